"""Compile-cache pre-warm: which units share a torch.compile cache, which unit compiles
it, and the controller-side store that holds it.

vLLM names a compiled artifact set ``$VLLM_CACHE_ROOT/torch_compile_cache/<hash>`` by a hash
of what changes the compiled graph (configs, PyTorch/Inductor, the GPU name, the traced
source; vLLM's "torch.compile integration" design doc, docs.vllm.ai). The controller cannot compute that hash, so it
groups servings by a *key* built from what determines it on a fleet that runs the plan's
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

A unit has one key per vLLM serving it will run (``unit_servings``): the plan's speculative
serving, the baseline the rollout starts first and measures against, and the baseline and
speculative serving of each event model it holds (``plan["event"]["servings"]``). Servings
with the same graph arguments share a key (a baseline and its speculative serving differ by
``--speculative-config``); TensorRT-LLM servings (DGX Spark) have no vLLM compile cache and
no key. Each key has one golden unit; a unit may be the golden unit of several keys.

Pure functions first; the store functions at the end do file I/O on the controller only.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ansible_collections.specfleet.fleet.plugins.module_utils.atomic_files import move_directory, write_file
from ansible_collections.specfleet.fleet.plugins.module_utils.store_manifest import (
    StoreLayout,
    build_manifest,
    promote,
    verify_tree,
)

from specfleet import loading, serving
from specfleet.fanout import distribution_job

KEY_VERSION = 1
STORE_SUBDIR = "compile-cache"
ENTRY_SUBDIR = "torch_compile_cache"
KEY_RECORD = "key.json"
MARKER = "specfleet-compile-cache.json"
MANIFESTS = "manifests"
# Which of a unit's servings are warmed (the role's specfleet_compile_cache_servings): the
# plan's speculative serving, its baseline, the event models' servings.
SOURCES = ("plan", "baseline", "event")

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


def serving_key(plan: Mapping[str, Any], spec: Mapping[str, Any]) -> str | None:
    """The key of one of the plan's servings; None for another engine than vLLM (TensorRT-LLM
    compiles no torch.compile graphs, so there is nothing to warm)."""
    if spec.get("engine") != "vllm":
        return None
    return cache_key(plan["device_class"], spec["image"], _digest(plan, spec), spec)


def serving_factors(plan: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    return key_factors(plan["device_class"], spec["image"], _digest(plan, spec), spec)


def _digest(plan: Mapping[str, Any], spec: Mapping[str, Any]) -> str | None:
    # The plan pins the digest of its own image; every serving it makes runs that image.
    return plan.get("image_digest") if spec["image"] == plan.get("image") else None


def plan_key(plan: Mapping[str, Any]) -> str | None:
    """The key of a unit's serving plan (its speculative serving), None when refused or not
    served by vLLM."""
    if plan.get("refused") or not plan.get("image") or not plan.get("serving"):
        return None
    return serving_key(plan, plan["serving"])


def plan_factors(plan: Mapping[str, Any]) -> dict[str, Any] | None:
    if plan_key(plan) is None:
        return None
    return serving_factors(plan, plan["serving"])


def unit_servings(plan: Mapping[str, Any], which: Sequence[str] = SOURCES) -> list[dict[str, Any]]:
    """Every vLLM serving the unit will run that ``which`` asks to warm, one per key:
    ``[{"key", "serving", "factors", "sources"}]`` in the order plan, baseline, event (the
    first serving of a key stands for it; ``sources`` names every kind that has the key).

    ``which``: any of ``plan`` (the speculative serving the rollout measures), ``baseline``
    (the serving it starts first and compares with), ``event`` (the baseline and speculative
    serving of each event model the unit holds). A refused plan has none: prepare stages no
    model on its unit. TensorRT-LLM servings are left out (no vLLM compile cache).
    """
    unknown = [name for name in which if name not in SOURCES]
    if unknown:
        raise ValueError(f"unknown serving kind(s) {', '.join(map(repr, unknown))} (known: {', '.join(SOURCES)})")
    if plan.get("refused") or not plan.get("image"):
        return []
    candidates: list[tuple[str, Mapping[str, Any] | None]] = []
    if "plan" in which:
        candidates.append(("plan", plan.get("serving")))
    if "baseline" in which:
        candidates.append(("baseline", plan.get("baseline_serving")))
    if "event" in which:
        candidates += [("event", spec) for spec in (plan.get("event") or {}).get("servings") or []]
    result: dict[str, dict[str, Any]] = {}
    for source, spec in candidates:
        key = serving_key(plan, spec) if spec else None
        if key is None:
            continue
        entry = result.setdefault(key, {"key": key, "serving": dict(spec), "factors": serving_factors(plan, spec),
                                        "sources": []})
        if source not in entry["sources"]:
            entry["sources"].append(source)
    return list(result.values())


# ---- grouping and the golden unit ------------------------------------------------------
def group_units(units: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Units (``host``, ``cache_keys``, ``serving``; in inventory order, reachable ones only)
    -> ``{key: {"golden": host, "units": [hosts]}}``, keys in order of first appearance.

    The golden unit compiles once for its key. It is a unit that serves nothing (no serving is
    interrupted), the one with the fewest golden runs so far, then the first in inventory
    order: golden runs on different units run side by side, those of one unit one after
    another. When every unit of the key serves, the first unit (its serving is stopped once
    for all its golden runs and restarted after the last). Units without keys are left out.
    """
    order: dict[str, int] = {}
    serving: dict[str, bool] = {}
    groups: dict[str, dict[str, Any]] = {}
    for unit in units:
        host = unit["host"]
        order.setdefault(host, len(order))
        serving[host] = bool(unit.get("serving"))
        for key in unit.get("cache_keys") or []:
            members = groups.setdefault(key, {"golden": None, "units": []})["units"]
            if host not in members:
                members.append(host)
    runs: Counter[str] = Counter()
    for group in groups.values():
        idle = [host for host in group["units"] if not serving[host]]
        golden = min(idle, key=lambda host: (runs[host], order[host])) if idle else group["units"][0]
        group["golden"] = golden
        runs[golden] += 1
    return groups


def golden_runs(servings: Iterable[Mapping[str, Any]], groups: Mapping[str, Mapping[str, Any]],
                stores: Mapping[str, Mapping[str, Any]], host: str) -> list[Mapping[str, Any]]:
    """The unit's servings (``unit_servings``) it compiles now, in order: those of the keys it
    is the golden unit of whose store is not present."""
    return [spec for spec in servings
            if (groups.get(spec["key"]) or {}).get("golden") == host
            and not (stores.get(spec["key"]) or {}).get("present")]


def entry_ref(key: str, name: str) -> str:
    """``<key>/<hash>``: one store entry, the path below ``<store>/compile-cache``."""
    return f"{key}/{name}"


def unit_entries(cache_keys: Iterable[str], stores: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The store entries a unit of ``cache_keys`` holds live: every entry of each of its keys'
    present stores, ``{"key", "name", "id", "manifest", "ref"}``.

    The unit's cache has one directory per vLLM hash. Should two of its keys compile to the
    same hash (they differ only in something vLLM's hash leaves out), vLLM uses that one
    directory for both; the unit takes it from the first of those keys and not from the
    other, else each run would replace the one by the other.
    """
    taken: dict[str, dict[str, Any]] = {}
    for key in cache_keys:
        store = stores.get(key) or {}
        if not store.get("present"):
            continue
        for entry in store.get("entries") or []:
            taken.setdefault(entry["name"], {"key": key, "name": entry["name"], "id": entry["id"],
                                             "manifest": entry["manifest"], "ref": entry_ref(key, entry["name"])})
    return list(taken.values())


def distribution_jobs(units: Iterable[Mapping[str, Any]], stores: Mapping[str, Mapping[str, Any]],
                      store: str, root: str) -> list[dict[str, Any]]:
    """One fan-out per (key, entry) that some unit taking it lacks.

    ``units``: ``host``, ``cache_keys``, ``missing`` (refs, ``entry_ref``, of the entries not
    live and verified on the unit). ``stores``: key -> inspection (``present``, ``entries``).
    The targets of a job are the units that take that entry from that key (``unit_entries``);
    those that hold it already serve it to their peers and copy nothing. Each job is a
    ``fanout.distribution_job`` of the key's store below the controller's ``store``
    (``<store>/compile-cache/<key>``) into the units' compile-cache ``root``.
    """
    units = list(units)
    takes = {unit["host"]: {entry["ref"] for entry in unit_entries(unit.get("cache_keys") or [], stores)}
             for unit in units}
    missing = {unit["host"]: set(unit.get("missing") or []) for unit in units}
    jobs = []
    for key, inspection in stores.items():
        if not inspection.get("present"):
            continue
        for entry in inspection.get("entries") or []:
            ref = entry_ref(key, entry["name"])
            targets = [unit["host"] for unit in units if ref in takes[unit["host"]]]
            if any(ref in missing[host] for host in targets):
                jobs.append(distribution_job(f"{key}: {entry['name']}", str(key_store(Path(store), key)),
                                             entry["name"], ENTRY_SUBDIR, root, targets))
    return jobs


# ---- what a unit reports ---------------------------------------------------------------------
def unit_result(servings: Iterable[Mapping[str, Any]], groups: Mapping[str, Mapping[str, Any]],
                stores: Mapping[str, Mapping[str, Any]], host: str, missing: Iterable[str]) -> dict[str, Any]:
    """The unit's compile cache after the pre-warm, per key: ``key``, ``sources``, ``model``,
    ``method`` (speculative method, None for a baseline), ``golden`` (the unit compiles that
    key), ``entries`` (what it holds from that key), ``shared`` (entries of that key it holds
    from an earlier key, ``unit_entries``), ``received`` (entries copied to it by this run)."""
    servings = list(servings)
    missing = set(missing)
    taken = unit_entries([spec["key"] for spec in servings], stores)
    keys = []
    for spec in servings:
        key = spec["key"]
        mine = [entry for entry in taken if entry["key"] == key]
        names = [entry["name"] for entry in mine]
        keys.append({
            "key": key,
            "sources": list(spec["sources"]),
            "model": spec["serving"]["model"],
            "method": serving.speculation(spec["serving"])["method"],
            "golden": (groups.get(key) or {}).get("golden") == host,
            "entries": names,
            "shared": [entry["name"] for entry in (stores.get(key) or {}).get("entries") or []
                       if entry["name"] not in names],
            "received": [entry["name"] for entry in mine if entry["ref"] in missing],
        })
    return {"keys": keys}


def summary_lines(result: Mapping[str, Any]) -> list[str]:
    """One line per key of ``unit_result``, for the play's closing summary."""
    lines = []
    for item in result.get("keys") or []:
        what = item["model"] + (f" + {item['method']}" if item["method"] else "")
        line = (f"{item['key']} ({'/'.join(item['sources'])}: {what}): {'golden, ' if item['golden'] else ''}"
                f"entries {','.join(item['entries']) or 'none'}, received {','.join(item['received']) or 'nothing'}")
        if item["shared"]:
            line += f", shares {','.join(item['shared'])} with an earlier key"
        lines.append(line)
    return lines or ["no vLLM serving to warm (plan refused, another engine, or none selected)"]


# ---- the controller store ----------------------------------------------------------------
def key_store(store: Path, key: str) -> Path:
    if not key or "/" in key or key.startswith("."):
        raise ValueError(f"bad compile-cache key {key!r}")
    return Path(store) / STORE_SUBDIR / key


def _write_json(path: Path, data: Any) -> None:
    """Atomically and durably (atomic_files.write_file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def inspect_store(store: Path, key: str, full: bool = True) -> dict[str, Any]:
    """Is the key's store complete? ``present`` only when key.json names the key and every
    entry it lists is live and matches its manifest (sha256 of every file when ``full``)."""
    base = key_store(store, key)
    result: dict[str, Any] = {"key": key, "path": str(base), "present": False, "entries": [], "problems": [],
                              "record": None}
    record_path = base / KEY_RECORD
    try:
        record = loading.load_json(record_path)
    except loading.FileProblem:
        result["problems"].append(f"{record_path}: missing or unreadable")
        return result
    result["record"] = record
    if record.get("key") != key or not record.get("entries"):
        result["problems"].append(f"{record_path}: not a complete record for {key}")
        return result
    for name in record["entries"]:
        manifest_path = base / MANIFESTS / f"{name}.json"
        try:
            manifest = loading.load_json(manifest_path)
        except loading.FileProblem:
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
            shutil.rmtree(staging)  # a killed collect's; staging is never live
        staging.parent.mkdir(parents=True, exist_ok=True)
        move_directory(str(source / name), str(staging))
        problems = promote(layout, manifest)
        if problems:
            raise ValueError(f"{name}: the fetched cache does not match its manifest: {'; '.join(problems[:5])}")
        _write_json(base / MANIFESTS / f"{name}.json", manifest)
        entries.append({"name": name, "id": manifest["id"], "files": len(manifest["files"]),
                        "bytes": sum(e["size"] for e in manifest["files"].values())})
    _write_json(base / KEY_RECORD, {**dict(record), "key": key, "entries": names})
    shutil.rmtree(fetched, ignore_errors=True)
    return {"key": key, "path": str(base), "entries": entries}
