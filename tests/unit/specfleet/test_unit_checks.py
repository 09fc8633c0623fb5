"""The prepare roles' "already so?" checks, built on the controller from what the roles write."""

from __future__ import annotations

import hashlib
import json

import pytest

from specfleet.cache import hf_repo_dir
from specfleet.unit_checks import (
    CheckInputError,
    file_sha256,
    hf_cache_checks,
    image_room_check,
    stores_lacking,
    tiktoken_checks,
    tiktoken_files,
)

ENCODINGS = [{"name": "o200k_base", "sha256": "a" * 64}, {"name": "cl100k_base", "sha256": "b" * 64}]
PREFIX = "https://openaipublic.blob.core.windows.net/encodings/"


def test_each_encoding_goes_under_its_name_and_the_sha1_of_its_url():
    copies = tiktoken_files(ENCODINGS, "/t", PREFIX)
    url_sha1 = hashlib.sha1(f"{PREFIX}o200k_base.tiktoken".encode()).hexdigest()
    assert copies[:2] == [
        {"name": "o200k_base", "sha256": "a" * 64, "dest": "/t/encodings/o200k_base.tiktoken"},
        {"name": "o200k_base", "sha256": "a" * 64, "dest": f"/t/cache/{url_sha1}"},
    ]
    # tiktoken's own name for o200k_base's cache file (sha1 of its blob URL).
    assert url_sha1 == "fb374d419588a4632f3f557e76b4b70aebbca790"
    assert [copy["name"] for copy in copies] == ["o200k_base", "o200k_base", "cl100k_base", "cl100k_base"]


def test_the_tiktoken_checks_are_the_directories_and_every_copy_root_s_with_its_hash():
    checks = tiktoken_checks(ENCODINGS, "/t", PREFIX)
    assert [(c["kind"], c["path"]) for c in checks[:2]] == [("directory", "/t/encodings"), ("directory", "/t/cache")]
    files = checks[2:]
    assert [c["path"] for c in files] == [copy["dest"] for copy in tiktoken_files(ENCODINGS, "/t", PREFIX)]
    assert {(c["kind"], c["owner"], c["group"], c["mode"]) for c in files} == {("file", "root", "root", "0644")}
    assert [c["sha256"] for c in files] == ["a" * 64, "a" * 64, "b" * 64, "b" * 64]


@pytest.fixture
def store(tmp_path):
    """A model store with one repo's manifest and its refs/main."""
    repo = "org/draft"
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests" / f"{hf_repo_dir(repo)}.json").write_text(
        json.dumps({"name": hf_repo_dir(repo), "id": "abc", "files": {}, "symlinks": {}}))
    (tmp_path / "hub" / hf_repo_dir(repo) / "refs").mkdir(parents=True)
    (tmp_path / "hub" / hf_repo_dir(repo) / "refs" / "main").write_text("0123abcd\n")
    return tmp_path


def test_hf_cache_checks_cover_directories_stores_and_checkpoint_links(store):
    checks = hf_cache_checks(["org/draft"], ["org/draft"], str(store), "/hf")
    assert checks[:3] == [{"kind": "directory", "path": p, "mine": True, "mode": "0755"}
                          for p in ("/hf", "/hf/hub", "/hf/checkpoints")]
    assert checks[3] == {"kind": "store", "root": "/hf", "subdir": "hub",
                         "manifest": {"name": "models--org--draft", "id": "abc", "files": {}, "symlinks": {}}}
    assert checks[4:] == [
        {"kind": "directory", "path": "/hf/checkpoints/org", "mine": True, "mode": "0755"},
        {"kind": "link", "path": "/hf/checkpoints/org/draft",
         "src": "../../hub/models--org--draft/snapshots/0123abcd"},
    ]


def test_a_manifest_the_store_lacks_is_named(store):
    missing = r"manifests/models--org--other\.json: cannot read the manifest of org/other"
    with pytest.raises(CheckInputError, match=missing):
        hf_cache_checks(["org/other"], [], str(store), "/hf")
    (store / "manifests" / "models--org--draft.json").write_text("{not json")
    with pytest.raises(CheckInputError, match=r"models--org--draft\.json: not a manifest"):
        hf_cache_checks(["org/draft"], [], str(store), "/hf")


def store_result(up_to_date, holds=None):
    detail = {"up_to_date": up_to_date, "stale_versions": []} if up_to_date is not None else "could not read: x"
    return {"kind": "store", "subject": "m", "holds": bool(up_to_date) if holds is None else holds, "detail": detail}


def test_lacking_models_are_those_not_live_and_not_those_with_leftovers_only():
    results = [{"kind": "directory", "holds": False, "detail": "mode"},
               store_result(True), store_result(False), store_result(True, holds=False), store_result(None)]
    models = ["a/live", "b/missing", "c/leftovers", "d/unreadable"]
    assert stores_lacking(results, models) == ["b/missing", "d/unreadable"]
    with pytest.raises(CheckInputError, match="4 store results for 3 models"):
        stores_lacking(results, ["a", "b", "c"])


def test_file_sha256_of_a_controller_file_or_empty_when_there_is_none(tmp_path):
    (tmp_path / "f").write_bytes(b"\xff\x00encoding")
    assert file_sha256(str(tmp_path / "f")) == hashlib.sha256(b"\xff\x00encoding").hexdigest()
    assert file_sha256(str(tmp_path / "none")) == ""
    assert file_sha256(str(tmp_path)) == ""


def test_the_image_room_check_counts_a_tarball_twice(tmp_path):
    tarball = tmp_path / "tiny.tar"
    tarball.write_bytes(b"x" * 12345)
    check = image_room_check("/var/lib/docker", "/var/lib/specfleet/images", str(tarball), 8, 20, 2)
    assert check == {"kind": "room", "spare": 2 * 2**30,
                     "needs": [{"path": "/var/lib/docker", "bytes": 12345},
                               {"path": "/var/lib/specfleet/images", "bytes": 12345}]}
    # A registry pull: Docker's root only, the plan's size, else the unknown-size default.
    pull = image_room_check("/d", "/u", "", 8, 20, 2)
    assert pull["needs"] == [{"path": "/d", "bytes": 8 * 2**30}]
    assert image_room_check("/d", "/u", "", None, 20, 0)["needs"] == [{"path": "/d", "bytes": 20 * 2**30}]
    # A tarball the controller lacks counts at the image's size (its copy task names it).
    missing = image_room_check("/d", "/u", str(tmp_path / "absent.tar"), "", 20, 0)
    assert [need["bytes"] for need in missing["needs"]] == [20 * 2**30, 20 * 2**30]
