"""The README's main command, `./scripts/up`, as a new user runs it (issue 16): the 9-unit
mixed lab as stock units (login `nvidia`, sudo password from the lab's Vault, no Docker,
toolkit or Docker SDK), their host keys collected, three faults in the last canary wave,
site.yml, and the script's own check that exactly the faulted units failed and ended on their
baseline. The report is read here too."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from specfleet_lab import lab

from tests.conftest import REPO

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.ci]  # ~10 min here
FAULTED = {"orinnx-01", "orinnano-01", "spark-01"}


def test_scripts_up_rehearses_the_event_on_stock_units(lab_session, tmp_path):
    cfg, brought_up = lab_session
    if lab.status(cfg)["lab"] != "down":
        lab.down(cfg)  # scripts/up brings up its own (stock) lab
    brought_up.append(True)
    runs = tmp_path / "runs"
    result = subprocess.run(["./scripts/up"], cwd=REPO, env={**os.environ, "SPECFLEET_RUNS_DIR": str(runs)},
                            capture_output=True, text=True, timeout=3600, check=False)
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-3000:]
    assert "rehearsal done" in result.stdout
    status = lab.status(cfg)
    assert status["stock"] and all(unit["login"] == "nvidia" for unit in status["units"])
    (run,) = runs.iterdir()
    records = {path.stem: json.loads(path.read_text()) for path in (run / "units").glob("*.json")}
    assert len(records) == 9
    assert {name for name, record in records.items() if record["decision"] == "failed"} == FAULTED
    # The faulted units were rolled back onto the baseline they had measured.
    assert all(records[name]["serving"] == "baseline" for name in FAULTED), {n: records[n] for n in FAULTED}
