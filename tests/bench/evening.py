#!/usr/bin/env python3
"""Benchmark (not a test): the evening's critical path, N stock lab units from nothing to decided.

    python tests/bench/evening.py 16
    python tests/bench/evening.py --replay <work dir>/run.json   (project a saved run again)

Brings up N stock units of the workshop profile (Jetson AGX Thor, as flashed: login nvidia
with a sudo password, no Docker), collects their host keys, then runs as an organiser would
`ansible-playbook -i inventory/lab playbooks/prepare.yml playbooks/prewarm.yml playbooks/rollout.yml`
(bootstrap, Docker, payloads; the compile-cache pre-warm; each key's canary, then every other
unit, each gated and kept or rolled back) with a benchmark-only callback (tests/bench/callbacks)
that records the timeline. Prints the wall time and controller CPU per phase.

Then projects the same plan onto real units (evening_model.py beside it), for this tree's design and for
main's before issue 37 (evening_model.BEFORE): the prepare phases from the lab's control
time, the payload sizes of the collection's catalog, the fan-out factor measured by
tests/bench/fanout.py (its last run at N=16 when there is one) and the bootstrap's packages as
the lab's mirror holds them; each measuring unit's decision from what it sends with the event
inventory's own bench settings (SPECFLEET_BENCH_EVENT_INVENTORY, default inventory/workshop) at
a real unit's speed and start time, over as many blocks as decisions simulated at the field's
speedup took (tests/bench/gate_accuracy.py's units and field noise). The real figures are in
tests/bench/data/evening_field.yml, each with its source. Prints the per-unit budget (starts,
blocks, requests, tokens, seconds at the first look, the median, the 90th percentile and the
most), the distribution of looks, the projected phases for SPECFLEET_BENCH_REAL_UNITS (default
60) units, what the next steps and the gate's budget would take off, and the total.

Real SSH, apt, Docker engines, rsync and HTTP; the Jetson identity and the CUDA vLLM are the
lab's EMULATIONS. Needs root and a lab that is down; leaves it down. Writes
lab/build/bench/evening.json and, in its work directory, run.json. The last line reads
`evening N=16: lab W s (bound by P); 60 real units projected H h MM min (bound by Q)`.
"""

from __future__ import annotations

import argparse
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
# This tree's controller and collection, whatever checkout the venv's editable install names.
sys.path[:0] = [str(REPO), str(REPO / "collections")]
sys.path.insert(0, str(REPO / "tests" / "bench"))  # the fan-out benchmark's report reader

import evening_model as evening  # noqa: E402
import fanout as fanout_bench  # noqa: E402
import gate_accuracy  # noqa: E402
from ansible_collections.specfleet.fleet.plugins.module_utils import jetson_identity  # noqa: E402
from specfleet_lab import aptmirror, lab  # noqa: E402
from specfleet_lab.config import LabConfig  # noqa: E402

from specfleet.catalog import load_catalog  # noqa: E402
from specfleet.plan import plan_unit  # noqa: E402
from specfleet.policy import merge as merge_policy  # noqa: E402
from specfleet.policy import resolve as resolve_policy  # noqa: E402
from specfleet.policy import variable_names  # noqa: E402

prompts = sys.modules["ansible_collections.specfleet.fleet.plugins.module_utils.spec_bench_prompts"]

FIELD = REPO / "tests" / "bench" / "data" / "evening_field.yml"
# The inventory whose bench settings the projection uses: the event's own.
EVENT_INVENTORY = Path(os.environ.get("SPECFLEET_BENCH_EVENT_INVENTORY", REPO / "inventory" / "workshop"))
REAL_UNITS = int(os.environ.get("SPECFLEET_BENCH_REAL_UNITS", "60"))
GIB = 2**30


def say(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def ansible_forks() -> int:
    config = configparser.ConfigParser()
    config.read(REPO / "ansible.cfg")
    return config.getint("defaults", "forks", fallback=5)


def rollout_serial() -> list:
    """The measuring play's default serial, as playbooks/rollout.yml writes it."""
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


def rollout_bench_defaults() -> dict[str, int]:
    """The rollout's spec_bench defaults (playbooks/rollout.yml's module_defaults)."""
    text = (REPO / "playbooks" / "rollout.yml").read_text()
    values = {name: int(default) for name, default in
              re.findall(r"specfleet_bench_(\w+) \| default\((\d+)\)", text)}
    missing = sorted({"warmups", "repetitions", "requests", "output_check", "max_tokens"} - set(values))
    if missing:
        raise SystemExit(f"playbooks/rollout.yml: no specfleet_bench_* default for {', '.join(missing)}")
    return values


def inventory_values(inventory: Path, prefix: str) -> dict:
    """The event inventory's group_vars whose names start with ``prefix``."""
    found = {}
    for path in sorted((inventory / "group_vars").rglob("*.yml")):
        found.update({name: value for name, value in (yaml.safe_load(path.read_text()) or {}).items()
                      if name.startswith(prefix)})
    return found


def event_bench(inventory: Path, workloads: list[str], design: evening.Design) -> evening.Bench:
    """What each block sends on the event: the rollout play's spec_bench defaults (the
    design's output tokens), with the event inventory's specfleet_bench_* values in their place,
    and the shipped prompt sets' sizes."""
    values = {**rollout_bench_defaults(), "max_tokens": design.max_tokens}
    for name, value in inventory_values(inventory, "specfleet_bench_").items():
        if name.removeprefix("specfleet_bench_") in values:
            values[name.removeprefix("specfleet_bench_")] = int(value)
    return evening.Bench(set_sizes={w: len(prompts.entries(w)) for w in workloads}, **values)


def event_speed(units: list[dict], field: dict) -> tuple[evening.Speed, evening.Starts, str]:
    """A real unit serving the plan the lab served (its class and model), from the field table:
    the slowest of the lab units' classes and models."""
    found = []
    for unit in units:
        figures = field["classes"].get(unit["device_class"])
        if not figures:
            raise SystemExit(f"{FIELD}: classes has no figures for {unit['device_class']}")
        rates = figures["decode_tok_s"].get(unit["model"])
        if rates is None:
            raise SystemExit(f"{FIELD}: classes.{unit['device_class']}.decode_tok_s has no figure for {unit['model']}")
        speed = evening.Speed(tpot_ms={1: 1000.0 / rates["c1"], 8: 8000.0 / rates["c8"]},
                              ttft_ms={1: figures["ttft_ms"]["c1"], 8: figures["ttft_ms"]["c8"]},
                              speedup={1: figures["speedup"]["c1"], 8: figures["speedup"]["c8"]})
        starts = evening.Starts(figures["start_warm_s"], figures["start_compile_s"], figures["start_jit_s"])
        found.append((speed.tpot_ms[1], speed, starts, f"{unit['device_class']}, {unit['model']}"))
    if not found:
        raise SystemExit("the fleet report has no unit to project")
    _, speed, starts, what = max(found, key=lambda entry: entry[0])
    return speed, starts, what


# A real unit of each class: the facts tests/fixtures/units keeps as read from one.
CLASS_FIXTURES = {"thor": "thor-r38", "agx_orin": "agx-orin-64gb-r39", "orin_nx": "orin-nx-16gb-r36",
                  "orin_nano": "orin-nano-8gb-r36", "dgx_spark": "dgx-spark"}


def side_by_side(what: str, inventory: Path) -> bool:
    """Whether the plan measures the candidate beside the baseline on a real unit of the
    projected class and model (``what``: "class, model") under the event inventory's policy."""
    device_class, model = what.split(", ", 1)
    facts = jetson_identity.read_unit(jetson_identity.paths_under(
        str(REPO / "tests" / "fixtures" / "units" / CLASS_FIXTURES[device_class])))
    catalog = load_catalog()
    names = set(variable_names())
    policy = resolve_policy({**{name: value for name, value in inventory_values(inventory, "specfleet_").items()
                                if name in names}, "specfleet_model": model}, catalog)
    return plan_unit(f"a {device_class} unit", facts, catalog.model(model), policy, catalog)["side_by_side"] is not None


def event_policy(inventory: Path) -> dict:
    """The gate's policy on the event: the shipped one with the event inventory's own values."""
    return merge_policy(inventory_values(inventory, "specfleet_gate_"))


def simulated_decisions(speed: evening.Speed, looks: dict, policy: dict) -> list[tuple[int, bool]]:
    """(blocks, kept) of decisions simulated at the field's speedup, under the calibration
    benchmark's field noise and ``policy`` (tests/bench/gate_accuracy.py)."""
    noise = next(model for model in gate_accuracy.MODELS if model.name == "field")
    generator = gate_accuracy.random.Random(f"evening-{looks['seed']}-{speed.speedup[1]}")
    decisions = []
    for _ in range(looks["decisions"]):
        unit = gate_accuracy.Unit(noise, speed.speedup[1], speed.speedup[8], generator)
        kept, blocks = gate_accuracy.rollout(unit, policy)
        decisions.append((blocks, kept))
    return decisions


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


def lab_evening(units: int, work: Path) -> dict:
    """Bring up ``units`` stock lab units, run the evening on them, take the lab down; what the
    projection reads of the run (also written to ``work``/run.json for ``--replay``)."""
    cfg = LabConfig()
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
    run = {"units": units, "lab_up_s": lab_up_s, "packages": packages, "events": events, "report": report,
           "rc": rc, "wall": wall}
    (work / "run.json").write_text(json.dumps(run) + "\n")
    return run


def budget_row(label: str, budget: evening.Budget) -> str:
    work = budget.work
    return (f"  {label:<24} {budget.starts:>6} {budget.blocks:>6} {work.requests:>8} {work.tokens:>8} "
            f"{work.seconds:>8.0f}  ({budget.start_seconds:.0f} s of it starting)")


def print_budgets(designs: dict[str, evening.Real], what: str, inventory: Path) -> None:
    """Per design, the budget of a unit deciding at the first look, at the median, the 90th
    percentile and the most blocks the simulated decisions took (the same decisions)."""
    real = designs[evening.DESIGN.name]
    speed = real.speed
    print(f"per unit, with {inventory.relative_to(REPO)}'s bench settings; {what}: TPOT "
          f"{speed.tpot_ms[1]:.1f} / {speed.tpot_ms[8]:.1f} ms, TTFT {speed.ttft_ms[1]:.0f} / "
          f"{speed.ttft_ms[8]:.0f} ms at c=1 / c=8, candidate {speed.speedup[1]:.2f}x / {speed.speedup[8]:.2f}x; start "
          f"{real.starts.warm_s:.0f} s warm, +{real.starts.jit_s:.0f} s JIT, +{real.starts.compile_s:.0f} s compile")
    blocks = sorted(b for b, _ in real.decisions)
    counts = {b: blocks.count(b) for b in sorted(set(blocks))}
    kept = sum(1 for _, k in real.decisions if k)
    print(f"looks: {len(blocks)} decisions simulated at {speed.speedup[1]:.2f}x (field noise), kept {kept}; blocks "
          + ", ".join(f"{b}: {100 * n / len(blocks):.0f}%" for b, n in counts.items()))
    marks = {"first look": 3, "median": blocks[len(blocks) // 2], "90th percentile": blocks[int(0.9 * len(blocks))],
             "most": blocks[-1]}
    for name, variant in designs.items():
        bench = variant.bench
        sizes = "+".join(str(size) for size in bench.set_sizes.values())
        print(f"{name}: a block sends {sizes} prompts ({'+'.join(bench.set_sizes)}) at "
              f"c={','.join(map(str, bench.concurrency))}, {bench.requests or 'the set size'} requests a run, "
              f"{bench.max_tokens} tokens at most, {bench.warmups} warm-up, output check {bench.output_check} "
              f"{'every block' if variant.design.check_every_block else 'once per serving'}; "
              f"{'a restart per block' if variant.design.restart_per_block else 'both servings side by side'}")
        print(f"  {'':<24} {'starts':>6} {'blocks':>6} {'requests':>8} {'tokens':>8} {'seconds':>8}")
        for label, count in marks.items():
            budget = evening.unit_budget(variant.design, bench, speed, variant.starts, count,
                                         kept=kept * 2 >= len(blocks))
            print(budget_row(f"{label} ({count} blocks)", budget))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("units", nargs="?", type=int, default=16)
    parser.add_argument("--replay", type=Path, help="project a run.json an earlier run left instead of running")
    args = parser.parse_args()
    field = yaml.safe_load(FIELD.read_text())
    if args.replay:
        run = json.loads(args.replay.read_text())
    else:
        if os.geteuid() != 0:
            print("the benchmark needs root (it brings up the lab)", file=sys.stderr)
            return 2
        if lab.status(LabConfig())["lab"] != "down":
            print("a lab is up; run `specfleet lab down` first (this benchmark needs its own)", file=sys.stderr)
            return 2
        run = lab_evening(args.units, Path(tempfile.mkdtemp(prefix="sf-bench-evening-")))
    units, wall, rc, packages = run["units"], run["wall"], run["rc"], run["packages"]
    phases = evening.phases(run["events"])
    report = run["report"]
    report_units = report["units"] if isinstance(report["units"], list) else list(report["units"].values())
    summary = report["summary"]
    f16, f16_pieces, f16_source = fanout_16(field)
    speed, starts, what = event_speed(report_units, field)
    policy = event_policy(EVENT_INVENTORY)
    workloads = list(policy["specfleet_gate_workloads"])
    # Keys whose canary swept its draft length (its record lists each k measured).
    canaries = sum(1 for unit in report_units if (unit.get("sweep") or {}).get("measured"))
    real = evening.Real(
        units=REAL_UNITS, controller_cores=field["controller"]["cores"],
        link_bytes_s=field["network"]["link_gbit"] * 1e9 / 8, fanout_16=f16,
        fanout_pieces=f16_pieces, payload_bytes=payload_sizes(report_units, field),
        package_bytes=packages, starts=starts, bench=event_bench(EVENT_INVENTORY, workloads, evening.DESIGN),
        speed=speed,
        decisions=simulated_decisions(speed, field["looks"], policy), canaries=canaries,
        # The report does not carry a unit's memory, the key's fifth factor: units of one class
        # alike (the workshop's) are one key.
        keys=len({(u["device_class"], u["model"], u["method"], u["image"]) for u in report_units if u.get("method")}))
    found = (list(evening.DESIGN.serial), evening.DESIGN.forks, evening.DESIGN.max_tokens,
             evening.DESIGN.restart_per_block)
    shipped = (rollout_serial(), ansible_forks(), rollout_bench_defaults()["max_tokens"],
               not side_by_side(what, EVENT_INVENTORY))
    if found != shipped:
        raise SystemExit(f"evening_model.DESIGN: serial, forks, max_tokens, restart per block {found}; "
                         f"playbooks/rollout.yml, ansible.cfg and the plan of {what}: {shipped}")
    designs = {design.name: dataclasses.replace(real, design=design,
                                                bench=event_bench(EVENT_INVENTORY, workloads, design))
               for design in (evening.BEFORE, evening.DESIGN)}
    projected = {name: evening.project(phases, units, variant) for name, variant in designs.items()}
    rows = projected[evening.DESIGN.name]
    total, longest = evening.critical(rows)
    lab_longest = max(phases, key=lambda p: p.wall_s)

    out = REPO / "lab" / "build" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"), "host": platform.node(), "cpus": os.cpu_count(),
        "units": units, "rc": rc, "lab_up_s": round(run["lab_up_s"], 1), "wall_s": round(wall, 1),
        "decisions": {k: summary.get(k) for k in ("units", "kept", "reverted", "failed")},
        "phases": [{"phase": p.name, "kind": p.kind, "wall_s": round(p.wall_s, 1),
                    "controller_cpu_s": round(p.cpu_s, 1), "units": len(p.hosts),
                    "starts_and_benchmarks_s": round(p.timed_wall(), 1)} for p in phases],
        "real": {"units": REAL_UNITS, "fanout_s_over_b_16": f16, "fanout_source": f16_source,
                 "payload_bytes": dict(real.payload_bytes), "package_bytes": packages, "serving": what},
        "projection": {name: [{**r, "seconds": round(r["seconds"], 1)} for r in found]
                       for name, found in projected.items()},
        "projected_total_s": {name: round(evening.critical(found)[0], 1) for name, found in projected.items()},
    }
    (out / "evening.json").write_text(json.dumps(record, indent=1) + "\n")

    print(f"lab: {units} stock units (workshop: Jetson AGX Thor, EMULATED), lab up {run['lab_up_s']:.0f} s "
          f"(not counted); ansible-playbook rc {rc}; kept/reverted/failed "
          f"{summary.get('kept')}/{summary.get('reverted')}/{summary.get('failed')}")
    print(f"{'phase':<22} {'wall s':>8} {'ctl CPU s':>10} {'units':>6} {'starts+bench s':>15}")
    for p in phases:
        print(f"{p.name:<22} {p.wall_s:>8.1f} {p.cpu_s:>10.1f} {len(p.hosts):>6} {p.timed_wall():>15.1f}")
    print(f"{'total':<22} {sum(p.wall_s for p in phases):>8.1f} {sum(p.cpu_s for p in phases):>10.1f}")
    print()
    print_budgets(designs, what, EVENT_INVENTORY)
    print()
    print(f"projected: {REAL_UNITS} real units; link {field['network']['link_gbit']} Gbit/s; fan-out "
          f"{f16:.2f} S/B at 16 ({f16_source}); models {real.payload_bytes['models'] / 1e9:.1f} GB, image "
          f"{real.payload_bytes['image'] / 1e9:.1f} GB per unit; packages {packages / 1e6:.0f} MB")
    for name, found in projected.items():
        print(f"{name:<22} {'units':>6} {'seconds':>9}  bound")
        for r in found:
            print(f"  {r['phase']:<20} {r['units']:>6} {r['seconds']:>9.0f}  {r['bound']}")
        seconds = evening.critical(found)[0]
        print(f"  {'total':<20} {REAL_UNITS:>6} {seconds:>9.0f}  ({seconds / 3600:.1f} h)")
    # The next steps, one at a time on this tree's design: what each would take off the evening.
    steps = {
        "JIT caches kept (FlashInfer, Triton)": {"jit_cached": True},
        "one warm-up per serving (side by side)": {"warm_every_block": False},
    }
    for label, change in steps.items():
        variant = dataclasses.replace(real, design=dataclasses.replace(evening.DESIGN, **change))
        seconds = evening.critical(evening.project(phases, units, variant))[0]
        print(f"  with {label}: {seconds / 3600:.1f} h")
    # The gate's budget on the night: fewer blocks bound the evening; the price is the units near
    # a threshold it reverts as inconclusive (the simulated decisions at the field's speedup).
    for budget in field["looks"]["budgets"]:
        decisions = simulated_decisions(speed, field["looks"], {**policy, "specfleet_gate_max_blocks": budget})
        seconds = evening.critical(evening.project(phases, units, dataclasses.replace(real, decisions=decisions)))[0]
        kept = sum(1 for _, keep in decisions if keep)
        print(f"  with specfleet_gate_max_blocks: {budget}: {seconds / 3600:.1f} h, {100 * kept / len(decisions):.0f}% "
              f"of the units at {speed.speedup[1]:.2f}x kept")
    # Units far from the thresholds (not a Jetson figure): how the evening goes when most decide
    # at their first look.
    for truth in field["looks"]["what_if_speedups"]:
        far = dataclasses.replace(speed, speedup={1: truth, 8: 1 + (truth - 1) / 2})
        decisions = simulated_decisions(far, field["looks"], policy)
        seconds = evening.critical(evening.project(phases, units, dataclasses.replace(
            real, speed=far, decisions=decisions)))[0]
        first = sum(1 for blocks, _ in decisions if blocks == 3)
        print(f"  were the units at {truth:.2f}x: {seconds / 3600:.1f} h, {100 * first / len(decisions):.0f}% decided "
              f"at the first look")
    hours, minutes = divmod(round(total / 60), 60)
    print(f"evening N={units}: lab {wall:.0f} s (bound by {lab_longest.name}); {REAL_UNITS} real units projected "
          f"{hours} h {minutes:02d} min (bound by {longest['phase']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
