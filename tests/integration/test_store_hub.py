"""`specfleet store add` against a loopback stand-in of the Hugging Face Hub.

The command runs as a subprocess, with huggingface_hub's real snapshot_download, pointed
at the stand-in Hub (tests/hub_standin.py) by HF_ENDPOINT.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.conftest import REPO
from tests.hub_standin import GOOD_TOKEN, OTHER_TOKEN, Hub, Repo, serving

# The command as the README shows it (`specfleet store add`), through the CLI's parser.
STORE_COMMAND = [sys.executable, "-m", "specfleet.cli", "store"]
CACHE_MANIFEST = [sys.executable, "-m", "specfleet.cli", "cache", "manifest"]

PUBLIC = "acme/tiny-draft"
GATED = "acme/gated-target"
UNKNOWN = "acme/no-such-model"


def repos() -> dict[str, Repo]:
    weights = bytes(range(256)) * 64  # 16 KiB standing in for safetensors
    public = Repo(PUBLIC, {
        "config.json": b'{"architectures": ["LlamaForCausalLM"], "hidden_size": 64}\n',
        "tokenizer/tokenizer_config.json": b'{"model_max_length": 2048}\n',
        "model.safetensors": weights,
        ".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n",
    }, lfs=frozenset({"model.safetensors"}))
    gated = Repo(GATED, {"config.json": b'{"hidden_size": 128}\n', "model.safetensors": weights[::-1]},
                 lfs=frozenset({"model.safetensors"}), gated=True)
    return {repo.repo_id: repo for repo in (public, gated)}


@pytest.fixture
def hub() -> Iterator[tuple[Hub, str]]:
    """The stand-in Hub and its CDN on 127.0.0.1, ports chosen by the kernel."""
    with serving(repos()) as served:
        yield served


def run(args: list[str], endpoint: str, cwd: Path, home: Path, token: str | None = None,
        command: list[str] = STORE_COMMAND) -> subprocess.CompletedProcess:
    # The developer's own Hugging Face settings (a token, an endpoint, offline mode) stay out.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(
        HF_ENDPOINT=endpoint, HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
        NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost", PYTHONPATH=str(REPO),
    )
    if token is not None:
        env["HF_TOKEN"] = token
    return subprocess.run([*command, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def one_line_error(result: subprocess.CompletedProcess) -> str:
    """The command's own report: one line, no traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("specfleet store add:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def assert_hub_layout(entry: Path, repo: Repo) -> None:
    assert (entry / "refs" / "main").read_text() == repo.commit
    snapshot = entry / "snapshots" / repo.commit
    for name, content in repo.files.items():
        link = snapshot / name
        assert link.is_symlink(), name
        blob = link.resolve()
        assert blob.parent == (entry / "blobs").resolve() and blob.name == repo.etag(name)
        assert blob.read_bytes() == content
    assert not [p for p in entry.rglob("*") if p.name.endswith((".incomplete", ".tmp", ".part"))]


def test_public_repo_lands_in_hub_layout_with_its_manifest_and_a_rerun_downloads_nothing(hub, tmp_path):
    state, endpoint = hub
    repo = state.repos[PUBLIC]
    # No --store: the default files/hf-store below the current directory (the checkout).
    result = run(["add", PUBLIC, "--format", "json"], endpoint, tmp_path, tmp_path / "hf-home")
    assert result.returncode == 0, result.stderr
    store = tmp_path / "files" / "hf-store"
    entry = store / "hub" / "models--acme--tiny-draft"
    assert_hub_layout(entry, repo)
    summary = json.loads(result.stdout)
    assert summary["revision"] == repo.commit and summary["name"] == entry.name
    # A HEAD per file; a GET per small file from the Hub, and for the LFS file from the CDN
    # (the HEAD stops at the redirect: the metadata is on it).
    assert state.count("hub", "/resolve/") == len(repo.files) + len(repo.files) - len(repo.lfs)
    assert state.count("cdn") == len(repo.lfs)

    # The manifest is what `specfleet cache manifest` writes for the same tree.
    manifest = (store / "manifests" / f"{entry.name}.json").read_text()
    twin = tmp_path / "twin"
    shutil.copytree(store / "hub", twin / "hub", symlinks=True)
    written = run([str(twin), "--format", "json"], endpoint, tmp_path, tmp_path / "hf-home", command=CACHE_MANIFEST)
    assert written.returncode == 0, written.stderr
    assert (twin / "manifests" / f"{entry.name}.json").read_text() == manifest
    assert json.loads(manifest)["id"] == summary["id"]
    assert sorted(p.name for p in (store / "manifests").iterdir()) == [f"{entry.name}.json"]

    # Again: the revision is asked for, nothing is downloaded, the manifest is the same.
    before = len(state.requests)
    again = run(["add", PUBLIC, "--store", str(store)], endpoint, tmp_path, tmp_path / "hf-home")
    assert again.returncode == 0, again.stderr
    later = state.requests[before:]
    assert [(s, m) for s, m, _ in later] == [("hub", "GET")]
    assert later[0][2] == f"/api/models/{PUBLIC}/revision/main"
    assert (store / "manifests" / f"{entry.name}.json").read_text() == manifest
    assert repo.commit in again.stdout


def test_a_revision_is_what_refs_main_points_at(hub, tmp_path):
    state, endpoint = hub
    repo = state.repos[PUBLIC]
    store = tmp_path / "store"
    result = run(["add", PUBLIC, "--store", str(store), "--revision", repo.commit], endpoint, tmp_path, tmp_path)
    assert result.returncode == 0, result.stderr
    assert_hub_layout(store / "hub" / "models--acme--tiny-draft", repo)
    assert (store / "manifests" / "models--acme--tiny-draft.json").is_file()

    manifest = (store / "manifests" / "models--acme--tiny-draft.json").read_text()
    missing = run(["add", PUBLIC, "--store", str(store), "--revision", "v9"], endpoint, tmp_path, tmp_path)
    assert missing.returncode == 1
    assert "no revision 'v9'" in one_line_error(missing)
    # The entry did not change: its manifest is back, nothing else is left in manifests/.
    assert (store / "manifests" / "models--acme--tiny-draft.json").read_text() == manifest
    assert [p.name for p in (store / "manifests").iterdir()] == ["models--acme--tiny-draft.json"]


def test_a_download_that_fails_midway_leaves_no_manifest_and_the_next_run_resumes(hub, tmp_path):
    state, endpoint = hub
    repo = state.repos[PUBLIC]
    store = tmp_path / "store"
    manifest = store / "manifests" / "models--acme--tiny-draft.json"
    assert run(["add", PUBLIC, "--store", str(store)], endpoint, tmp_path, tmp_path).returncode == 0
    first = manifest.read_text()

    # A new commit on the Hub, and its CDN failing: the small files arrive, the weights do not.
    repo.files = {**repo.files, "config.json": b'{"hidden_size": 96}\n', "model.safetensors": b"w" * 4096}
    repo.commit = hashlib.sha1(b"second commit").hexdigest()
    state.cdn_status = 503
    failed = run(["add", PUBLIC, "--store", str(store)], endpoint, tmp_path, tmp_path)
    assert failed.returncode == 1
    assert "HTTP 503" in one_line_error(failed)
    entry = store / "hub" / "models--acme--tiny-draft"
    assert (entry / "refs" / "main").read_text() == repo.commit  # huggingface_hub moved on ...
    assert not (entry / "snapshots" / repo.commit / "model.safetensors").exists()
    assert not manifest.exists()  # ... so no manifest claims the entry is complete
    assert list((store / "manifests").iterdir()) == []

    state.cdn_status = 200
    before = len(state.requests)
    resumed = run(["add", PUBLIC, "--store", str(store)], endpoint, tmp_path, tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    fetched = [(server, method, path) for server, method, path in state.requests[before:] if method == "GET"]
    assert [path.rsplit("/", 1)[-1] for server, _, path in fetched if server == "hub"] == ["main"]
    assert [server for server, _, _ in fetched] == ["hub", "cdn"]  # the revision, then only the weights
    assert_hub_layout(entry, repo)
    assert manifest.read_text() != first


@pytest.mark.parametrize("gate", ["all", "files"])
def test_gated_repo_needs_the_token_from_the_environment_and_never_shows_it(hub, tmp_path, gate):
    state, endpoint = hub
    repo = state.repos[GATED]
    repo.gate = gate
    store = tmp_path / "store"
    entry = store / "hub" / "models--acme--gated-target"
    manifest = store / "manifests" / f"{entry.name}.json"

    refused = run(["add", GATED, "--store", str(store)], endpoint, tmp_path, tmp_path)
    assert refused.returncode == 1
    line = one_line_error(refused)
    assert GATED in line and f"https://huggingface.co/{GATED}" in line and "HF_TOKEN" in line and "401" in line
    assert not manifest.exists() and not list((entry / "snapshots").glob("*/*"))
    # Refused where the Hub refuses: at the file downloads, or already at the repo's info.
    assert (state.count("hub", "/resolve/") > 0) == (gate == "files")

    wrong = run(["add", GATED, "--store", str(store)], endpoint, tmp_path, tmp_path, token=OTHER_TOKEN)
    assert wrong.returncode == 1
    line = one_line_error(wrong)
    assert "403" in line and f"https://huggingface.co/{GATED}" in line and "HF_TOKEN" in line
    assert OTHER_TOKEN not in wrong.stdout + wrong.stderr
    assert not manifest.exists()

    accepted = run(["add", GATED, "--store", str(store)], endpoint, tmp_path, tmp_path, token=GOOD_TOKEN)
    assert accepted.returncode == 0, accepted.stderr
    assert GOOD_TOKEN not in accepted.stdout + accepted.stderr
    assert_hub_layout(entry, repo)
    assert manifest.is_file()
    # The CDN refuses any request with an Authorization header: the blob came without the token.
    assert state.count("cdn") == len(repo.lfs)


def test_unknown_repo_fails_clearly(hub, tmp_path):
    state, endpoint = hub
    store = tmp_path / "store"
    result = run(["add", UNKNOWN, "--store", str(store)], endpoint, tmp_path, tmp_path)
    assert result.returncode == 1
    line = one_line_error(result)
    assert UNKNOWN in line and "no such model repo" in line
    assert not store.exists()  # the command made it, and nothing is in it: nothing is left behind


@pytest.mark.parametrize("revision", ["../../../outside", "/etc/x", "-x", "a b", "main..v2", ".hidden", "x.lock"])
def test_a_revision_that_is_no_ref_name_is_refused_before_the_hub_is_asked(hub, tmp_path, revision):
    state, endpoint = hub
    store = tmp_path / "store"
    result = run(["add", PUBLIC, "--store", str(store), f"--revision={revision}"], endpoint, tmp_path, tmp_path)
    assert result.returncode == 2
    assert "not a branch, tag or commit" in one_line_error(result) and "Traceback" not in result.stderr
    assert state.requests == [] and not store.exists() and not (tmp_path / "outside").exists()


def test_a_failed_add_into_a_store_in_use_leaves_only_what_was_there(hub, tmp_path):
    state, endpoint = hub
    store = tmp_path / "store"
    assert run(["add", PUBLIC, "--store", str(store)], endpoint, tmp_path, tmp_path).returncode == 0
    before = sorted(str(path.relative_to(store)) for path in store.rglob("*"))
    failed = run(["add", UNKNOWN, "--store", str(store)], endpoint, tmp_path, tmp_path)
    assert failed.returncode == 1
    assert sorted(str(path.relative_to(store)) for path in store.rglob("*")) == before


def test_a_store_that_cannot_be_written_fails_before_any_download(hub, tmp_path):
    state, endpoint = hub
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    result = run(["add", PUBLIC, "--store", str(blocker / "store")], endpoint, tmp_path, tmp_path)
    assert result.returncode == 2
    assert "cannot write" in one_line_error(result)

    # A store whose manifests/ cannot be written: the check comes before the download, and
    # undoes the directories it made.
    store = tmp_path / "store"
    store.mkdir()
    (store / "manifests").write_text("")
    result = run(["add", PUBLIC, "--store", str(store)], endpoint, tmp_path, tmp_path)
    assert result.returncode == 2
    assert "cannot write" in one_line_error(result)
    assert sorted(p.name for p in store.iterdir()) == ["manifests"]
    assert state.requests == []

    if os.geteuid() != 0:  # root writes into a 0555 directory anyway
        readonly = tmp_path / "readonly"
        readonly.mkdir(mode=0o555)
        result = run(["add", PUBLIC, "--store", str(readonly)], endpoint, tmp_path, tmp_path)
        assert result.returncode == 2 and not list(readonly.iterdir())


def test_the_url_paths_the_stand_in_serves_are_those_huggingface_hub_asks_for():
    """If huggingface_hub changed its endpoints, the stand-in would test nothing."""
    from huggingface_hub import constants, hf_hub_url

    url = hf_hub_url(PUBLIC, "tokenizer/tokenizer_config.json", revision="c0ffee", endpoint="http://h")
    assert url == f"http://h/{PUBLIC}/resolve/c0ffee/{quote('tokenizer/tokenizer_config.json')}"
    assert constants.HUGGINGFACE_HEADER_X_REPO_COMMIT == "X-Repo-Commit"
    assert constants.HUGGINGFACE_HEADER_X_LINKED_ETAG == "X-Linked-Etag"
