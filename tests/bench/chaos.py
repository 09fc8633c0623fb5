#!/usr/bin/env python3
"""Benchmark (not a test): kill the controller anywhere in site.yml, re-run, and check the fleet.

On a 3-unit lab of EMULATED units (thor-01, agxorin-jp6-01, agxorin-jp72-01; real SSH, Docker
engines, rsync and HTTP; the Jetson identity and the CUDA vLLM are the lab's emulations):

1. A first run of `ansible-playbook playbooks/site.yml` gives every unit its caches and a
   known-good serving; a second, as the rounds run it, times a full run (T).
2. Each of N rounds (seeded): truncate one file of a live model on one unit (so prepare repairs
   that cache), start site.yml with specfleet_rollout_remeasure=true (so the rollout starts,
   measures and decides again), and SIGKILL the controller at a random moment in (0, T): its
   ansible-playbook process group and the SSH connection masters it left (a laptop losing
   power). Then run site.yml again, as a user would, and check:
   - it ends without failure (rc 0);
   - every unit runs its release record's known-good, as its dockerd runs it (image and command
     line), and no trial is left open;
   - every live model on every unit is its controller manifest, byte for byte (no cache
     half-replaced);
   - no fleet key (specfleet_fanout) in any unit's authorized_keys or ~/.ssh.
   Each round prints the kill point (seconds, the task running) and what did not hold.

Needs root; brings up its own lab (taking down one that is up) and takes it down at the end.
Writes runs/bench/chaos.json. Never passes or fails; the last line reads `chaos: R/N recovered`.

    python tests/bench/chaos.py 20             # seed 1
    python tests/bench/chaos.py 5 --seed 7
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# This tree's controller and collection, whatever checkout the venv's editable install names.
sys.path[:0] = [str(REPO), str(REPO / "collections")]

from specfleet_lab import lab  # noqa: E402
from specfleet_lab.config import LabConfig  # noqa: E402

from tests.conftest import FLEET_PROBE, LAB_INVENTORY, fleet_leftovers, on_unit, trust_lab_host_keys  # noqa: E402
from tests.integration.test_fault_matrix_lab import (  # noqa: E402
    HF_HUB,
    RELEASE,
    assert_serves_known_good,
    verify_live_caches,
)

UNITS = ("thor-01", "agxorin-jp6-01", "agxorin-jp72-01")
PLAYBOOK = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(LAB_INVENTORY), "playbooks/site.yml"]
REMEASURE = ["-e", "specfleet_rollout_remeasure=true"]


def site(*extra: str, log: Path, runs: Path) -> subprocess.Popen:
    """site.yml in a process group of its own (so the kill takes every fork and ssh with it)."""
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "SPECFLEET_RUNS_DIR": str(runs)}
    with open(log, "w") as out:
        return subprocess.Popen([*PLAYBOOK, *extra], cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def ssh_masters() -> list[int]:
    """The SSH connection masters Ansible's runs left behind (ControlPersist detaches them)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"ssh") and any(word.startswith(b"ControlPersist") for word in argv):
            found.append(int(proc.name))
    return found


def kill_controller(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    for pid in ssh_masters():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def last_task(log: Path) -> str:
    tasks = re.findall(r"^TASK \[(.+?)\]", log.read_text(errors="replace"), re.MULTILINE)
    return tasks[-1] if tasks else "(before the first task)"


def corrupt_a_cache_file(rng: random.Random) -> str:
    """Truncate one blob of a live model on one unit: prepare must repair it, never half."""
    unit = rng.choice(UNITS)
    # -L: each live model is a link to its verified version (cache_store's layout).
    blobs = on_unit(unit, f"find -L {HF_HUB} -path '*/blobs/*' -type f -size +0 | sort").stdout.split()
    blob = rng.choice(blobs)
    on_unit(unit, f"truncate -s 100 {blob}")
    return f"{unit}:{blob.rsplit('/', 3)[-3]}"


def problems_after_recovery(rc: int, log: Path) -> list[str]:
    problems = [] if rc == 0 else [f"the re-run ended with rc {rc}: {last_task(log)}"]
    for unit in UNITS:
        release = json.loads(on_unit(unit, f"cat {RELEASE}").stdout or "{}")
        if release.get("trial"):
            problems.append(f"{unit}: the record still holds a trial ({release['trial'].get('run_id')})")
        if release.get("known_good"):
            try:
                assert_serves_known_good(unit, release)
            except AssertionError as exc:
                problems.append(f"{unit}: {str(exc).splitlines()[0]}")
        else:
            problems.append(f"{unit}: no known-good in its record")
        try:
            verify_live_caches(unit)
        except AssertionError as exc:
            problems.append(f"{unit}: {str(exc).splitlines()[0]}")
        left = fleet_leftovers(on_unit(unit, FLEET_PROBE).stdout)
        if left:
            problems.append(f"{unit}: fleet key left: {left}")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("rounds", type=int)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    cfg = LabConfig()
    work = REPO / "runs" / "bench" / "chaos"
    work.mkdir(parents=True, exist_ok=True)
    runs = work / "runs"
    lab.down(cfg)
    lab.up(cfg, "mixed", len(UNITS))
    rows = []
    try:
        trust_lab_host_keys()
        # The first run lays down the caches and the known-goods; the second, as every round
        # runs it, times a round (the kills are drawn within it).
        for name in ("first", "reference"):
            started = time.monotonic()
            rc = site(*REMEASURE, log=work / f"{name}.log", runs=runs).wait()
            full_s = time.monotonic() - started
            print(f"{name} site.yml (remeasure): {full_s:.0f} s, rc {rc}", flush=True)
            if rc != 0:
                raise SystemExit(f"the {name} run failed; see {work / f'{name}.log'}")
        for number in range(1, args.rounds + 1):
            corrupted = corrupt_a_cache_file(rng)
            at = rng.uniform(0.02, 0.98) * full_s
            killed_log, rerun_log = work / f"round{number}-killed.log", work / f"round{number}-rerun.log"
            process = site(*REMEASURE, log=killed_log, runs=runs)
            try:
                process.wait(timeout=at)
                finished_first = True
            except subprocess.TimeoutExpired:
                kill_controller(process)
                finished_first = False
            task = last_task(killed_log)
            rerun = site(log=rerun_log, runs=runs)
            problems = problems_after_recovery(rerun.wait(), rerun_log)
            row = {"round": number, "kill_s": round(at, 1), "task": task, "corrupted": corrupted,
                   "ran_to_end": finished_first, "recovered": not problems, "problems": problems}
            rows.append(row)
            print(f"round {number:2d}: kill at {at:5.0f} s during \"{task}\" ({corrupted}): "
                  f"{'recovered' if not problems else 'NOT recovered: ' + '; '.join(problems)}", flush=True)
    finally:
        lab.down(cfg)
        (work.parent / "chaos.json").write_text(json.dumps({"seed": args.seed, "rounds": rows}, indent=1))
    recovered = sum(row["recovered"] for row in rows)
    print(f"chaos: {recovered}/{args.rounds} recovered")


if __name__ == "__main__":
    main()
