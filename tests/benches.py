"""Synthetic spec_bench results in the module's own shape, for tests of the gate, the rollout,
the report and status (and the gate's calibration benchmark): per request, per prompt, with
the output check's tokens.

A side's speed is given as a factor on a baseline time per token; noise, stalls and the
output check's divergences are the caller's to set, so each test states what it measures.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible_collections.specfleet.fleet.plugins.module_utils.bench_figures import text_digest
from ansible_collections.specfleet.fleet.plugins.module_utils.spec_bench_client import REPEATS_SALTED

WORKLOADS = ("code_edit", "chat")
PROMPTS = 16
TOKENS = 128
BASE_TPOT_MS = 50.0
TTFT_MS = 80.0
ACCEPTANCE = {"rate": 0.357, "mean_length": 2.78, "per_position": [0.5, 0.42, 0.35, 0.29, 0.23], "drafts": 744,
              "draft_tokens": 3720, "accepted": 1328}


def prompt_ids(workload: str, prompts: int = PROMPTS) -> list[str]:
    return [f"{workload}-p{index:02d}" for index in range(prompts)]


def _cell(workload: str, level: int, speed: float, prompts: int, noise: Callable[[], float],
          acceptance: Mapping[str, Any] | None, texts: Mapping[str, str]) -> dict[str, Any]:
    requests = []
    for index, prompt in enumerate(prompt_ids(workload, prompts)):
        # Prompts differ (longer answers, easier drafts): pairing by prompt must cancel it.
        prompt_scale = 1.0 + 0.5 * index / prompts
        tpot = BASE_TPOT_MS * prompt_scale * (1.0 if level == 1 else 2.0) / speed * noise()
        e2e = TTFT_MS + tpot * (TOKENS - 1)
        requests.append({"prompt": prompt, "tokens": TOKENS, "ttft_ms": TTFT_MS, "tpot_ms": round(tpot, 4),
                         "e2e_ms": round(e2e, 4), "chunks": TOKENS, "text": texts[prompt]})
    wall_s = sum(request["e2e_ms"] for request in requests) / 1000.0 / level
    throughput = round(TOKENS * len(requests) / wall_s, 3)
    tpots = sorted(request["tpot_ms"] for request in requests)
    return {
        "runs": [{"throughput_tok_s": throughput, "tpot_p50_ms": tpots[len(tpots) // 2], "wall_s": wall_s,
                  "output_tokens": TOKENS * len(requests), "requests": requests, "failed_requests": 0,
                  "bursty_requests": 0, "spec_decode": None}],
        "ttft_ms": {"p50": TTFT_MS, "p90": TTFT_MS, "mean": TTFT_MS},
        "tpot_ms": {"p50": tpots[len(tpots) // 2], "p90": tpots[int(len(tpots) * 0.9)],
                    "mean": sum(tpots) / len(tpots)},
        "throughput_tok_s": {"median": throughput, "runs": [throughput], "spread": 0.0},
        "acceptance": acceptance,
        "bursts": {"remeasured_runs": 0, "bursty_requests_left_out": 0},
    }


def answer(prompt: str, diverge_at: int | None = None, drafts: int | None = None) -> dict[str, Any]:
    """The output check's record of one answer: tokens, and the baseline's lead per token (a tie
    at every 10th position), and the drafts its server counted while answering."""
    tokens = [f"{prompt}-t{position}" for position in range(24)]
    if diverge_at is not None:
        tokens = tokens[:diverge_at] + [f"{prompt}-other{position}" for position in range(diverge_at, 24)]
    margins = [0.02 if position % 10 == 5 else 2.5 for position in range(24)]
    return {"text": text_digest(" ".join(tokens)), "tokens": tokens, "margins": margins, "drafts": drafts}


# Where a repeat answers otherwise (``unstable``): at a confident token, or at a numerics tie.
UNSTABLE_AT = {"confident": 3, "tie": 5}


def bench(side: str, speed: float = 1.0, *, c8_speed: float | None = None, chat_speed: float | None = None,
          chat_c8_speed: float | None = None,
          prompts: int = PROMPTS, noise: float = 0.0, seed: int = 0, workloads: Sequence[str] = WORKLOADS,
          acceptance: Mapping[str, Any] | None = None, diverge_at: Mapping[str, int] | None = None,
          unstable: str | None = None, ok: bool = True, failure: Mapping[str, Any] | None = None,
          levels: Sequence[int] = (1, 8), drafted: bool = True,
          batched_diverge_at: Mapping[str, int] | None = None) -> dict[str, Any]:
    """One block's bench. ``speed``: code_edit at c=1 relative to the baseline (1.0); ``c8_speed``
    and ``chat_speed`` default to it, ``chat_c8_speed`` to ``c8_speed``. ``diverge_at``: prompt ->
    token position where this side's answer differs from the baseline's; ``unstable`` ("confident",
    "tie"): its check's repeat answers otherwise there (UNSTABLE_AT); ``drafted``: the speculative
    server drafted while answering the check; ``batched_diverge_at``: as ``diverge_at``, for the
    check's batch."""
    generator = random.Random(seed)

    def draw() -> float:
        return math.exp(generator.gauss(0.0, noise)) if noise else 1.0

    results: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    batched: dict[str, Any] = {}
    for workload in workloads:
        base_speed = speed if workload == workloads[0] else (chat_speed if chat_speed is not None else speed)
        answers = {prompt: answer(prompt, (diverge_at or {}).get(prompt)) for prompt in prompt_ids(workload, prompts)}
        texts = {prompt: found["text"] for prompt, found in answers.items()}
        results[workload] = {}
        for level in levels:
            level_speed = base_speed if level == 1 else (c8_speed if c8_speed is not None else base_speed)
            if workload != workloads[0] and level != 1 and chat_c8_speed is not None:
                level_speed = chat_c8_speed
            results[workload][f"c{level}"] = _cell(workload, level, level_speed, prompts, draw,
                                                   acceptance if side == "speculative" else None, texts)
        drafts = (20 if drafted else 0) if side == "speculative" else None
        checked = {}
        for prompt in prompt_ids(workload, prompts)[:8]:
            first = answer(prompt, (diverge_at or {}).get(prompt), drafts)
            again = dict(first) if not unstable else answer(prompt, UNSTABLE_AT[unstable], drafts)
            checked[prompt] = {**first, "repeat": again}
        outputs[workload] = checked
        batch = {prompt: answer(prompt, (batched_diverge_at or diverge_at or {}).get(prompt))
                 for prompt in prompt_ids(workload, prompts)[:8]}
        batched[workload] = {"concurrency": max(levels), "drafts": drafts, "answers": batch}
    return {"label": side, "ok": ok, "failure": failure, "results": results if ok else {}, "outputs": outputs,
            "outputs_batched": batched if max(levels) > 1 else {}, "output_check": {"repeats": REPEATS_SALTED},
            "model": "m", "endpoint": "http://127.0.0.1:8000", "duration_s": 1.0, "metrics_notes": []}


def blocks(*sides_and_benches: tuple[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"side": side, "bench": dict(found)} for side, found in sides_and_benches]


def aba(candidate_speed: float, **kwargs: Any) -> list[dict[str, Any]]:
    """Baseline, speculative, baseline, the speculative side at ``candidate_speed``."""
    return blocks(("baseline", bench("baseline", seed=1)),
                  ("speculative", bench("speculative", candidate_speed, acceptance=ACCEPTANCE, seed=2, **kwargs)),
                  ("baseline", bench("baseline", seed=3)))
