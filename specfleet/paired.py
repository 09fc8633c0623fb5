"""Paired, interleaved comparison of two servings on one unit: the statistics under the gate.

The rollout measures in blocks on the same unit, the baseline (A) and the speculative serving
(B) taking turns, A B A at least (then B A again while the verdict is open). Every block sends
the same prompts in the same order, so each prompt is measured under both servings.

**What is estimated.** The gate's thresholds speak of throughput (and TPOT) on the workload's
prompt set: total tokens over total time. A block's figure is therefore a ratio of sums over
the prompts every compared block measured, R_b = sum_p time_{b,p} / sum_p tokens_{b,p} (for
TPOT: decode time over decoded tokens), and the contrast is

    L = sum_b w_b * log(R_b)

with weights that compare every B block with the mean of the A blocks on either side of it
(A B A: -1/2, 1, -1/2), so a drift linear in time cancels. exp(L) is the ratio B/A. When
prompts draft unequally (some 2.5x faster, some slower), a mean of per-prompt ratios would
weigh a short fast prompt like a long slow one and land above the speedup the thresholds speak
of; the ratio of sums weighs each prompt by its time, as a stopwatch on the whole set does.

**Its uncertainty, in two levels** (prompts within blocks, blocks within the run):
- requests: each prompt's time carries its own noise (a slow request, a stall). Its part in
  log R_b is estimated with prompts as the units, from blocks of the same side: between two
  of them, the change of each prompt's share of the block's time, r_p, has
  sum_p r_p^2 / 2 = Var(log R_b) = sigma^2 * sum_p s_p^2 in expectation (the linearisation of a
  ratio estimator, Cochran, Sampling Techniques, 3rd ed., 1977, section 6.3; shares rather
  than times, so what the whole block shares, and each prompt's own speedup, drop out). The
  relative noise sigma^2 is the unit's: pooled over every workload and concurrency it was
  measured at (``noise_by_side``; the speculative side's is taken to be the baseline's until it
  is measured twice), then weighed by each block's own shares. Heavy tails count as they
  happened; only a request that stalled is mended (below).
- blocks: what a whole block shares (a slower minute, a clock step, a wander of the unit's
  speed from block to block) moves every prompt of it alike, so the prompt level cannot see
  it. Each B block's comparison with the A blocks beside it is a replicate of the speedup
  (``replicate_weights``; L is their mean); how much the replicates differ from each other,
  beyond what their requests' noise explains, is a method-of-moments estimate of the block
  level's variance with m - 1 degrees of freedom for m replicates (from five blocks on),
  pooled with the policy's ``block_noise`` as a prior worth PRIOR_BLOCKS of them and never
  below it. On three blocks (one replicate) the two baseline blocks' difference is the block
  level's only repeat, one degree of freedom (a steady drift counts in it too, so it errs
  wide). Replicates compare blocks next to
  each other in time, as the estimate does, so a unit that wanders slowly counts by how much it
  moves each comparison, not by how far it strays from one line over the whole run. This is
  block-level resampling's variance (Davison and Hinkley, Bootstrap Methods and their
  Application, 1997, section 3.8, two-stage sampling) in closed form: two to four replicates
  are too few to resample.

Var(L) = sum_b w_b^2 * (v_side(b) + sigma_block^2); the one-sided bound at confidence c is
exp(L - z_c * se) (normal approximation). More blocks narrow the bound; more prompts narrow
the request part.

**Stalls.** A request that stalled for seconds (a pause, a page-fault storm) is far out of line
with the same prompt in another block of its side (beyond OUTLIER_SCALES robust scales, at most
OUTLIER_SHARE of the prompts a pair: ``stalls``). It is given the time the same prompt took in
the side's other blocks, scaled to its block's level (``cleaned``), so the prompt set stays
whole: leaving the prompt out would move the figure by how well that prompt drafts. Only blocks
of one side are compared, so a prompt speculation truly slows is never taken for a stall; and
nothing is mended for a comparison while one side was measured once, since that side's stalls
cannot be found (the drift checks, which hold a side only against itself, mend either side's).
A cold start, a block's first requests slower than its rest against the side's other blocks
(``cold_starts``), is mended alike, wherever it can be found: it only ever slows the block.

**Drift.** Between blocks: with two baseline blocks, the later against the earlier; with three
or more, each against the mean of its neighbours, so a drift steady in time cancels there as it
does in the comparison, and a step or a wander shows (``drift_weights``). Within a block: the
prompts are sent in the same order in every block, so between two blocks of one side, the
change of the prompts after any point against the change of those before it is zero but for
noise; a clock or thermal step inside a block, or a cold start, shows at the point nearest it
(``step_within``, at each eighth).

Pure functions, stdlib only, deterministic.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

BASELINE = "baseline"
SPECULATIVE = "speculative"
SIDES = (BASELINE, SPECULATIVE)
# The policy's block_noise counts as this many blocks' worth of evidence about the block level.
PRIOR_BLOCKS = 2
# A request this many robust scales out of line with its prompt elsewhere is a stall (stalls),
# and at most this share of the prompts are mended for it between two blocks.
OUTLIER_SCALES = 4.0
OUTLIER_SHARE = 0.1
# A cold start: at most this share of a block's first prompts, slower than the rest of it by
# this many standard errors of their mean.
COLD_SHARE = 0.25
COLD_SCALES = 4.0
# A step inside a block is looked for at this many - 1 points of the sending order (eighths).
STEP_SPLITS = 8

# One block's figure, per prompt in sending order: (time in ms, tokens it covers).
Block = Mapping[str, tuple[float, float]]


@dataclass(frozen=True)
class Estimate:
    """A contrast on the log scale, and what it means as a ratio B/A."""

    log_ratio: float
    se: float  # standard error, requests and blocks together
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


def replicate_weights(sides: Sequence[str]) -> list[list[float]]:
    """Per B block with an A block beside it, the weights of its own comparison: that B block
    against the mean of the A blocks next to it (one, at an end). Each is a replicate of the
    speedup, measured in its own stretch of time."""
    rows = []
    for index, side in enumerate(sides):
        neighbours = [j for j in (index - 1, index + 1) if 0 <= j < len(sides) and sides[j] == BASELINE]
        if side != SPECULATIVE or not neighbours:
            continue
        weights = [0.0] * len(sides)
        weights[index] = 1.0
        for j in neighbours:
            weights[j] -= 1.0 / len(neighbours)
        rows.append(weights)
    return rows


def contrast_weights(sides: Sequence[str]) -> list[float]:
    """Per block, its weight in the B-versus-A contrast: the mean of the ``replicate_weights``.
    Raises ValueError when no B block has an A block beside it."""
    rows = replicate_weights(sides)
    if not rows:
        raise ValueError("no speculative block measured next to a baseline block")
    return [sum(column) / len(rows) for column in zip(*rows, strict=True)]


def same_side_pairs(sides: Sequence[str]) -> list[tuple[str, int, int]]:
    """(side, earlier, later) of every two successive blocks of one side."""
    pairs = []
    for side in SIDES:
        indexes = [index for index, which in enumerate(sides) if which == side]
        pairs.extend((side, earlier, later) for earlier, later in zip(indexes, indexes[1:], strict=False))
    return pairs


def difference_weights(size: int, earlier: int, later: int) -> list[float]:
    """Weights of block ``later`` against block ``earlier`` among ``size`` blocks."""
    weights = [0.0] * size
    weights[earlier], weights[later] = -1.0, 1.0
    return weights


def lasting_step(weights: Sequence[float]) -> float:
    """How far a contrast with ``weights`` moves for a step by 1 (log scale) that lasts from some
    block on, at the block where it moves it most."""
    return max(abs(sum(weights[index:])) for index in range(len(weights)))


def drift_weights(sides: Sequence[str]) -> list[list[float]]:
    """Weights of each drift contrast of the baseline blocks. With two, the later against the
    earlier: a steady drift and a step look alike there. With three or more, each baseline block
    against the mean of the ones either side of it (-1/2, 1, -1/2 over successive A blocks,
    positive when the middle one is slower): a drift steady in time cancels, as it does in the
    comparison itself, and what is left is a step or a wander, which the comparison does not
    cancel."""
    a_blocks = [index for index, side in enumerate(sides) if side == BASELINE]
    contrasts = []
    if len(a_blocks) == 2:
        contrasts.append(difference_weights(len(sides), *a_blocks))
    for before, middle, after in zip(a_blocks, a_blocks[1:], a_blocks[2:], strict=False):
        weights = [0.0] * len(sides)
        weights[before], weights[middle], weights[after] = -0.5, 1.0, -0.5
        contrasts.append(weights)
    return contrasts


def common_prompts(blocks: Sequence[Block]) -> list[str]:
    """The prompts every block measured (a positive time and count), in the first block's order."""
    if not blocks:
        return []
    return [prompt for prompt in blocks[0]
            if all(prompt in block and block[prompt][0] > 0 and block[prompt][1] > 0 for block in blocks)]


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _against(blocks: Sequence[Block], index: int, others: Sequence[int], prompts: Sequence[str]) -> list[float]:
    """Per prompt, the log of its time in block ``index`` less the mean log of its times in
    ``others``."""
    return [math.log(blocks[index][p][0]) - sum(math.log(blocks[j][p][0]) for j in others) / len(others)
            for p in prompts]


def _far_out(values: Mapping[str, float]) -> dict[str, float]:
    """prompt -> how many robust scales (1.4826 x the median absolute deviation) its value lies
    from the median, for those beyond OUTLIER_SCALES."""
    if len(values) < 4:
        return {}
    center = _median(list(values.values()))
    scale = 1.4826 * _median([abs(value - center) for value in values.values()])
    if scale <= 0:
        return {}
    return {prompt: abs(value - center) / scale for prompt, value in values.items()
            if abs(value - center) > OUTLIER_SCALES * scale}


def stalls(blocks: Sequence[Block], sides: Sequence[str]) -> set[tuple[int, str]]:
    """(block index, prompt) of each request that stalled: between two successive blocks of one
    side, a prompt whose change is beyond OUTLIER_SCALES robust scales of the others' (at most
    OUTLIER_SHARE of the prompts a pair); of the two, the block where the request was slower for
    its block's level (a stall only ever adds time). Only blocks of one side are compared, so a
    prompt speculation truly slows, or speeds up, is no stall."""
    prompts = common_prompts(blocks)
    levels = [log_level(block, prompts) for block in blocks] if prompts else []
    found: set[tuple[int, str]] = set()
    most = int(len(prompts) * OUTLIER_SHARE)
    for _, earlier, later in same_side_pairs(sides):
        changes = {p: math.log(blocks[later][p][0] / blocks[earlier][p][0]) for p in prompts}
        far = _far_out(changes)
        for prompt in sorted(far, key=lambda prompt: -far[prompt])[:most]:
            slower = later if changes[prompt] - (levels[later] - levels[earlier]) > 0 else earlier
            found.add((slower, prompt))
    return found


def cold_starts(blocks: Sequence[Block], sides: Sequence[str]) -> set[tuple[int, str]]:
    """(block index, prompt) of the requests a cold start slowed: a block whose first requests (two
    to COLD_SHARE of its prompts, in sending order) took longer, against the same prompts in the
    side's other blocks, than the rest of it did: their mean beyond COLD_SCALES standard errors and
    their median beyond one (robust scale), so one stall among them is no cold start, while the
    rest of the block is level with those blocks (within half that median), so a step in one of
    them is not taken for a cold start here. A server's first requests warm its caches; the rest
    of the block is its speed."""
    prompts = common_prompts(blocks)
    found: set[tuple[int, str]] = set()
    longest = int(len(prompts) * COLD_SHARE)
    if longest < 2:
        return found
    for index, side in enumerate(sides):
        others = [j for j, which in enumerate(sides) if which == side and j != index]
        if not others:
            continue
        changes = _against(blocks, index, others, prompts)
        center = _median(changes)
        excess = [change - center for change in changes]
        scale = 1.4826 * _median([abs(value) for value in excess])
        if scale <= 0:
            continue
        best, length = max((sum(excess[:k]) / (scale * math.sqrt(k)), k) for k in range(2, longest + 1))
        # Slow throughout, not one stall among them: their median too a scale above the rest.
        # And the rest of the block level with the side's other blocks: a step in one of those
        # (the same prompts, later, slower there) reads alike from here, but moves the rest too.
        slow = _median(excess[:length])
        if best > COLD_SCALES and slow > scale and abs(center) < slow / 2:
            found.update((index, prompt) for prompt in prompts[:length])
    return found


def cleaned(blocks: Sequence[Block], sides: Sequence[str], either_side: bool = False) -> list[Block]:
    """``blocks`` with each stalled request (``stalls``), and each a cold start slowed
    (``cold_starts``), given the time the same prompt took in the side's other blocks, per token
    and scaled to its own block's level, so the prompt set stays whole (leaving a prompt out would
    change the figure the thresholds speak of, by how well that prompt drafts). Stalls are left as
    they are while a side was measured once, unless ``either_side`` (a check that compares a side
    only with itself): that side's stalls cannot be found, and mending only the other's would
    favour it. A cold start is mended wherever it can be found: it slows a block whose side's
    other blocks show it, so mending it never favours the side that cannot be checked."""
    found = cold_starts(blocks, sides)
    if either_side or all(sides.count(side) >= 2 for side in SIDES):
        found |= stalls(blocks, sides)
    if not found:
        return list(blocks)
    prompts = [p for p in common_prompts(blocks) if not any((i, p) in found for i in range(len(blocks)))]
    if len(prompts) < 2:
        return list(blocks)
    levels = [log_level(block, prompts) for block in blocks]
    out = [dict(block) for block in blocks]
    for index, prompt in found:
        others = [j for j, side in enumerate(sides)
                  if side == sides[index] and j != index and (j, prompt) not in found]
        if not others:
            continue
        rate = sum(math.log(blocks[j][prompt][0] / blocks[j][prompt][1]) - levels[j] for j in others) / len(others)
        tokens = blocks[index][prompt][1]
        out[index][prompt] = (math.exp(rate + levels[index]) * tokens, tokens)
    return out


def log_level(block: Block, prompts: Sequence[str]) -> float:
    """log of the block's ratio of sums over ``prompts``: time per token of the whole set."""
    return math.log(sum(block[p][0] for p in prompts) / sum(block[p][1] for p in prompts))


def _shares(block: Block, prompts: Sequence[str]) -> list[float]:
    total = sum(block[p][0] for p in prompts)
    return [block[p][0] / total for p in prompts]


def share_variance(earlier: Block, later: Block, prompts: Sequence[str]) -> float:
    """Var(log R) of one block from its requests, estimated from two blocks of the same side:
    half the summed squares of the changes of each prompt's share of the block's time."""
    return sum((b - a) ** 2 for a, b in zip(_shares(earlier, prompts), _shares(later, prompts), strict=True)) / 2


def relative_noise(earlier: Block, later: Block, prompts: Sequence[str]) -> float:
    """The variance of one prompt's log time from its requests' noise, from two blocks of one
    side: ``share_variance`` over the blocks' sum of squared shares."""
    return share_variance(earlier, later, prompts) / sum(share * share for share in _shares(earlier, prompts))


def noise_by_side(cells: Sequence[Sequence[Block]], sides: Sequence[str]) -> dict[str, float]:
    """Per side, the relative request noise (``relative_noise``), pooled over every pair of
    successive same-side blocks in every cell (workload and concurrency: the noise is the
    unit's, and one pair sees too few stalls to speak for a block); a side measured once
    borrows the pooled figure of both. Infinite when no side was measured twice."""
    found: dict[str, list[float]] = {side: [] for side in SIDES}
    for blocks in cells:
        prompts = common_prompts(blocks)
        if len(prompts) < 2:
            continue
        for side, earlier, later in same_side_pairs(sides):
            found[side].append(relative_noise(blocks[earlier], blocks[later], prompts))
    pooled = [value for values in found.values() for value in values]
    fallback = sum(pooled) / len(pooled) if pooled else math.inf
    return {side: sum(values) / len(values) if values else fallback for side, values in found.items()}


def with_spread(blocks: Sequence[Block], sides: Sequence[str], noise: Mapping[str, float]) -> dict[str, float]:
    """``noise``, with a side measured once given at least the spread of its prompts' changes
    against the other side (less what the other side's own noise puts there). That spread also
    holds how unequally the prompts gain, so it is an upper estimate: for a guard against harm,
    which must not take a stall in the one block measured for a loss."""
    prompts = common_prompts(blocks)
    widened = dict(noise)
    for side in SIDES:
        once = [index for index, which in enumerate(sides) if which == side]
        others = [index for index, which in enumerate(sides) if which != side]
        if len(once) != 1 or not others or len(prompts) < 2:
            continue
        changes = _against(blocks, once[0], others, prompts)
        other_side = next(which for which in sides if which != side)
        spread = statistics.pvariance(changes) - noise[other_side] / len(others)
        widened[side] = max(noise[side], spread)
    return widened


def _pooled(floor: float, observed: float, freedom: int) -> float:
    """``observed`` (a variance on ``freedom`` degrees of freedom) pooled with ``floor`` worth
    PRIOR_BLOCKS of them, never below ``floor``."""
    return max(floor, (PRIOR_BLOCKS * floor + freedom * max(observed, 0.0)) / (PRIOR_BLOCKS + freedom))


def _null_moment(rows: Sequence[Sequence[float]], levels: Sequence[float], request_part: Sequence[float]) -> float:
    """The block level's variance read from contrasts with nothing to find (their expected value
    zero): per contrast, its square less what the requests' noise puts there, over its squared
    weights; their mean."""
    return sum((sum(w * y for w, y in zip(row, levels, strict=True)) ** 2
                - sum(w * w * r for w, r in zip(row, request_part, strict=True))) / sum(w * w for w in row)
               for row in rows) / len(rows)


def block_variance(levels: Sequence[float], sides: Sequence[str], request_part: Sequence[float],
                   block_noise: float) -> float:
    """The block level's variance, from how much the replicates of the comparison
    (``replicate_weights``, one per B block) differ from each other beyond what their requests'
    noise puts there: a method-of-moments estimate with m - 1 degrees of freedom for m
    replicates, pooled with ``block_noise``**2 (``_pooled``). Each replicate compares blocks next
    to each other in time, as the estimate does, so a unit that wanders slowly or steps once
    counts as much as it moves each comparison, not by how far it strays from one line over the
    whole run. With one replicate, the two baseline blocks' difference is the only repeat of the
    block level (a steady drift counts in it too, so this errs wide)."""
    floor = block_noise ** 2
    rows = replicate_weights(sides)
    if len(rows) < 2:
        if sides.count(BASELINE) != 2:
            return floor
        return _pooled(floor, _null_moment(drift_weights(sides), levels, request_part), 1)
    count = len(rows)
    values = [sum(w * y for w, y in zip(row, levels, strict=True)) for row in rows]
    mean = sum(values) / count
    spread = sum((value - mean) ** 2 for value in values)

    def centred_trace(diagonal: Sequence[float]) -> float:
        """tr(M C diag(d) C^T), M the centring matrix: the expected spread from variances d."""
        gram = [[sum(a * b * d for a, b, d in zip(one, two, diagonal, strict=True)) for two in rows] for one in rows]
        return sum(gram[i][i] for i in range(count)) - sum(map(sum, gram)) / count

    observed = (spread - centred_trace(request_part)) / centred_trace([1.0] * len(levels))
    return _pooled(floor, observed, count - 1)


def placebo_block_noise(levels: Sequence[float], block_noise: float) -> float:
    """The block level's noise (sd, log scale) from successive baseline blocks' ``levels`` alone:
    each middle one against the mean of its neighbours (``drift_weights``) is a contrast with the
    comparison's own weights and nothing to find, so its mean square over 1.5 is what one
    block's level varies by, request noise included (an upper estimate). Pooled with
    ``block_noise`` (``_pooled``). A sweep judges each draft length on one speculative block and
    its two neighbours, too few to see the unit wander; its baseline blocks, spaced out over the
    whole sweep, see it."""
    if len(levels) < 3:
        return block_noise
    placebos = drift_weights([BASELINE] * len(levels))
    return math.sqrt(_pooled(block_noise ** 2, _null_moment(placebos, levels, [0.0] * len(levels)), len(placebos)))


@dataclass(frozen=True)
class Variances:
    """The two levels of a set of blocks: per block, the request part of Var(log R_b); and the
    block level's variance."""

    prompts: list[str]
    request: list[float]
    block: float


def variances(blocks: Sequence[Block], sides: Sequence[str], block_noise: float,
              noise: Mapping[str, float] | None = None) -> Variances | None:
    """The variance components of ``blocks`` (all of them, whatever a contrast weighs), over the
    prompts every block measured; ``noise``: the relative request noise per side
    (``noise_by_side``), else from these blocks alone. None with fewer than two prompts."""
    prompts = common_prompts(blocks)
    if len(prompts) < 2:
        return None
    per_side = noise if noise is not None else noise_by_side([blocks], sides)
    request = [per_side[side] * sum(share * share for share in _shares(block, prompts))
               for block, side in zip(blocks, sides, strict=True)]
    levels = [log_level(block, prompts) for block in blocks]
    return Variances(prompts, request, block_variance(levels, sides, request, block_noise))


def estimate(blocks: Sequence[Block], sides: Sequence[str], weights: Sequence[float],
             block_noise: float, noise: Mapping[str, float] | None = None,
             steady: bool = False) -> Estimate | None:
    """The weighted contrast of the blocks' levels, with its two-level standard error (``noise``
    as for ``variances``); None when fewer than two prompts were measured in every block.
    ``steady``: the block level's variance is ``block_noise``**2 alone, what a unit that does
    not move shows (for the drift checks: a move must not widen the yardstick it is held to)."""
    found = variances(blocks, sides, block_noise, noise)
    if found is None:
        return None
    value = sum(weight * log_level(block, found.prompts) for block, weight in zip(blocks, weights, strict=True)
                if weight)
    block_level = block_noise ** 2 if steady else found.block
    variance = sum(weight * weight * (request + block_level)
                   for weight, request in zip(weights, found.request, strict=True))
    return Estimate(log_ratio=value, se=math.sqrt(variance), prompts=len(found.prompts))


def exposure(weights: Sequence[float], sides: Sequence[str], side: str) -> float:
    """The most a move by 1 (log scale) of the level of one of ``side``'s blocks moves a contrast
    with ``weights``: a move of that block alone, or of every block from some point on (a step
    that stays)."""
    alone = [abs(weight) for weight, which in zip(weights, sides, strict=True) if which == side]
    return max(*alone, lasting_step(weights))


def step_within(earlier: Block, later: Block, prompts: Sequence[str],
                noise: float) -> list[tuple[Estimate, float, float]]:
    """Between two blocks of one side, at each of STEP_SPLITS - 1 points in sending order: how
    much more the prompts after it changed than those before it did, as a ratio (1.0: no step
    inside either block), and the share of the time before the point in the earlier block and
    in the later one. A step
    where the unit's clocks changed, or a cold start whose first requests were slow, shows at the
    point nearest it. ``noise``: the side's relative request noise (``noise_by_side``)."""

    def change(part: Sequence[str]) -> float:
        return math.log(sum(later[p][0] for p in part) / sum(earlier[p][0] for p in part))

    def squared_shares(part: Sequence[str]) -> float:
        total = sum(earlier[p][0] for p in part)
        return sum((earlier[p][0] / total) ** 2 for p in part)

    found = []
    for split in sorted({len(prompts) * point // STEP_SPLITS for point in range(1, STEP_SPLITS)} - {0, len(prompts)}):
        before, after = prompts[:split], prompts[split:]
        se = math.sqrt(2 * noise * (squared_shares(before) + squared_shares(after)))
        shares = [sum(block[p][0] for p in before) / sum(block[p][0] for p in prompts) for block in (earlier, later)]
        found.append((Estimate(log_ratio=change(after) - change(before), se=se, prompts=len(prompts)), *shares))
    return found
