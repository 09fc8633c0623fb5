"""Paired, interleaved comparison of two servings on one unit: the statistics under the gate.

The rollout measures in blocks on the same unit, the baseline (A) and the speculative serving
(B) taking turns, A B A at least (then B A again while the verdict is open). Every block sends
the same prompts, so each prompt is measured under both servings and the comparison is paired
by prompt: what differs between prompts (length, how well drafts are accepted) cancels.

For one figure (time per output token, TPOT, ...), each prompt p gives one contrast

    d_p = sum_b w_b * log(y_{b,p})

with weights that compare every B block with the mean of the A blocks on either side of it
(A B A: -1/2, 1, -1/2). A drift that is linear in time (clocks, heat, another tenant ramping
up) cancels exactly; a step between blocks does not, which is why the drift between the A
blocks is measured and reported on its own (``drift``).

The estimate is a trimmed mean of the d_p (robust to a stalled request; a run whose stream
arrived in bursts is measured again before it gets here, never averaged in), and its
uncertainty has two parts:
- prompt to prompt: the bootstrap standard error of that trimmed mean, resampling prompts
  (pairs stay pairs);
- block to block: what a whole block shares (a slower minute, a page-cache flush) is the
  same for every prompt of the block, so resampling prompts cannot see it. Its variance is
  ``block_noise**2 * sum_b w_b**2``, with ``block_noise`` a policy figure (the run-to-run
  variation a unit shows beyond per-request noise; the calibration benchmark,
  tests/bench/gate_accuracy.py, measures what the default buys). More blocks shrink it.

The one-sided bound at confidence c is exp(estimate - z_c * se) on the log scale (a normal
approximation of a bootstrap standard error; with 32 or more prompts per block the trimmed
mean is close to normal, and the bootstrap keeps the heavy tails in the standard error).
More prompts or more blocks only ever narrow the bound: more measurement adds power.

Pure functions, stdlib only; deterministic (the bootstrap's generator is seeded).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

BASELINE = "baseline"
SPECULATIVE = "speculative"
SIDES = (BASELINE, SPECULATIVE)
TRIM = 0.1  # share cut from each end of the sorted contrasts
BOOTSTRAP_ROUNDS = 1000
BOOTSTRAP_SEED = 20261125


@dataclass(frozen=True)
class Estimate:
    """A paired contrast on the log scale, and what it means as a ratio B/A."""

    log_ratio: float  # trimmed mean of the per-prompt contrasts
    se: float  # standard error, prompt-to-prompt and block-to-block together
    prompts: int  # prompts measured in every block the contrast uses

    @property
    def ratio(self) -> float:
        return math.exp(self.log_ratio)

    def lower(self, confidence: float) -> float:
        """One-sided lower bound of the ratio at ``confidence``."""
        return math.exp(self.log_ratio - z_score(confidence) * self.se)

    def upper(self, confidence: float) -> float:
        """One-sided upper bound of the ratio at ``confidence``."""
        return math.exp(self.log_ratio + z_score(confidence) * self.se)


def z_score(confidence: float) -> float:
    """The standard normal quantile of ``confidence`` (0.5 < confidence < 1)."""
    return statistics.NormalDist().inv_cdf(confidence)


def contrast_weights(sides: Sequence[str]) -> list[float]:
    """Per block, its weight in the B-versus-A contrast: each B block against the mean of the
    A blocks next to it (one, at an end), the B blocks averaged. Raises ValueError when no B
    block has an A block beside it."""
    b_blocks = [index for index, side in enumerate(sides) if side == SPECULATIVE]
    weights = [0.0] * len(sides)
    used = 0
    for index in b_blocks:
        neighbours = [j for j in (index - 1, index + 1) if 0 <= j < len(sides) and sides[j] == BASELINE]
        if not neighbours:
            continue
        used += 1
        weights[index] += 1.0
        for j in neighbours:
            weights[j] -= 1.0 / len(neighbours)
    if not used:
        raise ValueError("no speculative block measured next to a baseline block")
    return [weight / used for weight in weights]


def drift_weights(sides: Sequence[str]) -> list[list[float]]:
    """Weights of each drift contrast: every A block against the A block before it (none with
    fewer than two A blocks). Each spans one B block, so a steady drift shows the same size
    however many blocks were measured."""
    a_blocks = [index for index, side in enumerate(sides) if side == BASELINE]
    contrasts = []
    for earlier, later in zip(a_blocks, a_blocks[1:], strict=False):
        weights = [0.0] * len(sides)
        weights[earlier], weights[later] = -1.0, 1.0
        contrasts.append(weights)
    return contrasts


def trimmed_mean(values: Sequence[float], trim: float = TRIM) -> float:
    ordered = sorted(values)
    cut = int(len(ordered) * trim)
    kept = ordered[cut:len(ordered) - cut] if len(ordered) - 2 * cut > 0 else ordered
    return sum(kept) / len(kept)


def bootstrap_se(values: Sequence[float], rounds: int = BOOTSTRAP_ROUNDS, seed: int = BOOTSTRAP_SEED) -> float:
    """Bootstrap standard error of the trimmed mean (resampling the values with replacement)."""
    if len(values) < 2:
        return math.inf
    generator = random.Random(seed)
    size = len(values)
    means = [trimmed_mean([values[generator.randrange(size)] for _ in range(size)]) for _ in range(rounds)]
    return statistics.stdev(means)


def estimate(blocks: Sequence[Mapping[str, float]], weights: Sequence[float], block_noise: float) -> Estimate | None:
    """The weighted contrast over ``blocks`` (each: prompt id -> a positive figure), paired
    by the prompts every weighted block measured; None when fewer than two such prompts."""
    used = [block for block, weight in zip(blocks, weights, strict=True) if weight]
    common = set(used[0]) if used else set()
    for block in used[1:]:
        common &= set(block)
    prompts = sorted(prompt for prompt in common
                     if all(block[prompt] > 0 for block in used))
    if len(prompts) < 2:
        return None
    contrasts = [sum(weight * math.log(block[prompt]) for block, weight in zip(blocks, weights, strict=True)
                     if weight)
                 for prompt in prompts]
    within = bootstrap_se(contrasts)
    between = block_noise * math.sqrt(sum(weight * weight for weight in weights))
    return Estimate(log_ratio=trimmed_mean(contrasts), se=math.hypot(within, between), prompts=len(prompts))
