"""Compile-cache pre-warm: which units share a torch.compile cache, which unit compiles
it, and the controller-side store that holds it.

vLLM names a compiled artifact set ``$VLLM_CACHE_ROOT/torch_compile_cache/<hash>`` by a hash
of what changes the compiled graph (configs, PyTorch/Inductor, the GPU name, the traced
source; vLLM's "torch.compile integration" design doc, docs.vllm.ai). The controller cannot compute that hash, so it
groups units by a *key* built from what determines it on a fleet that runs the plan's
images: the device class (GPU name, and which autotuned kernels fit), the image (digest
when pinned, else the reference: vLLM, torch, Triton and CUDA versions) and the serve
arguments that enter vLLM's config hashes. Arguments that do not (host, port, seed, memory
utilisation, names, logging and HTTP front-end settings) are left out, so units that differ
only in those share one cache. A key that is too fine costs one more golden run; one that is
too coarse costs nothing worse than a cache vLLM does not hit (its hash directory name
differs, so it is never used in place of the right one).

Controller store, per key (``key_store``)::

    <store>/compile-cache/<key>/
        key.json                          what the key stands for, entries, the golden run
        manifests/<hash>.json             manifest of each entry (store_manifest)
        torch_compile_cache/<hash>  ->    .specfleet/versions/<hash>/<id>   (atomic switch)

which is a store in the sense of ``specfleet distribute`` (subdir ``torch_compile_cache``,
name ``<hash>``), so it reaches every unit of the key by the same fan-out as the model
cache, into ``<unit cache dir>/torch_compile_cache/<hash>``: where the serving container
(mounting the unit cache dir at /root/.cache/vllm) looks it up. Every entry carries a marker
file naming its key, so a unit shows which key its cache was built for.

Pure functions first; the store functions at the end do file I/O on the controller only.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ansible_collections.specfleet.fleet.plugins.module_utils.store_manifest import (
    StoreLayout,
    build_manifest,
    promote,
    verify_tree,
)

from specfleet import serving

KEY_VERSION = 1
STORE_SUBDIR = "compile-cache"
ENTRY_SUBDIR = "torch_compile_cache"
KEY_RECORD = "key.json"
MARKER = "specfleet-compile-cache.json"
MANIFESTS = "manifests"

# `vllm serve` arguments that do not enter vLLM's compile hash (ModelConfig ignores seed and
# served_model_name, CacheConfig ignores gpu_memory_utilization and the KV sizing knobs;
# the rest is the HTTP front end and logging, outside the engine).
NEUTRAL_FLAGS = frozenset({
    "--host", "--port", "--seed", "--gpu-memory-utilization", "--kv-cache-memory-bytes",
    "--num-gpu-blocks-override", "--served-model-name", "--api-key", "--root-path",
    "--allowed-origins", "--allowed-methods", "--allowed-headers", "--allow-credentials",
    "--ssl-keyfile", "--ssl-certfile", "--ssl-ca-certs", "--uvicorn-log-level",
    "--disable-log-stats", "--disable-log-requests", "--enable-log-requests",
    "--disable-uvicorn-access-log", "--enable-force-include-usage", "--disable-fastapi-docs",
    "--max-log-len",
})
# ---- the key ---------------------------------------------------------------------------
def graph_args(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The serving's flags that enter vLLM's compile hash, by name (flag order and spelling
    do not matter: the serving holds them normalised, JSON values as dicts). The model is
    ``model``."""
    result: dict[str, Any] = {"model": spec["model"]}
    for flag, value in serving.engine_flags(spec):
        if flag not in NEUTRAL_FLAGS:
            result[flag] = value
    return result


def key_factors(device_class: str, image: str, image_digest: str | None, spec: Mapping[str, Any]) -> dict[str, Any]:
    """What a key stands for (written to the store's key.json and each entry's marker)."""
    return {
        "version": KEY_VERSION,
        "device_class": device_class,
        # The digest names the bytes; a tag may move, so it is used only when no digest is pinned.
        "image": image_digest or image,
        "args": graph_args(spec),
    }


def cache_key(device_class: str, image: str, image_digest: str | None, spec: Mapping[str, Any]) -> str:
    """``<device_class>-<12 hex>``: readable, and a safe directory name."""
    factors = key_factors(device_class, image, image_digest, spec)
    canonical = json.dumps(factors, sort_keys=True, separators=(",", ":"))
    return f"{device_class}-{hashlib.sha256(canonical.encode()).hexdigest()[:12]}"


def plan_key(plan: Mapping[str, Any]) -> str | None:
    """The key of a unit's serving plan (its speculative serving), None when refused."""
    if plan.get("refused") or not plan.get("image") or not plan.get("serving"):
        return None
    return cache_key(plan["device_class"], plan["image"], plan.get("image_digest"), plan["serving"])


def plan_factors(plan: Mapping[str, Any]) -> dict[str, Any] | None:
    if plan_key(plan) is None:
        return None
    return key_factors(plan["device_class"], plan["image"], plan.get("image_digest"), plan["serving"])


# ---- grouping and the golden unit ------------------------------------------------------
def group_units(units: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Units (``host``, ``key``, ``serving``; in inventory order, reachable ones only) ->
    ``{key: {"golden": host, "units": [hosts]}}``, keys in order of first appearance.

    The golden unit compiles once for its key: the first unit in inventory order that
    serves nothing (no serving is interrupted), else the first unit (its serving is stopped
    for the golden run and restarted after). Units without a key (plan refused) are left out.
    """
    groups: dict[str, dict[str, Any]] = {}
    for unit in units:
        key = unit.get("key")
        if not key:
            continue
        groups.setdefault(key, {"golden": None, "units": [], "_idle": None})
        group = groups[key]
        group["units"].append(unit["host"])
        if group["_idle"] is None and not unit.get("serving"):
            group["_idle"] = unit["host"]
    for group in groups.values():
        idle = group.pop("_idle")
        group["golden"] = idle or group["units"][0]
    return groups


def distribution_jobs(units: Iterable[Mapping[str, Any]], stores: Mapping[str, Mapping[str, Any]]
                      ) -> list[dict[str, Any]]:
    """One fan-out per (key, entry) that some unit of the key lacks.

    ``units``: ``host``, ``key``, ``missing`` (entry names not live and verified on the unit).
    ``stores``: key -> inspection (``present``, ``entries``). Every unit of the key is a
    target (those that hold the entry already serve it to their peers and copy nothing).
    """
    by_key: dict[str, list[Mapping[str, Any]]] = {}
    for unit in units:
        if unit.get("key"):
            by_key.setdefault(unit["key"], []).append(unit)
    jobs = []
    for key, members in by_key.items():
        store = stores.get(key) or {}
        if not store.get("present"):
            continue
        for entry in store.get("entries", []):
            if any(entry["name"] in (unit.get("missing") or []) for unit in members):
                jobs.append({"key": key, "entry": entry["name"], "units": [unit["host"] for unit in members]})
    return jobs


# ---- the controller store ----------------------------------------------------------------
def key_store(store: Path, key: str) -> Path:
    if not key or "/" in key or key.startswith("."):
        raise ValueError(f"bad compile-cache key {key!r}")
    return Path(store) / STORE_SUBDIR / key


def _write_json(path: Path, data: Any) -> None:
    """Atomically (rename of a finished temporary file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    temporary.replace(path)


def inspect_store(store: Path, key: str, full: bool = True) -> dict[str, Any]:
    """Is the key's store complete? ``present`` only when key.json names the key and every
    entry it lists is live and matches its manifest (sha256 of every file when ``full``)."""
    base = key_store(store, key)
    result: dict[str, Any] = {"key": key, "path": str(base), "present": False, "entries": [], "problems": [],
                              "record": None}
    record_path = base / KEY_RECORD
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError):
        result["problems"].append(f"{record_path}: missing or unreadable")
        return result
    result["record"] = record
    if record.get("key") != key or not record.get("entries"):
        result["problems"].append(f"{record_path}: not a complete record for {key}")
        return result
    for name in record["entries"]:
        manifest_path = base / MANIFESTS / f"{name}.json"
        try:
            manifest = json.loads(manifest_path.read_text())
        except (OSError, ValueError):
            result["problems"].append(f"{manifest_path}: missing or unreadable")
            continue
        layout = StoreLayout(str(base), ENTRY_SUBDIR, name)
        if layout.current_id() != manifest.get("id"):
            result["problems"].append(f"{layout.live}: not the manifest's version {manifest.get('id')}")
            continue
        problems = verify_tree(layout.version_dir(manifest["id"]), manifest, full)
        result["problems"] += [f"{name}/{problem}" for problem in problems]
        result["entries"].append({"name": name, "manifest": manifest, "id": manifest["id"]})
    result["present"] = not result["problems"]
    if not result["present"]:
        result["entries"] = []
    return result


def collect(store: Path, key: str, fetched: Path, record: Mapping[str, Any]) -> dict[str, Any]:
    """Switch a golden unit's fetched cache root (``fetched/torch_compile_cache/<hash>/``)
    into the key's store.

    Each entry gets the key marker, a manifest, and is switched in by ``promote`` (verified
    file by file, then one rename of a symlink); key.json, which is what makes the store
    count as present, is written last. An interrupted collect leaves no store that passes
    ``inspect_store``, and a store that was present stays usable until the new one is live.
    """
    base = key_store(store, key)
    source = Path(fetched) / ENTRY_SUBDIR
    names = sorted(p.name for p in source.iterdir() if p.is_dir() and not p.name.startswith(".")) \
        if source.is_dir() else []
    if not names:
        raise ValueError(f"{fetched}: the golden run wrote no {ENTRY_SUBDIR}/<hash> (compilation off?)")
    entries = []
    for name in names:
        marker = {"key": key, "hash": name, "factors": record.get("factors"), "golden": record.get("golden")}
        (source / name / MARKER).write_text(json.dumps(marker, indent=1, sort_keys=True) + "\n")
        manifest = build_manifest(str(source / name), name)
        layout = StoreLayout(str(base), ENTRY_SUBDIR, name)
        staging = Path(layout.staging_dir(manifest["id"]))
        if staging.exists():
            shutil.rmtree(staging)
        staging.parent.mkdir(parents=True, exist_ok=True)
        os.rename(source / name, staging)
        problems = promote(layout, manifest)
        if problems:
            raise ValueError(f"{name}: the fetched cache does not match its manifest: {'; '.join(problems[:5])}")
        _write_json(base / MANIFESTS / f"{name}.json", manifest)
        entries.append({"name": name, "id": manifest["id"], "files": len(manifest["files"]),
                        "bytes": sum(e["size"] for e in manifest["files"].values())})
    _write_json(base / KEY_RECORD, {**dict(record), "key": key, "entries": names})
    shutil.rmtree(fetched, ignore_errors=True)
    return {"key": key, "path": str(base), "entries": entries}
