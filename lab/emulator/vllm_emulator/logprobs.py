"""Per-token logprobs of the emulated target model, and the output-divergence faults.

What vLLM returns (vllm/entrypoints/openai/chat_completion/serving.py `_create_chat_logprobs`
and `_get_top_logprobs`; vllm/entrypoints/openai/completion/serving.py
`_create_completion_logprobs`): per generated token the sampled token's logprob and the
position's logprob dict, which vLLM V1 builds from `[sampled, top-1 .. top-N]` (the sampled
token first, a duplicate collapsing into it; vllm/v1/engine/logprobs.py), logprobs floored at
-9999.0, token bytes as UTF-8 ints.

- chat (`"logprobs": true, "top_logprobs": N`): `{"content": [{token, logprob, bytes,
  top_logprobs: [{token, logprob, bytes}]}]}`, `top_logprobs` = the first N entries of that
  dict (greedy: the N best, the chosen one first; N = 0: `[]`).
- completions (`"logprobs": N`): `{text_offset, token_logprobs, tokens, top_logprobs:
  [{token: logprob}]}` with the entries `i <= N` of the dict (so N = 0 still names the
  sampled token) and text offsets counted in the generated text.
Streaming chunks carry the logprobs of exactly the tokens of that chunk (a speculative step's
chunk carries several).

The emulated model: at position i of an answer the chosen (greedy) token is the top-1, and the
lead over the best alternative (the "gap", logprob of top-1 minus top-2) is drawn from a
seeded hash of (model, context, i): a few percent near-ties (gap < 0.05, as real GPUs show
where batch shape and numerics may flip a greedy choice), some uncertain positions
(0.05-1.0) and mostly confident ones (> 1.0). Further alternatives fall off geometrically so
the probabilities never sum above 1. The context is the rendered prompt (and the sampling
seed when sampling), so a baseline server and a speculative server of the same model report
identical numbers token by token at temperature 0: speculative decoding is lossless and the
logprobs come from the target model. One blake2b digest per token: cheap next to the pacing.

Output divergence (fault switches, faults.py) rewrites an answer at one position and then
continues consistently from the changed prefix (tokens.continue_from, a new context key):
- `tie`: at the first near-tie at or after `divergence_after_tokens` the server emits the
  baseline's second-best token (and reports its own view: those two swapped).
- `confident`: at the first position at or after `divergence_after_tokens` where the baseline
  was confident (gap >= CONFIDENT_GAP; nearly always that position itself) it emits a token the
  baseline ranked far below its top alternatives, reported with that low logprob.
- `unstable_outputs`: the n-th request of the process flips to the second-best token at
  position `divergence_after_tokens + n mod (answer length - divergence_after_tokens)`:
  the same request answered twice differs (non-determinism at temperature 0).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .tokens import continue_from, vocabulary

NEAR_TIE_GAP = 0.05
NEAR_TIE_SHARE = 0.04  # of positions: "a few percent"
UNCERTAIN_SHARE = 0.16  # gap 0.05 .. 1.0
CONFIDENT_GAP = 2.0  # where the `confident` fault diverges, the baseline led by at least this
FLOOR = -9999.0  # vLLM's JSON stand-in for -inf

_VOCAB = vocabulary()
# Steps through the vocabulary that visit every token (coprime with its size).
_STRIDES = tuple(s for s in (7, 11, 13, 17, 19, 23, 29, 31, 37, 41) if math.gcd(s, len(_VOCAB)) == 1) or (1,)


def context_key(model: str, context: str, sampling_seed: int | None = None) -> bytes:
    material = f"{model}\x00{sampling_seed}\x00{context}".encode("utf-8", "surrogatepass")
    return hashlib.blake2b(material, digest_size=16).digest()


def _uniforms(key: bytes, position: int) -> list[float]:
    digest = hashlib.blake2b(key + position.to_bytes(4, "big"), digest_size=32).digest()
    return [int.from_bytes(digest[i : i + 4], "big") / 4294967296.0 for i in range(0, 32, 4)]


def _gap(u0: float, u1: float) -> float:
    if u0 < NEAR_TIE_SHARE:
        return 0.001 + u1 * (NEAR_TIE_GAP - 0.002)
    if u0 < NEAR_TIE_SHARE + UNCERTAIN_SHARE:
        return NEAR_TIE_GAP + u1 * (1.0 - NEAR_TIE_GAP)
    return min(18.0, 1.0 - 3.5 * math.log(1.0 - u1))


def top_gap(key: bytes, position: int) -> float:
    """The baseline's lead of the top-1 over the top-2 at this position."""
    u = _uniforms(key, position)
    return _gap(u[0], u[1])


def ranked(key: bytes, position: int, chosen: str, count: int) -> list[tuple[str, float]]:
    """The `count` best (token, logprob) at a position, best first; `chosen` is the top-1."""
    u = _uniforms(key, position)
    gap = _gap(u[0], u[1])
    tail = 0.3 + 1.2 * u[2]  # mass below the top-2, relative to the top-2
    lp1 = -math.log1p(math.exp(-gap) * (1.0 + tail))
    result = [(chosen, lp1)]
    if count <= 1:
        return result[:count]
    size = len(_VOCAB)
    stride = _STRIDES[int(u[3] * len(_STRIDES))]
    index = int(u[4] * size)
    logprob = lp1 - gap
    step = 0
    while len(result) < count and step < size:
        token = _VOCAB[index]
        index = (index + stride) % size
        step += 1
        if token == chosen:
            continue
        if len(result) == 2:
            logprob += math.log(tail / 2.0)  # third: at most 3/4 of the second
        elif len(result) > 2:
            logprob -= 0.7 + 0.8 * ((u[5] + 0.618034 * len(result)) % 1.0)
        result.append((token, logprob))
    return result


def far_below(key: bytes, position: int, chosen: str, beyond: int) -> tuple[str, float]:
    """A token the model ranks below its `beyond` best, and its (low) logprob."""
    best = ranked(key, position, chosen, beyond)
    taken = {token for token, _ in best}
    u = _uniforms(key, position)
    start = int(u[6] * len(_VOCAB))
    for offset in range(len(_VOCAB)):
        token = _VOCAB[(start + offset) % len(_VOCAB)]
        if token not in taken:
            return token, best[-1][1] - 1.0 - 4.0 * u[7]
    raise ValueError("vocabulary too small")  # pragma: no cover - the vocabulary has ~400 tokens


@dataclass
class _Override:
    """A position where the server emitted another token than the baseline's top-1."""

    kind: str  # "second" (tie or unstable flip) or "far" (confident divergence)
    baseline_key: bytes
    baseline_token: str
    token: str
    logprob: float | None = None  # "far": the emitted token's logprob


@dataclass
class AnswerPlan:
    """An answer's tokens and what the server says about each one's logprobs."""

    model: str
    prompt: str
    sampling_seed: int | None
    code_like: bool
    tokens: list[str]
    segments: list[tuple[int, bytes]] = field(default_factory=list)  # (first position, context key)
    overrides: dict[int, _Override] = field(default_factory=dict)
    divergences: list[tuple[int, str]] = field(default_factory=list)  # (position, fault) for the log

    def __post_init__(self) -> None:
        if not self.segments:
            self.segments = [(0, context_key(self.model, self.prompt, self.sampling_seed))]

    def key_at(self, position: int) -> bytes:
        key = self.segments[0][1]
        for start, segment_key in self.segments:
            if start > position:
                break
            key = segment_key
        return key

    # --- faults ------------------------------------------------------------------------

    def first_near_tie(self, start: int) -> int | None:
        for position in range(start, len(self.tokens)):
            if top_gap(self.key_at(position), position) < NEAR_TIE_GAP:
                return position
        return None

    def first_confident(self, start: int) -> int | None:
        for position in range(start, len(self.tokens)):
            if top_gap(self.key_at(position), position) >= CONFIDENT_GAP:
                return position
        return None

    def diverge(self, position: int, kind: str, fault: str) -> None:
        """Emit another token at `position` and continue from the changed prefix."""
        if not 0 <= position < len(self.tokens):
            return
        key = self.key_at(position)
        baseline = self.tokens[position]
        if kind == "far":
            token, logprob = far_below(key, position, baseline, 20)
            override = _Override("far", key, baseline, token, logprob)
        else:
            token = ranked(key, position, baseline, 2)[1][0]
            override = _Override("second", key, baseline, token)
        prefix = [*self.tokens[:position], token]
        self.tokens = continue_from(self.prompt, prefix, len(self.tokens), self.code_like, self.sampling_seed)
        self.segments = [(start, k) for start, k in self.segments if start <= position]
        self.segments.append(
            (position + 1, context_key(self.model, self.prompt + "\x00" + "".join(prefix), self.sampling_seed))
        )
        self.overrides = {p: o for p, o in self.overrides.items() if p < position}
        self.overrides[position] = override
        self.divergences = [(p, f) for p, f in self.divergences if p < position] + [(position, fault)]

    # --- what the server reports ---------------------------------------------------------

    def entries(self, position: int, count: int) -> tuple[str, float, list[tuple[str, float]]]:
        """(sampled token, its logprob, the position's logprob dict in vLLM's order: the
        sampled token, then the `count` best without it)."""
        override = self.overrides.get(position)
        if override is None:
            best = ranked(self.key_at(position), position, self.tokens[position], max(1, count))
            return best[0][0], best[0][1], best[: max(1, count)]
        baseline = ranked(override.baseline_key, position, override.baseline_token, max(2, count))
        if override.kind == "second":
            # This server's numerics flipped a near-tie: its top-1 is the baseline's top-2.
            (first, lp1), (second, lp2) = baseline[0], baseline[1]
            own = [(second, lp1), (first, lp2), *baseline[2:]]
            return second, lp1, own[: max(1, count)]
        assert override.logprob is not None
        items = [(override.token, override.logprob), *baseline[:count]]
        return override.token, override.logprob, items


def _floor(value: float) -> float:
    return max(value, FLOOR)


def _token_bytes(token: str) -> list[int]:
    return list(token.encode("utf-8", errors="replace"))


def chat_logprobs(plan: AnswerPlan, first: int, tokens: Sequence[str], top: int) -> dict[str, Any]:
    """`choices[i].logprobs` of a chat chunk holding `tokens`, the first at position `first`."""
    content = []
    for offset, token in enumerate(tokens):
        sampled, logprob, items = plan.entries(first + offset, top)
        assert sampled == token, (sampled, token)
        content.append(
            {
                "token": token,
                "logprob": _floor(logprob),
                "bytes": _token_bytes(token),
                "top_logprobs": [
                    {"token": alt, "logprob": _floor(value), "bytes": _token_bytes(alt)} for alt, value in items[:top]
                ],
            }
        )
    return {"content": content}


def completion_logprobs(
    plan: AnswerPlan, first: int, tokens: Sequence[str], top: int, text_offset: int
) -> dict[str, Any]:
    """`choices[i].logprobs` of a completions chunk; `text_offset`: generated text so far."""
    result: dict[str, Any] = {"text_offset": [], "token_logprobs": [], "tokens": [], "top_logprobs": []}
    offset = text_offset
    for index, token in enumerate(tokens):
        sampled, logprob, items = plan.entries(first + index, top)
        assert sampled == token, (sampled, token)
        result["text_offset"].append(offset)
        result["token_logprobs"].append(_floor(logprob))
        result["tokens"].append(token)
        result["top_logprobs"].append({alt: _floor(value) for alt, value in items[: top + 1]})
        offset += len(token)
    return result
