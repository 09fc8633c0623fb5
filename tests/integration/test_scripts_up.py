"""The README's main command, `./scripts/up`, as a new user runs it (issue 16): the 9-unit
mixed lab as stock units (login `nvidia`, sudo password from the lab's Vault, no Docker,
toolkit or Docker SDK), their host keys collected, three faults in the last canary wave and
two output divergences, site.yml with the AGX Orin canaries sweeping the draft length, and the
script's own check that exactly the faulted units failed and ended on their baseline. The
report is read here too."""

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
    # Each AGX Orin key's canary measured k = 2 and 3 (the emulator's noiseless code-edit figures:
    # 1.64x and 1.81x, chat 1.02x and 0.96x: both kept, 3 has the higher lower bound; a longer k
    # only when more than 60% of drafts are accepted), its later unit took the choice.
    for canary, later in (("agxorin-jp6-01", "agxorin-jp6-02"), ("agxorin-jp72-01", "agxorin-jp72-02")):
        swept = records[canary]["sweep"]
        assert [(entry["tokens"], entry["decision"]) for entry in swept["measured"]][:2] == [(2, "keep"), (3, "keep")]
        assert (records[canary]["decision"], swept["chosen"]) == ("kept", 3), records[canary]["reasons"]
        assert records[later]["sweep"] == {"canary": canary, "chosen": 3}
        assert records[later]["num_speculative_tokens"] == 3
    # The output check: a numerics tie is reported and kept, a confident divergence reverts.
    tie = records["agxorin-jp6-02"]
    assert tie["decision"] == "kept" and tie["measurement"]["output_check"]["ties"], tie["measurement"]
    confident = records["agxorin-jp72-02"]
    assert confident["decision"] == "reverted" and confident["serving"] == "baseline"
    assert any("speculation changed the output where the baseline was confident" in reason
               for reason in confident["reasons"]), confident["reasons"]
    # The report shows the sweep, the confidence bounds, the drift and the output check.
    table = (run / "report.md").read_text()
    assert "| k sweep |" in table and "k=2 keep" in table and "k=3 from agxorin-jp6-01" in table, table
    assert "baseline drift" in table and "DIVERGED" in table and "numerics tie" in table, table
