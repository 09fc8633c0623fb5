"""An image tarball as a store entry the fan-out can pipeline: parts, manifest, atomic switch."""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.specfleet.fleet.plugins.module_utils.store_manifest import verify_tree

from specfleet import cache


def test_parts_cover_the_tarball_in_order_and_their_names_sort_so():
    parts = cache.image_parts(10_000, 3_000)
    assert parts == [("part-00000", 0, 3000), ("part-00001", 3000, 3000), ("part-00002", 6000, 3000),
                     ("part-00003", 9000, 1000)]
    assert cache.image_parts(6_000, 3_000)[-1] == ("part-00001", 3000, 3000)
    assert cache.image_parts(0, 3_000) == [("part-00000", 0, 0)]
    many = cache.image_parts(200_001, 1)
    assert [name for name, _, _ in many] == sorted(name for name, _, _ in many)
    with pytest.raises(ValueError, match="at least one byte"):
        cache.image_parts(10, 0)


def test_entry_names_come_from_the_tarball():
    assert cache.image_entry_name("/x/nvidia_vllm_26.10-py3.tar") == "nvidia_vllm_26.10-py3"
    with pytest.raises(ValueError, match="not a usable tarball name"):
        cache.image_entry_name("/x/.tar")


def concatenated(entry) -> bytes:
    return b"".join((entry / name).read_bytes() for name in sorted(os.listdir(entry)))


def listed(images) -> list[str]:
    """The image store's folder without its lock files: the entries, and any staging left."""
    return sorted(path.name for path in images.iterdir() if not path.name.endswith(".lock"))


def rewrite(tarball, data: bytes) -> None:
    """New content under the same name, with a later mtime however coarse the clock."""
    before = tarball.stat().st_mtime_ns
    tarball.write_bytes(data)
    os.utime(tarball, ns=(before + 10**9, before + 10**9))


def test_a_tarball_becomes_a_verified_entry_once_and_again_when_it_changes(tmp_path):
    tarball = tmp_path / "vllm_26.10.tar"
    tarball.write_bytes(os.urandom(10_000))
    store = tmp_path / "store"
    first = cache.store_image(tarball, store, 3_000)
    entry = store / "images" / "vllm_26.10"
    manifest = json.loads((store / "manifests" / "vllm_26.10.json").read_text())
    assert first == {"name": "vllm_26.10", "id": manifest["id"], "parts": 4, "bytes": 10_000, "changed": True}
    assert concatenated(entry) == tarball.read_bytes()
    assert verify_tree(str(entry), manifest, full=True) == []
    assert entry.stat().st_mode & 0o777 == 0o755
    assert listed(store / "images") == ["vllm_26.10"]  # no staging left

    # The same file again: nothing is cut or rewritten.
    assert cache.store_image(tarball, store, 3_000) == {**first, "changed": False}

    # Parts gone from the entry: cut again, though the tarball is the same.
    (entry / "part-00001").unlink()
    assert cache.store_image(tarball, store, 3_000) == {**first, "changed": True}
    assert concatenated(entry) == tarball.read_bytes()

    # A new tarball under the same name: a new entry replaces the old one whole.
    rewrite(tarball, os.urandom(7_000))
    second = cache.store_image(tarball, store, 3_000)
    assert second["changed"] and second["parts"] == 3 and second["id"] != first["id"]
    assert concatenated(entry) == tarball.read_bytes()
    assert listed(store / "images") == ["vllm_26.10"]


def test_a_cut_that_fails_leaves_no_manifest_so_no_unit_takes_a_partial_entry(tmp_path, monkeypatch):
    tarball = tmp_path / "img.tar"
    tarball.write_bytes(os.urandom(9_000))
    store = tmp_path / "store"
    cache.store_image(tarball, store, 3_000)
    rewrite(tarball, os.urandom(9_000))
    calls = []

    def copy_then_fail(source, target, length, chunk=1 << 20):
        calls.append(length)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        target.write(source.read(length))

    monkeypatch.setattr(cache, "copy_bytes", copy_then_fail)
    with pytest.raises(OSError, match="No space left"):
        cache.store_image(tarball, store, 3_000)
    assert not (store / "manifests" / "img.json").exists()
    assert listed(store / "images") == ["img"]  # the staging is gone
    monkeypatch.undo()
    again = cache.store_image(tarball, store, 3_000)
    assert again["changed"] and concatenated(store / "images" / "img") == tarball.read_bytes()


def test_the_command_cuts_a_tarball_and_refuses_bad_input_in_one_line(tmp_path, capsys):
    from specfleet import cli

    tarball = tmp_path / "img.tar"
    tarball.write_bytes(os.urandom(3 << 20))
    store = tmp_path / "store"
    assert cli.main(["store", "image", str(tarball), "--store", str(store), "--part-mib", "1", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["parts"] == 3
    assert cli.main(["store", "image", str(tarball), "--store", str(store), "--part-mib", "1"]) == 0
    assert "already in the store as" in capsys.readouterr().out

    assert cli.main(["store", "image", str(tmp_path / "missing.tar"), "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specfleet store image: ") and "missing.tar: no such tarball" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert cli.main(["store", "image", str(tarball), "--store", str(store), "--part-mib", "0"]) == 2
    assert "--part-mib 0: must be at least 1" in capsys.readouterr().err
