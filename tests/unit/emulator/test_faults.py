"""Fault switches: crash after N requests, never ready, hang mid-stream, startup delay."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import EAGLE3_K5, TARGET, parse_metrics, port_listening, read_sse
from vllm_emulator.faults import Faults, parse_faults

ARGS = ["--max-model-len", "2048", "--enforce-eager"]


def write_faults(env: dict[str, str], faults: dict[str, Any]) -> None:
    Path(env["SPECFLEET_EMULATOR_FAULTS_FILE"]).write_text(json.dumps(faults))


def test_parse_faults() -> None:
    assert parse_faults(None) == Faults()
    assert parse_faults({"crash_after_requests": 3}).crash_after_requests == 3
    with pytest.raises(ValueError):
        parse_faults({"crash_after": 3})
    with pytest.raises(ValueError):
        parse_faults({"hang_mid_stream_after_tokens": -1})
    assert parse_faults({"loaded_draft_slowdown": 2}).loaded_draft_slowdown == 2.0
    for bad in (0.5, True, "2"):
        with pytest.raises(ValueError, match="loaded_draft_slowdown must be a number >= 1"):
            parse_faults({"loaded_draft_slowdown": bad})
    assert parse_faults({"piecewise_gap_us": 250}).piecewise_gap_us == 250.0
    assert parse_faults({}).piecewise_gap_us is None  # the model's own gap
    for bad in (-1, False, "2"):
        with pytest.raises(ValueError, match="piecewise_gap_us must be a non-negative number"):
            parse_faults({"piecewise_gap_us": bad})
    weak_chat = parse_faults({"draft_acceptance": {"chat": [0.16, 0.02, 0.01]}})
    assert weak_chat.acceptance_for("chat") == (0.16, 0.02, 0.01) and weak_chat.acceptance_for("code_edit") is None
    for bad, match in (([0.2], "must be an object"), ({"poetry": [0.1]}, "unknown workload 'poetry'"),
                       ({"chat": []}, "non-increasing list"), ({"chat": [0.1, 0.2]}, "non-increasing list"),
                       ({"chat": [1.5]}, "non-increasing list"), ({"chat": [True]}, "non-increasing list")):
        with pytest.raises(ValueError, match=match):
            parse_faults({"draft_acceptance": bad})


def test_crash_after_requests(launch: Any, lab_env: dict[str, str]) -> None:
    write_faults(lab_env, {"crash_after_requests": 2})
    server = launch(TARGET, ARGS)
    for _ in range(2):
        status, body = server.post("/v1/completions", {"prompt": "hi", "max_tokens": 5, "temperature": 0})
        assert status == 200 and body["usage"]["completion_tokens"] == 5
    assert server.wait_exit(10) == 1
    assert not port_listening(server.port)
    assert "crash_after_requests=2" in server.output


def test_never_ready(launch: Any, lab_env: dict[str, str]) -> None:
    write_faults(lab_env, {"never_ready": True})
    server = launch(TARGET, ARGS, ready=False)
    time.sleep(1.0)  # several times a normal (eager) start at this time scale
    assert server.proc.poll() is None
    assert not port_listening(server.port)
    assert "Application startup complete." not in server.output
    assert "GPU KV cache size" in server.output


def test_hang_mid_stream(launch: Any, lab_env: dict[str, str]) -> None:
    write_faults(lab_env, {"hang_mid_stream_after_tokens": 5})
    server = launch(TARGET, ARGS)
    conn = server.connection(timeout=1.0)
    conn.request(
        "POST",
        "/v1/completions",
        body=json.dumps({"prompt": "hello", "max_tokens": 50, "temperature": 0, "stream": True}),
        headers={"content-type": "application/json"},
    )
    response = conn.getresponse()
    assert response.status == 200
    with pytest.raises((socket.timeout, TimeoutError)):
        read_sse(response)
    conn.close()
    assert server.get("/health")[0] == 200
    metrics = server.metrics()
    assert 'vllm:generation_tokens_total{engine="0",model_name="' + TARGET + '"} 5.0' in metrics


def test_startup_delay(launch: Any, lab_env: dict[str, str]) -> None:
    write_faults(lab_env, {"startup_delay_s": 100})  # 1 s at the 0.01 time scale
    server = launch(TARGET, ARGS, ready=False)
    assert server.wait_ready() >= 1.0


def test_speculation_only_faults_leave_the_baseline_alone(launch: Any, lab_env: dict[str, str]) -> None:
    write_faults(lab_env, {"only_when_speculating": True, "drafter_unbudgeted_mib": 200000})
    baseline = launch(TARGET, ARGS)
    assert baseline.get("/health")[0] == 200
    speculative = launch(TARGET, ARGS + ["--speculative-config", EAGLE3_K5], ready=False)
    assert speculative.wait_exit() != 0
    assert "Free memory on device" in speculative.output


def test_rejected_speculative_config(launch: Any, lab_env: dict[str, str]) -> None:
    write_faults(lab_env, {"reject_speculative_config": True})
    server = launch(TARGET, ARGS + ["--speculative-config", EAGLE3_K5], ready=False)
    assert server.wait_exit() != 0
    assert "validation error for SpeculativeConfig" in server.output


def _chat_acceptance(server: Any) -> float:
    """Accepted over drafted tokens of one greedy chat answer, from /metrics."""
    def totals() -> tuple[float, float]:
        found = parse_metrics(server.metrics())
        return tuple(sum(value for key, value in found.items()
                         if key.startswith(f"vllm:spec_decode_num_{name}_total{{"))
                     for name in ("accepted_tokens", "draft_tokens"))  # type: ignore[return-value]
    before = totals()
    status, body = server.post("/v1/completions", {"prompt": "Tell me about your favourite city and why you like it.",
                                                   "max_tokens": 200, "temperature": 0, "ignore_eos": True})
    assert status == 200 and body["usage"]["completion_tokens"] == 200
    accepted, drafted = (after - first for after, first in zip(totals(), before, strict=True))
    return accepted / drafted


def test_draft_acceptance_makes_a_head_draft_poorly_on_chat_only(launch: Any, lab_env: dict[str, str]) -> None:
    """The calibrated EAGLE-3 head accepts most of its chat drafts (MT-Bench: 2.3 of 5 at k=5);
    the switch's curve (0.16 / 0.02 / 0.01 ...) leaves it about 4%."""
    spec = ARGS + ["--speculative-config", EAGLE3_K5]
    assert _chat_acceptance(launch(TARGET, spec)) > 0.3
    write_faults(lab_env, {"draft_acceptance": {"chat": [0.16, 0.02, 0.01]}})
    assert _chat_acceptance(launch(TARGET, spec)) < 0.1
