#!/usr/bin/env python3
"""Benchmark (not a test): controller push vs fan-out of one store to N lab units.

    sudo .venv/bin/python tests/bench/fanout.py

Brings up a lab of max(N) units (profile workshop) with every unit link shaped to B in
both directions, and shapes the controller's own link (sflab0 and its bridge-side peer
up0) to the same B in both directions for the duration of the benchmark: otherwise the
controller could push N streams at N x B and push would look as fast as fan-out. So B is
every node's link rate and S/B (the time one unit needs to receive S at B) is the unit of
time. Push = the controller rsyncs the whole store to every unit at once (its link shared
N ways: ~N S/B); fan-out = `specfleet distribute` (pieces verified and passed on unit to
unit). Both use the same driver, rsync over SSH, per-file sha256 verification and atomic
switch-in; each run starts from units without the store. For each N the two variants run
back to back, alternating which goes first.

What sets the rate: every unit's ssh, rsync and sha256 work runs on this host's 2 cores,
and each copy (one piece, source to target) costs a fixed ~0.2 s alone and ~0.8-1 s when 16
units copy at once (ssh session, rrsync and the helper's Python starting, the rsync protocol).
On real units each has its own CPU and S/B is minutes (an 8B model in BF16, 16 GB, at 1 Gbit/s:
128 s), so the fixed cost is noise. The defaults keep the lab where the links, not its CPU, set
the rate, so that the figure measures the distribution, not this host:
- S = 96 MiB in 24 files, 12 pieces: S/B = 40 s, a piece 3.4 s at B. Measured F at N=16 on
  this host (2026-11-27): 24 MiB in 6 pieces 2.48-2.69; 48 MiB in 12 pieces 2.05; 96 MiB in
  8 pieces 1.88, 12 pieces 1.75-1.79, 16 pieces 1.78 (a copy's fixed cost: ~10%, ~4%, ~2% of
  S/B). The planner's lock-step schedule alone (tests/fanout_sim.py) is 1.67 S/B with 6
  pieces, 1.62 with 8, 1.42 with 12, 1.38 with 16.
- B = 320 Mbit/s / max(N): the lab's units together move what this host carries (16 units at
  20 Mbit/s). At N=60 and 20 Mbit/s the CPU sets the rate (measured: a copy took 12.9 s for
  3.4 s of link time, F 5.03); at 5.33 Mbit/s it does not.

Push is N S/B by construction (the controller's one link carries N copies); it is measured
for N <= SPECFLEET_BENCH_PUSH_MAX (16) and not run beyond (at N=60 and 5.33 Mbit/s it would
take 2.5 hours).

Then an image: a tarball of the same size, cut into the image store as specfleet_image does
(`specfleet store image`, 1 MiB parts), fanned out to the largest N by the same path.
Prints a table (with the bytes that left the controller, in S) and writes JSON to
lab/build/bench/fanout-N<max N>.json (`measured` reads it back); never passes or fails on
time. The last lines are `image fanout N=<max N>: Z.ZZ S/B, controller sent C.CC S` and
`fanout N=16: push X.XX S/B, fanout Y.YY S/B` (N=16 if it ran, else the largest N; `push not
run` beyond the push limit). In a run of several sizes every N shares the largest N's B.
Env: SPECFLEET_BENCH_SIZES=16 (e.g. 4,8,16 or 60) SPECFLEET_BENCH_MBIT (default 320/max N)
SPECFLEET_BENCH_MB=96 SPECFLEET_BENCH_FILES=24 SPECFLEET_BENCH_PIECES=12
SPECFLEET_BENCH_PUSH_MAX=16. Needs root (the lab) and a lab that is down (it will not take
down someone else's lab); leaves it down.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# This tree's controller and collection, whatever checkout the venv's editable install names.
sys.path[:0] = [str(REPO), str(REPO / "collections")]

from specfleet_lab import lab, network  # noqa: E402
from specfleet_lab.config import LabConfig  # noqa: E402

from specfleet import cache  # noqa: E402
from specfleet.fanout_run import Node, Options, Runner, nodes_from_inventory  # noqa: E402
from tests.stores import write_image_archive  # noqa: E402

SIZES = [int(x) for x in os.environ.get("SPECFLEET_BENCH_SIZES", "16").split(",")]
# What this 2-core host carries with the links, not its CPU, setting the rate (16 x 20 Mbit/s).
LAB_AGGREGATE_MBIT = 320
MBIT = float(os.environ.get("SPECFLEET_BENCH_MBIT", "") or round(LAB_AGGREGATE_MBIT / max(SIZES), 2))
STORE_MB = float(os.environ.get("SPECFLEET_BENCH_MB", "96"))
FILES = int(os.environ.get("SPECFLEET_BENCH_FILES", "24"))
PIECES = int(os.environ.get("SPECFLEET_BENCH_PIECES", "12"))
PUSH_MAX = int(os.environ.get("SPECFLEET_BENCH_PUSH_MAX", "16"))
ROOT = "/var/lib/specfleet-bench"
NAME = "models--bench--fanout"


def report_path(units: int) -> Path:
    return REPO / "lab" / "build" / "bench" / f"fanout-N{units}.json"


def write_report(report: dict) -> Path:
    """The run's figures, for its largest N (``measured`` reads them back)."""
    path = report_path(max(row["units"] for row in report["rows"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


def measured(units: int) -> dict | None:
    """The last run's fan-out to ``units`` (s_over_b, pieces, mbit, source), if there is one
    and every unit went live."""
    path = report_path(units)
    if not path.exists():
        return None
    report = json.loads(path.read_text())
    row = next((r for r in report["rows"] if r["units"] == units), None)
    if row is None or not row["fanout"]["ok"]:
        return None
    return {"s_over_b": row["fanout"]["s_over_b"], "pieces": report["pieces"], "mbit": report["mbit"],
            "source": f"{path.relative_to(REPO)}, {report['mbit']:g} Mbit/s"}


def say(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def make_store(base: Path) -> tuple[Path, dict]:
    """S bytes of random data in FILES blobs, HF hub layout, plus snapshot symlinks."""
    repo = base / "hub" / NAME
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / "main").mkdir(parents=True)
    total = int(STORE_MB * 2**20)
    sizes = [total // FILES] * FILES
    sizes[0] += total - sum(sizes)
    for index, size in enumerate(sizes):
        (repo / "blobs" / f"blob{index:03d}").write_bytes(os.urandom(size))
        os.symlink(f"../../blobs/blob{index:03d}", repo / "snapshots" / "main" / f"shard-{index:03d}")
    (manifest,) = cache.write_manifests(base, "hub")
    return base, manifest


def shape_controller(cfg: LabConfig, mbit: float) -> list[tuple[str | None, str]]:
    """tbf on both ends of the controller's veth (the lab shapes only unit links)."""
    rate_bytes = mbit * 1e6 / 8
    burst = max(16 * 1024, int(rate_bytes / 100))
    shaped = []
    for ns, dev in ((None, cfg.controller_veth), (cfg.bridge_netns, network.UPLINK)):
        argv = ["tc"] + (["-n", ns] if ns else []) + ["qdisc", "replace", "dev", dev, "root", "tbf",
                                                       "rate", f"{mbit}mbit", "burst", str(burst),
                                                       "latency", "50ms"]
        subprocess.run(argv, check=True)
        shaped.append((ns, dev))
    return shaped


def unshape(shaped: list[tuple[str | None, str]]) -> None:
    for ns, dev in shaped:
        subprocess.run(["tc"] + (["-n", ns] if ns else []) + ["qdisc", "del", "dev", dev, "root"],
                       check=False, capture_output=True)


def wipe(nodes: list[Node]) -> None:
    """Units start every run without the store (and without the fleet key)."""

    def one(node: Node) -> None:
        argv = ["ssh", "-p", str(node.port), "-l", node.user, "-o", "BatchMode=yes",
                *(["-i", node.key_file] if node.key_file else []), *node.ssh_args, node.host,
                f"rm -rf {ROOT}; sync"]
        subprocess.run(argv, check=True, capture_output=True, timeout=60)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(one, nodes))


def make_image_store(base: Path) -> tuple[Path, dict]:
    """A `docker save`-sized stand-in (an archive of that shape, its one layer S random bytes),
    cut into the image store as the image role does before a fan-out."""
    base.mkdir(parents=True)
    tarball = write_image_archive(base / "bench-image.tar", int(STORE_MB) << 20)
    store = base / "image-store"
    cache.store_image(tarball, store, 2**20)
    return store, json.loads((store / cache.MANIFESTS / "bench-image.json").read_text())


def run_once(nodes: list[Node], store: Path, manifest: dict, push: bool, subdir: str = "hub") -> dict:
    wipe(nodes)
    options = Options(root=ROOT, subdir=subdir, pieces=PIECES, push=push)
    started = time.monotonic()
    result = Runner(nodes, store, manifest, options).run()
    seconds = time.monotonic() - started
    if not result["ok"]:
        say(f"  not every unit completed: {result['units']}")
    return {"seconds": round(seconds, 2), "ok": result["ok"], "copies": result["copies"],
            "failures": result["failures"], "bytes_from": result["bytes_from"]}


def main() -> int:
    if os.geteuid() != 0:
        print("the benchmark needs root (it brings up the lab)", file=sys.stderr)
        return 2
    cfg = LabConfig()
    if lab.status(cfg)["lab"] != "down":
        print("a lab is up; run `specfleet lab down` first (this benchmark needs its own)", file=sys.stderr)
        return 2
    units = max(SIZES)
    work = Path(tempfile.mkdtemp(prefix="sf-bench-fanout-"))
    shaped: list = []
    rows = []
    try:
        store, manifest = make_store(work / "store")
        size = sum(e["size"] for e in manifest["files"].values())
        s_over_b = size * 8 / (MBIT * 1e6)
        say(f"store {size / 2**20:.1f} MiB in {len(manifest['files'])} files; B = {MBIT:g} Mbit/s; "
            f"S/B = {s_over_b:.2f}s")
        say(f"lab up: {units} units, links {MBIT:g} Mbit/s")
        lab.up(cfg, "workshop", units, MBIT, say=lambda m: None)
        # The inventory checks host keys (lab/build/known_hosts); units a clean checkout's lab
        # never had are collected first, as an organiser does for a new fleet.
        subprocess.run([sys.executable, "-m", "specfleet.cli", "hostkeys", "-i", str(cfg.inventory_dir)],
                       check=True, capture_output=True, timeout=600)
        shaped = shape_controller(cfg, MBIT)
        every = nodes_from_inventory(str(cfg.inventory_dir / "hosts.yml"))
        every.sort(key=lambda n: tuple(int(x) for x in n.host.split(".")))
        # One unit alone: what S/B costs in practice (TCP, ssh, rsync, verification).
        alone = run_once(every[:1], store, manifest, push=True)
        say(f"one unit alone: {alone['seconds']:.2f}s = {alone['seconds'] / s_over_b:.2f} S/B")
        for turn, n in enumerate(SIZES):
            nodes = every[:n]
            order = [True, False] if turn % 2 == 0 else [False, True]
            if n > PUSH_MAX:
                order = [False]
            results = {}
            for push in order:
                label = "push" if push else "fanout"
                say(f"N={n}: {label} ...")
                results[label] = run_once(nodes, store, manifest, push)
                say(f"N={n}: {label} {results[label]['seconds']:.1f}s "
                    f"({results[label]['seconds'] / s_over_b:.2f} S/B)")
            rows.append({"units": n, "push": None, **{
                k: {**v, "s_over_b": round(v["seconds"] / s_over_b, 2),
                    "controller_s": round(v["bytes_from"]["controller"] / size, 2)}
                for k, v in results.items()}})
        image_store, image_manifest = make_image_store(work / "image")
        image_size = sum(e["size"] for e in image_manifest["files"].values())
        say(f"N={units}: image fanout ({len(image_manifest['files'])} parts) ...")
        image = run_once(every, image_store, image_manifest, False, cache.IMAGE_SUBDIR)
        image = {**image, "bytes": image_size, "parts": len(image_manifest["files"]),
                 "s_over_b": round(image["seconds"] / (image_size * 8 / (MBIT * 1e6)), 2),
                 "controller_s": round(image["bytes_from"]["controller"] / image_size, 2)}
        say(f"N={units}: image fanout {image['seconds']:.1f}s ({image['s_over_b']:.2f} S/B)")
    finally:
        unshape(shaped)
        if lab.status(cfg)["lab"] != "down":
            say("lab down")
            lab.down(cfg)
        shutil.rmtree(work, ignore_errors=True)

    report = {"when": time.strftime("%Y-%m-%dT%H:%M:%S"), "host": platform.node(), "cpus": os.cpu_count(),
              "mbit": MBIT, "store_bytes": size, "files": FILES, "pieces": PIECES,
              "s_over_b_seconds": round(s_over_b, 3), "one_unit_alone": alone, "rows": rows, "image": image}
    write_report(report)
    print(f"store {size / 2**20:.1f} MiB in {FILES} files, {PIECES} pieces; B = {MBIT:g} Mbit/s (controller "
          f"and unit links, both ways), S/B = {s_over_b:.2f}s; one unit alone {alone['seconds'] / s_over_b:.2f} S/B")
    print(f"{'N':>3} {'push s':>8} {'push S/B':>9} {'fanout s':>9} {'fanout S/B':>11} {'speed-up':>9} "
          f"{'controller sent (S): push':>26} {'fanout':>7}")
    for row in rows:
        p, f = row["push"], row["fanout"]
        seconds, s_b, speed_up, sent = (
            (f"{p['seconds']:.1f}", f"{p['s_over_b']:.2f}", f"{p['seconds'] / f['seconds']:.1f}x",
             f"{p['controller_s']:.2f}") if p else ("-",) * 4)
        print(f"{row['units']:>3} {seconds:>8} {s_b:>9} {f['seconds']:>9.1f} {f['s_over_b']:>11.2f} {speed_up:>9} "
              f"{sent:>26} {f['controller_s']:>7.2f}")
    print(f"image fanout N={units}: {image['s_over_b']:.2f} S/B, controller sent {image['controller_s']:.2f} S "
          f"({image['parts']} parts, every unit {'live' if image['ok'] else 'NOT live'})")
    last = next((r for r in rows if r["units"] == 16), rows[-1])
    push = f"push {last['push']['s_over_b']:.2f} S/B" if last["push"] else f"push not run (N > {PUSH_MAX})"
    print(f"fanout N={last['units']}: {push}, fanout {last['fanout']['s_over_b']:.2f} S/B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
