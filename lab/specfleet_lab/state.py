"""The lab's record of everything it made on this host.

`lab down` removes exactly what is listed here and nothing else, so every step of
`lab up` records what it created *right after* creating it (a failed `up` can still be
cleaned by `down`). Things that existed before the lab (e.g. an /run/netns mount point
another tool made) are never recorded, hence never removed.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class LabState:
    version: int = 1
    created: float = field(default_factory=time.time)
    profile: str = ""
    units_requested: int = 0
    link_mbit: float | None = None
    # Stand-in model store marks the catalog's gated repos (lab up --gated-models).
    gated_models: bool = False
    # Stock units (login nvidia, no Docker): the profile's `stock: true` or `lab up --stock`.
    stock: bool = False
    # Who brought the lab up (`lab up --made-by`): scripts/up marks its rehearsal lab, which
    # `lab down --made-by scripts/up` (scripts/test) may then take down; empty: by hand.
    made_by: str = ""
    subnet: str = ""
    controller_address: str = ""
    # role -> {"pid": int, "match": str (substring of its command line), "argv": [...]}
    processes: dict[str, dict[str, Any]] = field(default_factory=dict)
    containers: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)
    netns: list[str] = field(default_factory=list)
    # {"netns": name or None for the root namespace, "dev": interface}
    veths: list[dict[str, Any]] = field(default_factory=list)
    qdiscs: list[dict[str, Any]] = field(default_factory=list)
    # Mount points the lab made itself (besides netns handles, which `ip netns delete`
    # removes): e.g. /run/netns when iproute2 turned it into a mount point for us.
    mounts: list[str] = field(default_factory=list)
    # iptables rules in the root namespace, as the argv after `iptables -I/-D`.
    firewall: list[list[str]] = field(default_factory=list)
    # The lab dockerd's cgroup parent directories (<controller>/specfleet-lab; the name
    # is the lab's own, see engine.CGROUP_PARENT), removed by `down` once empty.
    cgroups: list[str] = field(default_factory=list)
    # Per unit: name, kind_id, device_class, address, container, volume, netns, login.
    units: list[dict[str, Any]] = field(default_factory=list)
    images: dict[str, Any] = field(default_factory=dict)
    registry_images: list[str] = field(default_factory=list)
    # The LAN apt mirror's build (aptmirror.ensure_mirror) and its URIs.
    apt_mirror: dict[str, Any] = field(default_factory=dict)
    complete: bool = False

    def add(self, kind: str, value: Any) -> None:
        """Append to one of the list fields unless already there."""
        items = getattr(self, kind)
        if value not in items:
            items.append(value)


def load(path: Path) -> LabState | None:
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    known = {f for f in LabState.__dataclass_fields__}
    return LabState(**{k: v for k, v in data.items() if k in known})


def save(path: Path, state: LabState) -> None:
    """Write atomically: a crash mid-write must not lose the record of what exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def remove(path: Path) -> None:
    path.unlink(missing_ok=True)
