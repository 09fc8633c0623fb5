"""The output check on an emulated unit, one case per fault switch of the emulator (labelled as
one; faults.py): an image whose vLLM serves logprob requests without drafting, a numerics tie on
either side's self-repeat, a speculation bug that shows only in a batch, and a near-tie a prefix
cache hit tips. Each case is one rollout of thor-01 (kept without faults: tests/conftest.py
LAB_DECISIONS), measured again from its baseline, with real Ansible, SSH, Docker and HTTP.

A slow lane (about 20 min): `scripts/test --slow` runs it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specfleet.fleet.plugins.module_utils import spec_bench_client as client
from specfleet_lab import lab
from specfleet_lab.inventory import BENCH_OUTPUT_CHECK

from specfleet import gate
from tests.conftest import lab_decision, on_unit
from tests.conftest import lab_playbook as playbook

pytestmark = [pytest.mark.lab, pytest.mark.slow]
HOST = "thor-01"
CHECKED = 2 * BENCH_OUTPUT_CHECK  # the lab's checked prompts of each of the two workloads


@pytest.fixture(scope="module")
def prepared(fleet_lab) -> None:
    result = playbook("prepare.yml", "-l", HOST)
    assert result.returncode == 0, result.stdout[-6000:]
    assert lab_decision(HOST) == "kept"


def rollout(fleet_lab, runs: Path, faults: dict[str, Any]) -> dict[str, Any]:
    """One rollout of HOST from its baseline under ``faults``; its unit record."""
    lab.set_faults(fleet_lab, HOST, faults)
    try:
        # The switches apply from a server's next start: none of the unit's servings survives.
        on_unit(HOST, "docker rm -f specfleet-vllm specfleet-vllm-trial")
        result = playbook("rollout.yml", "-l", HOST, "-e", json.dumps({"specfleet_rollout_remeasure": True}),
                          env={"SPECFLEET_RUNS_DIR": str(runs)})
        assert result.returncode == 0, result.stdout[-6000:]
    finally:
        lab.set_faults(fleet_lab, HOST, None)
    return json.loads(next(runs.glob(f"*/units/{HOST}.json")).read_text())


def checked(record: dict[str, Any]) -> dict[str, Any]:
    return record["measurement"]["output_check"]


def report_line(runs: Path) -> str:
    (report_md,) = runs.glob("*/report.md")
    (row,) = [line for line in report_md.read_text().splitlines() if line.startswith(f"| {HOST} |")]
    return row


def test_an_image_that_does_not_draft_for_logprob_requests_is_reported_unchecked(fleet_lab, prepared, tmp_path):
    record = rollout(fleet_lab, tmp_path, {"only_when_speculating": True, "logprobs_without_drafting": True})
    found = checked(record)
    assert found["drafting"] == {"confirmed": 0, "not_drafted": CHECKED, "unknown": 0}, found
    assert any(gate.NOT_CHECKED_WITH_SPECULATION in reason for reason in record["reasons"]), record["reasons"]
    assert not any("answers identical token by token" in reason for reason in record["reasons"])
    assert f"{gate.NOT_CHECKED_WITH_SPECULATION} (0/{CHECKED} drafted)" in report_line(tmp_path)
    # Speculation did run on the measured traffic: acceptance was counted there.
    assert record["figures"]["code_edit"]["acceptance_c1"]["rate"] > 0


def test_a_tie_on_self_repeat_gives_the_same_verdict_on_either_side(fleet_lab, prepared, tmp_path):
    verdicts = {}
    for side, only in (("baseline", "only_when_baseline"), ("speculative", "only_when_speculating")):
        record = rollout(fleet_lab, tmp_path / side, {only: True, "unstable_outputs": "tie"})
        selves = checked(record)["self"]
        assert selves[side] and {entry["kind"] for entry in selves[side]} == {"tie"}, selves
        assert not selves["baseline" if side == "speculative" else "speculative"], selves
        assert any(f"the {side} answered the same request differently twice at a numerics tie" in reason
                   for reason in record["reasons"]), record["reasons"]
        verdicts[side] = record["decision"]
    assert verdicts == {"baseline": "kept", "speculative": "kept"}


def test_a_divergence_only_in_a_batch_reverts(fleet_lab, prepared, tmp_path):
    record = rollout(fleet_lab, tmp_path, {"batched_divergence": True})  # a baseline server ignores it
    assert record["decision"] == "reverted", record["reasons"]
    batched = checked(record)["batched"]
    assert batched["beyond"] and batched["baseline"]["diverged"] == 0, batched
    # Every answer of each workload's batch shared its steps with the others: all diverged.
    assert batched["speculative"] == {"diverged": CHECKED, "compared": CHECKED}, batched
    # One at a time the speculative server answers as the baseline does.
    assert checked(record)["identical"] == checked(record)["compared"] == CHECKED
    assert any("in a batch of 8 speculation changed the output" in reason for reason in record["reasons"])
    release = json.loads(on_unit(HOST, "cat /var/lib/specfleet/release.json").stdout)
    assert release["current"]["kind"] == release["known_good"]["kind"] == "baseline"


def test_a_near_tie_a_cache_hit_would_tip_does_not_revert(fleet_lab, prepared, tmp_path):
    record = rollout(fleet_lab, tmp_path, {"cache_hit_flips": True})  # on both servings
    found = checked(record)
    assert record["decision"] == "kept", record["reasons"]
    # Every check request had its own prefix-cache salt: no repeat found its prefill cached.
    assert found["repeats"] == client.REPEATS_SALTED and not found["self"]["speculative"], found
    assert not found["self"]["baseline"] and found["identical"] == found["compared"] == CHECKED, found
    assert any(f"each answer repeated: {client.REPEATS_SALTED}" in reason for reason in record["reasons"])
