#!/usr/bin/env python3
"""Benchmark (not a test): does the spec_bench client measure what the server did?

    .venv/bin/python tests/bench/bench_fidelity.py

1. Emulator lane. Starts the vLLM emulator (Thor GPU file, FP4 Llama-3.1-8B stand-in,
   noise 0, time scale 0.1) without and with EAGLE-3 k=5, runs the spec_bench client
   (concurrency 1, both prompt sets, one warm-up round, 3 runs) and compares each
   request's measured TTFT and TPOT with what the emulator's performance model
   programmed for exactly that request: the prefill step for TTFT, and for TPOT the sum
   of its decode steps (step_timing at the growing context, with the acceptance the
   engine's per-prompt RNG draws) over (tokens - 1). Prints the signed error of the
   per-request medians per configuration and the client's CPU time per token.
2. Real vLLM on CPU, if a venv exists at $SPECFLEET_VLLM_CPU_VENV or .cache/vllm-cpu-venv:
   one baseline server (tiny model), our client and `vllm bench serve` on the same prompts
   (custom dataset, chat endpoint, temperature 0, concurrency 1), alternating, and the
   median TTFT/TPOT of each. Skipped with a note when absent.

Writes runs/bench/bench_fidelity.json. Never passes or fails; the last line is
`bench error: tpot X.X% ttft Y.Y% (emulator)` (median over all requests of measured /
programmed - 1). The TTFT columns also show the mean TTFT the emulator's own histogram
recorded (from request arrival in the engine): client minus server is HTTP + request
preparation overhead, which is fixed in wall time and so looms large at a 0.1 time scale.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "lab" / "emulator"))

from specfleet_unit import spec_bench_client as client  # noqa: E402
from specfleet_unit import spec_bench_prompts as prompt_sets  # noqa: E402
from vllm_emulator.gpu import parse_gpu_spec  # noqa: E402
from vllm_emulator.hub import parse_model_info  # noqa: E402
from vllm_emulator.perfmodel import acceptance_rates, build_engine_perf, conditional_rates, step_timing  # noqa: E402
from vllm_emulator.server import prepare_request  # noqa: E402
from vllm_emulator.specconfig import validate_speculative_config  # noqa: E402

from tests.unit.emulator.conftest import (  # noqa: E402
    EAGLE3,
    TARGET_FP4,
    THOR_GPU,
    EmulatorProcess,
    build_env,
    stand_in_configs,
    write_stand_in,
)

SCALE = 0.1
MAX_TOKENS = 96
REPETITIONS = 3
SEED = 42
OUT = REPO / "runs" / "bench" / "bench_fidelity.json"
CONFIGS = {
    "baseline": None,
    "eagle3_k5": {"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": 5},
}


def model_info(name: str):
    return parse_model_info(name, Path("/m") / name, stand_in_configs()[name])


def engine_perf(spec: dict | None):
    target = model_info(TARGET_FP4)
    resolved = validate_speculative_config(spec, target, 1, model_info) if spec else None
    return build_engine_perf(parse_gpu_spec(THOR_GPU), target, resolved)


def programmed(perf, spec: dict | None, body: dict) -> dict:
    """TTFT and TPOT (wall seconds) the emulator programs for one request at concurrency 1.

    Mirrors the engine loop: the first step prefills the prompt and emits one token; each
    later step decodes the one running sequence (drafting k tokens with EAGLE-3, accepting
    position by position with the request's own RNG, seeded from the prompt) and emits
    1 + accepted tokens, capped at the output length.
    """
    state = SimpleNamespace(
        served_model_names=[TARGET_FP4], max_model_len=4096, generation_defaults={}, force_include_usage=False,
        speculative=object() if spec else None, engine_seed=0,
    )
    prepared = prepare_request(state, "chat", body)
    rng = random.Random(prepared.acceptance_seed)
    ttft = step_timing(perf, [], [], prefill_tokens=prepared.prompt_tokens, new_sequences=1).total_s
    emitted, decode = 1, 0.0
    conditional = conditional_rates(acceptance_rates(spec["method"], prepared.workload, perf.num_speculative_tokens))\
        if spec else []
    total = len(prepared.output)
    while emitted < total:
        accepted = 0
        for probability in conditional:
            if rng.random() < probability:
                accepted += 1
            else:
                break
        decode += step_timing(perf, [prepared.prompt_tokens + emitted], [bool(spec)]).total_s
        emitted += min(1 + accepted, total - emitted)
    return {
        "ttft_s": ttft * SCALE,
        "tpot_s": decode / (total - 1) * SCALE if total > 1 else None,
        "tokens": total,
        "workload": prepared.workload,
    }


def server_ttft(server) -> tuple[float, float]:
    """(sum, count) of the emulator's own vllm:time_to_first_token_seconds histogram."""
    samples = client.parse_prometheus(server.metrics())
    total = sum(v for n, _, v in samples if n == "vllm:time_to_first_token_seconds_sum")
    count = sum(v for n, _, v in samples if n == "vllm:time_to_first_token_seconds_count")
    return total, count


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:+.1f}%"


def emulator_lane(report: dict) -> tuple[list[float], list[float]]:
    tpot_errors: list[float] = []
    ttft_errors: list[float] = []
    lab = Path(tempfile.mkdtemp(prefix="specfleet-fidelity-"))
    for repo, config in stand_in_configs().items():
        write_stand_in(lab / "hf" / "hub", repo, config)
    (lab / "gpu.json").write_text(json.dumps(THOR_GPU))
    env = {**build_env(lab, lab), "SPECFLEET_EMULATOR_TIME_SCALE": str(SCALE)}
    print(f"emulator lane: Thor FP4 8B stand-in, time scale {SCALE}, noise 0, c=1, {REPETITIONS} runs, "
          f"max_tokens {MAX_TOKENS}")
    print(f"{'config':<11} {'workload':<10} {'TTFT ms meas/prog':>19} {'err':>7} {'TPOT ms meas/prog':>19} "
          f"{'err':>7} {'CPU us/token':>12} {'TTFT mean: client':>17} {'server':>9}")
    for name, spec in CONFIGS.items():
        extra = ["--max-model-len", "4096"] + (["--speculative-config", json.dumps(spec)] if spec else [])
        server = EmulatorProcess(TARGET_FP4, extra, env)
        try:
            server.wait_ready(60)
            endpoint = client.Endpoint.parse(f"http://127.0.0.1:{server.port}")
            perf = engine_perf(spec)
            for workload in prompt_sets.WORKLOADS:
                bodies = [client.build_request_body("chat", TARGET_FP4, p, MAX_TOKENS, SEED)
                          for p in prompt_sets.prompts(workload)]
                expected = [programmed(perf, spec, body) for body in bodies]
                client.run_batch(endpoint, client.CHAT_PATH, bodies[:1], 1, 60)  # warm-up round
                cpu = 0.0
                tokens = 0
                measured = []
                ttft_before = server_ttft(server)
                for _ in range(REPETITIONS):
                    before = time.process_time()
                    batch = client.run_batch(endpoint, client.CHAT_PATH, bodies, 1, 60)
                    cpu += time.process_time() - before
                    tokens += batch.output_tokens
                    assert not batch.failed, [r.error for r in batch.failed]
                    measured.extend(batch.results)
                ttft_after = server_ttft(server)
                server_ttft_mean = (ttft_after[0] - ttft_before[0]) / max(1, ttft_after[1] - ttft_before[1])
                rows = []
                for result in measured:
                    want = expected[result.index]
                    assert result.completion_tokens == want["tokens"], (result.completion_tokens, want)
                    rows.append((result.ttft_s, want["ttft_s"], result.tpot_s, want["tpot_s"]))
                ttft_m = statistics.median(r[0] for r in rows)
                ttft_p = statistics.median(r[1] for r in rows)
                tpot_m = statistics.median(r[2] for r in rows)
                tpot_p = statistics.median(r[3] for r in rows)
                tpot_errors += [r[2] / r[3] - 1 for r in rows]
                ttft_errors += [r[0] / r[1] - 1 for r in rows]
                cpu_per_token = cpu / tokens * 1e6
                print(f"{name:<11} {workload:<10} {ttft_m * 1e3:8.2f} / {ttft_p * 1e3:8.2f} "
                      f"{pct(ttft_m / ttft_p - 1):>7} {tpot_m * 1e3:8.3f} / {tpot_p * 1e3:8.3f} "
                      f"{pct(tpot_m / tpot_p - 1):>7} {cpu_per_token:12.1f} "
                      f"{statistics.mean(r[0] for r in rows) * 1e3:9.2f} {server_ttft_mean * 1e3:9.2f}")
                report["emulator"].append({
                    "config": name, "workload": workload, "time_scale": SCALE,
                    "ttft_ms_measured_p50": round(ttft_m * 1e3, 4), "ttft_ms_programmed_p50": round(ttft_p * 1e3, 4),
                    "tpot_ms_measured_p50": round(tpot_m * 1e3, 4), "tpot_ms_programmed_p50": round(tpot_p * 1e3, 4),
                    "ttft_error": round(ttft_m / ttft_p - 1, 4), "tpot_error": round(tpot_m / tpot_p - 1, 4),
                    "client_cpu_us_per_token": round(cpu_per_token, 2), "requests": len(rows),
                    "ttft_ms_client_mean": round(statistics.mean(r[0] for r in rows) * 1e3, 4),
                    "ttft_ms_server_histogram_mean": round(server_ttft_mean * 1e3, 4),
                    "emulated_tpot_ms_programmed_p50": round(tpot_p / SCALE * 1e3, 3),
                })
        finally:
            server.stop()
    return tpot_errors, ttft_errors


def real_lane(report: dict) -> None:
    venv = Path(os.environ.get("SPECFLEET_VLLM_CPU_VENV", REPO / ".cache" / "vllm-cpu-venv"))
    if not (venv / "bin" / "vllm").exists():
        print(f"real vLLM lane: skipped (no vLLM-CPU venv at {venv})")
        report["real"] = {"skipped": f"no venv at {venv}"}
        return
    sys.path.insert(0, str(REPO / "lab" / "engines" / "vllm-cpu"))
    import vllm_cpu_lane as lane

    hf_home = lane.default_hf_home()
    if not (hf_home / "specfleet-tiny-models.json").is_file():
        print(f"real vLLM lane: skipped (tiny models not built under {hf_home}; run the vllm_cpu tests once)")
        report["real"] = {"skipped": "no tiny models"}
        return
    work = Path(tempfile.mkdtemp(prefix="specfleet-fidelity-real-"))
    all_prompts = [p for w in prompt_sets.WORKLOADS for p in prompt_sets.prompts(w)]
    # ShareGPT format (json only; the custom JSONL dataset needs pandas, absent from the venv).
    dataset = work / "prompts.json"
    dataset.write_text(json.dumps(
        [{"conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": "x " * 64}]} for p in all_prompts]
    ))
    max_tokens = 64
    print(f"real vLLM lane: vllm-cpu, {lane.TARGET_MODEL}, baseline server, c=1, {len(all_prompts)} prompts, "
          f"max_tokens {max_tokens}; ours and `vllm bench serve` alternating, 2 rounds")
    server = lane.Server(mode="none", venv=venv, hf_home=hf_home, log_path=work / "vllm.log")
    server.start()
    rounds = []
    try:
        ready = server.wait_ready(timeout=600)
        print(f"  server ready after {ready:.0f} s")
        endpoint = client.Endpoint.parse(server.base_url)
        bodies = [client.build_request_body("chat", lane.TARGET_MODEL, p, max_tokens, SEED) for p in all_prompts]
        client.run_batch(endpoint, client.CHAT_PATH, bodies[:2], 1, 120)  # warm-up
        env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
        for number in range(2):
            cpu = time.process_time()
            batch = client.run_batch(endpoint, client.CHAT_PATH, bodies, 1, 300)
            cpu = time.process_time() - cpu
            ours = {
                "ttft_ms_p50": statistics.median(r.ttft_s for r in batch.results if r.ok) * 1e3,
                "tpot_ms_p50": statistics.median(r.tpot_s for r in batch.results if r.ok and r.tpot_s) * 1e3,
                "output_tok_s": batch.throughput_tok_s,
                "failed": len(batch.failed),
                "client_cpu_us_per_token": cpu / max(1, batch.output_tokens) * 1e6,
            }
            name = f"vllm-bench-{number}.json"
            command = [
                str(venv / "bin" / "vllm"), "bench", "serve", "--backend", "openai-chat",
                "--endpoint", "/v1/chat/completions", "--base-url", server.base_url, "--model", lane.TARGET_MODEL,
                "--tokenizer", lane.TARGET_MODEL, "--dataset-name", "sharegpt", "--dataset-path", str(dataset),
                "--disable-shuffle", "--sharegpt-output-len", str(max_tokens),
                "--num-prompts", str(len(all_prompts)), "--max-concurrency", "1", "--temperature", "0",
                "--top-p", "1.0", "--seed", str(SEED), "--percentile-metrics", "ttft,tpot,itl,e2el",
                "--metric-percentiles", "50,90", "--save-result", "--result-dir", str(work),
                "--result-filename", name,
            ]
            run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
            if run.returncode != 0:
                print(f"  vllm bench serve failed ({run.returncode}): {run.stderr.strip().splitlines()[-3:]}")
                report["real"] = {"error": run.stderr[-2000:], "ours": ours}
                return
            theirs_raw = json.loads((work / name).read_text())
            theirs = {
                "ttft_ms_p50": theirs_raw.get("median_ttft_ms"),
                "tpot_ms_p50": theirs_raw.get("median_tpot_ms"),
                "output_tok_s": theirs_raw.get("output_throughput"),
                "failed": theirs_raw.get("failed"),
            }
            rounds.append({"ours": ours, "vllm_bench": theirs})
            print(f"  round {number + 1}: TTFT p50 ours {ours['ttft_ms_p50']:.2f} ms vs vllm bench "
                  f"{theirs['ttft_ms_p50']:.2f} ms; TPOT p50 ours {ours['tpot_ms_p50']:.3f} ms vs "
                  f"{theirs['tpot_ms_p50']:.3f} ms; output tok/s ours {ours['output_tok_s']:.1f} vs "
                  f"{theirs['output_tok_s']:.1f}; our client CPU {ours['client_cpu_us_per_token']:.0f} us/token")
    finally:
        server.stop()
    ttft = statistics.median(r["ours"]["ttft_ms_p50"] / r["vllm_bench"]["ttft_ms_p50"] - 1 for r in rounds)
    tpot = statistics.median(r["ours"]["tpot_ms_p50"] / r["vllm_bench"]["tpot_ms_p50"] - 1 for r in rounds)
    print(f"  ours vs vllm bench serve (median of rounds): TTFT {pct(ttft)}, TPOT {pct(tpot)}")
    report["real"] = {"rounds": rounds, "ttft_vs_vllm_bench": ttft, "tpot_vs_vllm_bench": tpot}


def main() -> None:
    report: dict = {"emulator": [], "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    tpot_errors, ttft_errors = emulator_lane(report)
    try:
        real_lane(report)
    except Exception as exc:  # the real lane is best effort; the emulator figures stand
        print(f"real vLLM lane: failed: {exc.__class__.__name__}: {exc}")
        report["real"] = {"error": f"{exc.__class__.__name__}: {exc}"}
    tpot_error = statistics.median(tpot_errors)
    ttft_error = statistics.median(ttft_errors)
    report["summary"] = {"tpot_error": tpot_error, "ttft_error": ttft_error, "requests": len(tpot_errors)}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2))
    print(f"wrote {OUT.relative_to(REPO)}")
    print(f"bench error: tpot {tpot_error * 100:.1f}% ttft {ttft_error * 100:.1f}% (emulator)")


if __name__ == "__main__":
    main()
