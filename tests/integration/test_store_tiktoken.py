"""`specfleet store tiktoken` against a loopback server standing in for the encodings' host.

The real encodings are not available offline, so the server serves stand-in content: its
sha256 is not the role's, and the command must refuse it (exit 1, naming the file, the
expected and the received sha256) and leave nothing behind. The success path needs stand-in
checksums: an inventory that lists them for its units (`-i`), as the lab's does; the command
line has no way to skip the check.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from specfleet import store
from tests.conftest import REPO, own_message

STANDIN = {
    "o200k_base.tiktoken": b"IQ== 0\nIg== 1\nIw== 2\n",
    "cl100k_base.tiktoken": b"IQ== 0\nIg== 1\n",
}


@pytest.fixture
def encodings_server() -> Iterator[tuple[str, list[str]]]:
    """http://127.0.0.1:PORT/encodings/ serving STANDIN; the paths it was asked for."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            asked.append(self.path)
            name = self.path.removeprefix("/encodings/")
            body = STANDIN.get(name)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/encodings/", asked
    server.shutdown()
    server.server_close()


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
    return subprocess.run([sys.executable, "-m", "specfleet.cli", "store", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_content_with_another_sha256_is_refused_and_nothing_is_left(encodings_server, tmp_path):
    prefix, asked = encodings_server
    encodings, _ = store.tiktoken_table()
    first = encodings[0]
    # No --dir: the role's default, files/tiktoken below the current directory (the checkout).
    result = run(["tiktoken", "--url-prefix", prefix], tmp_path)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    got = hashlib.sha256(STANDIN[first.filename]).hexdigest()
    assert own_message(result.stderr) == (
        f"specfleet store tiktoken: {first.filename}: sha256 {got}, expected {first.sha256} "
        f"(from {prefix}{first.filename}); the download was discarded"
    )
    assert asked == [f"/encodings/{first.filename}"]
    assert list((tmp_path / "files" / "tiktoken").iterdir()) == []


def test_a_file_the_server_does_not_have_fails_clearly(encodings_server, tmp_path):
    prefix, _ = encodings_server
    result = run(["tiktoken", "--dir", str(tmp_path / "enc"), "--url-prefix", prefix + "missing/"], tmp_path)
    assert result.returncode == 1
    assert "HTTP 404" in result.stderr and "Traceback" not in result.stderr
    assert list((tmp_path / "enc").iterdir()) == []


def standin_inventory(path: Path, table: list[dict]) -> Path:
    """An inventory whose units check the stand-ins' sums (as the lab's does)."""
    path.write_text(yaml.safe_dump({"all": {"hosts": {"u1": None, "u2": None},
                                            "vars": {"specfleet_tiktoken_encodings": table}}}))
    return path


def test_verified_files_are_kept_and_not_fetched_again(encodings_server, tmp_path):
    prefix, asked = encodings_server
    # The stand-ins' sums, as an inventory lists them for its units' specfleet_tiktoken role.
    table = [{"name": e.name, "sha256": hashlib.sha256(STANDIN[e.filename]).hexdigest()}
             for e in store.tiktoken_table()[0]]
    inventory = standin_inventory(tmp_path / "inventory.yml", table)
    target = tmp_path / "enc"
    target.mkdir()
    (target / f"{table[1]['name']}.tiktoken").write_bytes(b"truncated")  # a wrong file is replaced

    args = ["tiktoken", "-i", str(inventory), "--dir", str(target), "--url-prefix", prefix]
    first = run(args, tmp_path)
    assert first.returncode == 0, first.stderr
    assert {p.name: p.read_bytes() for p in target.iterdir()} == STANDIN
    assert all(oct(p.stat().st_mode & 0o777) == "0o644" for p in target.iterdir())
    assert len(asked) == 2

    again = run(args, tmp_path)
    assert again.returncode == 0 and again.stdout.count(": present") == 2, again.stdout + again.stderr
    assert len(asked) == 2

    # Without -i the role's own sums apply, and the stand-ins are refused.
    refused = run(["tiktoken", "--dir", str(tmp_path / "other"), "--url-prefix", prefix], tmp_path)
    assert refused.returncode == 1 and "sha256" in refused.stderr, refused.stderr


def test_an_inventory_whose_hosts_disagree_is_refused_before_any_download(encodings_server, tmp_path):
    prefix, asked = encodings_server
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {
        "u1": {"specfleet_tiktoken_encodings": [{"name": "o200k_base", "sha256": "a" * 64}]},
        "u2": {"specfleet_tiktoken_encodings": [{"name": "o200k_base", "sha256": "b" * 64}]}}}}))
    result = run(["tiktoken", "-i", str(inventory), "--dir", str(tmp_path / "enc"), "--url-prefix", prefix], tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert own_message(result.stderr).startswith(
        f"specfleet store tiktoken: {inventory}: specfleet_tiktoken_encodings differs between hosts (u1; u2)"
    ), result.stderr
    assert asked == [] and not (tmp_path / "enc").exists()
