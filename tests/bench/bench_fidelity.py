#!/usr/bin/env python3
"""Benchmark (not a test): does the spec_bench client measure what the server did?

    .venv/bin/python tests/bench/bench_fidelity.py      (no arguments; about 8 minutes)

1. Emulator lane. Starts the vLLM emulator (Thor GPU file, FP4 Llama-3.1-8B stand-in,
   noise 0, time scale 1, i.e. real durations) without and with EAGLE-3 k=5, runs the
   spec_bench client (concurrency 1, both prompt sets, a warm-up, 3 runs) and compares each
   request's measured TTFT and TPOT with what the emulator's performance model programmed
   for exactly that request: the prefill step for TTFT, and for TPOT the sum of its decode
   steps (step_timing at the growing context, with the acceptance the engine's per-prompt
   RNG draws) over (tokens - 1). TTFT is also reported net of the emulator's fixed API cost,
   measured per request against a twin emulator at time scale 0.5 (see TTFT_NOTE). Prints
   the signed error of the per-request medians and the client's CPU time per token.
2. Real vLLM on CPU, if a venv exists at $SPECFLEET_VLLM_CPU_VENV or .cache/vllm-cpu-venv:
   one baseline server (tiny model) on 127.0.0.1; every prompt goes to it from our client
   and from the request function `vllm bench serve` runs (fidelity_vllm_pair.py, in the
   vLLM venv), back to back, with identical sampling and ignore_eos, so the error is
   per request and host load hits both alike (see REAL_NOTE); then one real `vllm bench
   serve` run as a cross-check. Skipped with a note when absent.

Writes runs/bench/bench_fidelity.json. Never passes or fails; the last line is
`bench error: tpot X.X% ttft Y.Y% (emulator)`: median over all emulator requests of
measured / programmed - 1 for TPOT, and of the net TTFT error.
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
sys.path.insert(0, str(REPO / "collections"))  # the collection's unit-side code, as pytest's pythonpath has it
sys.path.insert(0, str(REPO / "lab" / "emulator"))

from ansible_collections.specfleet.fleet.plugins.module_utils import spec_bench_client as client  # noqa: E402
from ansible_collections.specfleet.fleet.plugins.module_utils import spec_bench_prompts as prompt_sets  # noqa: E402
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

SCALE = 1.0
TWIN_SCALE = 0.5
REAL_ROUNDS = 2
MAX_TOKENS = 32
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
        served_model_names=[TARGET_FP4],
        max_model_len=4096,
        generation_defaults={},
        force_include_usage=False,
        speculative=object() if spec else None,
        engine_seed=0,
    )
    prepared = prepare_request(state, "chat", body)
    rng = random.Random(prepared.acceptance_seed)
    ttft = step_timing(perf, [], [], prefill_tokens=prepared.prompt_tokens, new_sequences=1).total_s
    emitted, decode = 1, 0.0
    conditional = (
        conditional_rates(acceptance_rates(spec["method"], prepared.workload, perf.num_speculative_tokens))
        if spec
        else []
    )
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


def emulator_env(lab: Path, work: Path, scale: float) -> dict[str, str]:
    work.mkdir(parents=True, exist_ok=True)
    return {**build_env(lab, work), "SPECFLEET_EMULATOR_TIME_SCALE": str(scale)}


TTFT_NOTE = """\
  TTFT: the programmed value is the engine's prefill step only. Every client (vllm bench serve too) also counts the
  emulator's unmodelled API path in TTFT (HTTP, JSON, tokenize + template, engine hand-off; a few ms, more when the
  CPU is busy), so `raw` (client TTFT / programmed - 1) mixes that server cost in. To get the client's own error, each
  request is followed by the same body (max_tokens 1) on a twin emulator at time scale {twin:g}; the twin's TTFT is
  fixed + {twin:g} x programmed, the main one's fixed + 1 x programmed, so `net` = (TTFT - TTFT twin) /
  ({gain:g} x programmed) - 1 cancels the fixed cost and keeps any error that scales with programmed time (timing
  the wrong chunk, a slow clock). `fixed` = 2 x twin - main, the offset so removed. A time-scale-0 twin was tried and
  over-subtracts (net -1..-5%): at scale 0 the response headers and role chunk are written after the prefill instead
  of during it. `srv` = mean of the emulator's own TTFT histogram (engine arrival -> first token) minus programmed.
  The last line uses net TTFT; scale 1 keeps the programmed TTFT (64-100 ms) large against scheduling jitter."""


def emulator_lane(report: dict) -> tuple[list[float], list[float]]:
    """Per request: TTFT/TPOT measured on the time-scale-1 emulator, the TTFT of the same body on a
    time-scale-TWIN_SCALE twin (sent right after it), and what the performance model programmed."""
    tpot_errors: list[float] = []
    ttft_errors: list[float] = []
    lab = Path(tempfile.mkdtemp(prefix="specfleet-fidelity-"))
    for repo, config in stand_in_configs().items():
        write_stand_in(lab / "hf" / "hub", repo, config)
    (lab / "gpu.json").write_text(json.dumps(THOR_GPU))
    print(
        f"emulator lane: Thor FP4 8B stand-in, time scale {SCALE:g} (real durations), noise 0, c=1, chat, "
        f"{REPETITIONS} runs after a warm-up, max_tokens {MAX_TOKENS}; twin at time scale {TWIN_SCALE:g}"
    )
    print(TTFT_NOTE.format(twin=TWIN_SCALE, gain=SCALE - TWIN_SCALE))
    print(
        f"{'config':<10} {'workload':<9} {'TTFT ms prog':>12} {'meas':>7} {'raw':>7} {'fixed':>6} {'srv':>6} "
        f"{'net':>7} {'TPOT ms prog':>12} {'meas':>7} {'err':>7} {'CPU us/tok':>10}"
    )
    # At time scale 1 the emulated start-up (weights, torch.compile, CUDA graphs) takes real minutes too:
    # start every server now so the later ones boot while the first are measured.
    processes = {}
    for name, spec in CONFIGS.items():
        extra = ["--max-model-len", "4096"] + (["--speculative-config", json.dumps(spec)] if spec else [])
        processes[name] = (
            EmulatorProcess(TARGET_FP4, extra, emulator_env(lab, lab / name, SCALE)),
            EmulatorProcess(TARGET_FP4, extra, emulator_env(lab, lab / f"{name}-twin", TWIN_SCALE)),
        )
    for name, spec in CONFIGS.items():
        server, twin = processes[name]
        try:
            server.wait_ready(600)
            twin.wait_ready(600)
            endpoint = client.Endpoint.parse(f"http://127.0.0.1:{server.port}")
            twin_endpoint = client.Endpoint.parse(f"http://127.0.0.1:{twin.port}")
            perf = engine_perf(spec)
            for workload in prompt_sets.WORKLOADS:
                texts = prompt_sets.prompts(workload)
                bodies = [client.build_request_body("chat", TARGET_FP4, p, MAX_TOKENS, SEED) for p in texts]
                twin_bodies = [client.build_request_body("chat", TARGET_FP4, p, 1, SEED) for p in texts]
                expected = [programmed(perf, spec, body) for body in bodies]
                client.run_batch(endpoint, client.CHAT_PATH, bodies[:2], 1, 60)  # warm-up
                client.run_batch(twin_endpoint, client.CHAT_PATH, twin_bodies[:2], 1, 60)
                cpu = 0.0
                tokens = 0
                rows = []
                ttft_before = server_ttft(server)
                for _ in range(REPETITIONS):
                    for index, body in enumerate(bodies):
                        before = time.process_time()
                        result = client.stream_request(endpoint, client.CHAT_PATH, body, 60, index=index)
                        cpu += time.process_time() - before
                        other = client.stream_request(twin_endpoint, client.CHAT_PATH, twin_bodies[index], 60)
                        assert result.ok and other.ok, (result.error, other.error)
                        want = expected[index]
                        assert result.completion_tokens == want["tokens"], (result.completion_tokens, want)
                        tokens += result.completion_tokens or 0
                        rows.append((result.ttft_s, other.ttft_s, want["ttft_s"], result.tpot_s, want["tpot_s"]))
                ttft_after = server_ttft(server)
                server_ttft_mean = (ttft_after[0] - ttft_before[0]) / max(1, ttft_after[1] - ttft_before[1])
                ttft_m, _, ttft_p, tpot_m, tpot_p = (statistics.median(r[i] for r in rows) for i in range(5))
                raw = statistics.median(r[0] / r[2] - 1 for r in rows)
                fixed = statistics.median((SCALE * r[1] - TWIN_SCALE * r[0]) / (SCALE - TWIN_SCALE) for r in rows)
                net = [(r[0] - r[1]) / ((SCALE - TWIN_SCALE) * r[2]) - 1 for r in rows]
                tpot_err = [r[3] / r[4] - 1 for r in rows]
                ttft_errors += net
                tpot_errors += tpot_err
                cpu_per_token = cpu / tokens * 1e6
                server_extra = server_ttft_mean - statistics.mean(r[2] for r in rows)
                print(
                    f"{name:<10} {workload:<9} {ttft_p * 1e3:12.2f} {ttft_m * 1e3:7.2f} {pct(raw):>7} "
                    f"{fixed * 1e3:6.2f} {server_extra * 1e3:6.2f} {pct(statistics.median(net)):>7} "
                    f"{tpot_p * 1e3:12.3f} {tpot_m * 1e3:7.3f} {pct(statistics.median(tpot_err)):>7} "
                    f"{cpu_per_token:10.1f}"
                )
                report["emulator"].append(
                    {
                        "config": name,
                        "workload": workload,
                        "time_scale": SCALE,
                        "twin_time_scale": TWIN_SCALE,
                        "requests": len(rows),
                        "ttft_ms_programmed_p50": round(ttft_p * 1e3, 4),
                        "ttft_ms_measured_p50": round(ttft_m * 1e3, 4),
                        "ttft_error_raw": round(raw, 4),
                        "ttft_ms_fixed_cost_p50": round(fixed * 1e3, 4),
                        "ttft_ms_server_histogram_mean_minus_programmed": round(server_extra * 1e3, 4),
                        "ttft_error_net": round(statistics.median(net), 4),
                        "tpot_ms_programmed_p50": round(tpot_p * 1e3, 4),
                        "tpot_ms_measured_p50": round(tpot_m * 1e3, 4),
                        "tpot_error": round(statistics.median(tpot_err), 4),
                        "client_cpu_us_per_token": round(cpu_per_token, 2),
                    }
                )
        finally:
            server.stop()
            twin.stop()
            if name == list(CONFIGS)[-1] or sys.exc_info()[0] is not None:  # last config, or failing
                for process in (p for pair in processes.values() for p in pair):
                    process.stop()
    return tpot_errors, ttft_errors


REAL_NOTE = """\
  Definitions, ours vs `vllm bench serve` (vllm/benchmarks/serve.py calculate_metrics and
  lib/endpoint_request_func.py async_request_openai_chat_completions): both take output tokens from the usage chunk
  and TPOT = (E2E - TTFT) / (tokens - 1). vLLM times TTFT on the first chunk with `choices` (the role chunk, which
  vLLM sends together with the first token) and E2E on the last chunk with `choices`, empty text or not. The old
  spec_bench_client timed only chunks with non-empty text, but vLLM streams one chunk per engine output and this
  tiny model makes many tokens whose text the detokenizer holds back or skips (content ""): TTFT came late, E2E
  early, and (E2E - TTFT) spanned fewer tokens than the usage count it was divided by. Fixed: every chunk with a
  choice is a token chunk except a role announcement without text; `old def` re-times our streams the old way. The
  rest of the old +19% was comparing whole runs on a busy host: whole-run TPOT medians of the same client move 2x
  between runs (see the cross-check line), because the server then often sends a stream in one burst at its end.
  Paired: each prompt goes to the same server from our client and from vLLM's own request function (in-process, the
  code `vllm bench serve` runs), back to back, order alternating; both send ignore_eos, temperature 0, top_p 1,
  seed {seed}, max tokens {max_tokens}, so both get exactly {max_tokens} tokens. CPU load from other work on the host
  hits both alike; error = median over requests of ours / vLLM's - 1."""


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
    dataset.write_text(
        json.dumps(
            [
                {"conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": "x " * 64}]}
                for p in all_prompts
            ]
        )
    )
    max_tokens = 64
    print(
        f"real vLLM lane: vllm-cpu, {lane.TARGET_MODEL}, one baseline server on 127.0.0.1, c=1, {len(all_prompts)} "
        f"prompts x {REAL_ROUNDS} rounds paired, then one `vllm bench serve` run between two of ours"
    )
    print(REAL_NOTE.format(seed=SEED, max_tokens=max_tokens))
    server = lane.Server(mode="none", venv=venv, hf_home=hf_home, log_path=work / "vllm.log")
    server.start()
    try:
        ready = server.wait_ready(timeout=600)
        print(f"  server ready after {ready:.0f} s")
        env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
        config = {
            "base_url": server.base_url,
            "model": lane.TARGET_MODEL,
            "prompts": all_prompts,
            "max_tokens": max_tokens,
            "seed": SEED,
            "ignore_eos": True,
            "rounds": REAL_ROUNDS,
            "client_path": str(REPO / "plugins" / "module_utils" / "spec_bench_client.py"),
        }
        (work / "pair.json").write_text(json.dumps(config))
        run = subprocess.run(
            [
                str(venv / "bin" / "python"),
                str(Path(__file__).with_name("fidelity_vllm_pair.py")),
                str(work / "pair.json"),
                str(work / "pairs.json"),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if run.returncode != 0:
            raise RuntimeError(f"pair driver failed ({run.returncode}): {run.stderr.strip()[-1500:]}")
        pairs = json.loads((work / "pairs.json").read_text())
        failed = [p for p in pairs if not (p["ours"]["ok"] and p["vllm"]["ok"])]
        if failed:
            raise RuntimeError(f"{len(failed)} paired requests failed: {failed[0]}")
        paired = real_paired_figures(pairs)
        cli = real_cli_crosscheck(lane, server, venv, env, work, dataset, all_prompts, max_tokens)
    finally:
        server.stop()
    report["real"] = {"paired": paired, "cli": cli, "requests": pairs}


def real_paired_figures(pairs: list[dict]) -> dict:
    def med(side: str, key: str) -> float:
        return statistics.median(p[side][key] for p in pairs) * 1e3

    tpot = statistics.median(p["ours"]["tpot_s"] / p["vllm"]["tpot_s"] - 1 for p in pairs)
    ttft = statistics.median(p["ours"]["ttft_s"] / p["vllm"]["ttft_s"] - 1 for p in pairs)
    e2e = statistics.median(p["ours"]["e2e_s"] / p["vllm"]["e2e_s"] - 1 for p in pairs)
    old_tpot = statistics.median(
        p["ours"]["old_tpot_s"] / p["vllm"]["tpot_s"] - 1 for p in pairs if p["ours"]["old_tpot_s"]
    )
    old_ttft = statistics.median(
        p["ours"]["old_ttft_s"] / p["vllm"]["ttft_s"] - 1 for p in pairs if p["ours"]["old_ttft_s"]
    )
    empty = sum(p["ours"]["chunks"] - p["ours"]["text_chunks"] for p in pairs)
    chunks = sum(p["ours"]["chunks"] for p in pairs)
    tokens_equal = all(p["ours"]["tokens"] == p["vllm"]["tokens"] for p in pairs)
    prompts_equal = all(p["ours"]["prompt_tokens"] == p["vllm"]["prompt_tokens"] for p in pairs)
    cpu = sum(p["ours"]["cpu_s"] for p in pairs) / sum(p["ours"]["tokens"] for p in pairs) * 1e6
    print(
        f"  same prompt tokens: {prompts_equal}; same output tokens: {tokens_equal} "
        f"({pairs[0]['ours']['tokens']} each); token chunks with empty text: {empty} of {chunks}"
    )
    print(
        f"  {'paired, p50 of ' + str(len(pairs)) + ' requests':<30} {'ours':>9} {'vllm':>9} {'error':>8} {'old def':>8}"
    )
    print(
        f"  {'TTFT ms':<30} {med('ours', 'ttft_s'):9.2f} {med('vllm', 'ttft_s'):9.2f} {pct(ttft):>8} {pct(old_ttft):>8}"
    )
    print(
        f"  {'TPOT ms':<30} {med('ours', 'tpot_s'):9.3f} {med('vllm', 'tpot_s'):9.3f} {pct(tpot):>8} {pct(old_tpot):>8}"
    )
    print(f"  {'E2E ms':<30} {med('ours', 'e2e_s'):9.2f} {med('vllm', 'e2e_s'):9.2f} {pct(e2e):>8}")
    print(f"  our client CPU: {cpu:.0f} us/token (real server, 64-token streams)")

    # On a busy host the server often delivers a whole stream in one burst at the end (TTFT ~ E2E, TPOT ~ 0) to
    # whichever client asked then; per-request TPOT ratios of such pairs are noise. Also show the pairs that both
    # clients received as a stream.
    def streamed(side: dict) -> bool:
        return side["ttft_s"] < 0.8 * side["e2e_s"]

    burst = {side: sum(not streamed(p[side]) for p in pairs) for side in ("ours", "vllm")}
    both = [p for p in pairs if streamed(p["ours"]) and streamed(p["vllm"])]
    tpot_streamed = statistics.median(p["ours"]["tpot_s"] / p["vllm"]["tpot_s"] - 1 for p in both) if both else None
    print(
        f"  burst-delivered streams (TTFT > 0.8 x E2E): ours {burst['ours']}, vllm {burst['vllm']} of {len(pairs)}; "
        f"TPOT error over the {len(both)} pairs streamed to both: {pct(tpot_streamed)}"
    )
    return {
        "requests": len(pairs),
        "burst_delivered": burst,
        "tpot_error_streamed_pairs": tpot_streamed,
        "streamed_pairs": len(both),
        "tpot_error": tpot,
        "ttft_error": ttft,
        "e2e_error": e2e,
        "old_definition_tpot_error": old_tpot,
        "old_definition_ttft_error": old_ttft,
        "empty_text_token_chunks": empty,
        "token_chunks": chunks,
        "same_output_tokens": tokens_equal,
        "same_prompt_tokens": prompts_equal,
        "client_cpu_us_per_token": cpu,
        "ttft_ms_p50": {"ours": med("ours", "ttft_s"), "vllm": med("vllm", "ttft_s")},
        "tpot_ms_p50": {"ours": med("ours", "tpot_s"), "vllm": med("vllm", "tpot_s")},
    }


def real_cli_crosscheck(
    lane, server, venv: Path, env: dict, work: Path, dataset: Path, prompts: list[str], max_tokens: int
) -> dict:
    """One real `vllm bench serve` run (same prompts, ignore_eos, seed) between two runs of our client.

    Run level, not paired: the host's load moves between runs, so this checks the CLI matches its own
    request function rather than measuring our error."""
    endpoint = client.Endpoint.parse(server.base_url)
    bodies = [
        client.build_request_body("chat", lane.TARGET_MODEL, p, max_tokens, SEED, ignore_eos=True) for p in prompts
    ]

    def ours() -> float:
        batch = client.run_batch(endpoint, client.CHAT_PATH, bodies, 1, 300)
        assert not batch.failed, [r.error for r in batch.failed]
        return statistics.median(r.tpot_s for r in batch.results if r.tpot_s) * 1e3

    before = ours()
    command = [
        str(venv / "bin" / "vllm"),
        "bench",
        "serve",
        "--backend",
        "openai-chat",
        "--endpoint",
        "/v1/chat/completions",
        "--base-url",
        server.base_url,
        "--model",
        lane.TARGET_MODEL,
        "--tokenizer",
        lane.TARGET_MODEL,
        "--dataset-name",
        "sharegpt",
        "--dataset-path",
        str(dataset),
        "--disable-shuffle",
        "--sharegpt-output-len",
        str(max_tokens),
        "--num-prompts",
        str(len(prompts)),
        "--max-concurrency",
        "1",
        "--ignore-eos",
        "--temperature",
        "0",
        "--top-p",
        "1.0",
        "--extra-body",
        json.dumps({"seed": SEED}),
        "--seed",
        str(SEED),
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(work),
        "--result-filename",
        "vllm-bench.json",
    ]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    if run.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed ({run.returncode}): {run.stderr.strip()[-1500:]}")
    theirs = json.loads((work / "vllm-bench.json").read_text())
    after = ours()
    lens = theirs.get("output_lens") or []
    print(
        f"  `vllm bench serve` cross-check (run level): TPOT p50 {theirs['median_tpot_ms']:.3f} ms, ours "
        f"{before:.3f} ms before / {after:.3f} ms after it; its output lens all {max_tokens}: "
        f"{bool(lens) and all(n == max_tokens for n in lens)}"
    )
    return {
        "vllm_bench_tpot_ms_p50": theirs["median_tpot_ms"],
        "vllm_bench_ttft_ms_p50": theirs["median_ttft_ms"],
        "ours_tpot_ms_p50_before": before,
        "ours_tpot_ms_p50_after": after,
        "vllm_bench_completed": theirs.get("completed"),
        "vllm_bench_failed": theirs.get("failed"),
    }


def main() -> None:
    report: dict = {"emulator": [], "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    started = time.monotonic()
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
    paired = report["real"].get("paired") if isinstance(report.get("real"), dict) else None
    if paired:
        print(
            f"real vLLM vs vllm bench serve (paired): tpot {paired['tpot_error'] * 100:+.1f}% "
            f"ttft {paired['ttft_error'] * 100:+.1f}% (goal 5%)"
        )
    print(f"wrote {OUT.relative_to(REPO)} after {time.monotonic() - started:.0f} s")
    print(f"bench error: tpot {tpot_error * 100:.1f}% ttft {ttft_error * 100:.1f}% (emulator)")


if __name__ == "__main__":
    main()
