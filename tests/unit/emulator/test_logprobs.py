"""Logprobs in vLLM's shapes (chat and completions, streaming and not), identical between a
baseline and a speculative server at temperature 0, and vLLM's refusals."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ansible_collections.specfleet.fleet.plugins.module_utils import bench_http, bench_stream
from conftest import EAGLE3_K5, TARGET_FP4, EmulatorProcess, Launcher
from vllm_emulator.logprobs import NEAR_TIE_GAP, AnswerPlan, context_key, ranked, top_gap
from vllm_emulator.tokens import generate

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
ARGS = ["--max-model-len", "4096", "--enforce-eager", "--served-model-name", "llama"]
PROMPT = "Explain why a Jetson unit decodes faster with speculative decoding."


@pytest.fixture(scope="module")
def baseline(module_launch: Launcher) -> EmulatorProcess:
    return module_launch(TARGET_FP4, ARGS)


@pytest.fixture(scope="module")
def speculative(module_launch: Launcher) -> EmulatorProcess:
    return module_launch(TARGET_FP4, [*ARGS, "--speculative-config", EAGLE3_K5])


def body(kind: str, top: int, max_tokens: int = 48, prompt: str = PROMPT) -> dict[str, Any]:
    """What the benchmark client sends for its output check."""
    return bench_http.build_request_body(kind, "llama", prompt, max_tokens, seed=42, top_logprobs=top)


def streamed(server: EmulatorProcess, kind: str, top: int, max_tokens: int = 48, prompt: str = PROMPT) -> Any:
    path = CHAT if kind == "chat" else COMPLETIONS
    return [event for _, event in server.stream(path, body(kind, top, max_tokens, prompt))]


def token_logprobs(events: list[Any]) -> list[tuple[str, float, float | None]]:
    """Through the client's own parser, as the benchmark reads them."""
    state = bench_stream.StreamState(sent_at=0.0)
    for event in events:
        state.on_event("[DONE]" if event == "[DONE]" else json.dumps(event), 0.0)
    return state.token_logprobs


# --- the model --------------------------------------------------------------------------------


def test_chosen_is_top1_and_a_few_percent_are_near_ties() -> None:
    plan = AnswerPlan("m", "a prompt", None, False, generate("a prompt", 4000, False))
    gaps = [top_gap(plan.key_at(i), i) for i in range(4000)]
    share = sum(gap < NEAR_TIE_GAP for gap in gaps) / len(gaps)
    assert 0.02 <= share <= 0.07
    assert sum(gap > 1.0 for gap in gaps) / len(gaps) > 0.7
    for position in range(0, 4000, 97):
        sampled, logprob, items = plan.entries(position, 5)
        assert sampled == plan.tokens[position] == items[0][0]
        values = [value for _, value in items]
        assert values == sorted(values, reverse=True) and len({t for t, _ in items}) == 5
        assert logprob < 0 and sum(2.718281828 ** value for value in values) <= 1.0


def test_numbers_are_a_function_of_model_prompt_and_position() -> None:
    key = context_key("m", "p")
    assert ranked(key, 3, " the", 4) == ranked(context_key("m", "p"), 3, " the", 4)
    assert ranked(key, 3, " the", 4) != ranked(context_key("other/model", "p"), 3, " the", 4)
    assert ranked(key, 3, " the", 4) != ranked(key, 4, " the", 4)


# --- shapes -----------------------------------------------------------------------------------


def test_chat_stream_shape(speculative: EmulatorProcess) -> None:
    events = streamed(speculative, "chat", 2)
    assert events[0]["choices"][0]["logprobs"] is None  # the role chunk
    chunks = [e for e in events[1:-2] if e["choices"]]
    assert any(len(c["choices"][0]["logprobs"]["content"]) > 1 for c in chunks)  # a speculative step
    for chunk in chunks:
        choice = chunk["choices"][0]
        content = choice["logprobs"]["content"]
        assert "".join(entry["token"] for entry in content) == choice["delta"]["content"]
        for entry in content:
            assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
            assert entry["bytes"] == list(entry["token"].encode())
            tops = entry["top_logprobs"]
            assert len(tops) == 2 and tops[0]["token"] == entry["token"] and tops[0]["logprob"] == entry["logprob"]
            assert tops[1]["logprob"] <= tops[0]["logprob"] and set(tops[1]) == {"token", "logprob", "bytes"}
    assert events[-2]["usage"]["completion_tokens"] == 48 == len(token_logprobs(events))


def test_completions_stream_shape(speculative: EmulatorProcess) -> None:
    events = streamed(speculative, "completion", 2)
    text = ""
    for event in events[:-2]:
        choice = event["choices"][0]
        logprobs = choice["logprobs"]
        assert set(logprobs) == {"text_offset", "token_logprobs", "tokens", "top_logprobs"}
        assert "".join(logprobs["tokens"]) == choice["text"]
        for token, value, top, offset in zip(
            logprobs["tokens"], logprobs["token_logprobs"], logprobs["top_logprobs"], logprobs["text_offset"],
            strict=True,
        ):
            assert offset == len(text)
            text += token
            assert len(top) == 2 and top[token] == value and max(top.values()) == value
    found = token_logprobs(events)
    assert len(found) == 48 and all(alternative is not None and alternative <= lp for _, lp, alternative in found)


def test_non_streaming_and_zero_top_logprobs(baseline: EmulatorProcess) -> None:
    chat = {**body("chat", 3), "stream": False}
    chat.pop("stream_options")
    status, answer = baseline.post(CHAT, chat)
    assert status == 200
    content = answer["choices"][0]["logprobs"]["content"]
    assert "".join(e["token"] for e in content) == answer["choices"][0]["message"]["content"]
    assert all(len(e["top_logprobs"]) == 3 for e in content)
    status, answer = baseline.post(CHAT, {**chat, "top_logprobs": 0})
    assert status == 200 and all(e["top_logprobs"] == [] for e in answer["choices"][0]["logprobs"]["content"])
    status, answer = baseline.post(COMPLETIONS, {"model": "llama", "prompt": PROMPT, "max_tokens": 8, "logprobs": 0,
                                                 "temperature": 0})
    assert status == 200
    logprobs = answer["choices"][0]["logprobs"]
    assert [list(top) for top in logprobs["top_logprobs"]] == [[token] for token in logprobs["tokens"]]
    status, answer = baseline.post(CHAT, {**chat, "logprobs": False, "top_logprobs": 0})
    assert status == 200 and answer["choices"][0]["logprobs"] is None


@pytest.mark.parametrize("kind", ["chat", "completion"])
def test_identical_between_baseline_and_speculative(
    baseline: EmulatorProcess, speculative: EmulatorProcess, kind: str
) -> None:
    base = token_logprobs(streamed(baseline, kind, 2, max_tokens=120))
    spec = token_logprobs(streamed(speculative, kind, 2, max_tokens=120))
    assert len(base) == 120 and spec == base
    again = token_logprobs(streamed(baseline, kind, 2, max_tokens=120))
    assert again == base


# --- refusals (vLLM's texts) ------------------------------------------------------------------


def error_of(server: EmulatorProcess, path: str, request: dict[str, Any]) -> dict[str, Any]:
    status, answer = server.post(path, request)
    assert status == 400, answer
    return answer["error"]


def test_top_logprobs_over_max_logprobs(baseline: EmulatorProcess, speculative: EmulatorProcess) -> None:
    for server in (baseline, speculative):
        error = error_of(server, CHAT, body("chat", 21))
        assert error == {
            "message": "Requested sample logprobs of 21, which is greater than max allowed: 20 "
            "(parameter=logprobs, value=21)",
            "type": "BadRequestError",
            "param": "logprobs",
            "code": 400,
        }
        error = error_of(server, COMPLETIONS, body("completion", 25))
        assert error["message"].startswith("Requested sample logprobs of 25, which is greater than max allowed: 20")
    # -1 asks for the whole vocabulary, also over the cap.
    error = error_of(baseline, CHAT, {**body("chat", 2), "top_logprobs": -1})
    assert "Requested sample logprobs of 128256, which is greater than max allowed: 20" in error["message"]
    assert baseline.post(CHAT, body("chat", 20))[0] == 200


def test_max_logprobs_flag(launch: Launcher) -> None:
    server = launch(TARGET_FP4, [*ARGS, "--max-logprobs", "2"])
    assert server.post(CHAT, {**body("chat", 2), "stream": False, "stream_options": None})[0] == 200
    error = error_of(server, CHAT, body("chat", 3))
    assert "greater than max allowed: 2 " in error["message"]


def test_top_logprobs_without_logprobs_and_negative(baseline: EmulatorProcess) -> None:
    request = body("chat", 2)
    request.pop("logprobs")
    error = error_of(baseline, CHAT, request)
    assert error["type"] == "Bad Request" and error["param"] == "top_logprobs"
    assert "Value error, when using `top_logprobs`, `logprobs` must be set to true. (parameter=top_logprobs)" in (
        error["message"]
    )
    error = error_of(baseline, CHAT, {**request, "logprobs": False})
    assert "when using `top_logprobs`, `logprobs` must be set to true." in error["message"]
    error = error_of(baseline, CHAT, {**body("chat", 2), "top_logprobs": -2})
    assert "`top_logprobs` must be a positive value or -1. (parameter=top_logprobs, value=-2)" in error["message"]
    error = error_of(baseline, COMPLETIONS, body("completion", -1))
    assert "`logprobs` must be a positive value. (parameter=logprobs, value=-1)" in error["message"]
    assert error["param"] == "logprobs"
    error = error_of(baseline, CHAT, {**body("chat", 2), "top_logprobs": "2"})
    assert "`top_logprobs` must be an integer." in error["message"]
    # The protocol check runs before the model lookup, as the request model is parsed first.
    error = error_of(baseline, CHAT, {**request, "model": "no/such-model"})
    assert "must be set to true" in error["message"]
