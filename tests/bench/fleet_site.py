#!/usr/bin/env python3
"""Benchmark (not a test): the whole evening on a workshop-sized lab fleet of EMULATED units.

`specfleet lab up --units N --profile workshop`, then `ansible-playbook playbooks/site.yml`
(prepare + rollout with its canary waves, gates and report) exactly as a user runs it,
with ansible.cfg as shipped. Measures:

  wall        seconds of the site.yml run
  controller  CPU seconds of ansible-playbook and everything it ran on the controller (its
              forks, ssh, rsync): the children's rusage of this process
  machine     CPU seconds of the whole lab machine over the run (/proc/stat), units included
  peak memory the lab machine's peak used memory (MemTotal - MemAvailable, sampled each
              0.5 s) over the run, and its rise over the machine before the lab came up

Real SSH, Docker engines, rsync and HTTP; the Jetson identity and the CUDA vLLM are the
lab's emulations. Needs root; takes the lab down at the end. Writes runs/bench/fleet_site.json.
The last line reads `site.yml N=60: wall W s, controller CPU C s, peak memory P GiB, ...`.

    python tests/bench/fleet_site.py        # N = 60
    python tests/bench/fleet_site.py 16
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# This tree's controller and collection, whatever checkout the venv's editable install names.
sys.path[:0] = [str(REPO), str(REPO / "collections")]

from specfleet_lab import lab  # noqa: E402
from specfleet_lab.config import LabConfig  # noqa: E402

GIB = 1024**3


def used_memory() -> int:
    fields = {}
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            name, value = line.split(":", 1)
            fields[name] = int(value.split()[0]) * 1024
    return fields["MemTotal"] - fields["MemAvailable"]


def machine_cpu() -> float:
    with open("/proc/stat") as stat:
        ticks = [int(value) for value in stat.readline().split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class PeakMemory:
    """Samples used memory in a thread until stopped; keeps the peak."""

    def __init__(self) -> None:
        self.peak = used_memory()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.peak = max(self.peak, used_memory())

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


def measure(units: int) -> dict:
    cfg = LabConfig()
    lab.down(cfg)
    before_lab = used_memory()
    started = time.monotonic()
    lab.up(cfg, "workshop", units)
    up_s = time.monotonic() - started
    with tempfile.TemporaryDirectory(prefix="specfleet-site-") as runs:
        cpu, machine, start = children_cpu(), machine_cpu(), time.monotonic()
        with PeakMemory() as memory:
            result = subprocess.run(
                [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "inventory/lab", "playbooks/site.yml"],
                cwd=REPO, capture_output=True, text=True,
                env={**os.environ, "SPECFLEET_RUNS_DIR": runs, "ANSIBLE_NOCOLOR": "1"},
            )
        wall, controller, machine = time.monotonic() - start, children_cpu() - cpu, machine_cpu() - machine
        reports = sorted(Path(runs).glob("*/report.json"))
        summary = json.loads(reports[-1].read_text())["summary"] if reports else {}
    lab.down(cfg)
    return {
        "units": units,
        "rc": result.returncode,
        "lab_up_s": round(up_s, 1),
        "wall_s": round(wall, 1),
        "controller_cpu_s": round(controller, 1),
        "machine_cpu_s": round(machine, 1),
        "peak_used_gib": round(memory.peak / GIB, 2),
        "peak_rise_over_no_lab_gib": round((memory.peak - before_lab) / GIB, 2),
        "summary": {key: summary.get(key) for key in ("units", "kept", "reverted", "failed")},
        "tail": result.stdout[-2000:] if result.returncode not in (0, 2) else "",
    }


def main() -> None:
    units = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    figures = measure(units)
    out = REPO / "runs" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "fleet_site.json").write_text(json.dumps(figures, indent=1))
    print(json.dumps({key: value for key, value in figures.items() if key != "tail"}, indent=1))
    if figures["tail"]:
        print(figures["tail"])
    counts = "/".join(str(figures["summary"].get(decision)) for decision in ("kept", "reverted", "failed"))
    print(f"site.yml N={units}: wall {figures['wall_s']} s, controller CPU {figures['controller_cpu_s']} s, "
          f"peak memory {figures['peak_used_gib']} GiB (+{figures['peak_rise_over_no_lab_gib']} over no lab), "
          f"kept/reverted/failed {counts}, rc {figures['rc']}")


if __name__ == "__main__":
    main()
