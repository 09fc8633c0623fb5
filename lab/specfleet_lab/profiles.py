"""Lab profiles: which emulated Jetson kinds a lab of N units is made of.

Data lives in lab/profiles/*.yml (kinds.yml + one file per profile); this module only
expands a profile into a list of units with names and addresses.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specfleet_lab.config import LabConfig
from specfleet_lab.sh import LabError


@dataclass(frozen=True)
class Unit:
    """One emulated Jetson of the lab."""

    name: str  # inventory host name, e.g. thor-01
    index: int  # 0-based position in the lab
    kind_id: str
    kind: dict[str, Any]
    address: str

    @property
    def device_class(self) -> str:
        return str(self.kind["device_class"])

    def container(self, prefix: str) -> str:
        return f"{prefix}-{self.name}"

    def volume(self, prefix: str) -> str:
        return f"{prefix}-{self.name}-docker"

    def netns(self, prefix: str) -> str:
        return f"{prefix}-{self.name}"

    @property
    def bridge_port(self) -> str:
        # Interface names are limited to 15 characters; host names are not, so the
        # bridge-side veth is named after the unit's address octet.
        return f"sfv{self.address.rsplit('.', 1)[1]}"


def load_kinds(profiles_dir: Path) -> dict[str, dict[str, Any]]:
    data = yaml.safe_load((profiles_dir / "kinds.yml").read_text()) or {}
    return dict(data.get("kinds", {}))


def available_profiles(profiles_dir: Path) -> list[str]:
    return sorted(p.stem for p in profiles_dir.glob("*.yml") if p.stem != "kinds")


def load_profile(profiles_dir: Path, name: str) -> dict[str, Any]:
    path = profiles_dir / f"{name}.yml"
    if not path.exists():
        known = ", ".join(available_profiles(profiles_dir))
        raise LabError(f"unknown lab profile {name!r} (known: {known})")
    return yaml.safe_load(path.read_text()) or {}


def profile_is_stock(profiles_dir: Path, name: str) -> bool:
    """`stock: true` in the profile: its units are as flashed (login nvidia, no Docker)."""
    return bool(load_profile(profiles_dir, name).get("stock", False))


def expand(cfg: LabConfig, profile_name: str, units: int) -> list[Unit]:
    """The profile's kinds cycled over `units` units; each kind numbers its own hosts."""
    if units < 1:
        raise LabError("a lab needs at least one unit")
    kinds = load_kinds(cfg.profiles_dir)
    cycle = load_profile(cfg.profiles_dir, profile_name)["cycle"]
    missing = [k for k in cycle if k not in kinds]
    if missing:
        raise LabError(f"profile {profile_name} names unknown kinds: {', '.join(missing)}")
    per_kind_total = {k: sum(1 for i in range(units) if cycle[i % len(cycle)] == k) for k in cycle}
    counters: dict[str, int] = {}
    result = []
    for index in range(units):
        kind_id = cycle[index % len(cycle)]
        counters[kind_id] = counters.get(kind_id, 0) + 1
        kind = kinds[kind_id]
        width = max(2, len(str(per_kind_total[kind_id])))
        name = f"{kind['host_prefix']}-{counters[kind_id]:0{width}d}"
        result.append(Unit(name, index, kind_id, kind, cfg.unit_address(index)))
    return result
