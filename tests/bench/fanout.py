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

Defaults (20 Mbit/s, 24 MiB in 24 files, 6 pieces) fit this 2-core host: every unit's
ssh/rsync/sha256 work runs on the same 2 cores, so at 40 Mbit/s x 16 units the CPU, not
the links, sets the fan-out rate (measured: 8.4 S/B at N=16 and 40 Mbit/s with 8 pieces,
3.5 S/B at 20 Mbit/s with 6 pieces); on real units each has its own CPU.

Then an image: a tarball of the same size, cut into the image store as specfleet_image does
(`specfleet store image`, 1 MiB parts), fanned out to the largest N by the same path.
Prints a table (with the bytes that left the controller, in S) and writes JSON to
lab/build/bench/fanout.json; never passes or fails on time. The last lines are
`image fanout N=16: Z.ZZ S/B, controller sent C.CC S` and
`fanout N=16: push X.XX S/B, fanout Y.YY S/B`.
Env: SPECFLEET_BENCH_SIZES=4,8,16 SPECFLEET_BENCH_MBIT=20 SPECFLEET_BENCH_MB=24
SPECFLEET_BENCH_FILES=24 SPECFLEET_BENCH_PIECES=6. Needs root (the lab) and a lab that
is down (it will not take down someone else's lab); leaves it down.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from specfleet_lab import lab, network  # noqa: E402
from specfleet_lab.config import LabConfig  # noqa: E402

from specfleet import cache  # noqa: E402
from specfleet.fanout_run import Node, Options, Runner, nodes_from_inventory  # noqa: E402

SIZES = [int(x) for x in os.environ.get("SPECFLEET_BENCH_SIZES", "4,8,16").split(",")]
MBIT = float(os.environ.get("SPECFLEET_BENCH_MBIT", "20"))
STORE_MB = float(os.environ.get("SPECFLEET_BENCH_MB", "24"))
FILES = int(os.environ.get("SPECFLEET_BENCH_FILES", "24"))
PIECES = int(os.environ.get("SPECFLEET_BENCH_PIECES", "6"))
ROOT = "/var/lib/specfleet-bench"
NAME = "models--bench--fanout"


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
    """A `docker save`-sized stand-in (S random bytes in one tarball), cut into the image store
    as the image role does before a fan-out."""
    base.mkdir(parents=True)
    tarball = base / "bench-image.tar"
    with tarball.open("wb") as out:
        for _ in range(int(STORE_MB)):
            out.write(os.urandom(2**20))
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
            results = {}
            for push in order:
                label = "push" if push else "fanout"
                say(f"N={n}: {label} ...")
                results[label] = run_once(nodes, store, manifest, push)
                say(f"N={n}: {label} {results[label]['seconds']:.1f}s "
                    f"({results[label]['seconds'] / s_over_b:.2f} S/B)")
            rows.append({"units": n, **{k: {**v, "s_over_b": round(v["seconds"] / s_over_b, 2),
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

    out_dir = Path(__file__).resolve().parents[2] / "lab" / "build" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    report = {"when": time.strftime("%Y-%m-%dT%H:%M:%S"), "host": platform.node(), "cpus": os.cpu_count(),
              "mbit": MBIT, "store_bytes": size, "files": FILES, "pieces": PIECES,
              "s_over_b_seconds": round(s_over_b, 3), "one_unit_alone": alone, "rows": rows, "image": image}
    (out_dir / "fanout.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"store {size / 2**20:.1f} MiB, B = {MBIT:g} Mbit/s (controller and unit links, both ways), "
          f"S/B = {s_over_b:.2f}s; one unit alone {alone['seconds'] / s_over_b:.2f} S/B")
    print(f"{'N':>3} {'push s':>8} {'push S/B':>9} {'fanout s':>9} {'fanout S/B':>11} {'speed-up':>9} "
          f"{'controller sent (S): push':>26} {'fanout':>7}")
    for row in rows:
        p, f = row["push"], row["fanout"]
        print(f"{row['units']:>3} {p['seconds']:>8.1f} {p['s_over_b']:>9.2f} {f['seconds']:>9.1f} "
              f"{f['s_over_b']:>11.2f} {p['seconds'] / f['seconds']:>8.1f}x {p['controller_s']:>26.2f} "
              f"{f['controller_s']:>7.2f}")
    print(f"image fanout N={units}: {image['s_over_b']:.2f} S/B, controller sent {image['controller_s']:.2f} S "
          f"({image['parts']} parts, every unit {'live' if image['ok'] else 'NOT live'})")
    last = next((r for r in rows if r["units"] == 16), rows[-1])
    print(f"fanout N={last['units']}: push {last['push']['s_over_b']:.2f} S/B, "
          f"fanout {last['fanout']['s_over_b']:.2f} S/B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
