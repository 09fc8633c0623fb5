"""Controller-side stores: Hugging Face hub repos and compile caches, with manifests.

A store directory looks like ``STORE/<subdir>/<name>/...``; ``specfleet cache manifest``
writes ``STORE/manifests/<name>.json`` for each, which the roles ship to units to verify
copies before switching them in.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ansible_collections.specfleet.fleet.plugins.module_utils.atomic_files import (
    exchange,
    fsync_directory,
    move_directory,
    write_file,
)
from ansible_collections.specfleet.fleet.plugins.module_utils.store_manifest import (
    build_manifest,
    total_bytes,
    verify_tree,
)

from specfleet import loading
from specfleet.fanout import lacked_jobs

MANIFESTS = "manifests"
# Image tarballs as store entries: STORE/images/<name>/part-NNNNN, the tarball cut in parts of
# equal size (the last shorter), so a unit passes each verified part on while it receives the
# rest (a fan-out pipelines whole files; one 8-70 GB file would travel in one piece), and
# `cat part-* | docker load` reads them back in order. STORE/sources/<name>.json records which
# tarball the entry was cut from.
IMAGE_SUBDIR = "images"
IMAGE_SOURCES = "sources"
IMAGE_PART_PREFIX = "part-"


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


def fanout_jobs(lacking: Iterable[Sequence[Any]], min_units: int, store: str, root: str) -> list[dict[str, Any]]:
    """The models to fan out unit to unit (``fanout.lacked_jobs``): ``lacking`` pairs each host,
    in play order, with the repos whose live copy there does not match its manifest. A model
    fewer than ``min_units`` units lack is pushed to each (rsync), as for a single unit. Each
    job copies the controller's model ``store`` into the units' HF cache ``root`` and carries
    its ``repo``."""
    return lacked_jobs(lacking, min_units, store, "hub", root, "specfleet_hf_cache_fanout_min_units",
                       hf_repo_dir, "repo")


def image_fanout_jobs(lacking: Iterable[Sequence[Any]], min_units: int, store: str, root: str
                      ) -> list[dict[str, Any]]:
    """The image tarballs to fan out unit to unit: ``lacking`` pairs each host with the tarball
    files (``specfleet_image_tarball``) whose image it lacks. Each job copies the entry
    ``store_image`` cuts from a tarball (``STORE/images/<name>``) into the units' image
    directory ``root`` and carries its ``tarball``; fewer than ``min_units`` units get the
    tarball from the controller (rsync)."""
    return lacked_jobs(lacking, min_units, store, IMAGE_SUBDIR, root, "specfleet_image_fanout_min_units",
                       image_entry_name, "tarball")


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


# ---- image tarballs as store entries ----------------------------------------------------------
def image_entry_name(tarball: str) -> str:
    """The store entry of a `docker save` tarball: its file name without ``.tar``."""
    name = Path(tarball).name
    stem = name[:-len(".tar")] if name.endswith(".tar") else name
    if not stem or stem.startswith("."):
        raise ValueError(f"{tarball}: not a usable tarball name")
    return stem


ARCHIVE_MANIFEST = "manifest.json"  # what `docker load` reads first: each image's config and layers
ARCHIVE_MANIFEST_LIMIT = 1 << 20


def image_archive_problem(tarball: Path) -> str | None:
    """Why ``tarball`` is not what `docker save` writes, else None: a plain tar archive whose
    manifest.json lists, for each image, a config and layers that are members of the archive.
    Each unit loads the parts with `docker load`; a file that is not such an archive would fail
    there, on every unit, after the fan-out. Only the members' headers are read (tarfile seeks
    past their data), so a 20 GB image costs its member count, not its size."""
    try:
        with tarball.open("rb") as head:
            if head.read(2) == b"\x1f\x8b":
                return "a gzip file: give `docker save -o FILE IMAGE`'s archive as it is, uncompressed"
        with tarfile.open(tarball, "r:") as archive:
            members = {member.name.removeprefix("./"): member for member in archive}
            listing = members.get(ARCHIVE_MANIFEST)
            if listing is None or not listing.isfile():
                return f"a tar archive without {ARCHIVE_MANIFEST}: not the output of `docker save`"
            if listing.size > ARCHIVE_MANIFEST_LIMIT:
                return f"its {ARCHIVE_MANIFEST} is {listing.size} bytes, more than `docker save` writes"
            reader = archive.extractfile(listing)
            images = json.loads(reader.read()) if reader else None
    except (OSError, tarfile.TarError, EOFError) as exc:
        return f"not a tar archive ({exc})"
    except (ValueError, RecursionError):  # JSON, or text that is not UTF-8
        return f"its {ARCHIVE_MANIFEST} is not JSON"
    if not isinstance(images, list) or not images or not all(
            isinstance(image, dict) and isinstance(image.get("Config"), str)
            and isinstance(image.get("Layers"), list) and all(isinstance(layer, str) for layer in image["Layers"])
            for image in images):
        return f"its {ARCHIVE_MANIFEST} is not a list of images, each with Config and Layers"
    absent = sorted({name for image in images for name in (image["Config"], *image["Layers"])} - set(members))
    if absent:
        return f"its {ARCHIVE_MANIFEST} names {len(absent)} file(s) the archive lacks, as {absent[0]!r}"
    return None


def image_parts(size: int, part_bytes: int) -> list[tuple[str, int, int]]:
    """(file name, offset, length) of each part a tarball of ``size`` bytes is cut into. The
    names sort in the parts' order (zero-padded to one width), as a shell glob lists them."""
    if part_bytes < 1:
        raise ValueError(f"a part must hold at least one byte, not {part_bytes}")
    count = max(1, -(-size // part_bytes))
    width = max(5, len(str(count - 1)))
    return [(f"{IMAGE_PART_PREFIX}{index:0{width}d}", index * part_bytes,
             min(part_bytes, size - index * part_bytes)) for index in range(count)]


def store_image(tarball: Path, store: Path, part_bytes: int) -> dict[str, Any]:
    """Make ``tarball`` the store entry ``STORE/images/<name>`` (``image_parts``) with its
    manifest, unless the entry was cut from this very file already (same name, size and
    mtime, same part size) and still holds what its manifest lists (sizes). Returns ``name``,
    ``id`` (the manifest's), ``parts``, ``bytes`` and ``changed``.

    The manifest says an entry is whole (the fan-out copies only entries that have one), so an
    entry being replaced loses its manifest first and gets the new one only once its parts are
    written, synced and switched in: a kill or a power cut at any point leaves either the old
    entry with its manifest, or an entry without one, which the next run cuts again. One cut
    per entry at a time (a lock beside it); a killed cut's staging is removed by the next."""
    name = image_entry_name(str(tarball))
    problem = image_archive_problem(tarball)
    if problem:
        raise ValueError(f"{tarball}: {problem}")
    stat = tarball.stat()
    source = {"tarball": tarball.name, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "part_bytes": part_bytes}
    marker = store / IMAGE_SOURCES / f"{name}.json"
    manifest_file = manifest_path(store, name)
    entries = store / IMAGE_SUBDIR
    entry = entries / name
    entries.mkdir(parents=True, exist_ok=True)
    with (entries / f".{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if manifest_file.is_file() and marker.is_file() and _readable(marker) == source:
            manifest = _readable(manifest_file)
            if manifest is not None and entry.is_dir() and not verify_tree(str(entry), manifest, full=False):
                return image_summary(manifest, changed=False)
        manifest_file.unlink(missing_ok=True)
        staging = entries / f".{name}.staging"
        shutil.rmtree(staging, ignore_errors=True)  # a killed cut's
        staging.mkdir()
        try:
            with tarball.open("rb") as whole:
                for part, offset, length in image_parts(stat.st_size, part_bytes):
                    whole.seek(offset)
                    with (staging / part).open("wb") as out:
                        copy_bytes(whole, out, length)
                        out.flush()
                        os.fsync(out.fileno())
            staging.chmod(0o755)
            fsync_directory(staging)
            switch_in(staging, entry)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        manifest = write_manifest(store, IMAGE_SUBDIR, name)
        marker.parent.mkdir(exist_ok=True)
        write_file(marker, json.dumps(source, sort_keys=True) + "\n")
    return image_summary(manifest, changed=True)


def _readable(path: Path) -> dict[str, Any] | None:
    """A marker or manifest this module wrote, or None where it is no longer one (cut again)."""
    try:
        return loading.load_json(path)
    except loading.FileProblem:
        return None


def copy_bytes(source: Any, target: Any, length: int, chunk: int = 8 << 20) -> None:
    left = length
    while left > 0:
        data = source.read(min(chunk, left))
        if not data:
            raise ValueError(f"{source.name}: ended {left} bytes early (the tarball changed while it was cut?)")
        target.write(data)
        left -= len(data)


def switch_in(staging: Path, entry: Path) -> None:
    """Put the directory ``staging`` at ``entry`` in one step, durably; what was there ends at
    ``staging``."""
    if not entry.exists():
        move_directory(str(staging), str(entry))
    elif exchange(str(staging), str(entry)):
        fsync_directory(entry.parent)
    else:
        aside = entry.parent / f".{entry.name}.old"
        shutil.rmtree(aside, ignore_errors=True)  # a killed switch's
        move_directory(str(entry), str(aside))
        move_directory(str(staging), str(entry))
        move_directory(str(aside), str(staging))


def image_summary(manifest: Mapping[str, Any], changed: bool) -> dict[str, Any]:
    return {"name": manifest["name"], "id": manifest["id"], "parts": len(manifest["files"]),
            "bytes": total_bytes(manifest), "changed": changed}
