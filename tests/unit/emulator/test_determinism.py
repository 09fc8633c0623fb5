"""Greedy output is a function of the prompt only: same with and without speculation."""

from __future__ import annotations

from typing import Any

from conftest import EAGLE3_K5, TARGET_FP4
from vllm_emulator.tokens import count_tokens, generate, natural_length, tokenize

PROMPTS = [
    "Explain speculative decoding to a robotics engineer.",
    "Add docstrings:\ndef f(x):\n    y = x * 2\n    return y\ndef g():\n    return 1\n",
    "List the steps to flash a Jetson.",
]


def completion_text(server: Any, prompt: str, max_tokens: int) -> tuple[str, int]:
    status, body = server.post("/v1/completions", {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
    assert status == 200, body
    return body["choices"][0]["text"], body["usage"]["completion_tokens"]


def test_generation_is_a_pure_function_with_prefixes() -> None:
    long = generate("abc", 200, False)
    assert generate("abc", 200, False) == long
    assert generate("abc", 50, False) == long[:50]
    assert generate("abd", 200, False) != long
    assert 200 <= natural_length("abc") <= 2000
    assert generate("abc", 30, False, sampling_seed=7) != generate("abc", 30, False)


def test_tokenizer_counts_word_pieces() -> None:
    assert tokenize("Hello, world") == ["Hello", ",", " world"]
    assert count_tokens("internationalization") == 4


def test_same_text_with_and_without_speculation(launch: Any) -> None:
    args = ["--max-model-len", "4096", "--enforce-eager"]
    baseline = launch(TARGET_FP4, args)
    speculative = launch(TARGET_FP4, args + ["--speculative-config", EAGLE3_K5])
    ngram = launch(TARGET_FP4, args + ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}'])
    for prompt in PROMPTS:
        reference = completion_text(baseline, prompt, 100)
        assert reference[1] == 100
        assert completion_text(speculative, prompt, 100) == reference
        assert completion_text(ngram, prompt, 100) == reference
        assert completion_text(baseline, prompt, 100) == reference  # across runs
        shorter, count = completion_text(speculative, prompt, 40)
        assert count == 40 and reference[0].startswith(shorter)
    events = speculative.stream("/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 100, "temperature": 0})
    streamed = "".join(e["choices"][0]["text"] for _, e in events[:-1] if e["choices"])
    assert streamed == completion_text(baseline, PROMPTS[0], 100)[0]
