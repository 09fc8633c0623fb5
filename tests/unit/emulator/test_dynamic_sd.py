"""Dynamic speculative decoding: `num_speculative_tokens_per_batch_size` in --speculative-config.

vLLM (vllm-project/vllm PR #32374, first released in v0.24.0): `[[min_batch, max_batch, k],
...]`, typed `list[tuple[int, int, int]] | None` in vllm/config/speculative.py, checked and
expanded by the engine core's Scheduler (vllm/v1/spec_decode/dynamic/utils.py); k = 0 turns
speculation off in a band. The emulated 0.20.2 does not know the key.
"""

from __future__ import annotations

import dataclasses
import json
import random
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import EAGLE3, TARGET_FP4, THOR_GPU, Launcher, parse_metrics, stand_in_configs
from vllm_emulator.engine import Engine, GenerationRequest, NoiseModel, StepOutput, StepRecord
from vllm_emulator.gpu import parse_gpu_spec
from vllm_emulator.hub import ModelInfo, parse_model_info
from vllm_emulator.metrics import VllmMetrics
from vllm_emulator.perfmodel import PIECEWISE_GAP_S, build_engine_perf, expected_decode_throughput
from vllm_emulator.specconfig import (
    DynamicScheduleError,
    SpecConfigError,
    dynamic_sd_lookup,
    validate_speculative_config,
)

CONFIGS = stand_in_configs()
THOR = parse_gpu_spec(THOR_GPU)
FIELD = "num_speculative_tokens_per_batch_size"
# Speculate alone (k = 5), not at all from two requests on: the bands the tests read.
BANDS = [[1, 1, 5], [2, 256, 0]]


def model(name: str) -> ModelInfo:
    return parse_model_info(name, Path("/m") / name, CONFIGS[name])


def eagle3(bands: Any = None, k: int = 5) -> dict[str, Any]:
    raw: dict[str, Any] = {"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": k}
    if bands is not None:
        raw[FIELD] = bands
    return raw


def resolve(raw: dict[str, Any], version: str) -> Any:
    return validate_speculative_config(raw, model(TARGET_FP4), 1, model, vllm_version=version)


def error_text(raw: dict[str, Any], version: str = "0.24.0") -> str:
    with pytest.raises(SpecConfigError) as caught:
        resolve(raw, version)
    return caught.value.text


# --- the key exists from vLLM 0.24.0 on -------------------------------------------------------


@pytest.mark.parametrize("version", ["0.20.2", "0.23.0"])
def test_older_versions_refuse_the_key(version: str) -> None:
    text = error_text(eagle3(BANDS), version)
    assert text.startswith("pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig")
    assert (
        f"{FIELD}\n  Unexpected keyword argument [type=unexpected_keyword_argument, "
        "input_value=[[1, 1, 5], [2, 256, 0]], input_type=list]"
    ) in text


@pytest.mark.parametrize("version", ["0.24.0", "0.26.1rc1.dev251", "0.33.0"])
def test_newer_versions_take_it(version: str) -> None:
    resolved = resolve(eagle3([[1, 16, 3], ["17", 64, 2.0]]), version)
    assert resolved.num_speculative_tokens_per_batch_size == ((1, 16, 3), (17, 64, 2))
    assert resolved.as_dict()[FIELD] == [[1, 16, 3], [17, 64, 2]]
    assert resolve(eagle3(), version).num_speculative_tokens_per_batch_size is None


@pytest.mark.parametrize(
    "bands,expected",
    [
        ({"1-16": 3}, f"{FIELD}\n  Input should be a valid list [type=list_type"),
        ([5], f"{FIELD}.0\n  Input should be a valid tuple [type=tuple_type, input_value=5, input_type=int]"),
        ([[1, 16]], f"{FIELD}.0.2\n  Field required [type=missing, input_value=[1, 16], input_type=list]"),
        ([[1, 16, 3, 9]], f"{FIELD}.0\n  Tuple should have at most 3 items after validation, not 4 [type=too_long"),
        ([[1, "x", 3]], f"{FIELD}.0.1\n  Input should be a valid integer, unable to parse string as an integer"),
        ([[1, 16, 1.5]], f"{FIELD}.0.2\n  Input should be a valid integer, got a number with a fractional part"),
    ],
)
def test_shape_is_checked_as_pydantic_does(bands: Any, expected: str) -> None:
    assert expected in error_text(eagle3(bands))


# --- the engine core's check (vllm/v1/spec_decode/dynamic/utils.py) -------------------------


@pytest.mark.parametrize(
    "bands,message",
    [
        (((2, 16, 3),), "The first batch-size range must start at 1 so every runtime batch size has a defined "
                        "schedule."),
        (((1, 16, 3), (16, 32, 2)), "Batch-size ranges must be non-overlapping and sorted."),
        (((1, 16, -1),), "num_speculative_tokens_per_batch_size values must be >= 0."),
        (((0, 16, 1),), "Batch-size range (0, 16) must be positive."),
        (((1, 16, 3), (40, 32, 1)), "Batch-size range start must be <= end for (40, 32, 1)."),
    ],
)
def test_bad_tables_are_refused_with_vllms_texts(bands: Any, message: str) -> None:
    with pytest.raises(DynamicScheduleError) as caught:
        dynamic_sd_lookup(bands, 256, 3)
    assert str(caught.value) == message
    failure = caught.value.to_failure()
    assert failure.in_engine_core and failure.exception_text == f"ValueError: {message}"


def test_gaps_carry_forward_and_k_is_clamped() -> None:
    # vLLM's own regression cases (tests/v1/spec_decode/test_dynamic_sd.py).
    lookup = dynamic_sd_lookup(((1, 16, 3), (32, 128, 2), (256, 2048, 0)), 256, 3)
    assert lookup is not None
    assert [lookup[b] for b in (1, 16, 17, 31, 32, 128, 129, 255, 256)] == [3, 3, 3, 3, 2, 2, 2, 2, 0]
    assert set(dynamic_sd_lookup(((1, 256, 4),), 256, 3)[1:]) == {3}  # type: ignore[index]
    assert dynamic_sd_lookup(((32, 64, 1), (1, 16, 3)), 64, 3)[20] == 3  # type: ignore[index]  # sorted first
    assert dynamic_sd_lookup((), 16, 3) is None and dynamic_sd_lookup(None, 16, 3) is None


# --- the performance model: the band picks the draft length ------------------------------------


def perf(spec: dict[str, Any] | None, max_num_seqs: int = 256, gap_s: float = PIECEWISE_GAP_S) -> Any:
    """The step model as the emulator's start builds it: with a table, PIECEWISE graphs (a gap of
    ``gap_s`` at each layer's graph boundary, default perfmodel's)."""
    resolved = None if spec is None else resolve(spec, "0.24.0")  # build_engine_perf uses TARGET_FP4
    engine_perf = build_engine_perf(THOR, model(TARGET_FP4), resolved)
    if resolved is not None and resolved.num_speculative_tokens_per_batch_size is not None:
        lookup = dynamic_sd_lookup(resolved.num_speculative_tokens_per_batch_size, max_num_seqs, 5)
        engine_perf = dataclasses.replace(engine_perf, draft_lookup=lookup,
                                          piecewise_gap_s=gap_s)
    return engine_perf


def tps(engine_perf: Any, concurrency: int) -> float:
    return expected_decode_throughput(engine_perf, "code_edit", 300, concurrency).tokens_per_second * concurrency


def test_throughput_follows_the_bands() -> None:
    dynamic, static, baseline = perf(eagle3(BANDS)), perf(eagle3()), perf(None)
    assert dynamic.draft_length(1) == 5 and dynamic.draft_length(8) == 0 and dynamic.draft_length(0) == 5
    # k = 5 alone, and no speculation from two on, each with the PIECEWISE graphs' gaps: under 1%
    # of a Thor FP4 8B step.
    assert 0.99 < tps(dynamic, 1) / tps(static, 1) < 0.997
    assert 0.99 < tps(dynamic, 8) / tps(baseline, 8) < 0.997
    assert tps(static, 8) != pytest.approx(tps(baseline, 8))
    assert tps(dynamic, 1) > 1.3 * tps(baseline, 1)  # code edits gain alone


def test_a_costlier_piecewise_fallback_costs_beyond_the_gate_margin() -> None:
    """The fault switch's 250 us a layer (a host whose graph boundaries cost more): the table
    loses more than the gate's 3% to plain speculation at c=1 and to the baseline at c=8."""
    costly, static, baseline = perf(eagle3(BANDS), gap_s=250e-6), perf(eagle3()), perf(None)
    assert tps(costly, 1) / tps(static, 1) < 0.91 and tps(costly, 8) / tps(baseline, 8) < 0.9


# --- the engine: each step's batch picks its band ----------------------------------------------


def run_engine(
    engine_perf: Any, concurrency: int, tokens: int = 120, workload: str = "code_edit", slowdown: float = 1.0,
    acceptance: tuple[float, ...] | None = None,
) -> tuple[list[StepRecord], dict[str, float]]:
    """`concurrency` equal requests admitted in the same step; the engine unpaced. `slowdown`:
    the loaded_draft_slowdown fault switch; `acceptance`: the draft_acceptance one's curve."""
    records: list[StepRecord] = []
    metrics = VllmMetrics("m", 5 if engine_perf.method else None, {"block_size": "16"})
    engine = Engine(engine_perf, metrics, 10**6, 256, 0.0, NoiseModel(), step_observer=records.append,
                    loaded_draft_slowdown=slowdown, draft_acceptance=lambda workload: acceptance)
    requests = [
        GenerationRequest(f"r{i}", 64, [" x"] * tokens, "length", workload, 0.0, random.Random(i))
        for i in range(concurrency)
    ]
    for request in requests:
        engine.submit(request)
    engine.start()
    for request in requests:
        finish = None
        while finish is None:
            item = request.outbox.get(timeout=10)
            assert isinstance(item, StepOutput)
            finish = item.finish_reason
    return records, parse_metrics(metrics.render())


def spec_counts(samples: dict[str, float]) -> tuple[float, float]:
    drafts = samples.get('vllm:spec_decode_num_drafts_total{engine="0",model_name="m"}', 0.0)
    draft_tokens = samples.get('vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"}', 0.0)
    return drafts, draft_tokens


def modelled_rate(records: list[StepRecord], concurrency: int, tokens: int = 120) -> float:
    return concurrency * tokens / sum(record.modelled_s for record in records)


def test_engine_picks_the_draft_length_per_step() -> None:
    dynamic, static, baseline = perf(eagle3(BANDS)), perf(eagle3()), perf(None)
    alone, alone_metrics = run_engine(dynamic, 1)
    assert {r.draft_tokens for r in alone if r.generation_requests} == {5}
    drafts, draft_tokens = spec_counts(alone_metrics)
    assert drafts > 0 and draft_tokens == 5 * drafts
    eight, eight_metrics = run_engine(dynamic, 8)
    assert {r.draft_tokens for r in eight} == {0}
    assert spec_counts(eight_metrics) == (0.0, 0.0)  # no drafting, no counts
    # Speed: as the static k = 5 server alone, as the baseline at eight.
    assert modelled_rate(alone, 1) > 1.3 * modelled_rate(run_engine(baseline, 1)[0], 1)
    assert modelled_rate(alone, 1) == pytest.approx(modelled_rate(run_engine(static, 1)[0], 1), rel=0.1)
    assert modelled_rate(eight, 8) == pytest.approx(modelled_rate(run_engine(baseline, 8)[0], 8), rel=0.02)
    assert modelled_rate(eight, 8) < 0.9 * modelled_rate(run_engine(static, 8)[0], 8)  # code still gains at 8
    # With a head that drafts poorly on chat, where k = 5 at eight costs more than it brings, the
    # k = 0 band wins it back.
    weak = (0.16, 0.02, 0.01)
    chat_eight = modelled_rate(run_engine(dynamic, 8, workload="chat", acceptance=weak)[0], 8)
    assert chat_eight > 1.2 * modelled_rate(run_engine(static, 8, workload="chat", acceptance=weak)[0], 8)


def test_the_loaded_draft_slowdown_costs_only_steps_that_draft_for_several_sequences() -> None:
    """The fault switch for speculation that pays alone and loses under load: a static k loses
    at eight, and a table that drafts at batch 1 only serves as the baseline there."""
    dynamic, static, baseline = perf(eagle3(BANDS)), perf(eagle3()), perf(None)
    alone = modelled_rate(run_engine(static, 1, slowdown=2.0)[0], 1)
    assert alone == pytest.approx(modelled_rate(run_engine(static, 1)[0], 1), rel=0.02)
    assert alone > 1.3 * modelled_rate(run_engine(baseline, 1)[0], 1)
    base_eight = modelled_rate(run_engine(baseline, 8, slowdown=2.0)[0], 8)
    assert base_eight == pytest.approx(modelled_rate(run_engine(baseline, 8)[0], 8), rel=0.02)
    assert modelled_rate(run_engine(static, 8, slowdown=2.0)[0], 8) < 0.9 * base_eight
    assert modelled_rate(run_engine(dynamic, 8, slowdown=2.0)[0], 8) == pytest.approx(base_eight, rel=0.02)


# --- through `vllm serve` ----------------------------------------------------------------------

SPEC_ARGS = ["--max-model-len", "4096", "--served-model-name", "llama"]
CODE = "Add type hints:\n```python\ndef load(path):\n    with open(path) as f:\n        return f.read()\n```"


def test_refused_by_the_emulated_0_20(launch: Launcher) -> None:
    server = launch(TARGET_FP4, [*SPEC_ARGS, "--speculative-config", json.dumps(eagle3(BANDS))], ready=False)
    assert server.wait_exit() == 1
    assert "1 validation error for SpeculativeConfig" in server.output
    assert f"{FIELD}\n" in server.output and "Unexpected keyword argument" in server.output


def test_bad_table_fails_the_engine_core(launch: Launcher, lab_env: dict[str, str]) -> None:
    env = {**lab_env, "SPECFLEET_EMULATOR_VLLM_VERSION": "0.24.0"}
    raw = json.dumps(eagle3([[2, 16, 3]]))
    server = launch(TARGET_FP4, [*SPEC_ARGS, "--enforce-eager", "--speculative-config", raw], env=env, ready=False)
    assert server.wait_exit() == 1
    output = server.output
    assert "ValueError: The first batch-size range must start at 1 so every runtime batch size" in output
    assert "RuntimeError: Engine core initialization failed." in output
    assert "build_dynamic_sd_schedule_lookup" in output


def test_served_bands_change_drafting_with_concurrency(launch: Launcher, lab_env: dict[str, str]) -> None:
    env = {**lab_env, "SPECFLEET_EMULATOR_VLLM_VERSION": "0.24.0", "SPECFLEET_EMULATOR_TIME_SCALE": "0.05"}
    server = launch(TARGET_FP4, [*SPEC_ARGS, "--speculative-config", json.dumps(eagle3(BANDS))], env=env)
    assert (
        "Dynamic speculative decoding changes the target verification length at runtime. Overriding "
        "cudagraph_mode from FULL_AND_PIECEWISE to PIECEWISE for reliability." in server.output
    )
    info = json.loads(server.get("/specfleet/emulator")[2])
    assert info["speculative"][FIELD] == BANDS

    def counts() -> tuple[float, float, float]:
        samples = parse_metrics(server.metrics())
        label = '{engine="0",model_name="llama"}'
        return (samples[f"vllm:spec_decode_num_drafts_total{label}"],
                samples[f"vllm:spec_decode_num_draft_tokens_total{label}"],
                samples[f"vllm:generation_tokens_total{label}"])

    def body(index: int) -> dict[str, Any]:
        return {"model": "llama", "prompt": f"{index}: {CODE}", "max_tokens": 150, "temperature": 0,
                "ignore_eos": True}

    before = counts()
    server.stream("/v1/completions", body(0))
    alone = [after - first for after, first in zip(counts(), before, strict=True)]
    assert alone[0] > 0 and alone[1] == 5 * alone[0] and alone[2] == 150
    barrier = threading.Barrier(8)

    def worker(index: int) -> None:
        barrier.wait()
        server.stream("/v1/completions", body(index), timeout=60)

    before = counts()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(1, 9)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    eight = [after - first for after, first in zip(counts(), before, strict=True)]
    assert eight[2] == 8 * 150
    # Only the steps a request ran alone (arrival skew, the last one's tail) drafted.
    assert eight[0] / eight[2] < 0.25 * alone[0] / alone[2]
