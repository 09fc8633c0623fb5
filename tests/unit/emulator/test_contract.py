"""Contract: the toolkit's client code reads the emulator and real vLLM identically.

The real side is what vLLM 0.32 on CPU printed and served (captured by
lab/engines/vllm-cpu/capture_fixtures.py into tests/integration/vllm_cpu/fixtures; the slow
lane re-checks it live). The emulator side runs live here. The same functions parse both:
the SSE parser and stream state, the Prometheus parser and spec-decode counters, the error
reader and the startup-log classifier.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specfleet.fleet.plugins.module_utils import bench_http, bench_stream, spec_metrics
from ansible_collections.specfleet.fleet.plugins.module_utils.vllm_logs import classify, resolved_spec_config
from conftest import DRAFT_1B, TARGET

REAL = Path(__file__).resolve().parents[2] / "integration" / "vllm_cpu" / "fixtures"
NGRAM = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4})
ARGS = ["--max-model-len", "2048", "--enforce-eager"]


def sse_events(raw: bytes) -> list[Any]:
    parser = bench_stream.SSEParser()
    events = parser.feed(raw) + parser.close()
    return [event if event == "[DONE]" else json.loads(event) for event in events]


def stream_shape(events: list[Any]) -> dict[str, Any]:
    """What the bench relies on in a stream, independent of the text."""
    assert events[-1] == "[DONE]"
    usage_chunk = events[-2]
    content_chunks = [e for e in events[:-2] if e["choices"] and e["choices"][0].get("delta", {}).get("content")]
    return {
        "object": {e["object"] for e in events[:-1]},
        "usage_chunk_choices": usage_chunk["choices"],
        "usage_keys": sorted(k for k in usage_chunk["usage"] if k != "prompt_tokens_details"),
        "has_content": bool(content_chunks),
        "delta_keys": sorted({k for e in content_chunks for k in e["choices"][0]["delta"]}),
    }


def metric_shape(text: str) -> dict[str, set]:
    samples = spec_metrics.parse_prometheus(text)
    spec = {name for name, _, _ in samples if name.startswith("vllm:spec_decode")}
    labels = {name: tuple(sorted(labels)) for name, labels, _ in samples if name.startswith("vllm:spec_decode")}
    return {"spec_names": spec, "spec_labels": set(labels.values())}


@pytest.fixture(scope="module")
def emulator_ngram(module_launch: Any) -> Any:
    return module_launch(TARGET, ARGS + ["--speculative-config", NGRAM])


def chat_body() -> dict[str, Any]:
    return {"model": TARGET, "messages": [{"role": "user", "content": "The unit reads the metrics. Summarise."}],
            "max_tokens": 16, "temperature": 0.0, "top_p": 1.0, "seed": 1234,
            "stream_options": {"include_usage": True}}


def test_stream_shape_matches(emulator_ngram: Any) -> None:
    real = stream_shape(sse_events((REAL / "ngram" / "sse_chat.txt").read_bytes()))
    events = emulator_ngram.stream("/v1/chat/completions", chat_body())
    emulated = stream_shape([data for _, data in events])
    assert emulated == real
    assert real["usage_chunk_choices"] == [] and real["usage_keys"] == ["completion_tokens", "prompt_tokens",
                                                                         "total_tokens"]


def test_stream_state_counts_tokens_from_usage_on_both(emulator_ngram: Any) -> None:
    for raw in ((REAL / "ngram" / "sse_chat.txt").read_bytes(),
                b"".join(f"data: {json.dumps(d) if d != '[DONE]' else d}\n\n".encode()
                         for _, d in emulator_ngram.stream("/v1/chat/completions", chat_body()))):
        events = sse_events(raw)
        usage = events[-2]["usage"]
        chunks = [e for e in events[:-2] if e["choices"][0]["delta"].get("content")]
        # Speculation packs several tokens into a chunk: chunks are never the token count.
        assert usage["completion_tokens"] >= len(chunks)


def test_spec_decode_metrics_match(emulator_ngram: Any) -> None:
    real_text = (REAL / "ngram" / "metrics_after.txt").read_text()
    emulated_text = emulator_ngram.metrics()
    assert metric_shape(emulated_text) == metric_shape(real_text)
    for text in (real_text, emulated_text):
        counters = spec_metrics.spec_decode_counters(text, model_name=TARGET)
        assert counters is not None and set(counters) == {"drafts", "draft_tokens", "accepted", "per_position"}
        assert sorted(counters["per_position"]) == [0, 1, 2]


def test_baseline_exposes_no_spec_counters(module_launch: Any) -> None:
    assert spec_metrics.spec_decode_counters((REAL / "none" / "metrics_after.txt").read_text()) is None
    assert spec_metrics.spec_decode_counters(module_launch(TARGET, ARGS).metrics()) is None


@pytest.mark.parametrize(("fixture", "body_change", "status"), [
    ("min_p_chat.json", {"min_p": 0.1}, 400),
    ("max_tokens_too_large_chat.json", {"max_tokens": 100000}, 400),
])
def test_error_shapes_match(emulator_ngram: Any, fixture: str, body_change: dict, status: int) -> None:
    real = json.loads((REAL / "ngram" / "errors" / fixture).read_text())
    got_status, body = emulator_ngram.post("/v1/chat/completions", {**chat_body(), **body_change})
    assert (got_status, real["status"]) == (status, status)
    assert sorted(body["error"]) == sorted(real["body"]["error"])
    assert body["error"]["type"] == real["body"]["error"]["type"]
    # The client reads both the same way: the message it reports is vLLM's own.
    reader = bench_http.error_message(got_status, json.dumps(body).encode())
    assert reader.startswith(f"HTTP {status}") and body["error"]["message"] in reader, reader
    assert bench_http.error_message(real["status"], json.dumps(real["body"]).encode()).startswith(f"HTTP {status}")


REJECTED = {
    "ngram_lookup_min_gt_max": "spec_config_rejected",
    "tensor_parallel_size_key": "spec_config_rejected",
    "unknown_method": "spec_config_rejected",
    "draft_model_without_num_speculative_tokens": "spec_config_rejected",
    "missing_draft_model": "model_missing_offline",
    "missing_target_model": "model_missing_offline",
    "invalid_json": "spec_config_rejected",
}


@pytest.mark.parametrize(("case", "expected"), sorted(REJECTED.items()))
def test_classifier_reads_real_and_emulated_failures_alike(launch: Any, case: str, expected: str) -> None:
    real_log = (REAL / "rejected" / f"{case}.log").read_text()
    assert classify(real_log)[0] == expected
    summary = json.loads((REAL / "rejected" / "summary.json").read_text())[case]
    config = summary["speculative_config"]
    # The same request, with the lab's stand-in names for the tiny real models.
    if isinstance(config, dict) and config.get("model") == "specfleet/tiny-llama-draft-copy":
        config = {**config, "model": DRAFT_1B}
    if case == "missing_target_model":
        extra = []
    else:
        extra = ["--speculative-config", config if isinstance(config, str) else json.dumps(config)]
    model = "specfleet/no-such-model" if case == "missing_target_model" else TARGET
    process = launch(model, ARGS + extra, ready=False)
    assert process.wait_exit() != 0
    assert classify(process.output)[0] == expected, process.output[-2000:]


def test_startup_lines_match(emulator_ngram: Any) -> None:
    real = (REAL / "ngram" / "startup.log").read_text()
    for text in (real, emulator_ngram.output):
        assert "Application startup complete." in text
        assert "Async scheduling not supported with ngram-based speculative decoding" in text
        assert resolved_spec_config(text)["method"] == "ngram"
    assert resolved_spec_config(real)["num_speculative_tokens"] == 3
    assert resolved_spec_config(emulator_ngram.output)["num_speculative_tokens"] == 3


def test_invalid_json_error_line_matches_real(launch: Any) -> None:
    real = (REAL / "rejected" / "invalid_json.log").read_text()
    process = launch(TARGET, ARGS + ["--speculative-config", '{"method": "ngram", num_speculative_tokens: 3'],
                     ready=False)
    assert process.wait_exit() == 2
    prefix = "vllm serve: error: argument --speculative-config/-sc: Value "
    assert prefix in real and prefix in process.output
