"""What a prepare role leaves on a unit, as the checks of the ``unit_state`` module.

A role asks these in one round trip before it does anything (plugins/module_utils/unit_state.py
answers them on the unit); when all hold it skips its tasks. The lists are built here, from the
same values the role's tasks write, so "already so" and "what the tasks make" cannot drift
apart: the tiktoken role copies exactly ``tiktoken_files``, the model role links exactly what
``cache.checkpoint_link`` says.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ansible_collections.specfleet.fleet.plugins.module_utils.store_manifest import sha256_file

from specfleet.cache import checkpoint_link, hf_repo_dir


class CheckInputError(ValueError):
    """A controller file a check is built from is missing or unreadable."""


def file_sha256(path: str) -> str:
    """The sha256 of a controller file, or '' when there is none (a directory, a dangling link)."""
    try:
        return sha256_file(path)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return ""


def tiktoken_files(encodings: Sequence[dict[str, str]], tiktoken_dir: str, url_prefix: str) -> list[dict[str, str]]:
    """Each encoding's two copies on a unit: under its name (TIKTOKEN_ENCODINGS_BASE,
    openai-harmony) and under the sha1 of its download URL (TIKTOKEN_CACHE_DIR, tiktoken's
    own cache naming)."""
    copies = []
    for encoding in encodings:
        name, sha256 = encoding["name"], encoding["sha256"]
        cached = hashlib.sha1(f"{url_prefix}{name}.tiktoken".encode()).hexdigest()  # noqa: S324 - tiktoken's naming
        copies.append({"name": name, "sha256": sha256, "dest": f"{tiktoken_dir}/encodings/{name}.tiktoken"})
        copies.append({"name": name, "sha256": sha256, "dest": f"{tiktoken_dir}/cache/{cached}"})
    return copies


def tiktoken_checks(encodings: Sequence[dict[str, str]], tiktoken_dir: str, url_prefix: str) -> list[dict[str, Any]]:
    """The encodings' directories and files, root's, as the tiktoken role makes them."""
    checks: list[dict[str, Any]] = [
        {"kind": "directory", "path": f"{tiktoken_dir}/{sub}", "owner": "root", "group": "root", "mode": "0755"}
        for sub in ("encodings", "cache")
    ]
    checks += [
        {"kind": "file", "path": copy["dest"], "sha256": copy["sha256"], "owner": "root", "group": "root",
         "mode": "0644"}
        for copy in tiktoken_files(encodings, tiktoken_dir, url_prefix)
    ]
    return checks


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CheckInputError(f"{path}: cannot read {what} ({exc.strerror or exc})") from exc


def hf_cache_checks(models: Sequence[str], checkpoint_models: Sequence[str], store: str,
                    cache_dir: str) -> list[dict[str, Any]]:
    """The model role's directories (the login user's: the check runs as that user), each
    model's live copy against its manifest in the controller ``store``, and the checkpoint
    links into the live snapshots."""
    checks: list[dict[str, Any]] = [
        {"kind": "directory", "path": path, "mine": True, "mode": "0755"}
        for path in (cache_dir, f"{cache_dir}/hub", f"{cache_dir}/checkpoints")
    ]
    for repo in models:
        manifest_file = Path(store) / "manifests" / f"{hf_repo_dir(repo)}.json"
        try:
            manifest = json.loads(_read(manifest_file, f"the manifest of {repo}"))
        except ValueError as exc:
            raise CheckInputError(f"{manifest_file}: not a manifest ({exc})") from exc
        checks.append({"kind": "store", "root": cache_dir, "subdir": "hub", "manifest": manifest})
    for repo in checkpoint_models:
        revision = _read(Path(store) / "hub" / hf_repo_dir(repo) / "refs" / "main", f"the revision of {repo}")
        checks.append({"kind": "directory", "path": posixpath.dirname(f"{cache_dir}/checkpoints/{repo}"),
                       "mine": True, "mode": "0755"})
        checks.append({"kind": "link", "path": f"{cache_dir}/checkpoints/{repo}",
                       "src": checkpoint_link(repo, revision)})
    return checks


def stores_lacking(results: Sequence[dict[str, Any]], models: Sequence[str]) -> list[str]:
    """The models (repo ids, in order) whose live copy is not the manifest's version (or could
    not be read): ``results`` are the unit_state results of ``hf_cache_checks(models, ...)``,
    whose store checks come in the models' order. A model that is live but whose versions
    folder still holds a killed switch's leftovers is not lacking (nothing to copy)."""
    stores = [result for result in results if result["kind"] == "store"]
    if len(stores) != len(models):
        raise CheckInputError(f"{len(stores)} store results for {len(models)} models: not the same checks")
    return [
        repo for repo, result in zip(models, stores, strict=True)
        if not (isinstance(result["detail"], dict) and result["detail"].get("up_to_date"))
    ]


GIB = 2**30


def image_room_check(docker_root: str, unit_dir: str, tarball: str | None, size_gib: float | None,
                     unknown_size_gib: float, spare_gib: float) -> dict[str, Any]:
    """The image role's room check before it fetches an image: Docker's data root takes the
    image; a tarball (``tarball``: its path on the controller) also lands whole, as a file or
    as fan-out parts, below ``unit_dir`` first, and stays there. On one disk the two add up.
    A tarball's own size is the bytes (the image Docker loads from it is as large); else the
    plan's size, else ``unknown_size_gib``."""
    image = (size_gib if size_gib not in (None, "") else unknown_size_gib)
    size = int(float(image) * GIB)
    needs = [{"path": docker_root, "bytes": size}]
    if tarball:
        try:
            size = Path(tarball).stat().st_size
        except OSError:
            pass  # the copy tasks say the tarball is missing, naming it
        needs = [{"path": docker_root, "bytes": size}, {"path": unit_dir, "bytes": size}]
    return {"kind": "room", "needs": needs, "spare": int(float(spare_gib) * GIB)}
