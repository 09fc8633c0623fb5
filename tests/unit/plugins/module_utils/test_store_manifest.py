"""Versioned stores: manifests, verification, atomic switch-in (pure file operations)."""

from __future__ import annotations

import os
import shutil

from ansible_collections.specfleet.fleet.plugins.module_utils import store_manifest as sm

from tests.stores import make_repo


def stage(layout, manifest, source):
    shutil.copytree(source, layout.staging_dir(manifest["id"]), symlinks=True)


def test_manifest_lists_files_and_symlinks(tmp_path):
    manifest = make_repo(tmp_path / "models--o--m")
    assert set(manifest["files"]) == {"blobs/w", "blobs/c"}
    assert manifest["symlinks"] == {"snapshots/rev/model.safetensors": "../../blobs/w",
                                    "snapshots/rev/config.json": "../../blobs/c"}
    assert manifest["id"] == sm.manifest_id(manifest) and sm.total_bytes(manifest) == 5008


def test_promote_switches_atomically_and_drops_old_versions(tmp_path):
    source = tmp_path / "src" / "models--o--m"
    first = make_repo(source)
    layout = sm.StoreLayout(str(tmp_path / "unit"), "hub", "models--o--m")
    stage(layout, first, source)
    assert sm.promote(layout, first) == []
    assert layout.current_id() == first["id"]
    assert os.readlink(layout.live).startswith("../.specfleet/versions/")
    config = tmp_path / "unit" / "hub" / "models--o--m" / "snapshots" / "rev" / "config.json"
    assert config.read_bytes() == b'{"a": 1}'

    (source / "blobs" / "c").write_bytes(b'{"a": 2}')
    second = sm.build_manifest(str(source), source.name)
    assert sm.bytes_to_fetch(second, layout.version_dir(first["id"])) == 0  # same sizes: linkable
    stage(layout, second, source)
    assert sm.promote(layout, second) == []
    assert layout.current_id() == second["id"]
    assert os.listdir(layout.versions) == [second["id"]]


def test_corrupt_copy_never_replaces_the_live_store(tmp_path):
    source = tmp_path / "src" / "models--o--m"
    good = make_repo(source)
    layout = sm.StoreLayout(str(tmp_path / "unit"), "hub", "models--o--m")
    stage(layout, good, source)
    sm.promote(layout, good)

    (source / "blobs" / "c").write_bytes(b'{"a": 3}')
    newer = sm.build_manifest(str(source), source.name)
    stage(layout, newer, source)
    staged = layout.staging_dir(newer["id"])
    with open(os.path.join(staged, "blobs", "c"), "wb") as handle:
        handle.write(b'{"a": X}')  # a bad transfer, same size
    problems = sm.promote(layout, newer)
    assert problems == ["blobs/c: sha256 mismatch"]
    assert layout.current_id() == good["id"]
    # The bad file is gone from staging so the next copy fetches it again.
    assert not os.path.exists(os.path.join(staged, "blobs", "c"))


def test_incomplete_copy_is_reported(tmp_path):
    source = tmp_path / "src" / "models--o--m"
    manifest = make_repo(source)
    layout = sm.StoreLayout(str(tmp_path / "unit"), "hub", "models--o--m")
    stage(layout, manifest, source)
    os.unlink(os.path.join(layout.staging_dir(manifest["id"]), "blobs", "w"))
    assert sm.promote(layout, manifest) == ["blobs/w: missing"]
    assert layout.current_id() is None and not os.path.lexists(layout.live)


def test_unmanaged_cache_is_kept_aside(tmp_path):
    source = tmp_path / "src" / "models--o--m"
    manifest = make_repo(source)
    layout = sm.StoreLayout(str(tmp_path / "unit"), "hub", "models--o--m")
    os.makedirs(os.path.join(layout.live, "blobs"))
    stage(layout, manifest, source)
    assert sm.promote(layout, manifest) == []
    assert any(name.startswith("unmanaged-") for name in os.listdir(layout.versions))


def test_verify_quick_vs_full(tmp_path):
    root = tmp_path / "models--o--m"
    manifest = make_repo(root)
    (root / "blobs" / "c").write_bytes(b'{"a": 9}')
    assert sm.verify_tree(str(root), manifest, full=False) == []
    assert sm.verify_tree(str(root), manifest, full=True) == ["blobs/c: sha256 mismatch"]


def test_rsync_complaint_skips_ssh_notices():
    from specfleet.cache import rsync_complaint

    stderr = ("Warning: Permanently added '10.213.77.13' (ED25519) to the list of known hosts.\n"
              'rsync: [receiver] mkstemp "/x/.f.tv4CC2" failed: Read-only file system (30)\n'
              "rsync error: some files/attrs were not transferred (code 23) at main.c(1394) [sender=3.5.0]\n")
    assert rsync_complaint(stderr) == 'rsync: [receiver] mkstemp "/x/.f.tv4CC2" failed: Read-only file system (30)'
    assert rsync_complaint("Warning: Permanently added 'h' (ED25519) to the list of known hosts.\n") == "rsync failed"
    assert rsync_complaint("") == "rsync failed"
