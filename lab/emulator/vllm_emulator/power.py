"""The emulated Jetson's power state: nvpmodel mode and jetson_clocks pinning, as a step-time factor.

A real Jetson left in a low nvpmodel mode, or with its clocks not pinned by jetson_clocks,
decodes slower than one at MAXN with pinned clocks. In the lab the unit's EMULATED
nvpmodel/jetson_clocks (lab/images/unit/rootfs/usr/lib/specfleet-lab/specfleet-lab-jetson-power)
keep that state in /etc/specfleet-lab/power/power.json, and the lab's
nvidia-container-runtime shim bind-mounts its directory read-only at
/run/specfleet-lab/power in GPU containers (a directory, so a file replaced by rename
shows up in running containers). The file (env `SPECFLEET_EMULATOR_POWER_FILE`):

    {"emulated": true, "mode_id": 2, "mode_name": "15W", "gpu_max_freq_hz": 612000000,
     "maxn_mode_id": 0, "maxn_mode_name": "MAXN", "maxn_gpu_max_freq_hz": 918000000,
     "clocks_pinned": false}

Every engine step lasts `step_time_factor` times the performance model's duration:
    MAXN GPU max frequency / the mode's GPU max frequency   (decode slows with the GPU clock)
  x UNPINNED_CLOCKS_PENALTY when the clocks are not pinned  (a lab assumption, see below)
The calibration (tests/unit/emulator/test_calibration.py) is at MAXN with pinned clocks,
where the factor is exactly 1.0; so is a missing file (a DGX Spark, a test, a container
started without the nvidia runtime): full speed.

The file is read at start and, while serving, again whenever it changed (one stat() at most
every CHECK_INTERVAL_S of wall time), so a mode changed under a running server shows in its
next steps.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import StartupFailure

DEFAULT_POWER_FILE = "/run/specfleet-lab/power/power.json"
# Lab assumption, not a measurement: with the clocks left to DVFS (jetson_clocks not run)
# the GPU and EMC clocks ramp up per burst of work and drop between steps, which costs
# decode throughput; NVIDIA's benchmarking guides pin clocks first. 10 % is a modest figure
# of the right size.
UNPINNED_CLOCKS_PENALTY = 1.1
CHECK_INTERVAL_S = 0.5


@dataclass(frozen=True)
class PowerState:
    mode_id: int
    mode_name: str
    gpu_max_freq_hz: int
    maxn_mode_id: int | None
    maxn_mode_name: str | None
    maxn_gpu_max_freq_hz: int
    clocks_pinned: bool

    @property
    def step_time_factor(self) -> float:
        """How much longer every engine step takes than at MAXN with pinned clocks."""
        factor = self.maxn_gpu_max_freq_hz / self.gpu_max_freq_hz
        return factor if self.clocks_pinned else factor * UNPINNED_CLOCKS_PENALTY

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "step_time_factor": round(self.step_time_factor, 4)}


def power_file_path(env: Mapping[str, str]) -> Path:
    return Path(env.get("SPECFLEET_EMULATOR_POWER_FILE", DEFAULT_POWER_FILE))


def parse_power_state(data: object) -> PowerState:
    """Validate the power description; raises ValueError naming the bad field."""
    if not isinstance(data, dict):
        raise ValueError("power state must be a JSON object")

    def frequency(key: str) -> int:
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{key} must be a positive integer (Hz), got {value!r}")
        return value

    mode_id = data.get("mode_id")
    if isinstance(mode_id, bool) or not isinstance(mode_id, int):
        raise ValueError(f"mode_id must be an integer, got {mode_id!r}")
    pinned = data.get("clocks_pinned")
    if not isinstance(pinned, bool):
        raise ValueError(f"clocks_pinned must be true or false, got {pinned!r}")
    maxn_id = data.get("maxn_mode_id")
    return PowerState(
        mode_id=mode_id,
        mode_name=str(data.get("mode_name", mode_id)),
        gpu_max_freq_hz=frequency("gpu_max_freq_hz"),
        maxn_mode_id=maxn_id if isinstance(maxn_id, int) and not isinstance(maxn_id, bool) else None,
        maxn_mode_name=None if data.get("maxn_mode_name") is None else str(data["maxn_mode_name"]),
        maxn_gpu_max_freq_hz=frequency("maxn_gpu_max_freq_hz"),
        clocks_pinned=pinned,
    )


def describe(state: PowerState | None) -> str:
    if state is None:
        return "no power state file: full speed (MAXN, clocks pinned)"
    pinned = "pinned" if state.clocks_pinned else "not pinned"
    return (
        f"NV Power Mode {state.mode_name} (id {state.mode_id}), GPU max {state.gpu_max_freq_hz} Hz of "
        f"{state.maxn_gpu_max_freq_hz} Hz at {state.maxn_mode_name or 'MAXN'}, clocks {pinned}: "
        f"engine steps x{state.step_time_factor:.3f}"
    )


class PowerMonitor:
    """The power state file, re-read when it changes (checked at most every `interval_s`)."""

    def __init__(
        self,
        path: Path,
        interval_s: float = CHECK_INTERVAL_S,
        on_change: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.interval_s = interval_s
        self._on_change = on_change
        self._clock = clock
        self._lock = threading.Lock()
        self._signature: tuple[int, int, int] | None = None
        self._checked = clock()
        self.state: PowerState | None = None
        self._load(initial=True)

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        # A rename gives a new inode; mtime and size catch an in-place rewrite.
        return st.st_ino, st.st_mtime_ns, st.st_size

    def _load(self, initial: bool = False) -> None:
        signature = self._stat()
        if signature == self._signature and not initial:
            return
        self._signature = signature
        if signature is None:
            state = None
        else:
            try:
                state = parse_power_state(json.loads(self.path.read_text()))
            except (OSError, ValueError) as exc:
                if initial:
                    raise
                # While serving, a bad file (a lab bug) keeps the last good state.
                self._report(f"specfleet vLLM EMULATOR power state file {self.path} unreadable ({exc}); "
                             f"keeping {describe(self.state)}")
                return
        if state != self.state or initial:
            self.state = state
            prefix = "power state" if initial else "power state changed"
            self._report(f"specfleet vLLM EMULATOR {prefix} ({self.path}): {describe(state)}")

    def _report(self, text: str) -> None:
        if self._on_change is not None:
            self._on_change(text)

    def refresh(self) -> None:
        """Re-read the file if it changed since the last look (rate-limited)."""
        now = self._clock()
        if now - self._checked < self.interval_s:
            return
        with self._lock:
            self._checked = now
            self._load()

    def step_time_factor(self) -> float:
        self.refresh()
        state = self.state
        return 1.0 if state is None else state.step_time_factor

    def info(self) -> dict[str, Any]:
        """What /specfleet/emulator reports: the state the engine paces by right now."""
        state = self.state
        return {
            "file": str(self.path),
            "present": state is not None,
            "state": None if state is None else state.as_dict(),
            "step_time_factor": 1.0 if state is None else round(state.step_time_factor, 4),
            "unpinned_clocks_penalty": UNPINNED_CLOCKS_PENALTY,
            "rule": "step time x MAXN GPU max freq / mode GPU max freq, x the penalty when clocks "
            "are not pinned; no file = full speed (MAXN, pinned)",
        }


def load_power_monitor(env: Mapping[str, str], on_change: Callable[[str], None] | None = None) -> PowerMonitor:
    """The monitor for the server's power file, or fail plainly on a malformed one (a lab bug)."""
    path = power_file_path(env)
    try:
        return PowerMonitor(path, on_change=on_change)
    except (OSError, ValueError) as exc:
        raise StartupFailure(
            exception_text=f"RuntimeError: specfleet emulator: invalid power state file {path}: {exc}",
        ) from exc
