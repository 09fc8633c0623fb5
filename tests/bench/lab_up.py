#!/usr/bin/env python3
"""Benchmark (not a test): how long `lab up` takes and how much memory a unit costs.

    sudo python3 tests/bench/lab_up.py            # 8 and 60 units, profile mixed

For each size: bring the lab down, record used host memory (MemTotal - MemAvailable),
`lab up`, let it settle, record memory again, `lab down` (timed). Memory per unit is the
increase in used memory divided by the number of units (so the lab engine and registry
are shared out over the units); the marginal figure between two sizes excludes them.
Other work on the host moves that figure, so the memory charged to the units' own cgroup
and the RSS of the lab's host processes are reported as well.
Images are built once before the first measurement so no size pays for them.
Prints a table and writes JSON to lab/build/bench/lab_up.json. Never passes or fails on
time. Env: SPECFLEET_BENCH_SIZES=8,60 SPECFLEET_BENCH_PROFILE=mixed.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from specfleet_lab import engine, images, lab, state  # noqa: E402
from specfleet_lab.config import LabConfig  # noqa: E402

SETTLE_SECONDS = 10.0


def used_kib() -> int:
    info = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, value = line.split(":", 1)
        info[key] = int(value.split()[0])
    return info["MemTotal"] - info["MemAvailable"]


def unit_cgroup_mib() -> dict[str, float]:
    """Memory charged to the unit containers (v1 memory cgroup of the lab engine).

    Unlike host-wide used memory this is not moved by other work on the host.
    """
    stat_file = Path(f"/sys/fs/cgroup/memory/{engine.CGROUP_PARENT}/memory.stat")
    if not stat_file.exists():
        return {}
    stats = dict(line.split() for line in stat_file.read_text().splitlines())
    return {key: round(int(stats[key]) / 2**20, 1) for key in ("total_rss", "total_cache")
            if key in stats}


def services_rss_mib(cfg: LabConfig) -> float:
    """RSS of the lab's own host processes (dockerd + its containerd, registries)."""
    st = state.load(cfg.state_file)
    pids = {int(e["pid"]) for e in (st.processes.values() if st else [])}
    children = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines())
        except (OSError, ValueError):
            continue
        if int(fields["PPid"]) in pids and "containerd" in fields["Name"]:
            children.add(int(status.parent.name))
    total = 0
    for pid in pids | children:
        try:
            text = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return round(total / 1024, 1)


def measure(cfg: LabConfig, profile: str, units: int) -> dict:
    lab.down(cfg)
    time.sleep(2)
    before = used_kib()
    t0 = time.monotonic()
    result = lab.up(cfg, profile, units)
    up_seconds = time.monotonic() - t0
    time.sleep(SETTLE_SECONDS)
    after = used_kib()
    cgroup = unit_cgroup_mib()
    services = services_rss_mib(cfg)
    t1 = time.monotonic()
    down = lab.down(cfg)
    down_seconds = time.monotonic() - t1
    return {
        "units": units,
        "profile": profile,
        "up_seconds": round(up_seconds, 1),
        "up_step_seconds": result["timings"],
        "down_seconds": round(down_seconds, 1),
        "down_leftovers": down.get("leftovers", []),
        "used_mib_before": round(before / 1024),
        "used_mib_after": round(after / 1024),
        "mib_per_unit": round((after - before) / 1024 / units, 1),
        "unit_cgroup_mib": cgroup,
        "unit_cgroup_rss_mib_per_unit": round(cgroup.get("total_rss", 0) / units, 1),
        "lab_services_rss_mib": services,
    }


def main() -> int:
    if os.geteuid() != 0:
        print("lab_up benchmark needs root", file=sys.stderr)
        return 2
    cfg = LabConfig()
    sizes = [int(s) for s in os.environ.get("SPECFLEET_BENCH_SIZES", "8,60").split(",")]
    profile = os.environ.get("SPECFLEET_BENCH_PROFILE", "mixed")
    if lab.status(cfg)["lab"] != "down":
        print("a lab is up; this benchmark would take it down -- run `lab down` first",
              file=sys.stderr)
        return 2
    # Warm the image cache (and time a cached rebuild check) outside the measurements.
    pid, started = engine.start_dockerd(cfg)
    t0 = time.monotonic()
    built = [images.build_base_image(cfg, images.ENGINE_SUITE),
             images.build_base_image(cfg, images.unit_suite(cfg)), images.build_unit_image(cfg),
             images.build_engine_images(cfg)[0]]
    cache_check = time.monotonic() - t0
    if started:  # every measured size starts from the same state: no lab engine running
        engine.stop_pid(pid, f"--host={cfg.docker_host}")
    rows = [measure(cfg, profile, n) for n in sizes]
    marginal = None
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        marginal = round((b["used_mib_after"] - b["used_mib_before"] - a["used_mib_after"]
                          + a["used_mib_before"]) / (b["units"] - a["units"]), 1)
    report = {
        "benchmark": "lab_up",
        "host": {"cpus": os.cpu_count(), "kernel": platform.release()},
        "image_cache_check_seconds": round(cache_check, 2),
        "images_built_during_warmup": [r.image for r in built if r.built],
        "rows": rows,
        "marginal_mib_per_unit": marginal,
    }
    print("MiB/unit = host used-memory increase / units (moved by anything else running);")
    print("rss/unit = anonymous memory charged to the units' cgroup / units (lab only)")
    print(f"{'units':>5} {'profile':>8} {'up s':>7} {'down s':>7} {'MiB/unit':>9} "
          f"{'rss/unit':>9} {'services':>9}")
    for r in rows:
        print(f"{r['units']:>5} {r['profile']:>8} {r['up_seconds']:>7} {r['down_seconds']:>7} "
              f"{r['mib_per_unit']:>9} {r['unit_cgroup_rss_mib_per_unit']:>9} "
              f"{r['lab_services_rss_mib']:>9}")
    if marginal is not None:
        print(f"marginal MiB per unit between {rows[0]['units']} and {rows[-1]['units']}: {marginal}")
    out = cfg.build_dir / "bench" / "lab_up.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
