"""Emulator tokens: a word-piece tokenizer and a deterministic "model".

Token counts only need to be plausible and stable: prompts split into word pieces
(leading space kept with the word, long words cut into 5-character pieces, punctuation
on its own). Greedy output is a pure function of the rendered prompt, so it is identical
with and without speculation and across runs, and a shorter `max_tokens` yields a prefix
of a longer one, as with a real greedy decoder.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence
from typing import Any

_PIECE = re.compile(r"\s*[A-Za-z]+|\s*\d|\s*[^\sA-Za-z\d]|\s+")
_MAX_PIECE = 5

_WORDS = (
    "the model memory bandwidth unit fleet token decode draft target step cache kernel "
    "latency throughput request server engine speculative verify accept batch layer "
    "weights precision quantized edge robot sensor plan report gate rollout device "
    "compute stream queue prompt output value system update config module runtime "
    "image container network measure result median baseline candidate faster slower "
    "because when while which this that with from into over under about each every "
    "first then also only more less very often rarely always never can will should "
    "must may would a an of to in on for and or is are was be it as by at not"
).split()
_CODE = (
    "def self return if else for in range None True False import from class int str "
    "float list dict value result items key args kwargs name path data index count "
    "total len print raise ValueError assert yield with as try except lambda not and or"
).split()
_CODE_PUNCT = ["(", ")", ":", ",", ".", " =", " ==", " +", "[", "]", "\n", "\n    ", "\n        ", '"""', " #"]


def tokenize(text: str) -> list[str]:
    pieces: list[str] = []
    for match in _PIECE.finditer(text):
        piece = match.group(0)
        stripped = piece.lstrip()
        lead = piece[: len(piece) - len(stripped)]
        if len(stripped) <= _MAX_PIECE:
            pieces.append(piece)
            continue
        pieces.append(lead + stripped[:_MAX_PIECE])
        for start in range(_MAX_PIECE, len(stripped), _MAX_PIECE):
            pieces.append(stripped[start : start + _MAX_PIECE])
    return pieces


def count_tokens(text: str) -> int:
    return len(tokenize(text))


def message_text(content: Any) -> str:
    """Text of an OpenAI message `content` (a string or a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return "" if content is None else str(content)


def render_chat_prompt(messages: Sequence[dict[str, Any]]) -> str:
    """A Llama-3-like chat template; its header tokens count as prompt tokens."""
    rendered = ["<|begin_of_text|>"]
    for message in messages:
        role = str(message.get("role", "user"))
        rendered.append(
            f"<|start_header_id|>{role}<|end_header_id|>\n\n{message_text(message.get('content'))}<|eot_id|>"
        )
    rendered.append("<|start_header_id|>assistant<|end_header_id|>\n\n")
    return "".join(rendered)


def user_text(messages: Sequence[dict[str, Any]]) -> str:
    return "\n".join(message_text(m.get("content")) for m in messages)


def _rng_for(prompt: str, sampling_seed: int | None) -> random.Random:
    material = prompt if sampling_seed is None else f"{sampling_seed}\x00{prompt}"
    digest = hashlib.sha256(material.encode("utf-8", "surrogatepass")).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def natural_length(prompt: str, sampling_seed: int | None = None) -> int:
    """Tokens until the emulated model would emit end-of-sequence (200..2000)."""
    return 200 + _rng_for("eos\x00" + prompt, sampling_seed).randrange(1801)


def generate(prompt: str, max_tokens: int, code_like: bool, sampling_seed: int | None = None) -> list[str]:
    """Output tokens for a prompt. `sampling_seed=None` means greedy (temperature 0)."""
    return _extend(_rng_for(prompt, sampling_seed), [], max_tokens, code_like)


def continue_from(
    prompt: str, prefix: Sequence[str], max_tokens: int, code_like: bool, sampling_seed: int | None = None
) -> list[str]:
    """`prefix` and then what the emulated model writes after it, `max_tokens` in all.

    A pure function of the prompt and the prefix: an answer that took another token at
    some position (an output-divergence fault) goes on consistently from its own text.
    """
    material = prompt + "\x00continue\x00" + "".join(prefix)
    return _extend(_rng_for(material, sampling_seed), list(prefix), max_tokens, code_like)


_SENTENCE_BREAKS = (".", ",", ";", "\n\n")


def _extend(rng: random.Random, tokens: list[str], max_tokens: int, code_like: bool) -> list[str]:
    since_period = 0
    for token in reversed(tokens):
        if token in _SENTENCE_BREAKS:
            break
        since_period += 1
    while len(tokens) < max_tokens:
        if code_like:
            roll = rng.random()
            if roll < 0.45:
                tokens.append(" " + rng.choice(_CODE))
            elif roll < 0.8:
                tokens.append(rng.choice(_CODE_PUNCT))
            else:
                tokens.append(rng.choice(_CODE))
            continue
        if since_period >= 8 and rng.random() < 0.18:
            tokens.append(rng.choice([".", ".", ".", ",", ";"]))
            if tokens[-1] == "." and rng.random() < 0.12:
                tokens.append("\n\n")
            since_period = 0
            continue
        word = rng.choice(_WORDS)
        if since_period == 0 and (not tokens or tokens[-1] in (".", "\n\n")):
            word = word.capitalize()
        tokens.append(word if tokens and tokens[-1] == "\n\n" else " " + word)
        since_period += 1
    return tokens[:max_tokens]


def vocabulary() -> tuple[str, ...]:
    """Every token the emulated model can write, once each (alternatives for logprobs)."""
    return _VOCABULARY


_VOCABULARY = tuple(
    dict.fromkeys(
        [" " + word for word in _WORDS]
        + [" " + word.capitalize() for word in _WORDS]
        + [word.capitalize() for word in _WORDS]
        + [" " + word for word in _CODE]
        + list(_CODE)
        + _CODE_PUNCT
        + list(_SENTENCE_BREAKS)
    )
)
