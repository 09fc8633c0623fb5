"""The rollout's release-record wiring (playbooks/tasks/rollout_unit.yml, record.yml and
playbooks/rollback.yml) run by ansible-playbook on this machine (local connection, the record in a
temporary folder): a unit without a record, one whose record cannot be read, and one an
interrupted run left on trial. A refused plan goes through the same reading and interrupted-trial
steps as any other without measuring anything; no Docker is reached (module_defaults point
vllm_container at a socket that does not exist), so the known-good's start fails as it would on a
unit whose dockerd is down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specfleet import release, serving
from tests.conftest import REPO

HOST = "unit-1"
RUN_ID = "20260101T000000Z-test"
REFUSED_PLAN = {"host": HOST, "refused": True, "reasons": ["no image fits"], "needs_tiktoken": False}


@pytest.fixture
def unit(tmp_path: Path) -> dict[str, Path]:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {HOST: {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    state_dir = tmp_path / "state"
    playbook = tmp_path / "refused.yml"
    playbook.write_text(json.dumps([{
        "name": "One unit's rollout with a refused plan",
        "hosts": "all",
        "gather_facts": False,
        "vars_files": [str(REPO / "playbooks" / "vars" / "serving.yml")],
        "module_defaults": {"specfleet.fleet.vllm_container": {
            "docker_host": f"unix://{tmp_path}/no-docker.sock", "docker_timeout": 1}},
        "tasks": [
            {"name": "The plan", "ansible.builtin.set_fact": {"specfleet_plan": REFUSED_PLAN,
                                                              "specfleet_run_id": RUN_ID}},
            {"name": "The unit's rollout",
             "ansible.builtin.include_tasks": str(REPO / "playbooks" / "tasks" / "rollout_unit.yml")},
        ],
    }]))
    return {"inventory": inventory, "playbook": playbook, "state_dir": state_dir,
            "record": state_dir / "release.json", "runs": tmp_path / "runs"}


def run(unit: dict[str, Path], playbook: Path, *extra: str) -> subprocess.CompletedProcess:
    binary = Path(sys.executable).with_name("ansible-playbook")
    return subprocess.run(
        [str(binary), "-i", str(unit["inventory"]), str(playbook), "-e",
         json.dumps({"specfleet_state_dir": str(unit["state_dir"]), "specfleet_release_file": str(unit["record"])}),
         *extra],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "SPECFLEET_RUNS_DIR": str(unit["runs"])},
    )


def unit_record(unit: dict[str, Path]) -> dict:
    return json.loads((unit["runs"] / RUN_ID / "units" / f"{HOST}.json").read_text())


def record_text(record: dict) -> str:
    """As write_release.yml writes it."""
    return json.dumps(record, indent=1, sort_keys=True) + "\n"


def test_a_unit_without_a_record_starts_from_none(unit):
    result = run(unit, unit["playbook"])
    assert result.returncode == 0, result.stdout[-4000:]
    assert unit_record(unit)["reasons"] == ["plan refused: no image fits"]
    assert not unit["record"].exists()  # a refused plan writes nothing


@pytest.mark.parametrize("text", ["", '{"version": 2, "current": ', "[]"])
def test_a_record_that_cannot_be_read_stops_the_unit_and_is_kept(unit, text):
    unit["state_dir"].mkdir()
    unit["record"].write_text(text)
    result = run(unit, unit["playbook"])
    assert result.returncode != 0
    assert f"{HOST}: release record {unit['record']} cannot be read (" in result.stdout, result.stdout[-4000:]
    assert "Traceback" not in result.stdout + result.stderr
    assert unit["record"].read_text() == text
    assert "failure_class: release_record_unreadable" in result.stdout
    rollback = run(unit, REPO / "playbooks" / "rollback.yml", "-e", "ansible_become=false")
    assert rollback.returncode != 0
    assert f"{HOST}: release record {unit['record']} cannot be read (" in rollback.stdout, rollback.stdout[-4000:]
    assert unit["record"].read_text() == text


def test_an_interrupted_trial_puts_the_known_good_back_first(unit):
    """The known-good's start is tried first (here it fails: no Docker): a refused plan keeps the
    record, marker and known-good, as it is for the next run, and says what happened."""
    baseline = serving.for_unit(serving.make("baseline", engine="vllm", image="img:1", model="m", port=8000,
                                             flags=[]), {}, [], [])
    candidate = serving.for_unit(serving.make("speculative", engine="vllm", image="img:1", model="m", port=8000,
                                              flags=[], speculative_config={"method": "ngram",
                                                                            "num_speculative_tokens": 3}), {}, [], [])
    text = record_text(release.on_trial(release.known_good(release.empty(), baseline), candidate, "r1"))
    unit["state_dir"].mkdir()
    unit["record"].write_text(text)
    result = run(unit, unit["playbook"])
    assert result.returncode == 0, result.stdout[-4000:]
    assert "Start the known-good and wait until it serves" in result.stdout
    assert unit_record(unit)["reasons"][-1] == (
        f"the previous run was interrupted during the trial of the speculative serving {candidate['spec_id'][:8]} "
        f"(ngram, k=3) in run r1; its known-good baseline serving {baseline['spec_id'][:8]} did not start again "
        "(docker_unavailable): the next run tries again")
    assert unit["record"].read_text() == text
