"""specfleet.status: table-driven cases of the pure row logic, with records built by the same
functions the rollout uses (release.*, gate.decide) and `docker inspect` shaped the way
vllm_container starts the serving container."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from ansible_collections.specfleet.fleet.plugins.module_utils.unit_layout import LAYOUT
from rich.console import Console

from specfleet import cli, gate, release, rollout, serving, status
from specfleet import policy as policy_module
from tests.benches import ACCEPTANCE, aba
from tests.conftest import REPO, load_module

vllm_container = load_module("vllm_container")

IMAGE = "10.213.77.1:5000/vllm/vllm-openai:v0.20.2"
ENV = {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
MOUNTS = ["/var/lib/specfleet/huggingface:/root/.cache/huggingface"]
SPEC_CONFIG = {"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 5}


def unit_spec(kind: str, secrets=("HF_TOKEN",), **fields) -> dict:
    """A serving placed on a unit, as the rollout makes it (specfleet.serving)."""
    made = serving.make(kind, engine="vllm", image=IMAGE, model="m", port=8000, flags=[], **fields)
    return serving.for_unit(made, ENV, MOUNTS, secrets)


BASELINE_SPEC = unit_spec("baseline")
CANDIDATE_SPEC = unit_spec("speculative", speculative_config=SPEC_CONFIG)
OTHER_SPEC = unit_spec("speculative", speculative_config=SPEC_CONFIG, extra_flags=[["--seed", "1"]], secrets=())


def outcome(blocks: list[dict]) -> dict:
    """The outcome the rollout records (specfleet.rollout) from interleaved blocks."""
    verdict = gate.decide(blocks, policy_module.merge({}))
    kept = verdict["decision"] == "keep"
    return {
        "decision": "kept" if kept else "reverted",
        "reasons": verdict["reasons"],
        "figures": verdict["figures"],
        "measurement": rollout.measurement(verdict),
        "baseline": blocks[0]["bench"],
        "speculative": blocks[1]["bench"],
        "resolved_speculative_config": SPEC_CONFIG,
        "serving": "speculative" if kept else "baseline",
    }


KEPT = outcome(aba(1.8, c8_speed=1.2, chat_speed=1.1))
REVERTED = outcome(aba(0.99))
BASELINE_BENCH = aba(1.0)[0]["bench"]
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


def on_trial() -> str:
    """What a rollout killed while its candidate was on trial leaves: the baseline known-good and
    serving (as saved before the candidate started) and the trial marker."""
    record = release.known_good(release.parse(None), BASELINE_SPEC)
    return record_text(release.on_trial(record, CANDIDATE_SPEC, "r9"))


def inspect_text(spec: dict, state: str = "running", exit_code: int = 0) -> str:
    """`docker inspect` of a container vllm_container started for ``spec``."""
    params = {
        "image": spec["image"],
        "args": serving.argv(spec),
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
                    "Entrypoint": serving.argv(spec)[:1],
                    "Cmd": serving.argv(spec)[1:],
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
                # As the gate found them: the figures the fleet report shows too.
                "speedup_c1": round(1 + KEPT["figures"]["code_edit"]["throughput_gain_c1"]["value"], 3),
                "tpot_p50_baseline_ms": KEPT["figures"]["code_edit"]["tpot_drop_c1"]["baseline"],
                "tpot_p50_speculative_ms": KEPT["figures"]["code_edit"]["tpot_drop_c1"]["candidate"],
                "acceptance_rate": ACCEPTANCE["rate"],
                "mean_acceptance_length": ACCEPTANCE["mean_length"],
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
            "last": {"decision": "reverted",
                     "speedup_c1": round(1 + REVERTED["figures"]["code_edit"]["throughput_gain_c1"]["value"], 3),
                     "acceptance_rate": ACCEPTANCE["rate"]},
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
                # A failed unit was not gated: no figures of the gate's to show.
                "speedup_c1": None,
                "tpot_p50_baseline_ms": None,
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
        "interrupted-trial",
        unit(ok(on_trial()), ok(inspect_text(CANDIDATE_SPEC))),
        {
            "trial": {"spec_id": CANDIDATE_SPEC["spec_id"], "run_id": "r9"},
            "current": {**status.spec_summary(CANDIDATE_SPEC), "spec_id": None},
            "current_matches_record": False,
        },
        [
            f"interrupted trial of the speculative serving {CANDIDATE_SPEC['spec_id'][:8]} (eagle3, k=5) in run r9: "
            "it may still serve it (or beside the baseline, in specfleet-vllm-trial); rollout.yml or rollback.yml "
            "-l thor-01 returns it to its known-good",
            "matches no spec in the release record (the candidate of the interrupted trial?)",
        ],
    ),
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
    # What the status reads is where the rollout and the module write: the unit layout.
    serving_vars = yaml.safe_load((REPO / "playbooks" / "vars" / "serving.yml").read_text())
    assert "'specfleet.fleet.unit_layout', 'release_file'" in serving_vars["specfleet_release_file"]
    assert status.RELEASE_FILE == LAYOUT["release_file"] == "/var/lib/specfleet/release.json"
    assert status.HASH_LABEL == vllm_container.HASH_LABEL == LAYOUT["config_hash_label"]
    defaults = yaml.safe_load((REPO / "roles" / "specfleet_serve" / "defaults" / "main.yml").read_text())
    assert "'specfleet.fleet.unit_layout', 'serving_container'" in defaults["specfleet_serve_container"]
    assert status.CONTAINER_NAME == LAYOUT["serving_container"]


def test_kept_record_parses_like_the_rollout_reads_it():
    # The same text the rollout's specfleet_release_parse accepts is "present" here.
    text = after_kept()
    assert release.parse(text)["known_good"]["spec_id"] == CANDIDATE_SPEC["spec_id"]
    record, state, problem = status.read_release(ok(text))
    assert (state, problem) == ("present", None) and record == release.parse(text)


def test_spec_summary_reads_the_serving_fields():
    assert status.spec_summary(CANDIDATE_SPEC) == {
        "spec_id": CANDIDATE_SPEC["spec_id"], "kind": "speculative", "method": "eagle3",
        "num_speculative_tokens": 5, "image": IMAGE,
    }
    assert status.spec_summary(BASELINE_SPEC)["method"] is None
    assert status.spec_summary("not a serving") is None


def test_a_version_1_record_is_read_with_its_servings():
    # Written before servings were structures: the same servings as command lines.
    def v1(spec: dict) -> dict:
        fields = ("kind", "image", "env", "mounts", "secret_env_names", "spec_id")
        return {**{key: spec[key] for key in fields}, "args": serving.argv(spec)}

    text = json.dumps({"version": 1, "current": v1(CANDIDATE_SPEC), "known_good": v1(BASELINE_SPEC),
                       "decisions": {CANDIDATE_SPEC["spec_id"]: KEPT}})
    record, state, problem = status.read_release(ok(text))
    assert (state, problem) == ("present", None)
    assert record["version"] == release.RECORD_VERSION
    assert record["current"] == CANDIDATE_SPEC and record["known_good"] == BASELINE_SPEC


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


# --------------------------------------------------------------------------- reaching units: Ansible

# What `ansible all -i INV -m ansible.builtin.raw -a "$(remote_command n0nce)" -T 3 --forks 2`
# printed on stdout with ANSIBLE_STDOUT_CALLBACK=ansible.posix.json (ansible-core 2.19.14,
# ansible 12.3.0), verbatim: here-01 has `ansible_connection: local` on a controller with no
# release record and no Docker daemon running; gone-01 is 127.0.0.1 port 1, where nothing listens.
RECORDED_NONCE = "n0nce"
RECORDED_RUN = r"""{
    "custom_stats": {},
    "global_custom_stats": {},
    "plays": [
        {
            "play": {
                "duration": {
                    "end": "2026-11-24T21:55:41.568761Z",
                    "start": "2026-11-24T21:55:41.382966Z"
                },
                "id": "02fc0000-0001-d176-3cf2-000000000004",
                "name": "Ansible Ad-Hoc",
                "path": ""
            },
            "tasks": [
                {
                    "hosts": {
                        "gone-01": {
                            "_ansible_no_log": false,
                            "action": "ansible.builtin.raw",
                            "changed": false,
                            "exception": "(traceback unavailable)",
                            "msg": "Task failed: Failed to connect to the host via ssh: ssh: connect to host 127.0.0.1 port 1: Connection refused",
                            "unreachable": true
                        },
                        "here-01": {
                            "_ansible_no_log": false,
                            "action": "ansible.builtin.raw",
                            "changed": true,
                            "rc": 0,
                            "stderr": "",
                            "stderr_lines": [],
                            "stdout": "cat: /var/lib/specfleet/release.json: No such file or directory\n\n@@specfleet-status-n0nce release 1\n[]\nCannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n\n@@specfleet-status-n0nce container 1\n",
                            "stdout_lines": [
                                "cat: /var/lib/specfleet/release.json: No such file or directory",
                                "",
                                "@@specfleet-status-n0nce release 1",
                                "[]",
                                "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",
                                "",
                                "@@specfleet-status-n0nce container 1"
                            ]
                        }
                    },
                    "task": {
                        "duration": {
                            "end": "2026-11-24T21:55:41.568761Z",
                            "start": "2026-11-24T21:55:41.396875Z"
                        },
                        "id": "02fc0000-0001-d176-3cf2-000000000006",
                        "name": "ansible.builtin.raw",
                        "path": ""
                    }
                }
            ]
        }
    ],
    "stats": {
        "gone-01": {
            "changed": 0,
            "failures": 0,
            "ignored": 0,
            "ok": 0,
            "rescued": 0,
            "skipped": 0,
            "unreachable": 1
        },
        "here-01": {
            "changed": 1,
            "failures": 0,
            "ignored": 0,
            "ok": 1,
            "rescued": 0,
            "skipped": 0,
            "unreachable": 0
        }
    }
}
"""  # noqa: E501
# What ansible.posix.timer (ANSIBLE_CALLBACKS_ENABLED=ansible.posix.timer) printed after the document, verbatim.
RECORDED_TIMER_TAIL = (
    "\nPLAYBOOK RECAP " + "*" * 65 + "\nPlaybook run took 0 days, 0 hours, 0 minutes, 0 seconds\n\n"
)
RECORDED_ADDRESSES = {"here-01": "127.0.0.9", "gone-01": "127.0.0.1"}


def test_recorded_run_becomes_one_read_per_unit():
    document, _where = status.ansible_document(RECORDED_RUN)
    reads = status.reads_from_ansible(document, RECORDED_NONCE, RECORDED_ADDRESSES, seconds=1.5)
    assert [(read.host, read.address) for read in reads] == [("here-01", "127.0.0.9"), ("gone-01", "127.0.0.1")]
    here, gone = reads
    assert here.error is None and set(here.sections) == {"release", "container"}
    assert here.sections["release"] == status.Section(
        "1", "cat: /var/lib/specfleet/release.json: No such file or directory"
    )
    assert here.sections["container"].rc == "1"
    assert gone.error == "connection refused: ssh: connect to host 127.0.0.1 port 1: Connection refused"
    assert gone.sections == {} and here.seconds == gone.seconds == 1.5
    rows = [status.unit_status(read) for read in reads]
    assert (rows[0]["reachable"], rows[0]["release_record"]) == (True, "missing")
    assert (rows[1]["reachable"], rows[1]["serving"]) == (False, "unknown")
    assert status.exit_code(rows) == 1


def test_output_through_a_pty_reads_the_same():
    # Over SSH, raw runs the command with a pty (ssh -tt): the recorded output with CR LF
    # line ends, as a terminal gives them.
    document = json.loads(RECORDED_RUN)
    here = document["plays"][0]["tasks"][0]["hosts"]["here-01"]
    here["stdout"] = here["stdout"].replace("\n", "\r\n")
    (read, _gone) = status.reads_from_ansible(document, RECORDED_NONCE, RECORDED_ADDRESSES)
    (plain, _gone) = status.reads_from_ansible(json.loads(RECORDED_RUN), RECORDED_NONCE, RECORDED_ADDRESSES)
    assert read.sections == plain.sections and "\r" not in read.sections["container"].text


def test_a_wrong_nonce_reads_no_sections():
    # The trailers are matched by the run's own nonce only.
    (here, _gone) = status.reads_from_ansible(status.ansible_document(RECORDED_RUN)[0], "other", RECORDED_ADDRESSES)
    assert here.error is None and here.sections == {}


@pytest.mark.parametrize(
    "stdout",
    [
        RECORDED_RUN + RECORDED_TIMER_TAIL,
        "PLAY [Ansible Ad-Hoc] *****\n{not json}\n" + RECORDED_RUN,
    ],
    ids=["timer-after", "text-before"],
)
def test_document_found_among_other_callbacks_output(stdout):
    document, (start, end) = status.ansible_document(stdout)
    assert document == json.loads(RECORDED_RUN)
    assert json.loads(stdout[start:end]) == document  # the rest is -v's and other callbacks' text


@pytest.mark.parametrize("stdout", ["", "[ERROR]: boom\n", '{"custom_stats": {}}\n', RECORDED_RUN[:200]])
def test_no_document(stdout):
    assert status.ansible_document(stdout) is None


def test_hosts_ansible_did_not_report_and_hosts_only_it_named():
    document = json.loads(RECORDED_RUN)
    addresses = {"absent-01": "10.0.0.1", "gone-01": "127.0.0.1"}  # here-01 is not listed
    reads = status.reads_from_ansible(document, RECORDED_NONCE, addresses)
    assert [(read.host, read.address) for read in reads] == [
        ("absent-01", "10.0.0.1"), ("gone-01", "127.0.0.1"), ("here-01", "here-01"),
    ]
    assert reads[0].error == "no result: Ansible did not report this host"
    assert reads[2].error is None and reads[2].sections


# Results of single hosts, verbatim from ansible.posix.json runs of the raw module
# (ansible-core 2.19.14, OpenSSH client), and the one line each becomes.
RECORDED_RESULTS = json.loads(
    r"""{
 "auth-01": {
  "_ansible_no_log": false,
  "action": "ansible.builtin.raw",
  "changed": false,
  "exception": "(traceback unavailable)",
  "msg": "Task failed: Failed to connect to the host via ssh: Warning: Permanently added '[127.0.0.1]:2299' (ED25519) to the list of known hosts.\r\nroot@127.0.0.1: Permission denied (publickey,password).",
  "unreachable": true
 },
 "keychanged-01": {
  "_ansible_no_log": false,
  "action": "ansible.builtin.raw",
  "changed": false,
  "exception": "(traceback unavailable)",
  "msg": "Task failed: Failed to connect to the host via ssh: @@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\r\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\r\n@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\r\nIT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!\r\nSomeone could be eavesdropping on you right now (man-in-the-middle attack)!\r\nIt is also possible that a host key has just been changed.\r\nThe fingerprint for the ED25519 key sent by the remote host is\nSHA256:H9Ccjs2c9+dnm2tRvCHCceYzMzxsMfSgHQziqJlMYcw.\r\nPlease contact your system administrator.\r\nAdd correct host key in /tmp/rec/known_wrong to get rid of this message.\r\nOffending ED25519 key in /tmp/rec/known_wrong:1\r\n  remove with:\r\n  ssh-keygen -f \"/tmp/rec/known_wrong\" -R \"[127.0.0.1]:2299\"\r\nHost key for [127.0.0.1]:2299 has changed and you have requested strict checking.\r\nHost key verification failed.",
  "unreachable": true
 },
 "keyunknown-01": {
  "_ansible_no_log": false,
  "action": "ansible.builtin.raw",
  "changed": false,
  "exception": "(traceback unavailable)",
  "msg": "Task failed: Failed to connect to the host via ssh: No ED25519 host key is known for [127.0.0.1]:2299 and you have requested strict checking.\r\nHost key verification failed.",
  "unreachable": true
 },
 "testnet-01": {
  "_ansible_no_log": false,
  "action": "ansible.builtin.raw",
  "changed": false,
  "exception": "(traceback unavailable)",
  "msg": "Task failed: Failed to connect to the host via ssh: ssh: connect to host 192.0.2.1 port 22: Connection refused",
  "unreachable": true
 },
 "silent-01": {
  "_ansible_no_log": false,
  "action": "ansible.builtin.raw",
  "changed": false,
  "exception": "(traceback unavailable)",
  "msg": "Task failed: Failed to connect to the host via ssh: Connection timed out during banner exchange\r\nConnection to 127.0.0.1 port 2298 timed out",
  "unreachable": true
 },
 "slow-01": {
  "_ansible_no_log": false,
  "action": "ansible.builtin.raw",
  "changed": false,
  "exception": "(traceback unavailable)",
  "failed": true,
  "msg": "Task failed: Timed out after 4 second(s).",
  "timedout": {
   "frame": "Configure `DISPLAY_TRACEBACK` to see a traceback on timeout errors.",
   "period": 4
  }
 },
 "noname-01": {
  "_ansible_no_log": false,
  "action": "ansible.builtin.raw",
  "changed": false,
  "exception": "(traceback unavailable)",
  "msg": "Task failed: Failed to connect to the host via ssh: ssh: Could not resolve hostname no-such-host.invalid: Name or service not known",
  "unreachable": true
 },
 "become-01": {
  "_ansible_no_log": false,
  "action": "ansible.builtin.raw",
  "changed": false,
  "exception": "(traceback unavailable)",
  "failed": true,
  "msg": "Task failed: Premature end of stream waiting for become success.\n>>> Standard Error\nsudo: a password is required"
 },
 "becomepw-01": {
  "_ansible_no_log": false,
  "action": "ansible.builtin.raw",
  "changed": false,
  "exception": "(traceback unavailable)",
  "failed": true,
  "msg": "Task failed: Premature end of stream waiting for become success.\n>>> Standard Error\n[sudo via ansible, key=dyxqybxsdtenkjbnvadniqfgjimwosqe] password:Sorry, try again."
 },
 "failing-01": {
  "_ansible_no_log": false,
  "action": "ansible.builtin.raw",
  "changed": true,
  "exception": "(traceback unavailable)",
  "failed": true,
  "msg": "non-zero return code",
  "rc": 3,
  "stderr": "err\n",
  "stderr_lines": [
   "err"
  ],
  "stdout": "out\n",
  "stdout_lines": [
   "out"
  ]
 }
}"""  # noqa: E501
)
RECORDED_FAILURES = [
    # an SSH server that rejects every key (UserKnownHostsFile=/dev/null: ssh's "Permanently added" comes first)
    ("auth-01", "authentication failed: root@127.0.0.1: Permission denied (publickey,password)."),
    # StrictHostKeyChecking=yes, known_hosts holding another key for [127.0.0.1]:2299
    (
        "keychanged-01",
        "host key changed: Offending ED25519 key in /tmp/rec/known_wrong:1 "
        '(unit recreated? ssh-keygen -f "/tmp/rec/known_wrong" -R "[127.0.0.1]:2299")',
    ),
    # StrictHostKeyChecking=yes, empty known_hosts
    (
        "keyunknown-01",
        "host key unknown: No ED25519 host key is known for [127.0.0.1]:2299 and you have requested strict checking.",
    ),
    # 192.0.2.1 (TEST-NET), refused where recorded
    ("testnet-01", "connection refused: ssh: connect to host 192.0.2.1 port 22: Connection refused"),
    # a port that accepts TCP but never sends the SSH banner (-T 3)
    ("silent-01", "timeout: Connection timed out during banner exchange"),
    # the command outlives --task-timeout 4 (ansible_connection: local)
    ("slow-01", "timeout: Timed out after 4 second(s)."),
    # ansible_host: no-such-host.invalid
    (
        "noname-01",
        "address not resolved: ssh: Could not resolve hostname no-such-host.invalid: Name or service not known",
    ),
    # ansible_become with no password; sudo wants one (local connection, a stand-in sudo on PATH)
    ("become-01", "become failed: sudo: a password is required"),
    # ansible_become_password wrong (same stand-in sudo, which answers as sudo does)
    (
        "becomepw-01",
        "become failed: [sudo via ansible, key=dyxqybxsdtenkjbnvadniqfgjimwosqe] password:Sorry, try again.",
    ),
    # the command exits 3 (local connection)
    ("failing-01", "command failed (rc 3): err"),
]


@pytest.mark.parametrize(("host", "error"), RECORDED_FAILURES, ids=[case[0] for case in RECORDED_FAILURES])
def test_describe_failure(host, error):
    result = RECORDED_RESULTS[host]
    assert status.describe_failure(result) == error
    read = status.reads_from_ansible({"plays": [{"tasks": [{"hosts": {"u": result}}]}]}, "n", {"u": "a"})[0]
    assert read.error == error and "\n" not in error


def test_a_traceback_never_reaches_the_row():
    result = {**RECORDED_RESULTS["testnet-01"], "exception": "Traceback (most recent call last):\n  File ..."}
    assert "Traceback" not in status.describe_failure(result)
    assert status.describe_failure({"unreachable": True}) == "unreachable: no message"
    long = status.describe_failure({"failed": True, "msg": "x" * 1000})
    assert len(long) == status.MESSAGE_LIMIT


def test_ansible_argv():
    argv = status.ansible_argv("inventory/lab", "thor", "sh -c true", 2.5, 100, "/venv/bin/ansible")
    assert argv == [
        "/venv/bin/ansible", "all", "-i", "inventory/lab", "--limit", "thor",
        "-m", "ansible.builtin.raw", "-a", "sh {% raw %}-c true{% endraw %}", "--become", "-T", "3",
        "--task-timeout", "5", "--forks", "32",
    ]
    assert "--limit" not in status.ansible_argv("inv", None, "c", 10, 3)
    assert status.ansible_argv("inv", None, "c", 10, 3)[-2:] == ["--forks", "3"]
    assert status.ansible_argv("inv", None, "c", 0.2, 1)[-6:-2] == ["-T", "1", "--task-timeout", "2"]
    assert status.ansible_argv("inv", None, "c", 10, 3, verbosity=3)[-1] == "-vvv"
    assert status.ANSIBLE_ENV == {"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1"}


def test_run_timeout_covers_every_batch_of_forks():
    one_batch = status.run_timeout(10, 32)
    assert one_batch == status.STARTUP_ALLOWANCE + status.task_timeout(10) + 5
    assert status.run_timeout(10, 33) == status.STARTUP_ALLOWANCE + 2 * (status.task_timeout(10) + 5)


def test_ansible_takes_the_remote_command_as_it_is():
    # The ad hoc CLI splits -a with parse_kv (key=value words are options for raw); the
    # command must come back whole as the raw module's free-form argument.
    from ansible.parsing.splitter import parse_kv

    command = status.untemplated(status.remote_command("n0nce"))
    assert parse_kv(command, check_raw=True) == {"_raw_params": command}
    assert not command.startswith("{")  # ad hoc reads -a '{...}' as JSON


def write_inventory(path: Path, hosts: dict, group_vars: dict | None = None) -> Path:
    data = {"all": {"hosts": hosts, "children": {"thor": {"hosts": {"thor-09": {}}, "vars": group_vars or {}}}}}
    path.write_text(yaml.safe_dump(data))
    return path


def test_inventory_hosts_and_addresses(tmp_path):
    inventory = write_inventory(
        tmp_path / "hosts.yml",
        {
            "b-01": {"ansible_host": "10.0.0.2"},
            "a-01": {"ansible_ssh_host": "10.0.0.1"},
            "templated": {"ansible_host": "{{ inventory_hostname }}.lan"},
            "plain": {},
        },
        {"ansible_host": "10.0.0.9"},
    )
    assert status.inventory_hosts(str(inventory)) == {
        "a-01": "10.0.0.1", "b-01": "10.0.0.2", "plain": "plain", "templated": "templated", "thor-09": "10.0.0.9",
    }
    assert status.inventory_hosts(str(inventory), "thor:b-01") == {"b-01": "10.0.0.2", "thor-09": "10.0.0.9"}
    assert status.inventory_hosts(str(inventory), "nothing-like-this") == {}


def status_json(capsys, *argv: str) -> tuple[int, list | None, str]:
    code = cli.main(["status", *argv, "--format", "json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if captured.out.strip() else None, captured.err


def test_cli_unknown_inventory_and_no_hosts_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)  # its ansible.cfg: an inventory that cannot be parsed is an error
    missing = tmp_path / "nope.yml"
    code, rows, err = status_json(capsys, "-i", str(missing))
    assert (code, rows) == (2, None) and f"-i {missing}:" in err
    inventory = write_inventory(tmp_path / "hosts.yml", {"a-01": {}})
    code, rows, err = status_json(capsys, "-i", str(inventory), "--limit", "zzz")
    assert (code, rows) == (2, None) and f"-i {inventory}: no hosts matching --limit zzz" in err
    code, rows, err = status_json(capsys, "-i", str(inventory), "--timeout", "0")
    assert (code, rows) == (2, None) and "--timeout" in err


def fake_ansible(tmp_path: Path, monkeypatch, script: str) -> None:
    fake = tmp_path / "ansible"
    fake.write_text(f"#!/bin/sh\n{script}\n")
    fake.chmod(0o755)
    monkeypatch.setattr(status, "ansible_executable", lambda: str(fake))


def test_cli_ansible_that_reports_no_host_exits_2(tmp_path, capsys, monkeypatch):
    inventory = write_inventory(tmp_path / "hosts.yml", {"a-01": {}})
    fake_ansible(tmp_path, monkeypatch, "echo '[WARNING]: a warning' >&2; echo '[ERROR]: no vault secrets' >&2; exit 1")
    code, rows, err = status_json(capsys, "-i", str(inventory))
    assert (code, rows) == (2, None)
    assert "ansible reported no unit: [ERROR]: no vault secrets" in err and "Traceback" not in err


def test_a_hung_ansible_is_bounded(tmp_path, monkeypatch):
    fake_ansible(tmp_path, monkeypatch, "exec sleep 30")
    monkeypatch.setattr(status, "run_timeout", lambda timeout, hosts: 1.0)
    began = time.monotonic()
    fleet = status.read_fleet("inv", {"a-01": "10.0.0.1", "b-01": "b-01"}, timeout=1)
    assert time.monotonic() - began < 10
    assert [(read.host, read.error) for read in fleet.reads] == [
        ("a-01", "timeout: ansible did not finish within 1 s"), ("b-01", "timeout: ansible did not finish within 1 s"),
    ]


def test_real_ansible_local_connection(tmp_path, monkeypatch):
    """The ansible binary for real, against this machine (ansible_connection: local)."""
    monkeypatch.chdir(REPO)
    inventory = write_inventory(tmp_path / "hosts.yml", {"here-01": {"ansible_connection": "local"}})
    addresses = status.inventory_hosts(str(inventory), "here-01")
    began = time.monotonic()
    fleet = status.read_fleet(str(inventory), addresses, limit="here-01", timeout=10)
    seconds = time.monotonic() - began
    assert fleet.argv[0] == status.ansible_executable() and fleet.argv[1:4] == ["all", "-i", str(inventory)]
    assert fleet.argv[fleet.argv.index("--limit") + 1] == "here-01"
    (read,) = fleet.reads
    assert (read.host, read.address, read.error) == ("here-01", "here-01", None), fleet.stderr
    assert set(read.sections) == {"release", "container"}
    row = status.unit_status(read)
    if not Path(status.RELEASE_FILE).exists():
        assert row["release_record"] == "missing" and read.sections["release"].rc != "0"
    assert seconds < 30 and read.seconds is not None and read.seconds <= seconds


def test_real_ansible_unreachable_closed_port(tmp_path, capsys, monkeypatch):
    """The ansible binary for real, against 127.0.0.1 on a port where nothing listens."""
    monkeypatch.chdir(REPO)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    known_hosts = tmp_path / "known_hosts"
    inventory = write_inventory(
        tmp_path / "hosts.yml",
        {
            "gone-01": {
                "ansible_host": "127.0.0.1",
                "ansible_port": port,
                "ansible_user": "root",
                "ansible_ssh_common_args": f"-o UserKnownHostsFile={known_hosts}",
            }
        },
    )
    began = time.monotonic()
    code, rows, err = status_json(capsys, "-i", str(inventory), "--limit", "gone-01", "--timeout", "2")
    assert time.monotonic() - began < 20
    assert code == 1 and "Traceback" not in err
    (row,) = rows
    assert (row["host"], row["address"], row["reachable"]) == ("gone-01", "127.0.0.1", False)
    assert row["error"] == f"connection refused: ssh: connect to host 127.0.0.1 port {port}: Connection refused"
    assert not known_hosts.exists()


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


def test_table_shows_every_unit_and_escapes_markup():
    rows = [status.unit_status(case[1]) for case in CASES]
    rows[-1]["error"] = "[bold]odd[/bold] error"
    console = Console(file=io.StringIO(), width=250, color_system=None)
    console.print(status.status_table(rows))
    text = console.file.getvalue()
    assert f"{len(rows)} unit(s), {len(rows) - 1} reachable" in text
    assert "UNREACHABLE" in text and "[bold]odd[/bold] error" in text
    # A unit an interrupted rollout left on trial says so in its serving cell; no other unit does.
    assert [row["host"] for row in rows if "interrupted trial" in status._serving_text(row)] == ["thor-01"]
    assert [case[0] for case, row in zip(CASES, rows, strict=True) if row["trial"]] == ["interrupted-trial"]
    speedup = round(1 + KEPT["figures"]["code_edit"]["throughput_gain_c1"]["value"], 3)
    assert "eagle3 k=5" in text and "vllm/vllm-openai:v0.20.2" in text and f"x{speedup:.2f}" in text
