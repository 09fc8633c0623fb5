#!/usr/bin/env python3
"""Benchmark (not a test): wall time and controller CPU time of a no-change re-run of
playbooks/prepare.yml on 8 and 60 lab units (EMULATED Jetsons; real SSH, Docker, rsync).

For each N: bring the lab up with N units (workshop profile), run prepare.yml once to
converge, then time a second run that must report changed=0 everywhere. Prints a table and
writes runs/bench/prepare_rerun.json. Needs root. Takes the lab down at the end.

    python tests/bench/prepare_rerun.py            # N = 8 and 60
    python tests/bench/prepare_rerun.py 8          # only N = 8
"""

from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from specfleet.lab import lab  # noqa: E402
from specfleet.lab.config import LabConfig  # noqa: E402


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def prepare() -> tuple[float, float, str]:
    """(wall s, controller CPU s, output) of one prepare.yml run."""
    cpu, start = children_cpu(), time.monotonic()
    result = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "inventory/lab", "playbooks/prepare.yml"],
        cwd=REPO, capture_output=True, text=True,
    )
    wall, used = time.monotonic() - start, children_cpu() - cpu
    if result.returncode != 0:
        raise SystemExit(f"prepare.yml failed:\n{result.stdout[-3000:]}")
    return wall, used, result.stdout


def changed_total(output: str) -> int:
    return sum(int(n) for n in re.findall(r"changed=(\d+)", output.split("PLAY RECAP")[-1]))


def main() -> None:
    sizes = [int(arg) for arg in sys.argv[1:]] or [8, 60]
    cfg = LabConfig()
    rows = []
    for units in sizes:
        lab.down(cfg)
        lab.up(cfg, "workshop", units)
        first_wall, first_cpu, _ = prepare()
        wall, cpu, output = prepare()
        rows.append({"units": units, "first_run_s": round(first_wall, 1), "first_run_cpu_s": round(first_cpu, 1),
                     "rerun_s": round(wall, 1), "rerun_cpu_s": round(cpu, 1), "rerun_changed": changed_total(output)})
        print(f"N={units}: converge {first_wall:.1f} s ({first_cpu:.1f} s CPU); "
              f"no-change re-run {wall:.1f} s wall, {cpu:.1f} s controller CPU, changed={rows[-1]['rerun_changed']}",
              flush=True)
    lab.down(cfg)
    out = REPO / "runs" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "prepare_rerun.json").write_text(json.dumps(rows, indent=1))
    print("\n| units | converge (s) | re-run wall (s) | re-run controller CPU (s) | re-run changed |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['units']} | {row['first_run_s']} | {row['rerun_s']} | "
              f"{row['rerun_cpu_s']} | {row['rerun_changed']} |")


if __name__ == "__main__":
    main()
