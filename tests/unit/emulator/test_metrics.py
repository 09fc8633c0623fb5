"""/metrics names, labels and format; counter deltas agree with the SpecDecoding log."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from conftest import TARGET, TARGET_FP4, EmulatorProcess, Launcher, parse_metrics
from vllm_emulator.metrics import format_float

LABELS = 'engine="0",model_name="llama"'
SPEC_LINE = re.compile(
    r"SpecDecoding metrics: Mean acceptance length: (?P<mal>[\d.]+), Accepted throughput: "
    r"[\d.]+ tokens/s, Drafted throughput: [\d.]+ tokens/s, Accepted: (?P<acc>\d+) tokens, "
    r"Drafted: (?P<dra>\d+) tokens, Per-position acceptance rate: (?P<pos>[\d., ]+), "
    r"Avg Draft acceptance rate: (?P<rate>[\d.]+)%"
)
CODE_PROMPT = "Refactor:\ndef add(a, b):\n    total = a + b\n    return total\ndef sub(a, b):\n    return a - b\n"


@pytest.fixture(scope="module")
def ngram_server(module_launch: Launcher) -> EmulatorProcess:
    env = {**module_launch.env, "VLLM_LOG_STATS_INTERVAL": "5"}  # every 50 ms at 0.01
    return module_launch(
        TARGET_FP4,
        [
            "--max-model-len",
            "4096",
            "--served-model-name",
            "llama",
            "--speculative-config",
            '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}',
        ],
        env=env,
    )


def test_format_float_matches_prometheus_client() -> None:
    assert format_float(0.0) == "0.0"
    assert format_float(12.0) == "12.0"
    assert format_float(1700000000.25) == "1.70000000025e+09"
    assert format_float(float("inf")) == "+Inf"


def test_names_labels_help_type_and_created(ngram_server: EmulatorProcess) -> None:
    text = ngram_server.metrics()
    for counter in (
        "prompt_tokens",
        "generation_tokens",
        "spec_decode_num_drafts",
        "spec_decode_num_draft_tokens",
        "spec_decode_num_accepted_tokens",
    ):
        assert f"# TYPE vllm:{counter}_total counter" in text
        assert f"# HELP vllm:{counter}_total " in text
        assert f"vllm:{counter}_total{{{LABELS}}} " in text
        assert f"# TYPE vllm:{counter}_created gauge" in text
        assert f"vllm:{counter}_created{{{LABELS}}} " in text
    for position in range(3):
        assert (f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LABELS},position="{position}"}} ') in text
    assert 'position="3"' not in text
    for reason in ("stop", "length", "abort"):  # labels sorted, like prometheus_client
        assert (f'vllm:request_success_total{{engine="0",finished_reason="{reason}",model_name="llama"}} ') in text
    for histogram in ("time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds"):
        assert f"# TYPE vllm:{histogram} histogram" in text
        assert f'vllm:{histogram}_bucket{{engine="0",le="+Inf",model_name="llama"}} ' in text
        assert f"vllm:{histogram}_count{{{LABELS}}} " in text
        assert f"vllm:{histogram}_sum{{{LABELS}}} " in text
    for gauge in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"):
        assert f"# TYPE vllm:{gauge} gauge" in text and f"vllm:{gauge}{{{LABELS}}} " in text


def test_baseline_server_has_no_spec_metrics(launch: Any) -> None:
    server = launch(TARGET, ["--max-model-len", "2048", "--enforce-eager"])
    assert "spec_decode" not in server.metrics()


def test_counter_deltas_match_the_spec_decoding_log(ngram_server: EmulatorProcess) -> None:
    before = parse_metrics(ngram_server.metrics())
    log_mark = len(ngram_server.stdout)
    for index in range(3):
        events = ngram_server.stream(
            "/v1/completions",
            {
                "model": "llama",
                "prompt": CODE_PROMPT + f"# {index}\n",
                "max_tokens": 150,
                "temperature": 0,
                "stream_options": {"include_usage": True},
            },
        )
        assert events[-2][1]["usage"]["completion_tokens"] == 150
    time.sleep(0.4)  # several log intervals: the last partial interval gets logged
    after = parse_metrics(ngram_server.metrics())

    def delta(name: str) -> float:
        return after[f"vllm:{name}{{{LABELS}}}"] - before[f"vllm:{name}{{{LABELS}}}"]

    drafts = delta("spec_decode_num_drafts_total")
    draft_tokens = delta("spec_decode_num_draft_tokens_total")
    accepted = delta("spec_decode_num_accepted_tokens_total")
    per_pos = [
        after[f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LABELS},position="{i}"}}']
        - before[f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{LABELS},position="{i}"}}']
        for i in range(3)
    ]
    assert draft_tokens == 3 * drafts
    assert sum(per_pos) == accepted
    assert per_pos[0] <= drafts and per_pos[0] >= per_pos[1] >= per_pos[2]  # prefix counts
    assert delta("generation_tokens_total") == 450

    lines = [SPEC_LINE.search(line) for line in ngram_server.stdout[log_mark:]]
    matches = [m for m in lines if m]
    assert matches, "no SpecDecoding metrics line was logged"
    assert sum(int(m["acc"]) for m in matches) == accepted
    assert sum(int(m["dra"]) for m in matches) == draft_tokens
    for match in matches:
        positions = [float(v) for v in match["pos"].split(", ")]
        assert len(positions) == 3
        mean_length = float(match["mal"])
        assert mean_length == pytest.approx(1 + sum(positions), abs=0.02)
        assert float(match["rate"]) == pytest.approx(100 * int(match["acc"]) / int(match["dra"]), abs=0.06)
    # Client-side formulas from counter deltas (serving-facts §2)
    assert 1 + accepted / drafts == pytest.approx(1 + sum(int(m["acc"]) for m in matches) / (draft_tokens / 3))
