"""The emulated Jetson's power state slows the emulator: nvpmodel mode and jetson_clocks
pinning from power.json (lab/emulator/vllm_emulator/power.py), read at start and followed
while serving. Ratios come from the file's values, not from constants."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import TARGET_FP4
from vllm_emulator.errors import StartupFailure
from vllm_emulator.power import (
    UNPINNED_CLOCKS_PENALTY,
    PowerMonitor,
    load_power_monitor,
    parse_power_state,
)

# An Orin NX as flashed (15W, clocks not pinned) and the same unit at MAXN, pinned.
LOW: dict[str, Any] = {
    "emulated": True, "mode_id": 2, "mode_name": "15W", "gpu_max_freq_hz": 612000000,
    "maxn_mode_id": 0, "maxn_mode_name": "MAXN", "maxn_gpu_max_freq_hz": 918000000, "clocks_pinned": False,
}
MAXN_PINNED: dict[str, Any] = {**LOW, "mode_id": 0, "mode_name": "MAXN", "gpu_max_freq_hz": 918000000,
                               "clocks_pinned": True}


def expected_factor(state: dict[str, Any]) -> float:
    ratio = state["maxn_gpu_max_freq_hz"] / state["gpu_max_freq_hz"]
    return ratio if state["clocks_pinned"] else ratio * UNPINNED_CLOCKS_PENALTY


def write_state(path: Path, state: dict[str, Any]) -> None:
    """As the unit's stand-in writes it: a new file renamed over the old one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(".power.json.tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)


# ---- the factor ----------------------------------------------------------------------------
def test_maxn_with_pinned_clocks_is_the_calibration():
    assert parse_power_state(MAXN_PINNED).step_time_factor == 1.0


def test_a_low_mode_and_unpinned_clocks_slow_the_steps():
    assert UNPINNED_CLOCKS_PENALTY > 1.0
    low = parse_power_state(LOW)
    assert low.step_time_factor == pytest.approx(expected_factor(LOW))
    assert low.step_time_factor > parse_power_state({**LOW, "clocks_pinned": True}).step_time_factor > 1.0
    maxn_unpinned = parse_power_state({**MAXN_PINNED, "clocks_pinned": False})
    assert maxn_unpinned.step_time_factor == pytest.approx(UNPINNED_CLOCKS_PENALTY)


@pytest.mark.parametrize("change", [
    {"gpu_max_freq_hz": 0}, {"gpu_max_freq_hz": "612"}, {"maxn_gpu_max_freq_hz": None},
    {"clocks_pinned": "no"}, {"mode_id": "2"}, {"mode_id": True},
])
def test_a_malformed_state_is_refused(change):
    with pytest.raises(ValueError):
        parse_power_state({**LOW, **change})


# ---- the file, read at start and followed ------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_no_file_is_full_speed(tmp_path):
    monitor = PowerMonitor(tmp_path / "power.json")
    assert monitor.state is None and monitor.step_time_factor() == 1.0
    assert monitor.info()["present"] is False


def test_the_monitor_follows_changes(tmp_path):
    path = tmp_path / "power" / "power.json"
    clock, seen = Clock(), []
    monitor = PowerMonitor(path, interval_s=0.5, on_change=seen.append, clock=clock)
    assert monitor.step_time_factor() == 1.0
    write_state(path, LOW)
    assert monitor.step_time_factor() == 1.0  # not looked at again yet (rate-limited)
    clock.now += 0.6
    assert monitor.step_time_factor() == pytest.approx(expected_factor(LOW))
    write_state(path, MAXN_PINNED)
    clock.now += 0.6
    assert monitor.step_time_factor() == 1.0
    assert monitor.info()["state"]["mode_name"] == "MAXN"
    assert len(seen) == 3 and "changed" in seen[1] and "15W" in seen[1]
    # A broken file while serving (a lab bug) keeps the last good state, and says so.
    path.write_text("{not json")
    clock.now += 0.6
    assert monitor.step_time_factor() == 1.0 and "unreadable" in seen[-1]
    path.unlink()
    clock.now += 0.6
    assert monitor.step_time_factor() == 1.0 and monitor.state is None


def test_a_malformed_file_at_start_fails_plainly(tmp_path):
    path = tmp_path / "power.json"
    path.write_text(json.dumps({**LOW, "gpu_max_freq_hz": -1}))
    with pytest.raises(StartupFailure) as failure:
        load_power_monitor({"SPECFLEET_EMULATOR_POWER_FILE": str(path)})
    assert "invalid power state file" in failure.value.exception_text


# ---- end to end: a server's pace follows the unit's power mode ---------------------------------
# Scale 0.1 as in test_calibration: at 0.01 a step is too short for its pace to show cleanly.
PACING_SCALE = "0.1"
PROMPT = "Write a numbered list of the steps to deploy vLLM on a fleet of Jetson units."


def stream_rate(server: Any, max_tokens: int = 80) -> float:
    """Decode tokens per wall second between the first and the last chunk."""
    events = server.stream("/v1/completions", {"prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0,
                                               "ignore_eos": True}, timeout=60)
    chunks = [t for t, e in events if isinstance(e, dict) and e["choices"]]
    return (max_tokens - 1) / (chunks[-1] - chunks[0])


def test_the_pace_follows_a_mode_changed_under_a_running_server(launch, lab_env):
    lab_env["SPECFLEET_EMULATOR_TIME_SCALE"] = PACING_SCALE
    path = Path(lab_env["SPECFLEET_EMULATOR_POWER_FILE"])
    write_state(path, MAXN_PINNED)
    server = launch(TARGET_FP4, ["--max-model-len", "4096"])
    assert any("power state" in line and "MAXN" in line for line in server.stdout)
    # The best of three streams each: a busy host only ever slows a stream down, so the
    # fastest is the one closest to the programmed pace.
    fast = max(stream_rate(server) for _ in range(3))
    write_state(path, LOW)  # `nvpmodel -m 2` on the unit; the server keeps running
    time.sleep(0.7)  # one check interval
    slow = max(stream_rate(server) for _ in range(3))
    assert fast / slow == pytest.approx(expected_factor(LOW), rel=0.15)
    info = json.loads(server.get("/specfleet/emulator")[2])
    assert info["power"]["state"]["mode_name"] == "15W" and info["power"]["state"]["clocks_pinned"] is False
    assert info["power"]["step_time_factor"] == pytest.approx(expected_factor(LOW), abs=1e-3)
    assert any("power state changed" in line and "15W" in line for line in server.stdout)


def test_without_a_power_file_the_server_runs_at_full_speed(launch, lab_env):
    server = launch(TARGET_FP4, ["--max-model-len", "4096"])
    info = json.loads(server.get("/specfleet/emulator")[2])
    assert info["power"]["present"] is False and info["power"]["step_time_factor"] == 1.0
