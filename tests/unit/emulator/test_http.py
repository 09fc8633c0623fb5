"""The OpenAI-compatible API: shapes, streaming, usage chunk, errors, auth."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from conftest import EAGLE3_K5, TARGET, TARGET_FP4, EmulatorProcess, Launcher

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
CODE_PROMPT = (
    "Add type hints to this class and return the whole class:\n"
    "class Cache:\n    def __init__(self, size):\n        self.size = size\n"
    "        self.items = {}\n\n    def get(self, key):\n        return self.items.get(key)\n"
)
SPEC_ARGS = ["--max-model-len", "4096", "--speculative-config", EAGLE3_K5, "--served-model-name", "llama-fp4"]


@pytest.fixture(scope="module")
def spec_server(module_launch: Launcher) -> EmulatorProcess:
    return module_launch(TARGET_FP4, [*SPEC_ARGS, "llama"])


@pytest.fixture(scope="module")
def base_server(module_launch: Launcher) -> EmulatorProcess:
    return module_launch(TARGET, ["--max-model-len", "2048", "--api-key", "sk-lab", "--enforce-eager"])


def chat_body(content: str, **extra: Any) -> dict[str, Any]:
    return {"model": "llama-fp4", "messages": [{"role": "user", "content": content}], "temperature": 0, **extra}


def test_health_version_models_and_label(spec_server: EmulatorProcess) -> None:
    status, headers, body = spec_server.get("/health")
    assert status == 200 and body == b""
    assert "specfleet-vllm-emulator" in headers["Server"]
    status, _, body = spec_server.get("/version")
    assert json.loads(body) == {"version": "0.20.2"}
    status, _, body = spec_server.get("/v1/models")
    models = json.loads(body)
    assert [m["id"] for m in models["data"]] == ["llama-fp4", "llama"]
    assert models["data"][0]["max_model_len"] == 4096
    assert models["data"][0]["root"] == TARGET_FP4
    status, _, body = spec_server.get("/specfleet/emulator")
    info = json.loads(body)
    assert info["emulator"] is True and info["speculative"]["method"] == "eagle3"


def test_streaming_chat_shape_with_usage(spec_server: EmulatorProcess) -> None:
    events = spec_server.stream(
        CHAT, chat_body("Tell me about Jetson Thor.", max_tokens=40, stream_options={"include_usage": True})
    )
    payloads = [e for _, e in events]
    assert payloads[-1] == "[DONE]"
    usage_chunk = payloads[-2]
    assert usage_chunk["choices"] == [] and usage_chunk["object"] == "chat.completion.chunk"
    assert usage_chunk["usage"]["completion_tokens"] == 40
    assert usage_chunk["usage"]["total_tokens"] == usage_chunk["usage"]["prompt_tokens"] + 40
    content_chunks = payloads[:-2]
    assert content_chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "llama-fp4" for c in content_chunks)
    assert content_chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in content_chunks[:-1])


def test_empty_stream_options_enable_usage_and_absent_do_not(spec_server: EmulatorProcess) -> None:
    with_empty = [e for _, e in spec_server.stream(CHAT, chat_body("Hi", max_tokens=8, stream_options={}))]
    assert with_empty[-2]["usage"]["completion_tokens"] == 8
    without = [e for _, e in spec_server.stream(CHAT, chat_body("Hi", max_tokens=8))]
    assert all("usage" not in e for e in without[:-1])


def test_speculation_puts_several_tokens_in_one_chunk(spec_server: EmulatorProcess) -> None:
    events = spec_server.stream(
        COMPLETIONS,
        {
            "model": "llama",
            "prompt": CODE_PROMPT,
            "max_tokens": 120,
            "temperature": 0,
            "stream_options": {"include_usage": True},
        },
    )
    payloads = [e for _, e in events]
    text_chunks = [e for e in payloads[:-2] if e["choices"]]
    assert payloads[-2]["usage"]["completion_tokens"] == 120
    assert len(text_chunks) < 100  # code edits accept ~1.7 drafts per step at k=5
    assert all(c["object"] == "text_completion" for c in text_chunks)


def test_non_streaming_responses(spec_server: EmulatorProcess) -> None:
    status, chat = spec_server.post(CHAT, chat_body("Hello", max_tokens=12))
    assert status == 200 and chat["object"] == "chat.completion"
    assert chat["choices"][0]["message"]["role"] == "assistant"
    assert chat["usage"]["completion_tokens"] == 12
    status, completion = spec_server.post(COMPLETIONS, {"model": "llama", "prompt": "Hello", "temperature": 0})
    assert status == 200 and completion["object"] == "text_completion"
    assert completion["usage"]["completion_tokens"] == 16  # OpenAI's default max_tokens


def test_max_tokens_over_model_length(spec_server: EmulatorProcess) -> None:
    status, body = spec_server.post(CHAT, chat_body("Hello", max_tokens=5000))
    assert status == 400
    error = body["error"]
    assert error["type"] == "BadRequestError" and error["code"] == 400
    assert "This model's maximum context length is 4096 tokens" in error["message"]


@pytest.mark.parametrize("extra", [{"min_p": 0.05}, {"logit_bias": {"42": 5}}])
def test_min_p_and_logit_bias_rejected_when_speculating(spec_server: EmulatorProcess, extra: dict[str, Any]) -> None:
    status, body = spec_server.post(CHAT, chat_body("Hello", max_tokens=4, **extra))
    assert status == 400
    assert body["error"]["message"] == (
        "The min_p and logit_bias sampling parameters are not yet supported with speculative decoding."
    )
    assert body["error"]["type"] == "BadRequestError"


def test_unknown_model_is_404(spec_server: EmulatorProcess) -> None:
    status, body = spec_server.post(CHAT, {**chat_body("Hi"), "model": "gpt-5"})
    assert status == 404
    assert body["error"]["type"] == "NotFoundError"
    assert body["error"]["message"] == "The model `gpt-5` does not exist."


def test_stream_options_without_stream(spec_server: EmulatorProcess) -> None:
    status, body = spec_server.post(CHAT, chat_body("Hi", stream_options={}))
    assert status == 400 and "stream=True" in body["error"]["message"]


def test_api_key_guards_v1_only(base_server: EmulatorProcess) -> None:
    status, _ = base_server.post(
        CHAT, {"model": TARGET, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    )
    assert status == 401
    assert base_server.get("/v1/models")[0] == 401
    assert base_server.get("/v1/models", {"authorization": "Bearer sk-lab"})[0] == 200
    assert base_server.get("/health")[0] == 200
    assert base_server.get("/metrics")[0] == 200
    status, body = base_server.post(
        CHAT,
        {
            "model": TARGET,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2,
            "min_p": 0.1,
            "temperature": 0,
        },
        {"authorization": "Bearer sk-lab"},
    )
    assert status == 200  # min_p is fine without speculation


def test_concurrency_8_streams_interleave(launch: Launcher, lab_env: dict[str, str]) -> None:
    # Paced at the lab's x 0.05, not the module's x 0.01: there a 200-token stream lasts
    # ~0.15 s of wall time, less than the skew between eight threads starting on a loaded
    # machine. At x 0.05 it lasts ~0.75 s.
    server = launch(TARGET_FP4, SPEC_ARGS, env={**lab_env, "SPECFLEET_EMULATOR_TIME_SCALE": "0.05"})
    results: dict[int, list[tuple[float, Any]]] = {}
    start = threading.Barrier(8)

    def worker(index: int) -> None:
        start.wait()
        results[index] = server.stream(
            CHAT,
            chat_body(f"Question {index}: explain caching.", max_tokens=200, stream_options={"include_usage": True}),
        )

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(results) == 8
    for events in results.values():
        assert events[-2][1]["usage"]["completion_tokens"] == 200
    # Streams really overlap: when the first stream ends, the others have their first token
    # too (served one after another, none would). One may lag: on a loaded machine the
    # emulator's threads get the CPU late and a response can start seconds after the rest.
    first_done = min(events[-1][0] for events in results.values())
    started = [index for index, events in results.items() if events[1][0] < first_done]
    assert len(started) >= 7, {index: (events[1][0], events[-1][0]) for index, events in results.items()}
