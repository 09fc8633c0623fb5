"""The unit's page cache, EMULATED, which vLLM's start-up check counts as used on unified memory.

On a Jetson (and a DGX Spark) the GPU allocates from the same memory as the Linux page
cache, and vLLM's start-up check ("Free memory on device cuda:0 (X/Y GiB) on startup is
less than desired GPU memory utilization") counts cached file pages as used: after an
rsync of model files, or after a vLLM container read its weights and stopped, the next
start can fail unless the cache is dropped first (`sync; sysctl -w vm.drop_caches=3`;
vllm-project/vllm#48140, NVIDIA's Thor unified-memory workaround). A lab unit's real page
cache is the host's and its stand-in model files are a few KiB, so the lab keeps the cache
in *emulated* bytes instead.

State (env `SPECFLEET_EMULATOR_PAGE_CACHE_DIR`, default /run/specfleet-lab/page-cache: the
unit's /etc/specfleet-lab/page-cache, bind-mounted read-write by the lab's
nvidia-container-runtime shim):
    dropped.json   {"emulated": true, "dropped_at_ns": ..., "reason": "boot" | "sysctl vm.drop_caches=3"}
                   written by the unit's EMULATED sysctl wrapper and at every unit start
                   (lab/images/unit/rootfs/usr/lib/specfleet-lab/specfleet-lab-page-cache)
    reads/*.json   {"emulated": true, "read_at_ns": ..., "models": [{"model": ..., "weights_gib": ...}]}
                   one per emulator start that loaded its weights (written here)

The rule (`cached_models`, pure): a model is in the page cache when, after the last drop,
  (a) any regular file of it under the HF cache the server sees (blobs/ and snapshots/ of
      its `models--org--name` directory) changed, by ctime: a copy makes new files, and
      `rsync -a` can keep a file's mtime but never its ctime; or
  (b) an emulator process recorded reading its weights (target and draft).
It counts once, with its emulated checkpoint size (`specfleet_emulated.weights_gib`: the
bytes of the files, also when `--quantization fp8` halves them in GPU memory). The sum is
added to what vLLM sees as used, capped at what is there to fill (free never goes below
zero). Without dropped.json (no state mounted: a container started without the nvidia
runtime, a unit test, Molecule) there is no emulated page cache: nothing is scanned,
counted or recorded, exactly as before.

Not emulated: page-cache eviction under memory pressure (the cap stands in for it), pages
of a model deleted since (its record still counts until the next drop: the toolkit drops
before every start), files outside the HF cache mounted into this container, image layers.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import StartupFailure
from .hub import ModelInfo, parse_model_info

DEFAULT_PAGE_CACHE_DIR = "/run/specfleet-lab/page-cache"
DROP_FILE = "dropped.json"
READS_DIR = "reads"
WRITTEN = "written to the HF cache"
READ = "read by an earlier server"
RULE = (
    "a model is cached when a file of it in the HF cache this server sees has a ctime after the last drop, "
    "or an emulator recorded reading its weights after it; each counts once with its emulated weights_gib; "
    "the sum counts as used memory, capped so free memory never goes below 0; emptied by "
    "`sysctl -w vm.drop_caches=1|3` (the unit's wrapper) and by a unit start"
)


@dataclass(frozen=True)
class Drop:
    """When the unit's page cache was last emptied."""

    at_ns: int
    reason: str

    @property
    def at(self) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.at_ns / 1e9))


@dataclass(frozen=True)
class Fill:
    """One event that put a model's files into the page cache."""

    model: str
    weights_gib: float
    at_ns: int
    how: str  # WRITTEN | READ


@dataclass(frozen=True)
class CachedModel:
    model: str
    weights_gib: float
    how: tuple[str, ...]


def cached_models(fills: Iterable[Fill], dropped_at_ns: int) -> tuple[CachedModel, ...]:
    """The rule: the models some fill put into the cache after the drop, each once.

    A fill at or before the drop was emptied by it (strictly after counts: a file's ctime
    comes from the kernel's coarse clock, which never runs ahead of the drop's time_ns)."""
    found: dict[str, CachedModel] = {}
    for fill in fills:
        if fill.at_ns <= dropped_at_ns:
            continue
        seen = found.get(fill.model)
        if seen is None:
            found[fill.model] = CachedModel(fill.model, fill.weights_gib, (fill.how,))
        else:
            how = seen.how if fill.how in seen.how else (*seen.how, fill.how)
            # The same model from two sources is the same files: its size once, the larger.
            found[fill.model] = CachedModel(fill.model, max(seen.weights_gib, fill.weights_gib), how)
    return tuple(sorted(found.values(), key=lambda cached: cached.model))


def total_gib(models: Iterable[CachedModel]) -> float:
    return sum(model.weights_gib for model in models)


def parse_drop(data: object) -> Drop:
    """Validate dropped.json; raises ValueError naming the bad field."""
    if not isinstance(data, dict):
        raise ValueError("the drop record must be a JSON object")
    at_ns = data.get("dropped_at_ns")
    if isinstance(at_ns, bool) or not isinstance(at_ns, int) or at_ns < 0:
        raise ValueError(f"dropped_at_ns must be a non-negative integer (ns since the epoch), got {at_ns!r}")
    return Drop(at_ns=at_ns, reason=str(data.get("reason", "drop")))


def parse_read_record(data: object) -> list[Fill]:
    """An emulator's read record as fills; raises ValueError when it is not one."""
    if not isinstance(data, dict):
        raise ValueError("a read record must be a JSON object")
    at_ns = data.get("read_at_ns")
    models = data.get("models")
    if isinstance(at_ns, bool) or not isinstance(at_ns, int) or not isinstance(models, list):
        raise ValueError("a read record needs read_at_ns (integer) and models (list)")
    fills = []
    for entry in models:
        weights = entry.get("weights_gib") if isinstance(entry, dict) else None
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("model"), str)
            or isinstance(weights, bool)
            or not isinstance(weights, (int, float))
            or weights < 0
        ):
            raise ValueError(f"bad model entry {entry!r}")
        fills.append(Fill(entry["model"], float(weights), at_ns, READ))
    return fills


def read_record(models: Iterable[ModelInfo], now_ns: int) -> dict[str, Any]:
    """What an emulator writes once its weights are loaded: the checkpoint bytes it read."""
    return {
        "emulated": True,
        "comment": "specfleet vLLM EMULATOR: weights this server read at start; they stay in the unit's "
        "EMULATED page cache after it stops, until the next drop",
        "read_at_ns": now_ns,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "models": [{"model": model.name, "weights_gib": model.weights_gib} for model in models],
    }


# ---- what the files say ---------------------------------------------------------------------
def _newest_file_ctime_ns(roots: Iterable[Path]) -> int | None:
    """The newest ctime of the regular files below `roots` (symlinks not followed)."""
    newest: int | None = None
    pending = [str(root) for root in roots]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    ctime = entry.stat(follow_symlinks=False).st_ctime_ns
                    newest = ctime if newest is None else max(newest, ctime)
            except OSError:
                continue  # removed while we looked
    return newest


def _stand_in_weights_gib(repo_dir: Path, repo_id: str) -> float | None:
    """The emulated checkpoint size of a stand-in repo (refs/main's snapshot), or None."""
    try:
        revision = (repo_dir / "refs" / "main").read_text().strip()
        snapshot = repo_dir / "snapshots" / revision
        return parse_model_info(repo_id, snapshot, json.loads((snapshot / "config.json").read_text())).weights_gib
    except (OSError, ValueError):
        # Not a stand-in (no specfleet_emulated block): its real bytes are what the host
        # caches, a few KiB; nothing to emulate.
        return None


def written_fills(hub: Path) -> list[Fill]:
    """One fill per stand-in model in the HF cache: its newest file change (ctime)."""
    fills: list[Fill] = []
    try:
        repos = sorted(p for p in hub.iterdir() if p.name.startswith("models--") and p.is_dir())
    except OSError:
        return fills  # no HF cache here
    for repo_dir in repos:
        repo_id = repo_dir.name[len("models--") :].replace("--", "/")
        newest = _newest_file_ctime_ns([repo_dir / "blobs", repo_dir / "snapshots"])
        weights = _stand_in_weights_gib(repo_dir, repo_id) if newest is not None else None
        if newest is not None and weights is not None:
            fills.append(Fill(repo_id, weights, newest, WRITTEN))
    return fills


def read_fills(reads_dir: Path) -> list[Fill]:
    """The fills of every read record; a file that is not one is skipped (records come from
    many containers; one bad file must not stop every later start on the unit)."""
    fills: list[Fill] = []
    try:
        paths = sorted(p for p in reads_dir.iterdir() if p.suffix == ".json" and not p.name.startswith("."))
    except OSError:
        return fills
    for path in paths:
        try:
            fills.extend(parse_read_record(json.loads(path.read_text())))
        except (OSError, ValueError):
            continue
    return fills


@dataclass(frozen=True)
class PageCache:
    """The emulated page cache a server found at start."""

    directory: Path
    drop: Drop
    models: tuple[CachedModel, ...]

    @property
    def gib(self) -> float:
        return total_gib(self.models)

    def record_read(self, models: Iterable[ModelInfo], now_ns: int | None = None) -> Path:
        """Write this server's read record (atomically: other starts read the directory)."""
        now = time.time_ns() if now_ns is None else now_ns
        reads = self.directory / READS_DIR
        reads.mkdir(exist_ok=True)
        name = f"{now}-{socket.gethostname()}-{os.getpid()}.json"
        tmp = reads / f".{name}.tmp"
        tmp.write_text(json.dumps(read_record(models, now), indent=2) + "\n")
        final = reads / name
        os.replace(tmp, final)
        return final


def page_cache_dir(env: Mapping[str, str]) -> Path:
    return Path(env.get("SPECFLEET_EMULATOR_PAGE_CACHE_DIR", DEFAULT_PAGE_CACHE_DIR))


def load_page_cache(env: Mapping[str, str], hub: Path) -> PageCache | None:
    """The emulated page cache now, or None without state (no dropped.json: not emulated).
    A malformed dropped.json fails startup plainly (a lab bug, not a vLLM failure)."""
    directory = page_cache_dir(env)
    drop_file = directory / DROP_FILE
    if not drop_file.is_file():
        return None
    try:
        drop = parse_drop(json.loads(drop_file.read_text()))
    except (OSError, ValueError) as exc:
        raise StartupFailure(
            exception_text=f"RuntimeError: specfleet emulator: invalid page cache state {drop_file}: {exc}",
        ) from exc
    fills = [*written_fills(hub), *read_fills(directory / READS_DIR)]
    return PageCache(directory=directory, drop=drop, models=cached_models(fills, drop.at_ns))


def describe(cache: PageCache, counted_gib: float) -> str:
    """The log line: what was counted, and why (labelled EMULATED)."""
    head = (
        f"specfleet vLLM EMULATOR: EMULATED page cache ({cache.directory}; last emptied {cache.drop.at} "
        f"by {cache.drop.reason}): "
    )
    if not cache.models:
        return head + "empty, nothing counted as used memory"
    listed = ", ".join(f"{m.model} {m.weights_gib:.2f} GiB ({' and '.join(m.how)})" for m in cache.models)
    capped = "" if counted_gib >= cache.gib - 1e-9 else f" (capped from {cache.gib:.2f} GiB: no more memory to fill)"
    return head + f"{counted_gib:.2f} GiB counted as used memory{capped}: {listed}"


def info(cache: PageCache | None, directory: Path, counted_gib: float, record: Path | None) -> dict[str, Any]:
    """What /specfleet/emulator reports under `page_cache`."""
    base: dict[str, Any] = {"emulated": True, "directory": str(directory), "present": cache is not None, "rule": RULE}
    if cache is None:
        return {**base, "page_cache_gib": 0.0, "counted_gib": 0.0, "models": [], "last_drop": None, "read_record": None}
    return {
        **base,
        "last_drop": {"at": cache.drop.at, "at_ns": cache.drop.at_ns, "reason": cache.drop.reason},
        "models": [{"model": m.model, "weights_gib": m.weights_gib, "how": list(m.how)} for m in cache.models],
        "page_cache_gib": round(cache.gib, 4),
        "counted_gib": round(counted_gib, 4),
        "read_record": None if record is None else str(record),
    }
