# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Manifests of file stores (HF hub repos, compile caches) and versioned, atomic switch-in.

Unit-side and controller-side code, standard library only. A store is a directory tree;
its manifest lists every regular file (size, sha256) and symlink (target). The manifest
id, a hash of that listing, names the version. On a unit the live path is a symlink to
``<versions>/<id>``, so switching versions is one atomic rename and a reader never sees
a half-replaced store. A repaired copy of the live version goes in beside it as
``<versions>/<id>.<n>`` (the id is the name up to the first dot), so the live link resolves
to a whole version at every moment and the broken one is removed only after the switch.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time

try:  # in a module, and on the controller
    from ansible_collections.specfleet.fleet.plugins.module_utils.atomic_files import fresh_path, switch_directory
except ImportError:  # shipped beside this file by the fan-out driver (fanout_unit.py puts it on sys.path)
    from atomic_files import fresh_path, switch_directory  # type: ignore[no-redef]

UNMANAGED_PREFIX = "unmanaged-"

MANIFEST_VERSION = 1
_CHUNK = 1024 * 1024


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def build_manifest(root: str, name: str) -> dict:
    """List every file and symlink below ``root`` (relative paths, sorted)."""
    files: dict[str, dict] = {}
    symlinks: dict[str, str] = {}
    for directory, subdirs, filenames in os.walk(root):
        subdirs.sort()
        for entry in sorted(subdirs + filenames):
            path = os.path.join(directory, entry)
            relative = os.path.relpath(path, root)
            if os.path.islink(path):
                symlinks[relative] = os.readlink(path)
            elif os.path.isfile(path):
                files[relative] = {"size": os.path.getsize(path), "sha256": sha256_file(path)}
    manifest = {"version": MANIFEST_VERSION, "name": name, "files": files, "symlinks": symlinks}
    manifest["id"] = manifest_id(manifest)
    return manifest


def manifest_id(manifest: dict) -> str:
    listing = json.dumps({"files": manifest["files"], "symlinks": manifest["symlinks"]}, sort_keys=True)
    return hashlib.sha256(listing.encode()).hexdigest()[:16]


def total_bytes(manifest: dict) -> int:
    return sum(entry["size"] for entry in manifest["files"].values())


def verify_tree(root: str, manifest: dict, full: bool) -> list[str]:
    """Problems with ``root`` against ``manifest``; empty when it matches.

    ``full`` re-hashes every file (what catches a corrupted byte); otherwise sizes only.
    """
    problems = []
    for relative, entry in manifest["files"].items():
        path = os.path.join(root, relative)
        if os.path.islink(path) or not os.path.isfile(path):
            problems.append(f"{relative}: missing")
        elif os.path.getsize(path) != entry["size"]:
            problems.append(f"{relative}: size {os.path.getsize(path)}, expected {entry['size']}")
        elif full and sha256_file(path) != entry["sha256"]:
            problems.append(f"{relative}: sha256 mismatch")
    for relative, target in manifest["symlinks"].items():
        path = os.path.join(root, relative)
        if not os.path.islink(path) or os.readlink(path) != target:
            problems.append(f"{relative}: symlink to {target!r} missing")
    return problems


def bytes_to_fetch(manifest: dict, have_root: str | None) -> int:
    """Bytes a copy must transfer when files of equal size and path at ``have_root`` are
    hard-linked instead (rsync --link-dest)."""
    needed = 0
    for relative, entry in manifest["files"].items():
        have = os.path.join(have_root, relative) if have_root else None
        if not (have and os.path.isfile(have) and os.path.getsize(have) == entry["size"]):
            needed += entry["size"]
    return needed


def version_id(name: str) -> str:
    """The version id a ``versions/`` entry holds: ``<id>``, or ``<id>.<n>`` for a repaired copy."""
    return name.split(".", 1)[0]


class StoreLayout:
    """Where one store lives on a unit.

    ``<root>/<subdir>/<name>`` is the live path (a relative symlink, so it resolves inside a
    container that mounts ``<root>`` anywhere); versions sit in ``<root>/.specfleet/versions``
    and copies arrive in ``<root>/.specfleet/incoming`` on the same filesystem, so moving a
    finished copy into place is a rename.
    """

    def __init__(self, root: str, subdir: str, name: str):
        self.root = root
        self.name = name
        self.live = os.path.join(root, subdir, name) if subdir else os.path.join(root, name)
        self.versions = os.path.join(root, ".specfleet", "versions", name)
        self.incoming = os.path.join(root, ".specfleet", "incoming", name)

    def live_version(self) -> str | None:
        """The ``versions/`` entry the live link resolves to, or None (no link, or not ours)."""
        if not os.path.islink(self.live):
            return None
        target = os.path.realpath(self.live)
        if os.path.dirname(target) != os.path.realpath(self.versions) or not os.path.isdir(target):
            return None
        return os.path.basename(target)

    def version_dir(self, ident: str) -> str:
        """The directory of version ``ident``: the live one when ``ident`` is live (it may be a
        repaired copy, ``<id>.<n>``), else ``versions/<ident>``."""
        live = self.live_version()
        if live is not None and version_id(live) == ident:
            return os.path.join(self.versions, live)
        return os.path.join(self.versions, ident)

    def staging_dir(self, ident: str) -> str:
        return os.path.join(self.incoming, ident)

    def current_id(self) -> str | None:
        live = self.live_version()
        return version_id(live) if live is not None else None

    def unmanaged(self) -> bool:
        """A real directory (not our symlink) sits at the live path."""
        return os.path.isdir(self.live) and not os.path.islink(self.live)

    def stale_versions(self) -> list[str]:
        """``versions/`` entries the live link does not resolve to, left by a switch that was
        killed before it removed them (or, not yet live, before it switched). A cache that
        was at the live path before the first switch is kept (``unmanaged-*``), unless it is
        only the link a killed switch had made to put in its place."""
        if not os.path.isdir(self.versions):
            return []
        live = self.live_version()
        stale = []
        for name in sorted(os.listdir(self.versions)):
            kept_aside = name.startswith(UNMANAGED_PREFIX) and not os.path.islink(os.path.join(self.versions, name))
            if name != live and not kept_aside:
                stale.append(name)
        return stale


def existing_ancestor(path: str) -> str:
    """``path``, or its nearest parent that exists (where it would be made)."""
    while not os.path.exists(path):
        path = os.path.dirname(path) or "/"
    return path


def free_bytes(path: str) -> int:
    stats = os.statvfs(existing_ancestor(path))
    return stats.f_bavail * stats.f_frsize


def drop_stale_versions(layout: StoreLayout) -> list[str]:
    """Remove what ``stale_versions`` lists; returns it."""
    stale = layout.stale_versions()
    for name in stale:
        path = os.path.join(layout.versions, name)
        if os.path.islink(path):
            os.unlink(path)
        else:
            shutil.rmtree(path, ignore_errors=True)
    return stale


def promote(layout: StoreLayout, manifest: dict) -> list[str]:
    """Verify the finished copy in staging and switch it in. Returns problems; on any,
    the live store is untouched and the bad files are removed from staging so the next
    copy fetches them again.

    The copy is moved into ``versions/`` under a fresh name (``<id>``, or ``<id>.<n>`` when
    the live version is the one being repaired), the live link is switched to it in one
    rename, and only then is what it pointed at removed: a kill at any moment leaves the
    live path resolving to the old version, whole, or to the new one. A cache laid down by
    hand at the live path is kept beside the versions (``unmanaged-<time>``) rather than
    deleted, exchanged with the link in one step."""
    ident = manifest["id"]
    staging = layout.staging_dir(ident)
    if not os.path.isdir(staging):
        return [f"{staging}: no copy to switch in"]
    problems = verify_tree(staging, manifest, full=True)
    if problems:
        for problem in problems:
            relative = problem.split(":", 1)[0]
            path = os.path.join(staging, relative)
            if os.path.isfile(path) and not os.path.islink(path):
                os.unlink(path)
        return problems
    os.makedirs(layout.versions, exist_ok=True)
    os.makedirs(os.path.dirname(layout.live), exist_ok=True)
    displaced = None
    if layout.unmanaged():
        displaced = fresh_path(os.path.join(layout.versions, f"{UNMANAGED_PREFIX}{int(time.time())}"))
    switch_directory(staging, fresh_path(os.path.join(layout.versions, ident)), layout.live, displaced)
    drop_stale_versions(layout)
    return []


def inspect_store(layout: StoreLayout, manifest: dict, full: bool) -> dict:
    """Whether the live store is the manifest's version (by size, or ``full``: by hash), and
    what a copy of it needs: where it is staged, what to hard-link from, the bytes and room."""
    current = layout.current_id()
    wanted = manifest["id"]
    live_dir = layout.version_dir(current) if current else None
    problems = verify_tree(live_dir, manifest, full) if current == wanted else []
    up_to_date = current == wanted and not problems
    staging = layout.staging_dir(wanted)
    # Hard-link from what is live, or from a staged partial copy of this very version.
    link_dest = live_dir if live_dir and os.path.isdir(live_dir) else None
    have = staging if os.path.isdir(staging) else link_dest
    needed = 0 if up_to_date else bytes_to_fetch(manifest, have)
    return {
        "up_to_date": up_to_date,
        "current_id": current,
        "wanted_id": wanted,
        "live_path": layout.live,
        "staging_dir": staging,
        "link_dest": link_dest,
        "free_bytes": free_bytes(layout.root),
        "needed_bytes": needed,
        "staging_fits": free_bytes(staging) >= needed,
        "total_bytes": total_bytes(manifest),
        "stale_versions": layout.stale_versions(),
        "problems": problems,
    }
