"""atomic_files: whole or untouched at every step, durable (fsync of data, then of the rename)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest
from ansible_collections.specfleet.fleet.plugins.module_utils import atomic_files as af
from ansible_collections.specfleet.fleet.plugins.module_utils import store_manifest as sm

from tests.crash_points import killed_at, steps_of


@pytest.fixture
def synced(monkeypatch):
    """The inodes fsync was called on, in order, with the renames between them."""
    events: list[tuple[str, int]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.fstat(fd).st_ino))
        return real_fsync(fd)

    def replace(source, destination, **kwargs):
        events.append(("replace", os.lstat(source).st_ino))
        return real_replace(source, destination, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


def test_write_file_syncs_the_data_before_the_rename_and_the_directory_after(tmp_path, synced):
    target = tmp_path / "key"
    af.write_file(target, "secret\n", 0o600)
    assert target.read_text() == "secret\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert os.listdir(tmp_path) == ["key"]
    file_inode, directory_inode = target.stat().st_ino, tmp_path.stat().st_ino
    assert synced == [("fsync", file_inode), ("replace", file_inode), ("fsync", directory_inode)]


def test_write_file_takes_bytes_and_replaces_what_was_there(tmp_path):
    target = tmp_path / "blob"
    target.write_text("old")
    af.write_file(str(target), b"\x00new")
    assert target.read_bytes() == b"\x00new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_an_error_while_writing_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "manifest.json"
    target.write_text("old")
    with pytest.raises(ValueError), af.replacing(target) as handle:
        handle.write("half")
        raise ValueError("checksum refused")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["manifest.json"]


def test_a_kill_at_any_step_of_a_write_leaves_the_old_or_the_new_file(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("old")
    steps = steps_of(lambda: af.write_file(target, "new"))
    assert [step.split("(")[0] for step in steps] == ["fsync", "chmod", "replace", "fsync"]
    for step in range(len(steps)):
        target.write_text("old")
        assert killed_at(step, lambda: af.write_file(target, "new"))
        assert target.read_text() == ("new" if step > 2 else "old")


def test_move_directory_never_moves_over_an_existing_path(tmp_path):
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "f").write_text("x")
    (tmp_path / "taken").mkdir()  # an empty directory: a bare rename would replace it silently
    with pytest.raises(FileExistsError):
        af.move_directory(str(tmp_path / "copy"), str(tmp_path / "taken"))
    af.move_directory(str(tmp_path / "copy"), str(tmp_path / "free"))
    assert (tmp_path / "free" / "f").read_text() == "x" and not (tmp_path / "copy").exists()


def test_fresh_path_skips_every_name_in_use(tmp_path):
    base = str(tmp_path / "abc")
    assert af.fresh_path(base) == base
    os.mkdir(base)
    os.symlink("dangling", base + ".2")
    assert af.fresh_path(base) == base + ".3"


def test_fsync_tree_syncs_every_file_and_directory(tmp_path, synced):
    (tmp_path / "t" / "sub").mkdir(parents=True)
    (tmp_path / "t" / "a").write_text("a")
    (tmp_path / "t" / "sub" / "b").write_text("b")
    os.symlink("a", tmp_path / "t" / "link")  # a link has no data of its own
    af.fsync_tree(tmp_path / "t")
    wanted = {(tmp_path / "t" / p).stat().st_ino for p in ("", "a", "sub", "sub/b")}
    assert {inode for event, inode in synced if event == "fsync"} == wanted


def test_point_symlink_replaces_a_link_in_one_rename(tmp_path):
    (tmp_path / "v1").mkdir()
    (tmp_path / "v2").mkdir()
    os.symlink("v1", tmp_path / "live")
    os.symlink("left by a kill", tmp_path / ("live" + af.NEW_LINK_SUFFIX))
    af.point_symlink(str(tmp_path / "live"), "v2")
    assert os.readlink(tmp_path / "live") == "v2"
    assert sorted(os.listdir(tmp_path)) == ["live", "v1", "v2"]


def test_a_directory_at_the_link_is_kept_only_where_the_caller_says(tmp_path):
    (tmp_path / "live").mkdir()
    with pytest.raises(IsADirectoryError):
        af.point_symlink(str(tmp_path / "live"), "v1")
    assert (tmp_path / "live").is_dir() and not (tmp_path / "live").is_symlink()


def hand_made_cache(base):
    """A cache laid down by hand at ``live``; ``v1`` the version to link there instead."""
    (base / "v1").mkdir(parents=True)
    (base / "v1" / "f").write_text("managed")
    (base / "live").mkdir()
    (base / "live" / "f").write_text("by hand")
    (base / "aside").mkdir()
    return str(base / "live"), str(base / "aside" / "kept")


def test_a_directory_at_the_link_is_exchanged_with_it_never_missing(tmp_path):
    live, displaced = hand_made_cache(tmp_path / "clean")
    steps = steps_of(lambda: af.point_symlink(live, "v1", displaced_to=displaced))
    assert [step.split("(")[0] for step in steps] == ["symlink", "fsync", "exchange", "fsync", "fsync"]
    assert open(os.path.join(live, "f")).read() == "managed"
    assert open(os.path.join(displaced, "f")).read() == "by hand"
    for step in range(len(steps)):
        live, displaced = hand_made_cache(tmp_path / f"killed-at-{step}")
        assert killed_at(
            step, lambda live=live, displaced=displaced: af.point_symlink(live, "v1", displaced_to=displaced)
        )
        # The path resolves at every step: to the hand-made cache, or through the new link,
        # and the hand-made cache is whole wherever it is.
        if step <= 2:
            assert not os.path.islink(live) and open(os.path.join(live, "f")).read() == "by hand"
        else:
            assert os.readlink(live) == "v1" and open(os.path.join(displaced, "f")).read() == "by hand"


def test_without_exchange_the_directory_is_moved_aside_then_linked(tmp_path, monkeypatch):
    live, displaced = hand_made_cache(tmp_path)
    monkeypatch.setattr(af, "exchange", lambda first, second: False)  # an old C library or file system
    af.point_symlink(live, "v1", displaced_to=displaced)
    assert (tmp_path / "live" / "f").read_text() == "managed"
    assert (tmp_path / "aside" / "kept" / "f").read_text() == "by hand"
    assert sorted(os.listdir(tmp_path / "aside")) == ["kept"]


def test_exchange_swaps_two_paths(tmp_path):
    (tmp_path / "a").mkdir()
    os.symlink("target", tmp_path / "b")
    assert af.exchange(str(tmp_path / "a"), str(tmp_path / "b"))  # Linux, glibc >= 2.28, ext4/xfs/tmpfs
    assert os.path.islink(tmp_path / "a") and (tmp_path / "b").is_dir()
    with pytest.raises(FileNotFoundError):
        af.exchange(str(tmp_path / "a"), str(tmp_path / "missing"))


def test_the_fanout_helper_runs_from_the_files_the_driver_ships(tmp_path):
    """On a unit, fanout_unit.py imports store_manifest and atomic_files from beside itself
    (no collection there): the driver must ship all three."""
    from specfleet import fanout_run

    helper = tmp_path / "helper"
    helper.mkdir()
    for name in fanout_run.HELPER_FILES:
        shutil.copy(fanout_run.UNIT_HELPER_DIR / name, helper / name)
    store = tmp_path / "ctrl" / "models--o--m"
    (store / "blobs").mkdir(parents=True)
    (store / "blobs" / "b").write_bytes(b"b" * 100)
    manifest = sm.build_manifest(str(store), store.name)
    root = tmp_path / "unit"
    shutil.copytree(store, sm.StoreLayout(str(root), "hub", store.name).staging_dir(manifest["id"]))
    request = json.dumps({"root": str(root), "subdir": "hub", "manifest": manifest})
    # -I: no PYTHONPATH, no user site, not even the script's folder, as python3 on a unit
    done = subprocess.run(
        [sys.executable, "-I", str(helper / "fanout_unit.py"), "promote"],
        input=request,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["changed"] is True
    assert (root / "hub" / "models--o--m" / "blobs" / "b").read_bytes() == b"b" * 100
