"""Secrets from Ansible Vault never leak (issue 7, item 5), on the lab's EMULATED thor-01.

A random Hugging Face token and a random vLLM API key go into a vault-encrypted vars file
(real ansible-vault); site.yml runs with it at -v and an Ansible log file. Then both secrets,
plain and base64 at every alignment, are looked for in stdout, stderr, the log, every file of
the run folder, everything under /var/lib/specfleet on the unit (the release record among
them) and the serving container's log. Only the container's environment may hold them, and
must: that is how they reach vLLM, which then refuses /v1/* without the key.
"""

from __future__ import annotations

import base64
import io
import json
import os
import secrets
import string
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, lab_decision
from tests.conftest import on_unit as on_lab_unit

pytestmark = pytest.mark.lab

INVENTORY = REPO / "inventory" / "lab"
UNIT = "thor-01"
BIN = Path(sys.executable).parent
ALNUM = string.ascii_letters + string.digits

# Run on the unit: the key arrives on stdin, so it never sits in a command line.
AUTH_CHECK = r"""
import json, sys, urllib.request, urllib.error
key = sys.stdin.read().strip()
def status(path, key=None):
    request = urllib.request.Request("http://127.0.0.1:8000" + path)
    if key:
        request.add_header("Authorization", "Bearer " + key)
    try:
        return urllib.request.urlopen(request, timeout=10).status
    except urllib.error.HTTPError as exc:
        return exc.code
print(json.dumps({"health": status("/health"), "models_without_key": status("/v1/models"),
                  "models_wrong_key": status("/v1/models", "not-" + key),
                  "models_with_key": status("/v1/models", key)}))
"""


def random_secret(prefix: str, length: int) -> str:
    return prefix + "".join(secrets.choice(ALNUM) for _ in range(length))


def forms(secret: str) -> dict[str, bytes]:
    """The secret as bytes, and as it reads inside base64 (standard and URL-safe) at each
    of the three byte alignments: only the characters no neighbouring byte can change."""
    raw = secret.encode()
    found = {"plain": raw}
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + raw)
        first, last = -(-8 * pad // 6), (8 * (pad + len(raw)) - 6) // 6
        inner = encoded[first:last + 1]
        found[f"base64+{pad}"] = inner
        found[f"base64url+{pad}"] = inner.replace(b"+", b"-").replace(b"/", b"_")
    return found


def leaks(sources: dict[str, bytes], named_secrets: dict[str, str]) -> list[str]:
    """Where any form of any secret occurs, as 'source: secret (form)' (values never shown)."""
    return [
        f"{source}: {name} ({form})"
        for source, data in sources.items()
        for name, secret in named_secrets.items()
        for form, needle in forms(secret).items()
        if needle in data
    ]


def on_unit(command: str, stdin: bytes = b"") -> bytes:
    proc = on_lab_unit(UNIT, command, stdin=stdin, text=False)
    assert proc.returncode == 0, f"{command}: {proc.stderr.decode(errors='replace')[-2000:]}"
    return proc.stdout


def playbook(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(INVENTORY), *args, "-l", UNIT],
        cwd=REPO, capture_output=True, timeout=3600, env={**os.environ, "ANSIBLE_NOCOLOR": "1", **env},
    )


def test_the_leak_check_finds_what_it_looks_for():
    """The check itself: plain and base64 at any offset, and nothing else."""
    secret = random_secret("hf_", 34)
    for prefix in (b"", b"x", b"xy", b"xyz"):
        assert leaks({"b64": base64.b64encode(prefix + secret.encode() + b"!")}, {"t": secret})
        assert leaks({"url": base64.urlsafe_b64encode(prefix + secret.encode())}, {"t": secret})
    assert leaks({"plain": f"token={secret}\n".encode()}, {"t": secret}) == ["plain: t (plain)"]
    assert leaks({"other": random_secret("hf_", 34).encode()}, {"t": secret}) == []


@pytest.fixture(scope="module")
def vault_run(fleet_lab, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("secrets")
    named = {"hf_token": random_secret("hf_", 34), "api_key": random_secret("sk-specfleet-", 40)}
    password = tmp / "vault-password"
    password.write_text(secrets.token_urlsafe(24) + "\n")
    password.chmod(0o600)
    vault = tmp / "vault.yml"
    vault.write_text(f"specfleet_hf_token: {named['hf_token']}\nspecfleet_api_key: {named['api_key']}\n")
    encrypted = subprocess.run([str(BIN / "ansible-vault"), "encrypt", str(vault), "--vault-password-file",
                                str(password)], capture_output=True, text=True, timeout=60)
    assert encrypted.returncode == 0, encrypted.stderr
    viewed = subprocess.run([str(BIN / "ansible-vault"), "view", str(vault), "--vault-password-file",
                             str(password)], capture_output=True, timeout=60)
    assert viewed.returncode == 0, viewed.stderr

    runs, log = tmp / "runs", tmp / "ansible.log"
    runs.mkdir()
    started = time.monotonic()
    result = playbook(
        "playbooks/site.yml", "-v", "-e", f"@{vault}", "--vault-password-file", str(password),
        "-e", "specfleet_rollout_remeasure=true",
        env={"ANSIBLE_LOG_PATH": str(log), "SPECFLEET_RUNS_DIR": str(runs)},
    )
    seconds = time.monotonic() - started
    yield {"tmp": tmp, "secrets": named, "vault": vault, "viewed": viewed.stdout, "result": result,
           "runs": runs, "log": log, "seconds": seconds}

    # Leave the shared unit serving without a key nobody knows: the same rollout without these
    # secrets goes back to the lab's own event key (an earlier decision, so nothing is measured).
    cleanup_runs = tmp / "cleanup-runs"
    cleanup_runs.mkdir()
    playbook("playbooks/rollout.yml", env={"SPECFLEET_RUNS_DIR": str(cleanup_runs)})


def test_vault_file_is_encrypted_and_the_control_finds_the_secrets_in_its_plaintext(vault_run):
    named = vault_run["secrets"]
    assert vault_run["vault"].read_text().startswith("$ANSIBLE_VAULT;")
    assert leaks({"vault.yml": vault_run["vault"].read_bytes()}, named) == []
    # Negative control: the same check does find them where they are, and in base64 of them.
    plaintext = vault_run["viewed"]
    assert sorted(leaks({"view": plaintext}, named)) == sorted(
        f"view: {name} (plain)" for name in named
    )
    assert leaks({"b64": base64.b64encode(plaintext)}, named)


def test_the_run_succeeds_and_the_server_requires_the_key(vault_run):
    result = vault_run["result"]
    out = result.stdout.decode(errors="replace")
    assert result.returncode == 0, out[-6000:] + result.stderr.decode(errors="replace")[-2000:]
    print(f"site.yml -l {UNIT} with vaulted secrets: {vault_run['seconds']:.0f} s")
    run_dir = next(vault_run["runs"].iterdir())
    record = json.loads((run_dir / "units" / f"{UNIT}.json").read_text())
    assert record["decision"] == lab_decision(UNIT), record["reasons"]
    # Both benchmarks ran to the end against a server that answers 401 without the key.
    assert record["baseline"]["ok"] and record["speculative"]["ok"], record["reasons"]

    statuses = json.loads(on_unit(f"python3 -c '{AUTH_CHECK}'", vault_run["secrets"]["api_key"].encode()))
    assert statuses == {"health": 200, "models_without_key": 401, "models_wrong_key": 401, "models_with_key": 200}
    # The decided serving starts afresh after the gate (alone, with its whole budget), so its log
    # holds the check above, not the benchmark's requests: refused without the key, served with it.
    container_log = on_unit("docker logs specfleet-vllm 2>&1")
    assert b'"GET /v1/models HTTP/1.1" 401' in container_log, container_log[-2000:]
    assert b'"GET /v1/models HTTP/1.1" 200' in container_log, container_log[-2000:]

    # The secrets reached the server through its environment (where they must be).
    env = dict(item.split("=", 1) for item in json.loads(
        on_unit("docker inspect --format '{{json .Config.Env}}' specfleet-vllm")))
    assert {"HF_TOKEN", "VLLM_API_KEY"} <= set(env)
    assert env["VLLM_API_KEY"] == vault_run["secrets"]["api_key"], "the container has another API key"
    assert env["HF_TOKEN"] == vault_run["secrets"]["hf_token"], "the container has another HF token"

    # The release record keeps the names only.
    release = json.loads(on_unit("cat /var/lib/specfleet/release.json"))
    assert release["current"]["secret_env_names"] == ["HF_TOKEN", "VLLM_API_KEY"]


def test_no_secret_in_output_logs_report_or_unit(vault_run):
    result, named = vault_run["result"], vault_run["secrets"]
    assert vault_run["log"].stat().st_size > 0, "ANSIBLE_LOG_PATH was not written"
    sources: dict[str, bytes] = {
        "stdout": result.stdout,
        "stderr": result.stderr,
        "ansible log": vault_run["log"].read_bytes(),
    }
    run_files = [path for path in vault_run["runs"].rglob("*") if path.is_file()]
    assert {path.name for path in run_files} >= {f"{UNIT}.json", "report.json", "report.md", "report.csv",
                                                   "report.html"}
    sources.update({f"run folder: {path.relative_to(vault_run['runs'])}": path.read_bytes() for path in run_files})

    with tarfile.open(fileobj=io.BytesIO(on_unit("tar -C /var/lib/specfleet -cf - ."))) as archive:
        members = [member for member in archive.getmembers() if member.isfile()]
        assert any(member.name.endswith("release.json") for member in members)
        for member in members:
            sources[f"{UNIT}:/var/lib/specfleet/{member.name.removeprefix('./')}"] = archive.extractfile(member).read()
    sources[f"{UNIT}: docker logs specfleet-vllm"] = on_unit("docker logs specfleet-vllm 2>&1")
    sources[f"{UNIT}: container labels"] = on_unit("docker inspect --format '{{json .Config.Labels}}' specfleet-vllm")

    # -v really was verbose (results printed), so a leak would have had its chance.
    assert b"=> {" in result.stdout or b"=>" in result.stdout
    assert leaks(sources, named) == []
