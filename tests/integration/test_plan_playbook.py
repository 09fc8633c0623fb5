"""playbooks/plan.yml run by ansible-playbook against fixture units (local connection)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

LOCAL_INVENTORY = REPO / "tests" / "fixtures" / "inventory-local"


def ansible_playbook(inventory: Path, *extra: str) -> subprocess.CompletedProcess:
    binary = Path(sys.executable).with_name("ansible-playbook")
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run([str(binary), "-i", str(inventory), "playbooks/plan.yml", *extra],
                          cwd=REPO, capture_output=True, text=True, env=env, timeout=300)


def test_plan_playbook_prints_every_unit():
    result = ansible_playbook(LOCAL_INVENTORY)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    # Thor's default image, pinned, with vLLM 0.26.0 inside, takes a per-batch-size table; Thor
    # holds both servings while measured (YAML folds the long line). Orin on JetPack 6: the
    # versioned image, vLLM 0.14.0, no table.
    folded = " ".join(out.split())
    assert ("thor-r38: thor L4T 38.2.0: eagle3 k=5 (per-batch-size table if c=8 loses) util=0.80 "
            "vllm/vllm-openai:v0.26.0 (vLLM 0.26.0, pinned) (measured side by side: baseline 0.37, candidate 0.43 "
            "on port 8001)") in folded
    assert ("agx-orin-64gb-r36: agx_orin L4T 36.4.3: eagle3 k=3 util=0.80 "
            "ghcr.io/nvidia-ai-iot/vllm:0.14.0-r36.4-tegra-aarch64-cu126-22.04 (vLLM 0.14.0, pinned)") in folded
    assert "orin-nano-8gb-r36: orin_nano L4T 36.4.7: ngram k=3" in out
    assert "EAGLE-3 not allowed on orin_nano" in out


def test_check_mode_gives_the_same_plan():
    result = ansible_playbook(LOCAL_INVENTORY, "--check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "thor-r38: thor L4T 38.2.0: eagle3 k=5" in result.stdout


def test_bad_inventory_fails_in_the_first_play(tmp_path):
    inventory = tmp_path / "inventory"
    shutil.copytree(LOCAL_INVENTORY, inventory)
    # Keep the fixtures reachable from the copied inventory.
    (tmp_path / "units").symlink_to(REPO / "tests" / "fixtures" / "units")
    hosts = (inventory / "hosts.yml").read_text()
    (inventory / "hosts.yml").write_text(
        hosts.replace("specfleet_model: meta-llama/Llama-3.2-1B-Instruct",
                      "specfleet_model: meta-llama/Llama-3.2-1B-Instruct\n"
                      "      specfleet_spec_tokens: {orin_nano: 50}"))
    result = ansible_playbook(inventory)
    assert result.returncode != 0
    assert "orin-nano-8gb-r36: specfleet_spec_tokens.orin_nano: must be 1..16, got 50" in result.stdout
    # any_errors_fatal: no unit was read, let alone changed.
    assert "Read the unit's identity" not in result.stdout
