"""Calibration: the performance model reproduces the published figures (+-10 %).

| figure (source)                                                   | target |
|-------------------------------------------------------------------|--------|
| Thor Llama-3.1-8B FP16, single stream (Thor workshop)             | 10.7   |
| Thor Llama-3.1-8B FP8 (Thor workshop)                             | 14.2   |
| Thor Llama-3.1-8B FP4 (Thor workshop)                             | 19.1   |
| Thor FP4 + EAGLE-3 k=5, long structured output (Thor workshop)    | 25.6   |
| EAGLE-3 k=3 speedup, code edit (Alauda AI guide, A30)             | 1.84x  |
| EAGLE-3 k=3 per-position, code edit (Alauda AI guide)             | 0.50/0.40/0.33 |
| EAGLE-3 mean acceptance length on MT-Bench, k=3 / 5 / 7           | 2.79 / 3.32 / 3.53 |
|   (vllm-project/vllm#20780, #26191)                               |        |
| EAGLE-1 mean acceptance length on MT-Bench, k=2 / 4 (vllm#16035)  | 1.89 / 2.08 |
| ngram k=5 on chat (Alauda AI guide)                               | 0.85x  |

The Thor workshop: Jetson AI Lab's GTC DC 2025 Thor workshop ("From AI Exploration to
Production Deployment", Performance Recap). The Alauda AI guide ("Speculative Decoding for vLLM
Inference Services") was measured on an A30; its ratios are applied as workload/method
properties on Thor with the 16-bit Llama-3.1-8B (same model family and size).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import EAGLE3, TARGET, TARGET_FP4, TARGET_FP8, THOR_GPU, stand_in_configs
from vllm_emulator.gpu import parse_gpu_spec
from vllm_emulator.hub import ModelInfo, parse_model_info
from vllm_emulator.perfmodel import (
    acceptance_rates,
    build_engine_perf,
    detect_workload,
    expected_decode_throughput,
    mean_acceptance_length,
)
from vllm_emulator.specconfig import validate_speculative_config

CONFIGS = stand_in_configs()
THOR = parse_gpu_spec(THOR_GPU)
SHORT_CONTEXT = 300  # short prompt, a few hundred tokens generated
LONG_CONTEXT = 600  # seed 002: ~600-700 generated tokens


def model(name: str) -> ModelInfo:
    return parse_model_info(name, Path("/m") / name, CONFIGS[name])


def perf(target: str, spec: dict[str, Any] | None = None) -> Any:
    resolved = None
    if spec is not None:
        resolved = validate_speculative_config(spec, model(target), 1, model)
    return build_engine_perf(THOR, model(target), resolved)


def tps(
    target: str,
    spec: dict[str, Any] | None = None,
    workload: str = "chat",
    context: int = SHORT_CONTEXT,
    concurrency: int = 1,
) -> float:
    estimate = expected_decode_throughput(perf(target, spec), workload, context, concurrency)
    return estimate.tokens_per_second * concurrency


def eagle3(k: int) -> dict[str, Any]:
    return {"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": k}


NGRAM5 = {"method": "ngram", "num_speculative_tokens": 5}


def emulator_figures() -> list[tuple[str, float, float]]:
    """(figure, seed target, emulator value) for the whole calibration table."""
    fp16_long = tps(TARGET, context=LONG_CONTEXT)
    return [
        ("Thor 8B FP16 tok/s", 10.7, tps(TARGET)),
        ("Thor 8B FP8 tok/s", 14.2, tps(TARGET_FP8)),
        ("Thor 8B FP4 tok/s", 19.1, tps(TARGET_FP4)),
        ("Thor FP4+EAGLE-3 k=5 long tok/s", 25.6, tps(TARGET_FP4, eagle3(5), "structured", LONG_CONTEXT)),
        ("EAGLE-3 k=3 speedup code edit", 1.84, tps(TARGET, eagle3(3), "code_edit", LONG_CONTEXT) / fp16_long),
        ("ngram k=5 speedup chat", 0.85, tps(TARGET, NGRAM5, "chat", LONG_CONTEXT) / fp16_long),
    ]


@pytest.mark.parametrize("figure,target,value", emulator_figures())
def test_calibration_table(figure: str, target: float, value: float) -> None:
    assert value == pytest.approx(target, rel=0.10), f"{figure}: {value:.3f} vs {target}"


def test_per_position_acceptance_of_code_edits() -> None:
    assert acceptance_rates("eagle3", "code_edit", 3) == pytest.approx([0.50, 0.40, 0.33], rel=0.10)


@pytest.mark.parametrize("method,k,published", [("eagle3", 3, 2.79), ("eagle3", 5, 3.32), ("eagle3", 7, 3.53),
                                                ("eagle", 2, 1.89), ("eagle", 4, 2.08)])
def test_mean_acceptance_length_on_chat_is_the_published_one(method: str, k: int, published: float) -> None:
    assert mean_acceptance_length(acceptance_rates(method, "chat", k)) == pytest.approx(published, abs=0.03)


def test_thor_speedups_of_the_eagle3_head_are_in_the_published_range() -> None:
    """Thor FP4, k=5 (the plan's), c=1: code edits and chat between the Thor workshop's 1.34x and
    what the published acceptance gives a bandwidth-bound target (Thor's step streams ~5 GiB;
    drafting a position streams the 0.8 GiB head): chat above H100's 1.65x at k=2
    (vllm#16937), whose step is launch-bound. Neither loses at c=8."""
    for workload, low, high in (("code_edit", 1.5, 1.9), ("chat", 1.65, 2.3)):
        gain_1 = tps(TARGET_FP4, eagle3(5), workload, LONG_CONTEXT) / tps(TARGET_FP4, context=LONG_CONTEXT)
        gain_8 = (tps(TARGET_FP4, eagle3(5), workload, LONG_CONTEXT, 8)
                  / tps(TARGET_FP4, context=LONG_CONTEXT, concurrency=8))
        assert low <= gain_1 <= high and 1.0 < gain_8 < gain_1, (workload, gain_1, gain_8)


def test_seed_workloads_are_detected() -> None:
    refactor = "Add docstrings and type annotations to this class and return the full updated class:\n" + "\n".join(
        [
            "class Store:",
            "    def __init__(self, path):",
            "        self.path = path",
            "    def load(self):",
            "        with open(self.path) as f:",
            "            return f.read()",
        ]
    )
    assert detect_workload(refactor) == "code_edit"
    assert detect_workload("Explain the concept of entropy in at least 800 words.") == "chat"
    assert (
        detect_workload(
            "Write a 5-sentence paragraph explaining the main benefit of using "
            "Jetson Thor for an autonomous robotics developer."
        )
        == "chat"
    )
    assert detect_workload("Write a step-by-step checklist for deploying a model.") == "structured"


def test_ngram_is_a_slight_regression_on_code_edits() -> None:
    ratio = tps(TARGET, NGRAM5, "code_edit", LONG_CONTEXT) / tps(TARGET, context=LONG_CONTEXT)
    assert 0.85 <= ratio <= 1.02


def test_speculation_gains_shrink_at_concurrency_8() -> None:
    for workload in ("code_edit", "structured", "chat"):
        for spec in (eagle3(5), NGRAM5):
            gain_1 = tps(TARGET_FP4, spec, workload) / tps(TARGET_FP4)
            gain_8 = tps(TARGET_FP4, spec, workload, concurrency=8) / tps(TARGET_FP4, concurrency=8)
            assert gain_8 < gain_1, (workload, spec["method"], gain_1, gain_8)
    assert tps(TARGET_FP4, concurrency=8) > 6 * tps(TARGET_FP4)  # batching amortises weights


def test_model_is_bandwidth_bound() -> None:
    # seed 003: "59% less data = 78% faster": FP4 over FP16 lands close to that.
    assert tps(TARGET_FP4) / tps(TARGET) == pytest.approx(1.78, rel=0.08)


def _stream_rate(server: Any, prompt: str, max_tokens: int) -> tuple[float, int]:
    """Emulated decode tok/s from client timings: (n-1)/(last - first chunk) x scale."""
    events = server.stream(
        "/v1/completions",
        {
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        },
        timeout=60,
    )
    chunks = [(t, e) for t, e in events if isinstance(e, dict) and e["choices"]]
    tokens = events[-2][1]["usage"]["completion_tokens"]
    wall = chunks[-1][0] - chunks[0][0]
    first_chunk_tokens = 1
    return (tokens - first_chunk_tokens) / wall, tokens


# The emulator paces steps against absolute deadlines, so its delivered rate is the model's
# as long as one step (model time x scale) outlasts the per-token cost of Python, HTTP and a
# loaded 2-core host. At the suite's usual 0.01 a step is ~0.5 ms and that cost shows (CI
# measured 12.1 instead of 19.1 tok/s); at 0.1 a step is ~5 ms. Streams here take ~7 s.
PACING_SCALE = "0.1"


def test_end_to_end_through_http(launch: Any, lab_env: dict[str, str]) -> None:
    lab_env["SPECFLEET_EMULATOR_TIME_SCALE"] = PACING_SCALE
    scale = float(PACING_SCALE)
    prompt = "Write a numbered list of the steps to deploy vLLM on a fleet of Jetson units."
    baseline = launch(TARGET_FP4, ["--max-model-len", "4096"])
    rate, tokens = _stream_rate(baseline, prompt, 400)
    assert tokens == 400
    assert rate * scale == pytest.approx(19.1, rel=0.10)

    speculative = launch(TARGET_FP4, ["--max-model-len", "4096", "--speculative-config", json.dumps(eagle3(5))])
    rate, tokens = _stream_rate(speculative, prompt, 1200)
    assert tokens == 1200
    assert rate * scale == pytest.approx(25.6, rel=0.10)
    info = json.loads(speculative.get("/specfleet/emulator")[2])
    assert info["time_scale"] == scale
