#!/usr/bin/env python3
"""Benchmark (not a test): a no-change re-run of playbooks/prepare.yml, the way Ansible runs
roles out of the box against specfleet's, on lab units (EMULATED Jetsons; real SSH, Docker,
rsync).

For each N: bring the lab up with N units (workshop profile), converge once, then alternate
the three arms, ROUNDS of each, every one of which must report changed=0. Alternating spreads
any drift of the shared machine over the arms alike.

  defaults             Ansible's defaults (forks 5, no pipelining, Ansible's default ssh_args,
                       every fact gathered first: tests/bench/data/prepare_with_facts.yml) and
                       every task of every role on every run (specfleet_*_ask_first false):
                       the way a playbook of roles runs out of the box
  defaults, ask first  Ansible's defaults as above, the roles as shipped: each asks the unit
                       once whether it is already so (specfleet.fleet.unit_state) and stops
                       there when it is
  tuned                as shipped: the roles ask first, ansible.cfg as shipped (forks 30,
                       pipelining, ControlPersist 300 s, explicit gathering, the quiet console)

Prints a table (medians; wall and controller CPU, and CPU per unit) and writes
runs/bench/prepare_speed.json. Needs root; takes the lab down at the end. The last line reads
`prepare re-run N=16: defaults A s, tuned B s, ratio R` (R = A / B); the middle arm's line
before it says how much of R the roles' question makes and how much ansible.cfg.

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
# This tree's controller and collection, whatever checkout the venv's editable install names.
sys.path[:0] = [str(REPO), str(REPO / "collections")]

from specfleet_lab import lab  # noqa: E402
from specfleet_lab.config import LabConfig  # noqa: E402

ROUNDS = 2
DEFAULTS_ENV = {
    "ANSIBLE_FORKS": "5",
    "ANSIBLE_PIPELINING": "False",
    # Ansible's own default ssh_args (ControlPersist 60 s), replacing the tuned 300 s.
    "ANSIBLE_SSH_ARGS": "-C -o ControlMaster=auto -o ControlPersist=60s",
}
ASKING_ROLES = ("bootstrap", "docker", "tiktoken", "hf_cache", "image")
EVERY_TASK = json.dumps({f"specfleet_{role}_ask_first": False for role in ASKING_ROLES})
# arm: (playbook, environment, extra arguments)
ARMS = {
    "defaults": ("tests/bench/data/prepare_with_facts.yml", DEFAULTS_ENV, ["-e", EVERY_TASK]),
    "defaults, ask first": ("tests/bench/data/prepare_with_facts.yml", DEFAULTS_ENV, []),
    "tuned": ("playbooks/prepare.yml", {}, []),
}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_prepare(playbook: str, env: dict[str, str], extra: list[str]) -> tuple[float, float, str]:
    """(wall s, controller CPU s, output) of one run."""
    cpu, start = children_cpu(), time.monotonic()
    result = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "inventory/lab", playbook, *extra],
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
    # The inventory checks host keys: units a clean checkout's lab never had are collected
    # first, as an organiser does for a new fleet.
    subprocess.run([sys.executable, "-m", "specfleet.cli", "hostkeys", "-i", str(cfg.inventory_dir)],
                   check=True, capture_output=True, timeout=600)
    converge_wall, converge_cpu, _ = run_prepare(*ARMS["tuned"])
    samples: dict[str, list[tuple[float, float]]] = {arm: [] for arm in ARMS}
    for round_number in range(ROUNDS):
        for arm, (playbook, env, extra) in ARMS.items():
            wall, cpu, output = run_prepare(playbook, env, extra)
            changed = changed_total(output)
            if changed:
                raise SystemExit(f"N={units} {arm} re-run changed {changed} things: not a no-change re-run")
            samples[arm].append((wall, cpu))
            print(f"N={units} round {round_number + 1} {arm}: {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
    row = {"units": units, "converge_s": round(converge_wall, 1), "converge_cpu_s": round(converge_cpu, 1)}
    for arm, values in samples.items():
        row[arm] = {"wall_s": round(statistics.median(w for w, _ in values), 1),
                    "cpu_s": round(statistics.median(c for _, c in values), 1)}
        row[arm]["cpu_per_unit_s"] = round(row[arm]["cpu_s"] / units, 2)
    row["ratio"] = round(row["defaults"]["wall_s"] / row["tuned"]["wall_s"], 2)
    row["ratio_ask_first"] = round(row["defaults, ask first"]["wall_s"] / row["tuned"]["wall_s"], 2)
    return row


def main() -> None:
    sizes = [int(arg) for arg in sys.argv[1:]] or [60, 16]
    rows = [measure(units) for units in sizes]
    lab.down(LabConfig())
    out = REPO / "runs" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    (out / "prepare_speed.json").write_text(json.dumps(rows, indent=1))
    print(f"\nmedian of {ROUNDS} alternating no-change re-runs per arm (lab units are EMULATED Jetsons); "
          "wall s / controller CPU s / CPU s per unit")
    print("| units | converge (s) | " + " | ".join(ARMS) + " | ratio |")
    print("|---|---|" + "---|" * len(ARMS) + "---|")
    for row in rows:
        cells = " | ".join(f"{row[arm]['wall_s']} / {row[arm]['cpu_s']} / {row[arm]['cpu_per_unit_s']}" for arm in ARMS)
        print(f"| {row['units']} | {row['converge_s']} | {cells} | {row['ratio']} |")
    for row in sorted(rows, key=lambda r: r["units"] == 16):
        print(f"prepare re-run N={row['units']}: defaults, ask first {row['defaults, ask first']['wall_s']:.1f} s, "
              f"tuned {row['tuned']['wall_s']:.1f} s, ratio {row['ratio_ask_first']:.2f}")
        print(f"prepare re-run N={row['units']}: defaults {row['defaults']['wall_s']:.1f} s, "
              f"tuned {row['tuned']['wall_s']:.1f} s, ratio {row['ratio']:.2f}")

if __name__ == "__main__":
    main()
