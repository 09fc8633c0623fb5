#!/usr/bin/env python3
"""Benchmark (not a test): the evening's critical path, N stock lab units from nothing to decided.

    python tests/bench/evening.py 16

Brings up N stock units of the workshop profile (Jetson AGX Thor, as flashed: login nvidia
with a sudo password, no Docker), collects their host keys, then runs as an organiser would
`ansible-playbook -i inventory/lab playbooks/prepare.yml playbooks/prewarm.yml playbooks/rollout.yml`
(bootstrap, Docker, payloads; the compile-cache pre-warm; the canaries and the waves, each
unit gated and kept or rolled back) with a benchmark-only callback (tests/bench/callbacks)
that records the timeline. Prints the wall time and controller CPU per phase and per wave.

Then projects the same plan onto real units (specfleet.evening): the figures in
tests/bench/data/evening_field.yml (link, controller, start times and decode rates per class,
each with its source), the payload sizes of the collection's catalog, the fan-out factor
measured by tests/bench/fanout.py (its last run at N=16 when there is one) and the
bootstrap's packages as the lab's mirror holds them. Prints the projected phases for
SPECFLEET_BENCH_REAL_UNITS (default 60) units, the total and the phase that bounds it.

Real SSH, apt, Docker engines, rsync and HTTP; the Jetson identity and the CUDA vLLM are the
lab's EMULATIONS. Needs root and a lab that is down; leaves it down. Writes
lab/build/bench/evening.json. The last line reads
`evening N=16: lab W s (bound by P); 60 real units projected H h MM min (bound by Q)`.
"""

from __future__ import annotations

import configparser
import dataclasses
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "bench"))  # the fan-out benchmark's report reader

import fanout as fanout_bench  # noqa: E402
from specfleet_lab import aptmirror, lab  # noqa: E402
from specfleet_lab.config import LabConfig  # noqa: E402

from specfleet import evening  # noqa: E402
from specfleet.catalog import load_catalog  # noqa: E402

FIELD = REPO / "tests" / "bench" / "data" / "evening_field.yml"
REAL_UNITS = int(os.environ.get("SPECFLEET_BENCH_REAL_UNITS", "60"))
GIB = 2**30


def say(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def ansible_forks() -> int:
    config = configparser.ConfigParser()
    config.read(REPO / "ansible.cfg")
    return config.getint("defaults", "forks", fallback=5)


def rollout_serial() -> list:
    """The waves play's default serial, as playbooks/rollout.yml writes it."""
    text = (REPO / "playbooks" / "rollout.yml").read_text()
    found = re.search(r"specfleet_rollout_serial \| default\((\[.*?\])\)", text)
    if not found:
        raise SystemExit("playbooks/rollout.yml: no default specfleet_rollout_serial found")
    return yaml.safe_load(found.group(1))


def package_bytes(cfg: LabConfig) -> int:
    """The bootstrap's packages: every .deb of the lab's LAN mirror (what a stock unit lacks)."""
    pool = aptmirror.www_dir(cfg) / "debian" / "pool"
    return sum(path.stat().st_size for path in pool.rglob("*.deb"))


def payload_sizes(units: list[dict], field: dict) -> dict[str, float]:
    """Bytes per unit of the models phase (target and draft) and the image phase, for the
    plan the lab served, from the catalog (and the field table for images it gives no size)."""
    catalog = load_catalog()
    models, image = 0.0, 0.0
    for unit in units:
        draft = (unit.get("resolved_speculative_config") or {}).get("model")
        repos = {unit["model"], *([draft] if draft else [])}
        models = max(models, sum((catalog.artifact_gib(r) or 0.0) * GIB for r in repos))
        ref = unit["image"].split("/", 1)[1] if re.match(r"^[\d.]+:\d+/", unit["image"]) else unit["image"]
        size = next((i.size_gib * GIB for i in catalog.images if i.ref == ref and i.size_gib), None)
        if size is None:
            size = next((i["size_gb"] * 1e9 for i in field["images"] if i["match"] in ref), None)
        if size is None:
            raise SystemExit(f"{FIELD}: images: no size for {ref} (neither specfleet/data/images.yml nor this table)")
        image = max(image, size)
    return {"models": models, "image": image}


def bench_scale(units: list[dict], field: dict) -> dict[str, float]:
    """Per lab host: the real unit's TPOT over the lab's (its baseline, first workload, c=1)."""
    scale = {}
    for unit in units:
        baseline = (unit.get("baseline") or {}).get("results") or {}
        lab_tpot = next((w["c1"]["tpot_ms"]["p50"] for w in baseline.values() if w.get("c1")), None)
        figures = field["classes"].get(unit["device_class"])
        if lab_tpot is None:
            continue
        if not figures or unit["model"] not in figures["decode_tok_s"]:
            raise SystemExit(f"{FIELD}: classes.{unit['device_class']}.decode_tok_s has no figure for {unit['model']}")
        scale[unit["host"]] = 1000.0 / figures["decode_tok_s"][unit["model"]] / lab_tpot
    return scale


def start_seconds(units: list[dict], field: dict) -> tuple[float, float]:
    """(cold, warm) container start of the slowest class the lab's units were."""
    classes = {unit["device_class"] for unit in units}
    missing = sorted(c for c in classes if c not in field["classes"])
    if missing:
        raise SystemExit(f"{FIELD}: classes has no figures for {', '.join(missing)}")
    return (max(field["classes"][c]["start_cold_s"] for c in classes),
            max(field["classes"][c]["start_warm_s"] for c in classes))


def fanout_16(field: dict) -> tuple[float, int, str]:
    """F at 16 units and the pieces it was measured with: tests/bench/fanout.py's last run
    when there is one, else the field table's figure."""
    found = fanout_bench.measured(16)
    if found:
        return found["s_over_b"], found["pieces"], found["source"]
    network = field["network"]
    return network["fanout_s_over_b_16"], network["fanout_pieces"], network["fanout_source"]


def run_evening(cfg: LabConfig, work: Path) -> tuple[list[dict], dict, int, float]:
    timeline = work / "timeline.json"
    env = {
        **os.environ,
        "SPECFLEET_RUNS_DIR": str(work / "runs"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_CALLBACK_PLUGINS": str(REPO / "tests" / "bench" / "callbacks"),
        "ANSIBLE_CALLBACKS_ENABLED": "specfleet.fleet.specfleet_summary,bench_timeline",
        "SPECFLEET_BENCH_TIMELINE": str(timeline),
        "SPECFLEET_BENCH_TIMED_ACTIONS": ",".join(evening.TIMED_ACTIONS),
    }
    argv = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(cfg.inventory_dir),
            "-e", f"specfleet_compile_cache_store={work / 'store'}",
            "playbooks/prepare.yml", "playbooks/prewarm.yml", "playbooks/rollout.yml"]
    say("ansible-playbook prepare.yml prewarm.yml rollout.yml ...")
    started = time.monotonic()
    result = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    (work / "output.txt").write_text(result.stdout + result.stderr)
    if not timeline.exists():
        raise SystemExit(f"no timeline written (rc {result.returncode}):\n{(result.stdout + result.stderr)[-3000:]}")
    reports = sorted((work / "runs").glob("*/report.json"))
    if not reports:
        raise SystemExit(f"no fleet report (rc {result.returncode}):\n{result.stdout[-3000:]}")
    return json.loads(timeline.read_text()), json.loads(reports[-1].read_text()), result.returncode, wall


def main() -> int:
    if os.geteuid() != 0:
        print("the benchmark needs root (it brings up the lab)", file=sys.stderr)
        return 2
    units = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    cfg = LabConfig()
    if lab.status(cfg)["lab"] != "down":
        print("a lab is up; run `specfleet lab down` first (this benchmark needs its own)", file=sys.stderr)
        return 2
    field = yaml.safe_load(FIELD.read_text())
    work = Path(tempfile.mkdtemp(prefix="sf-bench-evening-"))
    try:
        say(f"lab up: {units} stock units (workshop profile)")
        started = time.monotonic()
        lab.up(cfg, "workshop", units, stock=True, say=lambda m: None)
        lab_up_s = time.monotonic() - started
        subprocess.run([sys.executable, "-m", "specfleet.cli", "hostkeys", "-i", str(cfg.inventory_dir)],
                       check=True, capture_output=True, timeout=600, cwd=REPO)
        packages = package_bytes(cfg)
        events, report, rc, wall = run_evening(cfg, work)
    finally:
        if lab.status(cfg)["lab"] != "down":
            say("lab down")
            lab.down(cfg)

    phases = evening.phases(events)
    report_units = report["units"] if isinstance(report["units"], list) else list(report["units"].values())
    summary = report["summary"]
    f16, f16_pieces, f16_source = fanout_16(field)
    cold, warm = start_seconds(report_units, field)
    canaries = next((len(p.timed_hosts()) for p in phases if p.name == evening.CANARY_PHASE), 0)
    real = evening.Real(
        units=REAL_UNITS, forks=ansible_forks(), controller_cores=field["controller"]["cores"],
        link_bytes_s=field["network"]["link_gbit"] * 1e9 / 8, fanout_16=f16,
        fanout_pieces=f16_pieces, payload_bytes=payload_sizes(report_units, field),
        package_bytes=packages, start_cold_s=cold,
        start_warm_s=warm, bench_scale=bench_scale(report_units, field),
        serial=rollout_serial(), canaries=canaries)
    rows = evening.project(phases, units, real)
    total, longest = evening.critical(rows)
    # The same plan with one setting changed: what would shorten the evening.
    waves = [r["units"] for r in rows if r["phase"].startswith("wave ") and r["phase"] != evening.CANARY_PHASE]
    variants = {
        f"forks = {max(waves)} (ansible.cfg has {real.forks}): the largest wave in one round":
            dataclasses.replace(real, forks=max(waves)),
        "specfleet_rollout_serial [1, '25%', '100%'] (one wave fewer)":
            dataclasses.replace(real, serial=[1, "25%", "100%"]),
    }
    shorter = {label: evening.critical(evening.project(phases, units, variant))[0]
               for label, variant in variants.items()}
    lab_longest = max(phases, key=lambda p: p.wall_s)

    out = REPO / "lab" / "build" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"), "host": platform.node(), "cpus": os.cpu_count(),
        "units": units, "rc": rc, "lab_up_s": round(lab_up_s, 1), "wall_s": round(wall, 1),
        "decisions": {k: summary.get(k) for k in ("units", "kept", "reverted", "failed")},
        "phases": [{"phase": p.name, "kind": p.kind, "wall_s": round(p.wall_s, 1),
                    "controller_cpu_s": round(p.cpu_s, 1), "units": len(p.hosts),
                    "starts_and_benchmarks_s": round(p.timed_wall(), 1)} for p in phases],
        "real": {"units": REAL_UNITS, "fanout_s_over_b_16": f16, "fanout_source": f16_source,
                 "payload_bytes": dict(real.payload_bytes), "package_bytes": packages,
                 "bench_scale": {h: round(v, 2) for h, v in real.bench_scale.items()}},
        "projection": [{**r, "seconds": round(r["seconds"], 1)} for r in rows],
        "projected_total_s": round(total, 1),
        "shorter": {label: round(seconds, 1) for label, seconds in shorter.items()},
    }
    (out / "evening.json").write_text(json.dumps(record, indent=1) + "\n")

    print(f"lab: {units} stock units (workshop: Jetson AGX Thor, EMULATED), lab up {lab_up_s:.0f} s (not counted); "
          f"ansible-playbook rc {rc}; kept/reverted/failed "
          f"{summary.get('kept')}/{summary.get('reverted')}/{summary.get('failed')}")
    print(f"{'phase':<22} {'wall s':>8} {'ctl CPU s':>10} {'units':>6} {'starts+bench s':>15}")
    for p in phases:
        print(f"{p.name:<22} {p.wall_s:>8.1f} {p.cpu_s:>10.1f} {len(p.hosts):>6} {p.timed_wall():>15.1f}")
    print(f"{'total':<22} {sum(p.wall_s for p in phases):>8.1f} {sum(p.cpu_s for p in phases):>10.1f}")
    print()
    print(f"projected: {REAL_UNITS} real units; link {field['network']['link_gbit']} Gbit/s; fan-out "
          f"{f16:.2f} S/B at 16 ({f16_source}); models {real.payload_bytes['models'] / 1e9:.1f} GB, image "
          f"{real.payload_bytes['image'] / 1e9:.1f} GB per unit; packages {packages / 1e6:.0f} MB; start cold "
          f"{real.start_cold_s:.0f} s / warm {real.start_warm_s:.0f} s; benchmark blocks x"
          f"{min(real.bench_scale.values(), default=1):.1f}..{max(real.bench_scale.values(), default=1):.1f} "
          f"(real TPOT over the lab's)")
    print(f"{'phase':<22} {'units':>6} {'seconds':>9}  bound")
    for r in rows:
        print(f"{r['phase']:<22} {r['units']:>6} {r['seconds']:>9.0f}  {r['bound']}")
    print(f"{'total':<22} {REAL_UNITS:>6} {total:>9.0f}  ({total / 3600:.1f} h)")
    for label, seconds in shorter.items():
        print(f"  with {label}: {seconds / 3600:.1f} h")
    hours, minutes = divmod(round(total / 60), 60)
    print(f"evening N={units}: lab {wall:.0f} s (bound by {lab_longest.name}); {REAL_UNITS} real units projected "
          f"{hours} h {minutes:02d} min (bound by {longest['phase']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
