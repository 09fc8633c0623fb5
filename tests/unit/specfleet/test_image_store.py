"""An image tarball as a store entry the fan-out can pipeline: parts, manifest, atomic switch."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile

import pytest
from ansible_collections.specfleet.fleet.plugins.module_utils.store_manifest import verify_tree

from specfleet import cache
from tests.stores import write_image_archive


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


def rewrite(tarball, layer_bytes: int) -> None:
    """Another image under the same name, with a later mtime however coarse the clock."""
    before = tarball.stat().st_mtime_ns
    write_image_archive(tarball, layer_bytes)
    os.utime(tarball, ns=(before + 10**9, before + 10**9))


def test_a_tarball_becomes_a_verified_entry_once_and_again_when_it_changes(tmp_path):
    tarball = write_image_archive(tmp_path / "vllm_26.10.tar", 10_000)
    size = tarball.stat().st_size
    store = tmp_path / "store"
    first = cache.store_image(tarball, store, 3_000)
    entry = store / "images" / "vllm_26.10"
    manifest = json.loads((store / "manifests" / "vllm_26.10.json").read_text())
    assert first == {"name": "vllm_26.10", "id": manifest["id"], "parts": -(-size // 3_000), "bytes": size,
                     "changed": True}
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
    rewrite(tarball, 30_000)
    second = cache.store_image(tarball, store, 3_000)
    assert second["changed"] and second["parts"] == -(-tarball.stat().st_size // 3_000) > first["parts"]
    assert second["id"] != first["id"]
    assert concatenated(entry) == tarball.read_bytes()
    assert listed(store / "images") == ["vllm_26.10"]


def test_a_cut_that_fails_leaves_no_manifest_so_no_unit_takes_a_partial_entry(tmp_path, monkeypatch):
    tarball = write_image_archive(tmp_path / "img.tar", 9_000)
    store = tmp_path / "store"
    cache.store_image(tarball, store, 3_000)
    rewrite(tarball, 9_000)
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

    tarball = write_image_archive(tmp_path / "img.tar", (3 << 20) - 20_480)  # the archive: 3 MiB
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


def archive_without(directory, drop: str, manifest: bytes | None = None):
    """A `docker save`-shaped archive with member ``drop`` left out, or manifest.json replaced."""
    source = write_image_archive(directory / "source.tar", 1_000)
    target = directory / "bad.tar"
    with tarfile.open(source) as archive, tarfile.open(target, "w") as out:
        for member in archive:
            if member.name == drop:
                continue
            data = archive.extractfile(member).read()
            if member.name == "manifest.json" and manifest is not None:
                data = manifest
            member.size = len(data)
            out.addfile(member, io.BytesIO(data))
    return target


def refused(bad, tmp_path, capsys) -> str:
    """The one line `store image` refuses ``bad`` with; nothing of the store was made."""
    from specfleet import cli

    store = tmp_path / "store"
    assert cli.main(["store", "image", str(bad), "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"specfleet store image: {bad}: ") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not store.exists()
    return err


@pytest.mark.parametrize("content", [b"", b"just some text\n", os.urandom(5_000)], ids=["empty", "text", "random"])
def test_a_file_that_is_no_tar_archive_is_refused_and_the_store_untouched(content, tmp_path, capsys):
    bad = tmp_path / "bad.tar"
    bad.write_bytes(content)
    assert "not a tar archive" in refused(bad, tmp_path, capsys)


@pytest.mark.parametrize(("drop", "manifest", "problem"), [
    ("manifest.json", None, "a tar archive without manifest.json"),
    ("layer/layer.tar", None, "names 1 file(s) the archive lacks, as 'layer/layer.tar'"),
    ("", b"{not json", "its manifest.json is not JSON"),
    ("", b"\xff\xfe", "its manifest.json is not JSON"),
    ("", b'{"Config": "config.json"}', "is not a list of images, each with Config and Layers"),
    ("", b"[]", "is not a list of images"),
])
def test_an_archive_docker_load_would_refuse_is_refused_and_the_store_untouched(drop, manifest, problem, tmp_path,
                                                                                 capsys):
    assert problem in refused(archive_without(tmp_path, drop, manifest), tmp_path, capsys)


def test_a_compressed_archive_is_refused_as_one(tmp_path, capsys):
    from specfleet import cli

    tarball = write_image_archive(tmp_path / "img.tar", 1_000)
    packed = tmp_path / "packed.tar"
    packed.write_bytes(gzip.compress(tarball.read_bytes()))
    assert cli.main(["store", "image", str(packed), "--store", str(tmp_path / "store")]) == 2
    assert "a gzip file: give `docker save -o FILE IMAGE`'s archive as it is" in capsys.readouterr().err
