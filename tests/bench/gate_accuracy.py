#!/usr/bin/env python3
"""Benchmark (not a test): how often the gate decides what the truth says.

    .venv/bin/python tests/bench/gate_accuracy.py

Units of known true speedup at concurrency 1 (about 1.8x, 1.35x, 1.1x, 0.9x on the
code_edit workload) are picked from the vLLM emulator's performance model: a search over
device class (Thor, AGX Orin), target precision, method (EAGLE-3, draft model, MTP, n-gram)
and k for the configuration closest to each target. The truth for a case is the gate rule
applied to the model's noiseless figures (gain at c=1 >= +30 %, TPOT drop >= 20 %, no loss
at c=8).

Bench results are SYNTHESIZED, not measured on emulator processes (400 real emulator
benchmarks would take far too long): each decision draws a baseline and a candidate
spec_bench result (3 runs x 8 prompts x 96 tokens per side, at c=1 and c=8) from the
emulator's noise model: a per-unit factor shared by both sides and a per-request factor
N(1, sigma) clipped to [0.7, 1.5] on step durations, as vllm_emulator.engine.NoiseModel
does (default sigma 0.03). Then specfleet.gate.decide with the default policy.
Also prints the same at larger sigmas (what real units' noise might look like).

Writes runs/bench/gate_accuracy.json. The last line is
`gate accuracy: X.X% over N decisions` for the emulator's default noise.
"""

from __future__ import annotations

import itertools
import json
import random
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "lab" / "emulator"))

from vllm_emulator.gpu import parse_gpu_spec  # noqa: E402
from vllm_emulator.hub import parse_model_info  # noqa: E402
from vllm_emulator.perfmodel import build_engine_perf, expected_decode_throughput, prefill_seconds  # noqa: E402
from vllm_emulator.specconfig import validate_speculative_config  # noqa: E402

from specfleet import policy  # noqa: E402
from specfleet.gate import decide  # noqa: E402
from tests.unit.emulator.conftest import (  # noqa: E402
    DRAFT_1B,
    EAGLE3,
    TARGET,
    TARGET_FP4,
    TARGET_FP8,
    THOR_GPU,
    stand_in_configs,
)

TARGETS = (1.8, 1.35, 1.1, 0.9)
DECISIONS = 100
SIGMA = 0.03  # SPECFLEET_EMULATOR_NOISE default
EXTRA_SIGMAS = (0.08, 0.15)
RUNS, PROMPTS, TOKENS = 3, 8, 96
PROMPT_TOKENS = 330  # the code_edit prompts render to ~280-380 emulator tokens
CONTEXT = PROMPT_TOKENS + TOKENS // 2
OUT = REPO / "runs" / "bench" / "gate_accuracy.json"
GPUS = {
    "thor": THOR_GPU,
    "agx_orin": {"device_class": "agx_orin", "gpu_name": "Orin", "memory_total_mib": 62841,
                 "memory_bandwidth_gbps": 204.8, "compute_capability": "8.7"},
}
POLICY = policy.merge({})


def model(name: str):
    return parse_model_info(name, Path("/m") / name, stand_in_configs()[name])


def spec_for(method: str, k: int) -> dict:
    if method == "eagle3":
        return {"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": k}
    if method == "draft_model":
        return {"method": "draft_model", "model": DRAFT_1B, "num_speculative_tokens": k}
    if method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
    return {"method": "mtp", "num_speculative_tokens": k}


def figures(gpu_name: str, target: str, spec: dict | None) -> dict:
    """Noiseless c=1 and c=8 figures of a served configuration on code_edit prompts."""
    target_info = model(target)
    resolved = validate_speculative_config(spec, target_info, 1, model) if spec else None
    perf = build_engine_perf(parse_gpu_spec(GPUS[gpu_name]), target_info, resolved)
    one = expected_decode_throughput(perf, "code_edit", CONTEXT, 1)
    eight = expected_decode_throughput(perf, "code_edit", CONTEXT, 8)
    return {
        "tpot_s": one.seconds_per_step / one.tokens_per_step,
        "ttft_s": prefill_seconds(perf, PROMPT_TOKENS),
        "c8_tok_s": eight.tokens_per_second * 8,
        "c8_step_s": eight.seconds_per_step,
    }


def pick_cases() -> list[dict]:
    """For each target speedup, the configuration whose c=1 throughput ratio is closest."""
    candidates = []
    for gpu_name, target, method, k in itertools.product(
        GPUS, (TARGET, TARGET_FP8, TARGET_FP4), ("eagle3", "draft_model", "ngram"), range(1, 8)
    ):
        if gpu_name == "agx_orin" and target == TARGET_FP4:
            continue  # Orin cannot run FP4 (plan refuses it)
        try:
            base = figures(gpu_name, target, None)
            cand = figures(gpu_name, target, spec_for(method, k))
        except (ValueError, KeyError):
            continue
        throughput = lambda f: TOKENS / (f["ttft_s"] + (TOKENS - 1) * f["tpot_s"])  # noqa: E731 - c=1 request
        candidates.append({
            "unit": f"{gpu_name} {target.split('/')[-1]} {method} k={k}",
            "base": base, "cand": cand,
            "speedup": throughput(cand) / throughput(base),
            "tpot_drop": 1 - cand["tpot_s"] / base["tpot_s"],
            "c8_change": cand["c8_tok_s"] / base["c8_tok_s"] - 1,
        })
    cases = []
    for want in TARGETS:
        best = min(candidates, key=lambda c: abs(c["speedup"] - want))
        truth = (best["speedup"] - 1 >= POLICY["specfleet_gate_min_throughput_gain"]
                 and best["tpot_drop"] >= POLICY["specfleet_gate_min_tpot_drop"]
                 and best["c8_change"] >= -POLICY["specfleet_gate_max_c8_regression"])
        cases.append({**best, "target": want, "truth": "keep" if truth else "revert"})
    return cases


def factor(rng: random.Random, sigma: float) -> float:
    return min(1.5, max(0.7, rng.gauss(1.0, sigma))) if sigma > 0 else 1.0


def synth_bench(f: dict, unit_factor: float, rng: random.Random, sigma: float) -> dict:
    """A spec_bench result drawn from the emulator's noise model (code_edit, c=1 and c=8)."""
    runs1, tpots, runs8 = [], [], []
    for _ in range(RUNS):
        request_factors = [factor(rng, sigma) * unit_factor for _ in range(PROMPTS)]
        seconds = sum(q * (f["ttft_s"] + (TOKENS - 1) * f["tpot_s"]) for q in request_factors)
        runs1.append(PROMPTS * TOKENS / seconds)
        tpots.append(statistics.median(q * f["tpot_s"] * 1000 for q in request_factors))
        # c=8: one batch; every step takes the mean factor of the running requests.
        batch = statistics.mean(factor(rng, sigma) for _ in range(PROMPTS)) * unit_factor
        runs8.append(f["c8_tok_s"] / batch)

    def cell(runs: list[float], tpot_runs: list[float]) -> dict:
        middle = statistics.median(runs)
        return {
            "runs": [{"throughput_tok_s": t, "tpot_p50_ms": p, "failed_requests": 0}
                     for t, p in zip(runs, tpot_runs, strict=True)],
            "throughput_tok_s": {"median": middle, "runs": runs, "spread": (max(runs) - min(runs)) / middle},
            "tpot_ms": {"p50": statistics.median(tpot_runs)},
            "acceptance": None,
        }

    return {
        "ok": True, "failure": None,
        "results": {"code_edit": {"c1": cell(runs1, tpots), "c8": cell(runs8, [f["c8_step_s"] * 1000] * RUNS)}},
        "output_hashes": {"code_edit": "same"}, "output_stable": {"code_edit": True},
    }


def evaluate(cases: list[dict], sigma: float, seed: int = 2024) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for case in cases:
        matches, reasons, spreads = 0, {}, []
        for _ in range(DECISIONS):
            unit = min(1.25, max(0.8, rng.gauss(1.0, sigma * 0.67)))  # per-unit factor, both sides
            base, cand = synth_bench(case["base"], unit, rng, sigma), synth_bench(case["cand"], unit, rng, sigma)
            spreads += [bench["results"]["code_edit"]["c1"]["throughput_tok_s"]["spread"] for bench in (base, cand)]
            verdict = decide(base, cand, POLICY)
            matches += verdict["decision"] == case["truth"]
            if verdict["decision"] != case["truth"]:
                failed = [c["check"] for c in verdict["checks"] if not c["passed"]] or ["(keep)"]
                reasons[failed[0]] = reasons.get(failed[0], 0) + 1
        spread = statistics.median(spreads)
        rows.append({"unit": case["unit"], "speedup": case["speedup"], "truth": case["truth"],
                     "share": matches / DECISIONS, "wrong_by": reasons, "margin": margin(case),
                     "spread": spread, "clear": margin(case) > spread})
    return rows


def margin(case: dict) -> float:
    """How far the noiseless figures sit from the nearest gate threshold (as a share)."""
    gain = case["speedup"] - 1.0
    return min(
        abs(gain - POLICY["specfleet_gate_min_throughput_gain"]),
        abs(gain - POLICY["specfleet_gate_disable_below"]),
        abs(case["tpot_drop"] - POLICY["specfleet_gate_min_tpot_drop"]),
        abs(case["c8_change"] + POLICY["specfleet_gate_max_c8_regression"]),
    )


def main() -> None:
    cases = pick_cases()
    print("bench results: SYNTHESIZED from the emulator's performance model and noise model "
          f"({RUNS} runs x {PROMPTS} prompts x {TOKENS} tokens per side), not measured on emulator processes")
    print(f"{'target':>6}  {'unit (closest configuration)':<34} {'c=1 gain':>8} {'TPOT drop':>9} {'c=8':>7} truth")
    for case in cases:
        print(f"{case['target']:>5}x  {case['unit']:<34} {case['speedup']:>7.2f}x {case['tpot_drop'] * 100:>8.1f}% "
              f"{case['c8_change'] * 100:>+6.1f}% {case['truth']}")
    report = {"cases": [{k: v for k, v in c.items() if k not in ("base", "cand")} for c in cases],
              "decisions_per_case": DECISIONS, "synthesized": True, "by_sigma": {}}
    results = {}
    for sigma in (*EXTRA_SIGMAS, SIGMA):
        rows = evaluate(cases, sigma)
        results[sigma] = rows
        report["by_sigma"][str(sigma)] = rows
        label = "emulator default" if sigma == SIGMA else "sensitivity"
        print(f"noise sigma {sigma} ({label}):")
        for row in rows:
            wrong = f"  wrong by: {row['wrong_by']}" if row["wrong_by"] else ""
            print(f"  {row['speedup']:.2f}x ({row['truth']}): {row['share'] * 100:5.1f}% match; margin to the nearest "
                  f"threshold {row['margin'] * 100:.1f}% vs run spread {row['spread'] * 100:.1f}% "
                  f"({'clear' if row['clear'] else 'not clear'}){wrong}")
    rows = results[SIGMA]
    clear = [row for row in rows if row["clear"]]
    met = all(row["share"] >= 0.99 for row in clear)
    report["goal_met"] = met
    print(f"goal (>= 99% wherever the truth is clear of the thresholds by more than the spread): "
          f"{'met' if met else 'MISSED'} on {len(clear)} clear case(s) of {len(rows)}")
    total = sum(row["share"] * DECISIONS for row in rows)
    count = DECISIONS * len(rows)
    report["accuracy"] = total / count
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2))
    print(f"wrote {OUT.relative_to(REPO)}")
    print(f"gate accuracy: {total / count * 100:.1f}% over {count} decisions")


if __name__ == "__main__":
    main()
