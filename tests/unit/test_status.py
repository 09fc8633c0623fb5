"""specfleet.status: table-driven cases of the pure row logic, with records built by the same
functions the rollout uses (release.*, gate.decide) and `docker inspect` shaped the way
vllm_container starts the serving container."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import threading
import time
from pathlib import Path

import paramiko
import pytest
import yaml
from rich.console import Console

from specfleet import gate, release, status
from specfleet import policy as policy_module
from tests.conftest import REPO, load_module

vllm_container = load_module("vllm_container")

IMAGE = "10.213.77.1:5000/vllm/vllm-openai:v0.20.2"
ENV = {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
MOUNTS = ["/var/lib/specfleet/huggingface:/root/.cache/huggingface"]
BASE_ARGS = ["vllm", "serve", "m", "--port", "8000"]
SPEC_CONFIG = {"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 5}
CAND_ARGS = [*BASE_ARGS, "--speculative-config", json.dumps(SPEC_CONFIG, separators=(",", ":"))]
BASELINE_SPEC = release.serving_spec("baseline", IMAGE, BASE_ARGS, ENV, MOUNTS, ["HF_TOKEN"])
CANDIDATE_SPEC = release.serving_spec("speculative", IMAGE, CAND_ARGS, ENV, MOUNTS, ["HF_TOKEN"])
OTHER_SPEC = release.serving_spec("speculative", IMAGE, [*CAND_ARGS, "--seed", "1"], ENV, MOUNTS, [])


def cell(throughput: float, tpot: float, acceptance: dict | None = None) -> dict:
    """A spec_bench cell: three runs around a median (the shape gate.decide reads)."""
    runs = [throughput * 0.99, throughput, throughput * 1.01]
    return {
        "runs": [{"throughput_tok_s": t, "tpot_p50_ms": tpot, "failed_requests": 0} for t in runs],
        "throughput_tok_s": {"median": throughput, "runs": runs, "spread": 0.02},
        "tpot_ms": {"p50": tpot, "p90": tpot * 1.1, "mean": tpot},
        "acceptance": acceptance,
    }


def bench(c1: float, tpot: float, c8: float, acceptance: dict | None = None) -> dict:
    return {
        "ok": True,
        "failure": None,
        "results": {"code_edit": {"c1": cell(c1, tpot, acceptance), "c8": cell(c8, tpot * 2, acceptance)}},
        "output_hashes": {"code_edit": "a" * 64},
        "output_stable": {"code_edit": True},
    }


ACCEPTANCE = {"rate": 0.33, "mean_length": 2.63, "per_position": [0.48, 0.39, 0.32], "drafts": 700}
BASELINE_BENCH = bench(375.2, 2.57, 2588.1)
FAST_BENCH = bench(584.6, 1.57, 2970.3, ACCEPTANCE)
SLOW_BENCH = bench(370.0, 2.60, 2500.0, {"rate": 0.05, "mean_length": 1.2, "per_position": [0.05]})


def outcome(baseline: dict, speculative: dict) -> dict:
    """The outcome the rollout records ("Record the outcome" in playbooks/rollout.yml)."""
    verdict = gate.decide(baseline, speculative, policy_module.merge({}))
    kept = verdict["decision"] == "keep"
    return {
        "decision": "kept" if kept else "reverted",
        "reasons": verdict["reasons"],
        "figures": verdict["figures"],
        "baseline": baseline,
        "speculative": speculative,
        "resolved_speculative_config": SPEC_CONFIG,
        "serving": "speculative" if kept else "baseline",
    }


KEPT = outcome(BASELINE_BENCH, FAST_BENCH)
REVERTED = outcome(BASELINE_BENCH, SLOW_BENCH)
FAILED = {
    "decision": "failed",
    "reasons": ["Serve the speculative plan: oom_at_start: no memory", "rolled back to the known-good serving"],
    "failure": {"task": "Serve the speculative plan", "failure_class": "oom_at_start", "message": "no memory"},
    "baseline": BASELINE_BENCH,
    "speculative": None,
    "serving": "baseline",
}


def record_text(record: dict) -> str:
    """As write_release.yml writes it (to_nice_json(indent=1) sorts keys)."""
    return json.dumps(record, indent=1, sort_keys=True) + "\n"


def after_kept() -> str:
    record = release.known_good(release.parse(None), BASELINE_SPEC)
    record = release.known_good(record, CANDIDATE_SPEC)
    return record_text(release.decided(record, CANDIDATE_SPEC["spec_id"], KEPT))


def after(result: dict) -> str:
    """Reverted or failed: the baseline stays known-good and serving."""
    record = release.known_good(release.parse(None), BASELINE_SPEC)
    return record_text(release.decided(record, CANDIDATE_SPEC["spec_id"], result))


def inspect_text(spec: dict, state: str = "running", exit_code: int = 0) -> str:
    """`docker inspect` of a container vllm_container started for ``spec``."""
    params = {
        "image": spec["image"],
        "args": spec["args"],
        "env": spec["env"],
        "secret_env": {"HF_TOKEN": "x"},
        "mounts": spec["mounts"],
        "port": 8000,
        "runtime": "nvidia",
        "shm_size": "16g",
        "ulimits": {"memlock": "-1:-1"},
        "labels": {},
        "files": spec.get("files", {}),
    }
    labels = {vllm_container.HASH_LABEL: vllm_container.config_hash(vllm_container.desired_config(params))}
    return json.dumps(
        [
            {
                "Name": "/specfleet-vllm",
                "Config": {
                    "Image": spec["image"],
                    "Entrypoint": spec["args"][:1],
                    "Cmd": spec["args"][1:],
                    "Labels": labels,
                },
                "State": {
                    "Status": state,
                    "Running": state == "running",
                    "ExitCode": exit_code,
                    "StartedAt": "2026-11-22T03:51:46Z",
                    "FinishedAt": "0001-01-01T00:00:00Z",
                },
            }
        ],
        indent=4,
    )


NO_FILE = status.Section("1", f"cat: {status.RELEASE_FILE}: No such file or directory")
NO_CONTAINER = status.Section("1", "[]\nError response from daemon: No such container: specfleet-vllm")


def ok(text: str) -> status.Section:
    return status.Section("0", text)


def unit(release_section: status.Section | None, container_section: status.Section | None) -> status.UnitRead:
    sections = {
        name: section
        for name, section in (("release", release_section), ("container", container_section))
        if section is not None
    }
    return status.UnitRead("thor-01", "10.213.77.10", sections=sections, seconds=0.2)


# (case id, what was read, expected subset of the row, problem substrings)
CASES = [
    (
        "never-rolled-out",
        unit(NO_FILE, NO_CONTAINER),
        {"serving": "absent", "release_record": "missing", "current": None, "known_good": None, "last": None},
        [],
    ),
    (
        "kept-speculative",
        unit(ok(after_kept()), ok(inspect_text(CANDIDATE_SPEC))),
        {
            "serving": "running",
            "release_record": "present",
            "current_matches_record": True,
            "current_is_known_good": True,
            "current": status.spec_summary(CANDIDATE_SPEC),
            "last": {
                "decision": "kept",
                "serving": "speculative",
                "candidate_spec_id": CANDIDATE_SPEC["spec_id"],
                "speedup_c1": round(584.6 / 375.2, 3),
                "tpot_p50_baseline_ms": 2.57,
                "tpot_p50_speculative_ms": 1.57,
                "acceptance_rate": 0.33,
                "mean_acceptance_length": 2.63,
            },
        },
        [],
    ),
    (
        "reverted-to-baseline",
        unit(ok(after(REVERTED)), ok(inspect_text(BASELINE_SPEC))),
        {
            "serving": "running",
            "current_is_known_good": True,
            "known_good": status.spec_summary(BASELINE_SPEC),
            "last": {"decision": "reverted", "speedup_c1": round(370.0 / 375.2, 3), "acceptance_rate": 0.05},
        },
        [],
    ),
    (
        "failed-and-exited",
        unit(ok(after(FAILED)), ok(inspect_text(BASELINE_SPEC, "exited", 137))),
        {
            "serving": "exited",
            "container": {"exit_code": 137},
            "last": {
                "decision": "failed",
                "speedup_c1": None,
                "tpot_p50_baseline_ms": 2.57,
                "tpot_p50_speculative_ms": None,
            },
        },
        [],
    ),
    (
        "container-absent-but-recorded",
        unit(ok(after_kept()), NO_CONTAINER),
        {
            "serving": "absent",
            "current": None,
            "current_matches_record": False,
            "known_good": status.spec_summary(CANDIDATE_SPEC),
        },
        ["no serving container"],
    ),
    (
        "malformed-json",
        unit(ok('{"version": 1, "current": '), NO_CONTAINER),
        {"release_record": "malformed", "known_good": None},
        ["not valid JSON"],
    ),
    ("not-an-object", unit(ok("[1, 2]"), NO_CONTAINER), {"release_record": "malformed"}, ["not a JSON object"]),
    (
        "other-version",
        unit(ok(json.dumps({**release.empty(), "version": 7})), NO_CONTAINER),
        {"release_record": "malformed"},
        ["record version 7"],
    ),
    (
        "unreadable",
        unit(status.Section("1", f"cat: {status.RELEASE_FILE}: Permission denied"), NO_CONTAINER),
        {"release_record": "unreadable"},
        [f"{status.RELEASE_FILE}: cannot read: Permission denied"],
    ),
    ("empty-file", unit(ok(""), NO_CONTAINER), {"release_record": "malformed"}, ["not valid JSON"]),
    (
        "hand-started-container",
        unit(ok(after_kept()), ok(inspect_text(OTHER_SPEC))),
        {
            "current": {**status.spec_summary(OTHER_SPEC), "spec_id": None},
            "current_matches_record": False,
            "current_is_known_good": False,
        },
        ["matches no spec"],
    ),
    (
        "record-current-stale",
        unit(
            ok(record_text(release.serving(json.loads(after(REVERTED)), CANDIDATE_SPEC))),
            ok(inspect_text(BASELINE_SPEC)),
        ),
        {"current": status.spec_summary(BASELINE_SPEC), "current_matches_record": False, "current_is_known_good": True},
        ["serves the known-good spec"],
    ),
    (
        "no-record-container-running",
        unit(NO_FILE, ok(inspect_text(BASELINE_SPEC))),
        {
            "serving": "running",
            "current": {**status.spec_summary(BASELINE_SPEC), "spec_id": None},
            "current_matches_record": None,
            "current_is_known_good": None,
        },
        [],
    ),
    ("docker-missing", unit(NO_FILE, status.Section("nodocker", "")), {"serving": "absent"}, ["not installed"]),
    (
        "docker-daemon-down",
        unit(NO_FILE, status.Section("1", "Cannot connect to the Docker daemon at unix://...")),
        {"serving": "unknown"},
        ["Cannot connect to the Docker daemon"],
    ),
    ("docker-inspect-garbage", unit(NO_FILE, ok("<html>")), {"serving": "unknown"}, ["docker inspect: not valid JSON"]),
    (
        "output-cut-short",
        unit(None, None),
        {"serving": "unknown", "release_record": "unreadable"},
        ["release.json: no answer", "docker inspect: no answer"],
    ),
    (
        "several-decisions-none-serving",
        unit(
            ok(record_text(release.decided(json.loads(after(REVERTED)), OTHER_SPEC["spec_id"], FAILED))),
            ok(inspect_text(BASELINE_SPEC)),
        ),
        {"last": None},
        ["2 decisions"],
    ),
    (
        "odd-outcome-shape",
        unit(
            ok(record_text(release.decided(release.empty(), "x", {"decision": "kept", "baseline": "?", "reasons": 3}))),
            NO_CONTAINER,
        ),
        {"last": {"decision": "kept", "speedup_c1": None, "reasons": []}},
        [],
    ),
    (
        "unreachable",
        status.UnitRead("thor-01", "10.213.77.10", error="10.213.77.10:22: connection refused"),
        {"reachable": False, "error": "10.213.77.10:22: connection refused", "serving": "unknown", "current": None},
        [],
    ),
]


def subset(actual, expected) -> bool:
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            key in actual and subset(actual[key], value) for key, value in expected.items()
        )
    return actual == expected


@pytest.mark.parametrize(("read", "expected", "problems"), [case[1:] for case in CASES], ids=[c[0] for c in CASES])
def test_unit_status(read, expected, problems):
    row = status.unit_status(read)
    assert subset(row, expected), json.dumps(row, indent=1)
    assert row["reachable"] is (read.error is None)
    assert row["host"] == "thor-01" and row["address"] == "10.213.77.10"
    for text in problems:
        assert any(text in problem for problem in row["problems"]), row["problems"]
    if not problems:
        assert row["problems"] == []
    json.dumps(row)  # plain JSON data, always


def test_real_record_shapes_agree_with_the_code_that_writes_them():
    # Names the status reads must be the ones the rollout and the module write.
    serving = yaml.safe_load((REPO / "playbooks" / "vars" / "serving.yml").read_text())
    assert serving["specfleet_state_dir"] == "/var/lib/specfleet"
    assert '"{{ specfleet_state_dir }}/release.json"' in (REPO / "playbooks" / "rollout.yml").read_text()
    assert status.RELEASE_FILE == "/var/lib/specfleet/release.json"
    assert status.HASH_LABEL == vllm_container.HASH_LABEL
    defaults = yaml.safe_load((REPO / "roles" / "specfleet_serve" / "defaults" / "main.yml").read_text())
    assert status.CONTAINER_NAME == defaults["specfleet_serve_container"]


def test_kept_record_parses_like_the_rollout_reads_it():
    # The same text the rollout's specfleet_release_parse accepts is "present" here.
    text = after_kept()
    assert release.parse(text)["known_good"]["spec_id"] == CANDIDATE_SPEC["spec_id"]
    record, state, problem = status.read_release(ok(text))
    assert (state, problem) == ("present", None) and record == release.parse(text)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (BASE_ARGS, None),
        (CAND_ARGS, SPEC_CONFIG),
        ([*BASE_ARGS, "--speculative-config=" + json.dumps({"method": "ngram"})], {"method": "ngram"}),
        ([*BASE_ARGS, "--speculative-config", "{oops"], {"method": "unparsed"}),
        ([*BASE_ARGS, "--speculative-config"], None),
        ("not a list", None),
    ],
)
def test_speculative_of(args, expected):
    assert status.speculative_of(args) == expected


@pytest.mark.parametrize(
    ("rows", "code"),
    [
        ([], 0),
        ([{"reachable": True}, {"reachable": True}], 0),
        ([{"reachable": True}, {"reachable": False}], 1),
    ],
)
def test_exit_code(rows, code):
    assert status.exit_code(rows) == code


LAB_VARS = {
    "ansible_host": "10.213.77.10",
    "ansible_user": "root",
    "ansible_ssh_private_key_file": "/work/main/lab/build/ssh/id_ed25519",
    "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR "
    "-o IdentitiesOnly=yes",
}


@pytest.mark.parametrize(
    ("host", "variables", "checking", "expected"),
    [
        (
            "thor-01",
            LAB_VARS,
            True,
            status.Target(
                "thor-01",
                "10.213.77.10",
                22,
                "root",
                LAB_VARS["ansible_ssh_private_key_file"],
                strict_host_key=False,
                known_hosts_file=None,
            ),
        ),
        ("plain", {}, True, status.Target("plain", "plain")),
        (
            "checking-off",
            {"ansible_port": "2222"},
            False,
            status.Target("checking-off", "checking-off", 2222, strict_host_key=False),
        ),
        (
            "own-known-hosts",
            {"ansible_ssh_extra_args": "-oUserKnownHostsFile=/etc/fleet_hosts", "ansible_port": "x"},
            True,
            status.Target("own-known-hosts", "own-known-hosts", known_hosts_file="/etc/fleet_hosts"),
        ),
        (
            "accept-new",
            {"ansible_ssh_common_args": "-o 'StrictHostKeyChecking accept-new'", "ansible_ssh_user": "nv"},
            True,
            status.Target("accept-new", "accept-new", user="nv", strict_host_key=False),
        ),
    ],
)
def test_target_for(host, variables, checking, expected):
    assert status.target_for(host, variables, checking) == expected


KEY = paramiko.RSAKey.generate(1024)
TARGET = status.Target("thor-01", "10.213.77.10", 22, "root", "/keys/id")


@pytest.mark.parametrize(
    ("exc", "text"),
    [
        (TimeoutError("timed out"), "root@10.213.77.10:22: no answer within 5 s"),
        (TimeoutError(), "no answer within 5 s"),
        (
            paramiko.ssh_exception.NoValidConnectionsError({("10.213.77.10", 22): ConnectionRefusedError(111, "x")}),
            "root@10.213.77.10:22: connection refused",
        ),
        (paramiko.AuthenticationException("no"), "authentication failed with key /keys/id"),
        (paramiko.BadHostKeyException("h", KEY, paramiko.RSAKey.generate(1024)), "host key differs"),
        (paramiko.SSHException("Server '10.213.77.10' not found in known_hosts"), "host key unknown"),
        (FileNotFoundError(2, "No such file", "/keys/id"), "key file /keys/id not found"),
        (OSError(113, "No route to host"), "No route to host"),
        (EOFError(), "EOFError"),
    ],
)
def test_describe_error(exc, text):
    assert text in status.describe_error(exc, TARGET, 5.0)


def run_remote_command_locally(tmp_path: Path, monkeypatch, release_text: str | None, docker: str | None):
    """The real remote command, run by the local sh with a fake docker, parsed back."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "cat", "id"):
        (bin_dir / tool).symlink_to(
            subprocess.run(
                ["sh", "-c", f"command -v {tool}"], capture_output=True, text=True, check=True
            ).stdout.strip()
        )
    if docker is not None:
        (bin_dir / "docker").write_text(f"#!/bin/sh\n{docker}\n")
        (bin_dir / "docker").chmod(0o755)
    path = tmp_path / "release.json"
    if release_text is not None:
        path.write_text(release_text)
    monkeypatch.setattr(status, "RELEASE_FILE", str(path))
    command = status.remote_command("n0nce")
    result = subprocess.run(
        ["/bin/sh", "-c", command],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    return status.parse_sections(result.stdout, "n0nce")


def test_remote_command_reads_record_and_container(tmp_path, monkeypatch):
    fake = f"cat <<'EOF'\n{inspect_text(CANDIDATE_SPEC)}\nEOF"
    sections = run_remote_command_locally(tmp_path, monkeypatch, after_kept(), fake)
    assert sections["release"].rc == "0" and json.loads(sections["release"].text) == json.loads(after_kept())
    assert sections["container"].rc == "0" and json.loads(sections["container"].text)[0]["State"]["Status"] == "running"
    row = status.unit_status(status.UnitRead("thor-01", "10.213.77.10", sections=sections))
    assert row["current_is_known_good"] is True and row["last"]["decision"] == "kept"


def test_remote_command_without_record_or_docker(tmp_path, monkeypatch):
    sections = run_remote_command_locally(tmp_path, monkeypatch, None, None)
    assert sections["container"] == status.Section("nodocker", "")
    row = status.unit_status(status.UnitRead("u", "a", sections=sections))
    assert (row["release_record"], row["serving"]) == ("missing", "absent")


def test_remote_command_container_absent(tmp_path, monkeypatch):
    fake = "echo '[]'; echo 'Error response from daemon: No such container: specfleet-vllm' >&2; exit 1"
    sections = run_remote_command_locally(tmp_path, monkeypatch, "{broken", fake)
    row = status.unit_status(status.UnitRead("u", "a", sections=sections))
    assert (row["release_record"], row["serving"]) == ("malformed", "absent")


def test_a_file_cannot_fake_a_trailer():
    text = "@@specfleet-status-other release 0\n{}\n\n@@specfleet-status-n0nce release 0\n"
    assert status.parse_sections(text, "n0nce") == {
        "release": status.Section("0", "@@specfleet-status-other release 0\n{}")
    }


def test_read_fleet_in_parallel_keeps_order_and_reports_each():
    targets = [status.Target(f"u{i}", f"10.0.0.{i}") for i in range(6)]
    started: list[str] = []
    lock = threading.Lock()

    def reader(target: status.Target, timeout: float) -> status.UnitRead:
        with lock:
            started.append(target.host)
        time.sleep(0.3 if target.host == "u0" else 0.05)
        return status.UnitRead(target.host, target.address, error="down" if target.host == "u3" else None)

    done: list[str] = []
    began = time.monotonic()
    reads = status.read_fleet(targets, 1.0, on_done=lambda read: done.append(read.host), reader=reader)
    assert time.monotonic() - began < 1.0  # six sleeps in parallel, not in a row
    assert [read.host for read in reads] == [t.host for t in targets]
    assert sorted(done) == sorted(t.host for t in targets) and done[-1] == "u0"
    assert status.exit_code([status.unit_status(read) for read in reads]) == 1


def test_read_unit_refused_is_a_row_not_a_traceback(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    key = tmp_path / "id"
    key.write_text("not a key")
    read = status.read_unit(status.Target("gone", "127.0.0.1", port, "root", str(key), False, None), timeout=2)
    assert read.error and "connection refused" in read.error
    assert read.seconds is not None and read.seconds < 2


def test_table_shows_every_unit_and_escapes_markup():
    rows = [status.unit_status(case[1]) for case in CASES]
    rows[-1]["error"] = "[bold]odd[/bold] error"
    console = Console(file=io.StringIO(), width=250, color_system=None)
    console.print(status.status_table(rows))
    text = console.file.getvalue()
    assert f"{len(rows)} unit(s), {len(rows) - 1} reachable" in text
    assert "UNREACHABLE" in text and "[bold]odd[/bold] error" in text
    assert "eagle3 k=5" in text and "vllm/vllm-openai:v0.20.2" in text and "x1.56" in text
