#!/usr/bin/env python3
"""Benchmark (not a test): a no-change re-run of playbooks/prepare.yml, Ansible's defaults
against specfleet's tuned ansible.cfg, on lab units (EMULATED Jetsons; real SSH, Docker, rsync).

For each N: bring the lab up with N units (workshop profile), converge once, then alternate
A (defaults) and B (tuned) re-runs, ROUNDS of each, every one of which must report changed=0.
Alternating spreads any drift of the shared machine over both arms alike.

  A  forks 5, no pipelining, Ansible's default ssh_args, every fact gathered first
     (tests/bench/data/prepare_with_facts.yml): what ansible-playbook does out of the box
  B  ansible.cfg as shipped: forks 30, pipelining, ControlPersist 300 s, explicit gathering
     (the roles read only jetson_facts), the summary callback

Prints a table (medians; wall and controller CPU) and writes runs/bench/prepare_speed.json.
Needs root; takes the lab down at the end. The last line reads
`prepare re-run N=16: defaults A s, tuned B s, ratio R`.

    python tests/bench/prepare_speed.py            # N = 60, then 16
    python tests/bench/prepare_speed.py 16         # only N = 16
"""

from __future__ import annotations

import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from specfleet_lab import lab  # noqa: E402
from specfleet_lab.config import LabConfig  # noqa: E402

ROUNDS = 2
DEFAULTS_ENV = {
    "ANSIBLE_FORKS": "5",
    "ANSIBLE_PIPELINING": "False",
    # Ansible's own default ssh_args (ControlPersist 60 s), replacing the tuned 300 s.
    "ANSIBLE_SSH_ARGS": "-C -o ControlMaster=auto -o ControlPersist=60s",
}
ARMS = {
    "defaults": ("tests/bench/data/prepare_with_facts.yml", DEFAULTS_ENV),
    "tuned": ("playbooks/prepare.yml", {}),
}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_prepare(playbook: str, env: dict[str, str]) -> tuple[float, float, str]:
    """(wall s, controller CPU s, output) of one run."""
    cpu, start = children_cpu(), time.monotonic()
    result = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "inventory/lab", playbook],
        cwd=REPO, capture_output=True, text=True, env={**os.environ, **env},
    )
    wall, used = time.monotonic() - start, children_cpu() - cpu
    if result.returncode != 0:
        raise SystemExit(f"{playbook} failed:\n{result.stdout[-3000:]}")
    return wall, used, result.stdout


def changed_total(output: str) -> int:
    return sum(int(n) for n in re.findall(r"changed=(\d+)", output.split("PLAY RECAP")[-1]))


def measure(units: int) -> dict:
    cfg = LabConfig()
    lab.down(cfg)
    lab.up(cfg, "workshop", units)
    converge_wall, converge_cpu, _ = run_prepare(*ARMS["tuned"])
    samples: dict[str, list[tuple[float, float]]] = {arm: [] for arm in ARMS}
    for round_number in range(ROUNDS):
        for arm, (playbook, env) in ARMS.items():
            wall, cpu, output = run_prepare(playbook, env)
            changed = changed_total(output)
            if changed:
                raise SystemExit(f"N={units} {arm} re-run changed {changed} things: not a no-change re-run")
            samples[arm].append((wall, cpu))
            print(f"N={units} round {round_number + 1} {arm}: {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
    row = {"units": units, "converge_s": round(converge_wall, 1), "converge_cpu_s": round(converge_cpu, 1)}
    for arm, values in samples.items():
        row[f"{arm}_s"] = round(statistics.median(w for w, _ in values), 1)
        row[f"{arm}_cpu_s"] = round(statistics.median(c for _, c in values), 1)
    row["ratio"] = round(row["defaults_s"] / row["tuned_s"], 2)
    return row


def main() -> None:
    sizes = [int(arg) for arg in sys.argv[1:]] or [60, 16]
    rows = [measure(units) for units in sizes]
    lab.down(LabConfig())
    out = REPO / "runs" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "prepare_speed.json").write_text(json.dumps(rows, indent=1))
    print(f"\nmedian of {ROUNDS} alternating no-change re-runs per arm (lab units are EMULATED Jetsons)")
    print("| units | converge (s) | defaults wall (s) | defaults CPU (s) | tuned wall (s) | tuned CPU (s) | ratio |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['units']} | {row['converge_s']} | {row['defaults_s']} | {row['defaults_cpu_s']} | "
              f"{row['tuned_s']} | {row['tuned_cpu_s']} | {row['ratio']} |")
    for row in sorted(rows, key=lambda r: r["units"] == 16):
        print(f"prepare re-run N={row['units']}: defaults {row['defaults_s']:.1f} s, "
              f"tuned {row['tuned_s']:.1f} s, ratio {row['ratio']:.2f}")


if __name__ == "__main__":
    main()
