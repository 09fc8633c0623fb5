"""specfleet/store.py without a network: paths, the roles' defaults it reads, the sha256 check,
the error texts (from huggingface_hub's own errors for the Hub's answers)."""

from __future__ import annotations

import argparse
import errno
import hashlib
import io
import json
import os

import httpx2
import pytest
import yaml
from huggingface_hub.utils import hf_raise_for_status

from specfleet import cache, store
from tests.conftest import REPO


def role_default(role: str, name: str):
    return yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())[name]


FILES_DIR_DEFAULTS = {
    ("specfleet_hf_cache", "specfleet_hf_cache_store"): "hf-store",
    ("specfleet_fanout", "specfleet_fanout_store"): "hf-store",
    ("specfleet_tiktoken", "specfleet_tiktoken_source_dir"): "tiktoken",
    ("specfleet_compile_cache", "specfleet_compile_cache_store"): "store",
    ("specfleet_image", "specfleet_image_tarball_dir"): "images",
}


@pytest.mark.parametrize(("role", "name"), list(FILES_DIR_DEFAULTS))
def test_every_controller_folder_is_below_specfleet_files_dir(role, name):
    """One variable moves them all (an installed collection's playbooks are not beside files/)."""
    value = role_default(role, name)
    assert value == "{{ specfleet_files_dir | default(playbook_dir ~ '/../files') }}/" + FILES_DIR_DEFAULTS[role, name]
    assert store.checkout_path(value, name) == "files/" + FILES_DIR_DEFAULTS[role, name]


def test_default_directories_are_the_roles_defaults_below_the_checkout():
    assert store.COLLECTION_ROOT == REPO
    assert store.default_store() == "files/hf-store"
    assert store.default_tiktoken_dir() == "files/tiktoken"
    assert (REPO / "playbooks").is_dir()  # what {{ playbook_dir }}/.. is the parent of


@pytest.mark.parametrize("value", ["/srv/hf-store", "{{ playbook_dir }}/../files/hf-store",
                                   "{{ specfleet_files_dir | default(playbook_dir ~ '/../files') }}/{{ x }}"])
def test_a_default_the_cli_cannot_place_is_refused(value):
    with pytest.raises(ValueError, match="is not a path below"):
        store.checkout_path(value, "v")


def test_the_tiktoken_table_is_the_roles():
    encodings, prefix = store.tiktoken_table()
    assert [{"name": e.name, "sha256": e.sha256} for e in encodings] == role_default(
        "specfleet_tiktoken", "specfleet_tiktoken_encodings"
    )
    assert prefix == role_default("specfleet_tiktoken", "specfleet_tiktoken_url_prefix")
    assert store.encoding_url(prefix, encodings[0]) == f"{prefix}{encodings[0].name}.tiktoken"
    assert store.encoding_url("http://mirror/enc", encodings[0]) == f"http://mirror/enc/{encodings[0].name}.tiktoken"


def subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    (commands,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return commands.choices[name]


def test_no_option_changes_or_skips_the_checksums():
    parser = argparse.ArgumentParser()
    store.register(parser.add_subparsers())
    tiktoken = subcommand(subcommand(parser, "store"), "tiktoken")
    options = {option for action in tiktoken._actions for option in action.option_strings}
    assert options == {"-h", "--help", "-i", "--inventory", "--dir", "--url-prefix", "--format"}


def test_verified_content_is_renamed_into_place(tmp_path):
    content = b"IQ== 0\n"
    target = tmp_path / "o200k_base.tiktoken"
    store.copy_verified(io.BytesIO(content), target, hashlib.sha256(content).hexdigest(), "http://x/o200k_base.tiktoken")
    assert target.read_bytes() == content
    assert target.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == [target.name]
    assert store.has_checksum(target, hashlib.sha256(content).hexdigest())
    assert not store.has_checksum(target, "0" * 64)
    assert not store.has_checksum(tmp_path / "absent", "0" * 64)


def test_a_mismatch_names_the_file_both_sums_and_leaves_the_old_file(tmp_path):
    target = tmp_path / "cl100k_base.tiktoken"
    target.write_bytes(b"old")
    expected = "a" * 64
    got = hashlib.sha256(b"other").hexdigest()
    with pytest.raises(store.StoreError) as raised:
        store.copy_verified(io.BytesIO(b"other"), target, expected, "http://m/cl100k_base.tiktoken")
    assert str(raised.value) == (
        f"cl100k_base.tiktoken: sha256 {got}, expected {expected} (from http://m/cl100k_base.tiktoken); "
        "the download was discarded"
    )
    assert raised.value.code == store.EXIT_FAILED
    assert [p.name for p in tmp_path.iterdir()] == [target.name] and target.read_bytes() == b"old"


def test_an_endless_download_stops_at_the_limit_and_leaves_nothing(tmp_path):
    with pytest.raises(store.StoreError, match="more than 10 bytes"):
        store.copy_verified(io.BytesIO(b"x" * 11), tmp_path / "e.tiktoken", "0" * 64, "http://m/e", limit=10)
    assert list(tmp_path.iterdir()) == []


def hub_error(status: int, url: str, **headers: str) -> Exception:
    """The exception huggingface_hub raises for this answer of the Hub."""
    response = httpx2.Response(status, headers=headers, request=httpx2.Request("GET", url))
    with pytest.raises(Exception) as raised:
        hf_raise_for_status(response)
    return raised.value


API = "https://huggingface.co/api/models/org/name/revision/main"
RESOLVE = "https://huggingface.co/org/name/resolve/0123/model.safetensors"


@pytest.mark.parametrize(
    ("error", "code", "fragments"),
    [
        (hub_error(401, API, **{"X-Error-Code": "GatedRepo"}), 1,
         ["(401)", "https://huggingface.co/org/name", "HF_TOKEN"]),
        (hub_error(401, API), 1, ["(401)", "gated or private, or does not exist", "HF_TOKEN"]),
        (hub_error(403, RESOLVE, **{"X-Error-Code": "GatedRepo"}), 1,
         ["refused the token in HF_TOKEN (403)", "https://huggingface.co/org/name"]),
        (hub_error(401, API, **{"X-Error-Message": "Invalid credentials in Authorization header"}), 1, ["(401)"]),
        (hub_error(404, API, **{"X-Error-Code": "RepoNotFound"}), 1, ["no such model repo on the Hub (404)"]),
        (hub_error(404, API, **{"X-Error-Code": "RevisionNotFound"}), 1, ["no revision 'v1'"]),
        (hub_error(500, API), 1, ["HTTP 500"]),
        (httpx2.ConnectError("refused"), 1, ["could not be reached (ConnectError)"]),
        (PermissionError(errno.EACCES, "Permission denied", "/s/hub/x"), 2, ["cannot write the store"]),
        (OSError(errno.ENOSPC, "No space left on device", "/s/hub/x"), 2, ["No space left"]),
    ],
)
def test_hub_failures_are_one_line_naming_the_repo(tmp_path, error, code, fragments):
    failure = store.hub_failure("org/name", "v1", tmp_path, error)
    assert failure is not None and failure.code == code
    message = str(failure)
    assert "\n" not in message and (message.startswith("org/name: ") or message.startswith(str(tmp_path)))
    for fragment in fragments:
        assert fragment in message


def test_an_unforeseen_failure_is_not_dressed_up(tmp_path):
    assert store.hub_failure("org/name", None, tmp_path, ValueError("bug")) is None


def test_prepare_dirs_creates_and_proves_each_or_undoes_what_it_made(tmp_path):
    store.prepare_dirs([tmp_path / "s" / "hub", tmp_path / "s" / "manifests"])
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["hub", "manifests"]
    assert list((tmp_path / "s" / "hub").iterdir()) == []  # the probe file is gone

    (tmp_path / "file").write_text("")
    with pytest.raises(store.StoreError) as raised:
        store.prepare_dirs([tmp_path / "new" / "hub", tmp_path / "file" / "manifests"])
    assert raised.value.code == store.EXIT_BAD_INPUT
    assert "cannot write here" in str(raised.value) and "nothing was written" in str(raised.value)
    assert not (tmp_path / "new").exists()


def test_links_out_of_an_entry_are_found(tmp_path):
    entry = tmp_path / "models--org--name"
    (entry / "snapshots" / "c0" / "sub").mkdir(parents=True)
    (entry / "blobs").mkdir()
    (entry / "blobs" / "e1").write_text("x")
    (entry / "snapshots" / "c0" / "ok").symlink_to("../../blobs/e1")
    (entry / "snapshots" / "c0" / "sub" / "ok").symlink_to("../../../blobs/e1")
    assert store.links_leaving(entry) == []
    (entry / "blobs" / "e2").symlink_to("../../blobs/ab/e2")  # huggingface_hub's shared blob store
    (entry / "snapshots" / "c0" / "abs").symlink_to("/etc/hostname")
    assert store.links_leaving(entry) == ["blobs/e2 -> ../../blobs/ab/e2", "snapshots/c0/abs -> /etc/hostname"]


def test_shared_blobs_are_off_for_a_store():
    from huggingface_hub.utils._shared_blobs import shared_blobs_enabled

    store._hub_without_shared_blobs()
    assert not shared_blobs_enabled()


def test_pin_main(tmp_path):
    store.pin_main(tmp_path, "c" * 40)
    assert (tmp_path / "refs" / "main").read_text() == "c" * 40
    assert os.listdir(tmp_path / "refs") == ["main"]


def test_one_manifest_is_what_the_whole_store_run_writes_for_it(tmp_path):
    for name in ("models--a--b", "models--c--d"):
        (tmp_path / "hub" / name / "blobs").mkdir(parents=True)
        (tmp_path / "hub" / name / "blobs" / "e").write_text(name)
    one = cache.write_manifest(tmp_path, "hub", "models--c--d")
    text = cache.manifest_path(tmp_path, "models--c--d").read_text()
    assert json.loads(text) == one
    assert cache.write_manifests(tmp_path, "hub")[1] == one
    assert cache.manifest_path(tmp_path, "models--c--d").read_text() == text
    assert sorted(p.name for p in (tmp_path / "manifests").iterdir()) == ["models--a--b.json", "models--c--d.json"]


SHA_A, SHA_B = "a" * 64, "b" * 64


def test_an_inventorys_table_is_the_one_its_hosts_set():
    table = [{"name": "o200k_base", "sha256": SHA_A}]
    variables = {"u1": {"specfleet_tiktoken_encodings": table}, "u2": {"specfleet_tiktoken_encodings": table},
                 "u3": {}}
    assert store.inventory_table(variables, "inv.yml") == table
    encodings, _ = store.tiktoken_table(table)
    assert encodings == [store.Encoding("o200k_base", SHA_A)]
    assert store.inventory_table({"u1": {}}, "inv.yml") is None


def test_hosts_that_disagree_on_the_table_are_refused_by_name():
    variables = {"u1": {"specfleet_tiktoken_encodings": [{"name": "o200k_base", "sha256": SHA_A}]},
                 "u2": {"specfleet_tiktoken_encodings": [{"name": "o200k_base", "sha256": SHA_B}]}}
    with pytest.raises(store.StoreError, match=r"inv.yml: specfleet_tiktoken_encodings differs between hosts \(u1; u2"):
        store.inventory_table(variables, "inv.yml")


@pytest.mark.parametrize("table", ["o200k_base", [{"name": "o200k_base"}], [{"name": "x y", "sha256": SHA_A}],
                                   [{"name": "o200k_base", "sha256": "{{ sha }}"}]])
def test_a_table_that_is_not_names_and_sha256_is_refused(table):
    with pytest.raises(ValueError, match="specfleet_tiktoken_encodings: "):
        store.tiktoken_table(table)


@pytest.mark.parametrize("revision", ["main", "v1.0", "release/2025-01", "refs/pr/3", "a" * 40, "abc1234"])
def test_a_branch_tag_commit_or_pr_ref_is_a_revision(revision):
    assert store.revision_problem(revision) is None


@pytest.mark.parametrize("revision", ["../x", "..", "/etc", "-x", "a b", "x.lock", ".hidden", "a//b", "x@{1}",
                                      "a/.b", "", "x\ny", "x:y", "x~1", "x^", "x?", "x*", "x[", "x\\y", "a/", "a."])
def test_a_revision_that_could_leave_the_store_or_is_no_ref_is_refused(revision):
    assert store.revision_problem(revision).startswith("--revision ")
