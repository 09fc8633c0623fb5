"""The README's main command, `./scripts/up`, as a new user runs it (issue 16): the 9-unit
mixed lab as stock units (login `nvidia`, sudo password from the lab's Vault, no Docker,
toolkit or Docker SDK), their host keys collected, three faults (two canaries, one unit after them) and
two output divergences, site.yml with the AGX Orin canaries sweeping the draft length, and the
script's own check that exactly the faulted units failed and ended on their baseline. The
report is read here too.

Secrets (issue 19): the run gets a Hugging Face token from a vault file of its own (-e @file
--vault-password-file, passed through by scripts/up) and generates this event's API key into
the lab's Vault. Neither, plain or base64, may show in its output, its Ansible log, the run
folder or any unit's state and serving log; the units refuse /v1 without the key."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from specfleet_lab import engine, lab

from tests.conftest import CONSOLE_FULL, MODELS_STATUS, REPO, lab_api_key
from tests.integration.test_report_visual import rendered
from tests.integration.test_secrets_lab import leaks, random_secret

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.ci]  # ~10 min here
FAULTED = {"orinnx-01", "orinnano-01", "spark-01"}
BIN = Path(sys.executable).parent


def as_root(cfg, unit: str, command: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """A root command on a stock unit (no root login): the lab's engine runs it in the unit."""
    return subprocess.run([engine.DOCKER_CLI, "exec", "-i", f"{cfg.prefix}-{unit}", "sh", "-c", command],
                          env={**os.environ, **engine.docker_env(cfg)}, input=stdin or "", capture_output=True,
                          text=True, timeout=120, check=False)


def test_scripts_up_rehearses_the_event_on_stock_units(lab_session, tmp_path):
    cfg, brought_up = lab_session
    if lab.status(cfg)["lab"] != "down":
        lab.down(cfg)  # scripts/up brings up its own (stock) lab
    brought_up.append(True)
    runs, log = tmp_path / "runs", tmp_path / "ansible.log"
    hf_token = random_secret("hf_", 34)
    password, vault = tmp_path / "vault-password", tmp_path / "vault.yml"
    password.write_text(random_secret("", 32) + "\n")
    password.chmod(0o600)
    vault.write_text(f"specfleet_hf_token: {hf_token}\n")
    encrypted = subprocess.run([str(BIN / "ansible-vault"), "encrypt", str(vault), "--vault-password-file",
                                str(password)], cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert encrypted.returncode == 0, encrypted.stderr
    quiet = {key: value for key, value in os.environ.items() if key != CONSOLE_FULL}  # as a user's shell
    result = subprocess.run(["./scripts/up", "-e", f"@{vault}", "--vault-password-file", str(password)], cwd=REPO,
                            env={**quiet, "SPECFLEET_RUNS_DIR": str(runs), "ANSIBLE_LOG_PATH": str(log)},
                            capture_output=True, text=True, timeout=3600, check=False)
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-3000:]
    assert "rehearsal done" in result.stdout
    # No library's Python warning on the console (a CryptographyDeprecationWarning once headed
    # every ansible command): the lock keeps them out.
    warned = [line for line in (result.stdout + result.stderr).splitlines() if re.search(r"\w+Warning: ", line)]
    assert warned == [], warned
    assert lab.status(cfg)["made_by"] == "scripts/up"  # which scripts/test may take down
    # The playbook's console (issue 20): the quiet callback's lines, from its first play's title
    # to the report `specfleet report` prints after it: at most ~300 for 9 units.
    lines = result.stdout.splitlines()
    first = next(number for number, line in enumerate(lines) if line.startswith("== "))
    report_at = next(number for number, line in enumerate(lines) if line.startswith("# specfleet rollout"))
    console = lines[first:report_at]
    assert len(console) <= 300 and not [line for line in console if line.startswith("TASK [")], \
        f"{len(console)} lines:\n" + "\n".join(console)
    for unit in FAULTED:  # each failure once, with its cause
        assert len([line for line in console if line.startswith(f"  {unit}: FAILED in ")]) == 1, "\n".join(console)
    status = lab.status(cfg)
    assert status["stock"] and all(unit["login"] == "nvidia" for unit in status["units"])
    (run,) = runs.iterdir()
    records = {path.stem: json.loads(path.read_text()) for path in (run / "units").glob("*.json")}
    assert len(records) == 9
    # The report leads with them: in the first screen at 1280 px, each named with the command to
    # measure it again (test_report_visual renders it; the screenshot is kept in runs/artefacts).
    seen = rendered(run, "report-9-units")
    assert seen["attentionTop"] < 400 and seen["scrollWidth"] <= seen["clientWidth"], seen
    commands = [line for line in seen["attentionText"].splitlines() if line.startswith("ansible-playbook ")]
    for unit in FAULTED:
        assert any(unit in command and "specfleet_rollout_remeasure=true" in command for command in commands), seen
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
    # Thor (issue 38): the head's published acceptance keeps speculation on thor-01, code edits and
    # chat both faster (the emulator's noiseless Thor FP4 k=5 figures: 1.69x and 2.06x); thor-02's
    # head drafts poorly on chat (the emulator's draft_acceptance switch): its chat guard reverts it.
    kept = records["thor-01"]
    assert (kept["decision"], kept["serving"]) == ("kept", "speculative"), kept["reasons"]
    for workload in ("code_edit", "chat"):
        gain = kept["figures"][workload]["throughput_gain_c1"]["value"]
        assert 0.34 <= gain <= 1.3, (workload, kept["figures"][workload])
    slowed = records["thor-02"]
    assert (slowed["decision"], slowed["serving"]) == ("reverted", "baseline"), slowed["reasons"]
    assert any(reason.startswith("chat: ") and "regresses" in reason for reason in slowed["reasons"]), slowed["reasons"]
    assert not any(reason.startswith("code_edit: ") and "regresses" in reason for reason in slowed["reasons"])
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
    # The units serve with the event's key the run generated into the lab's Vault.
    assert "ansible-vault view inventory/lab/.specfleet/api_key.yml" in result.stdout
    key = lab_api_key()
    assert as_root(cfg, "thor-01", MODELS_STATUS, "").stdout == "401", "served without the key"
    assert as_root(cfg, "thor-01", MODELS_STATUS, f"Authorization: Bearer {key}\n").stdout == "200"
    env = json.loads(as_root(cfg, "thor-01", "docker inspect -f '{{json .Config.Env}}' specfleet-vllm").stdout)
    assert {f"VLLM_API_KEY={key}", f"HF_TOKEN={hf_token}"} <= set(env), "both secrets reach vLLM"
    # Neither secret anywhere else: output, log, run folder, every unit's state and serving log.
    sources = {"stdout": result.stdout.encode(), "stderr": result.stderr.encode(), "log": log.read_bytes()}
    sources.update({f"run:{path.relative_to(run)}": path.read_bytes() for path in run.rglob("*") if path.is_file()})
    for name in records:
        state = "cat $(find /var/lib/specfleet -type f -size -4M ! -path '*/huggingface/*' ! -path '*/vllm-cache/*')"
        sources[f"{name}:state"] = as_root(cfg, name, state).stdout.encode()
        sources[f"{name}:serving log"] = as_root(cfg, name, "docker logs specfleet-vllm 2>&1").stdout.encode()
    assert all(sources.values()), [source for source, data in sources.items() if not data]
    assert leaks(sources, {"hf_token": hf_token, "api_key": key}) == []
