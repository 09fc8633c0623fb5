"""Controller-side stores: Hugging Face hub repos and compile caches, with manifests.

A store directory looks like ``STORE/<subdir>/<name>/...``; ``specfleet cache manifest``
writes ``STORE/manifests/<name>.json`` for each, which the roles ship to units to verify
copies before switching them in.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
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
