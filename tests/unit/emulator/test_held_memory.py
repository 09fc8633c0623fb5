"""Memory another server on the unit holds counts as used at vLLM's start-up check
(lab/emulator/vllm_emulator/held.py, EMULATED): the candidate measured beside the baseline
starts only when its share fits in what the baseline leaves, as on a real GPU. No lab: the
state directory is a scratch one."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import TARGET_FP4
from test_page_cache import CONFIGS, drop, hub_of, hub_repo, state_of, unit_env  # noqa: F401  (a fixture)
from vllm_emulator import held

FREE_MEMORY = re.compile(r"ValueError: Free memory on device cuda:0 \((\d+\.\d\d)/122\.82 GiB\) on startup is less "
                         r"than desired GPU memory utilization \(0\.5, 61\.41 GiB\)")


def test_a_record_counts_while_its_server_lives_and_is_removed_after(tmp_path: Path):
    path = held.hold(tmp_path, 55.27, TARGET_FP4, 8000)
    assert path.parent == tmp_path / held.HELD_DIR and not list(path.parent.glob(".*"))
    found = held.others(tmp_path)
    assert found == [held.Held(55.27, TARGET_FP4, 8000)] and held.total_gib(found) == 55.27
    assert "55.27 GiB counted as used" in held.describe(found) and "EMULATED" in held.describe(found)
    held._HOLDING.pop().close()  # the server's process ends: its lock goes with it
    assert held.others(tmp_path) == [] and not path.exists()


def test_a_record_that_is_not_one_counts_nothing(tmp_path: Path):
    (tmp_path / held.HELD_DIR).mkdir()
    (tmp_path / held.HELD_DIR / "1-2.json").write_text("not json")
    assert held.others(tmp_path) == [] and held.others(tmp_path / "absent") == []


def test_a_second_server_starts_only_in_what_the_first_leaves(launch, unit_env):  # noqa: F811
    hub_repo(hub_of(unit_env), TARGET_FP4, CONFIGS[TARGET_FP4])
    drop(state_of(unit_env))  # the page cache empty: only what the servers hold counts
    first = launch(TARGET_FP4, ["--max-model-len", "8192", "--gpu-memory-utilization", "0.5"], env=unit_env)

    drop(state_of(unit_env))  # as the toolkit does before every start: the weights it read leave the page cache
    beside = launch(TARGET_FP4, ["--max-model-len", "8192", "--gpu-memory-utilization", "0.5"], env=unit_env,
                    ready=False)
    assert beside.wait_exit() == 1
    match = FREE_MEMORY.search("\n".join(beside.stderr))
    # 122.82 GiB, 3 of them the OS's, 61.41 the first server's: 58.41 free, short of 61.41.
    assert match and match.group(1) == "58.41", beside.output
    assert any("EMULATED memory held by other servers" in line and "61.41 GiB" in line for line in beside.stdout)

    drop(state_of(unit_env))
    smaller = launch(TARGET_FP4, ["--max-model-len", "8192", "--gpu-memory-utilization", "0.45"], env=unit_env)
    records = sorted((state_of(unit_env) / held.HELD_DIR).glob("*.json"))
    assert sorted(json.loads(path.read_text())["held_gib"] for path in records) == [55.2709, 61.4121]

    first.stop()
    smaller.stop()  # both end: what they held is free again
    drop(state_of(unit_env))
    launch(TARGET_FP4, ["--max-model-len", "8192", "--gpu-memory-utilization", "0.5"], env=unit_env)
    assert len(list((state_of(unit_env) / held.HELD_DIR).glob("*.json"))) == 1
