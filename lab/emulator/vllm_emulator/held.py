"""Memory other servers on the unit hold, EMULATED, which vLLM's start-up check counts as used.

A vLLM server takes its ``--gpu-memory-utilization`` share of the GPU's memory and keeps it
while it runs. A second server on the same GPU (the rollout's candidate measured beside the
baseline) sees that share as used at its own start-up check ("Free memory on device ... is
less than desired GPU memory utilization ... reduce GPU memory used by other processes"), and
fails when its share does not fit in what is left. The lab's servers are separate containers
with no GPU, so each records what it holds here, and each start counts what the others hold.

State: the directory ``held/`` in the unit's EMULATED page-cache state (pagecache.py: the unit's
/etc/specfleet-lab/page-cache, bind-mounted read-write into every container started with the
nvidia runtime by the lab's shim). One file per running server:
    held/<ns>-<pid>.json   {"emulated": true, "held_gib": ..., "model": ..., "port": ...}
each locked (flock, exclusive) by its server for as long as its process lives. A file whose lock
can be taken is a server that ended (stopped, killed, crashed): it counts nothing, and the
reader removes it. Without page-cache state (no dropped.json: a container started without the
nvidia runtime, a unit test) nothing is recorded or counted, as before.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

HELD_DIR = "held"

# The open, locked records of this process: the lock lasts as long as the file stays open.
_HOLDING: list[IO[str]] = []


@dataclass(frozen=True)
class Held:
    """What one other running server holds."""

    held_gib: float
    model: str
    port: int | None


def others(directory: Path) -> list[Held]:
    """What the other running servers on the unit hold; records of ended servers are removed."""
    found: list[Held] = []
    try:
        paths = sorted(p for p in (directory / HELD_DIR).iterdir() if p.suffix == ".json"
                       and not p.name.startswith("."))
    except OSError:
        return found
    for path in paths:
        try:
            with path.open() as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:  # its server still runs and holds the lock
                    data = json.loads(handle.read())
                    found.append(Held(float(data["held_gib"]), str(data.get("model", "?")), data.get("port")))
                    continue
            path.unlink(missing_ok=True)  # its server ended: nothing held
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a record that is not one counts nothing (many containers write here)
    return found


def total_gib(held: list[Held]) -> float:
    return sum(entry.held_gib for entry in held)


def hold(directory: Path, held_gib: float, model: str, port: int | None) -> Path:
    """Record what this server holds, locked for as long as this process lives. Written under a
    hidden name, locked, then renamed: a reader never finds it unlocked."""
    folder = directory / HELD_DIR
    folder.mkdir(parents=True, exist_ok=True)
    name = f"{time.time_ns()}-{os.getpid()}.json"
    tmp = folder / f".{name}.tmp"
    handle = tmp.open("w")
    fcntl.flock(handle, fcntl.LOCK_EX)
    handle.write(json.dumps({"emulated": True, "held_gib": round(held_gib, 4), "model": model, "port": port}) + "\n")
    handle.flush()
    final = folder / name
    os.replace(tmp, final)
    _HOLDING.append(handle)
    return final


def describe(held: list[Held]) -> str:
    """The log line: what other servers hold (labelled EMULATED)."""
    head = "specfleet vLLM EMULATOR: EMULATED memory held by other servers on this unit: "
    if not held:
        return head + "none"
    listed = ", ".join(f"{entry.model} on port {entry.port} {entry.held_gib:.2f} GiB" for entry in held)
    return head + f"{total_gib(held):.2f} GiB counted as used ({listed})"
