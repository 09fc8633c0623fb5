"""Controller-side stores: Hugging Face hub repos and compile caches, with manifests.

A store directory looks like ``STORE/<subdir>/<name>/...``; ``specfleet cache manifest``
writes ``STORE/manifests/<name>.json`` for each, which the roles ship to units to verify
copies before switching them in.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ansible_collections.specfleet.fleet.plugins.module_utils.atomic_files import write_file
from ansible_collections.specfleet.fleet.plugins.module_utils.store_manifest import build_manifest

MANIFESTS = "manifests"


def holdings_line(holdings: Sequence[Sequence[Any]], skipped: Sequence[str]) -> str:
    """One line on a unit's model store: ``holdings`` is (repo, held) per repo prepare staged,
    ``skipped`` why each event model was left out (the plan's ``event.skipped``)."""
    held = [repo for repo, is_held in holdings if is_held]
    missing = [repo for repo, is_held in holdings if not is_held]
    line = f"holds {len(held)}/{len(holdings)} models: {', '.join(held) or 'none'}"
    if missing:
        line += f"; NOT held: {', '.join(missing)}"
    if skipped:
        line += f"; not staged (the unit cannot serve them): {'; '.join(skipped)}"
    return line


def hf_repo_dir(repo_id: str) -> str:
    """Hugging Face hub cache directory name of a model repo: models--org--name."""
    return "models--" + repo_id.replace("/", "--")


def fanout_jobs(lacking: Iterable[Sequence[Any]], min_units: int) -> list[dict[str, Any]]:
    """One unit-to-unit fan-out per model that at least ``min_units`` units lack.

    ``lacking``: (host, repos) pairs in play order, the repos whose live copy on that host does
    not match its manifest. Pushing a model of S bytes from the controller to N units takes
    N*S over the controller's one link; a fan-out takes about S (units pass verified pieces on
    to each other), but sets up a fleet key on every unit first, which only pays from a few
    units on. A model fewer units lack is pushed to each (rsync), as for a single unit.
    Each job: ``repo``, ``name`` (its hub directory) and ``units``.
    """
    if min_units < 1:
        raise ValueError(f"specfleet_hf_cache_fanout_min_units must be at least 1, not {min_units}")
    units_of: dict[str, list[str]] = {}
    for host, repos in lacking:
        for repo in repos:
            units_of.setdefault(repo, []).append(host)
    return [{"repo": repo, "name": hf_repo_dir(repo), "units": hosts}
            for repo, hosts in sorted(units_of.items()) if len(hosts) >= min_units]


def fanned_out(results: Iterable[Mapping[str, Any]], host: str) -> list[str]:
    """The repos that this run's fan-outs made live on ``host``: from the registered results
    of the `specfleet distribute --format json` task that ran ``fanout_jobs``. A unit a fan-out
    could not serve (a dropped link, a failed check) is not among them: the controller pushes
    to it as to a single unit."""
    live = []
    for result in results:
        if result.get("skipped") or not result.get("stdout"):
            continue
        outcome = json.loads(result["stdout"])
        if outcome.get("units", {}).get(host) == "live":
            live.append(result["item"]["repo"])
    return live


def checkpoint_link(repo_id: str, revision: str) -> str:
    """Target of ``<HF_HOME>/checkpoints/<repo_id>``, the plain path an engine reads as a
    checkpoint directory (TensorRT-LLM's speculative_model_dir, as `hf download --local-dir`
    leaves it): the repo's snapshot, relative, so the
    link resolves wherever a container mounts HF_HOME (the snapshot's own file links to
    ../../blobs are relative too)."""
    if not revision.strip() or "/" in revision.strip():
        raise ValueError(f"{repo_id}: no usable revision in refs/main ({revision!r})")
    up = "../" * (repo_id.count("/") + 1)
    return f"{up}hub/{hf_repo_dir(repo_id)}/snapshots/{revision.strip()}"


# What ssh prints on every connection to a unit whose key it does not keep (the copy's ssh
# runs with UserKnownHostsFile=/dev/null): not a reason the copy failed.
SSH_NOTICE_PREFIX = "Warning: Permanently added"


def rsync_complaint(stderr: str) -> str:
    """The first line of a failed copy's stderr that says why, ssh's notices left out."""
    lines = [line.strip() for line in stderr.splitlines()]
    reasons = [line for line in lines if line and not line.startswith(SSH_NOTICE_PREFIX)]
    return reasons[0] if reasons else "rsync failed"


def store_entries(store: Path, subdir: str) -> list[Path]:
    base = store / subdir if subdir else store
    return sorted(path for path in base.iterdir() if path.is_dir() and not path.name.startswith("."))


def manifest_path(store: Path, name: str) -> Path:
    return store / MANIFESTS / f"{name}.json"


def write_manifest(store: Path, subdir: str, name: str) -> dict:
    """Write (or rewrite) the manifest of one entry, ``STORE/<subdir>/<name>``; returns it.

    The one writer of manifests (`specfleet cache manifest`, `specfleet store add`). A role
    reads a manifest as the statement that its entry is complete, so it appears whole or not
    at all: written beside its place and renamed over it (atomic_files.write_file)."""
    entry = store / subdir / name if subdir else store / name
    manifest = build_manifest(str(entry), name)
    target = manifest_path(store, name)
    target.parent.mkdir(exist_ok=True)
    write_file(target, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def write_manifests(store: Path, subdir: str) -> list[dict]:
    """Write (or rewrite) the manifest of every entry; returns them."""
    (store / MANIFESTS).mkdir(exist_ok=True)
    return [write_manifest(store, subdir, entry.name) for entry in store_entries(store, subdir)]
