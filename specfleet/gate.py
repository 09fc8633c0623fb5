"""The gate: keep or revert speculative decoding on a unit from interleaved measurement blocks.

Pure functions, no Ansible. Input: the measuring order of the unit's blocks, each a spec_bench
``bench`` of one side (the baseline A, speculation on B), A B A at least, every block with the
same prompts, seed and settings; and the merged policy (``specfleet_gate_*``).

Rules (thresholds from seed 000 and the policy; statistics in specfleet.paired):
- On the primary workload (the first of ``specfleet_gate_workloads``), keep only when the
  one-sided lower bound of the throughput speedup at concurrency 1 clears
  ``1 + specfleet_gate_min_throughput_gain``, the upper bound of TPOT (speculative over
  baseline) at concurrency 1 clears ``1 - specfleet_gate_min_tpot_drop``, and throughput at
  concurrency 8 is non-inferior: its lower bound clears ``1 - specfleet_gate_margin``. Each
  figure is the prompt set's: total time over total tokens (a ratio of sums), as a stopwatch
  on the whole set measures it.
- Every other gated workload shows no regression beyond the margin: its throughput at
  concurrency 1 reverts when even its upper bound is below ``1 - margin`` (a guard against
  harm, not a second proof: a break-even chat workload must not revert a unit). Its loss at
  concurrency 8, if any, is reported, not gated.
- A bound that straddles its threshold is inconclusive: one more pair of blocks (B, A) is
  measured while ``specfleet_gate_max_blocks`` allows, then the verdict is taken again. Still
  inconclusive at the budget reverts, saying so. A figure that clears its threshold in the
  wrong direction (even its best bound misses) reverts at once.
- The bounds of each look are at the confidence ``look_confidence`` gives: the policy's error
  (1 - ``specfleet_gate_confidence``) is spent over the looks the budget allows, so looking
  again after an inconclusive verdict does not add to the chance of a wrong keep. The guards
  against harm take the same bounds: checked at every look, a guard that fires wrongly reverts a
  good unit, and its error too would grow with each look at a fixed confidence.
- The unit's drift while it was measured: between successive baseline blocks, and inside a
  block (at each eighth of the sending order, the prompts after it against those before it,
  between two blocks of one side). Beyond ``specfleet_gate_max_drift`` and surely not zero, the
  unit moved, which the interleaving does not cancel (it cancels a steady drift, not a step):
  when the verdict stands with every bound widened by the most the move can have biased the
  comparison (``drift``'s ``allowance``), the move could not have decided it and the verdict is
  taken (a unit far from every threshold); else the blocks after the move are judged alone once
  they hold baseline, speculative, baseline (``judged_from``), and until then the verdict is
  inconclusive. On three blocks the bounds make room for the scan inside the two baseline
  blocks even when it is not surely beyond the noise: a step in the second can hide in their
  difference behind a cold start of the first, and the scan is the only other view of it.
- The output check compares the tokens each side generated for the same request: a first
  divergence where the baseline's two best candidates were within
  ``specfleet_gate_tie_logprob_gap`` in any baseline answer that reached it is a numerics tie
  (reported); one where every baseline answer was confident reverts. The same rule judges
  each side's own repeat: a speculative server that answers the same request otherwise where
  it was confident reverts, a tie is noted on either side. A server that sent no alternative
  leaves the prompt inconclusive. Answers of a batch revert when the speculative side diverges
  confidently beyond the baseline's own batch. A check for which the speculative server did
  not draft says so: its outputs were not checked with speculation on.
- Either side's benchmark not ``ok`` reverts, with its failure.

Throughput at a concurrency is compared through the set's time per output token (the sum of
the requests' E2E over the sum of their tokens): with the same number of requests in flight on
both sides, the ratio of throughputs is the inverse ratio of that time (Little's law).
Anything not measured (acceptance on a server without spec-decode counters, a missing
concurrency) is reported as unavailable, never filled in.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.specfleet.fleet.plugins.module_utils.bench_figures import bench_of, cell, cell_acceptance

from specfleet import paired
from specfleet.policy import defaults as policy_defaults

SINGLE = "c1"
LOADED = "c8"
PASS, FAIL, OPEN, NOTE = "pass", "fail", "inconclusive", "note"
KEEP, REVERT, MEASURE = "keep", "revert", "measure"
BETWEEN_BASELINES = "between baseline blocks"  # a drift's ``where`` for a move between blocks


def gate_defaults() -> dict[str, Any]:
    """The ``specfleet_gate_*`` defaults, from the one place they are documented (policy.yml)."""
    return {name: value for name, value in policy_defaults().items() if name.startswith("specfleet_gate_")}


def _pct(value: float | None, signed: bool = True) -> str:
    if value is None:
        return "n/a"
    return f"{value * 100:+.1f}%" if signed else f"{value * 100:.1f}%"


def _num(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


# ---- per-prompt figures of a block ------------------------------------------------------------
def prompt_figures(bench: Mapping[str, Any], workload: str, level: str, figure: str) -> dict[str, tuple[float, float]]:
    """prompt id -> (time ms, tokens) of one block over its clean requests, in sending order (a
    prompt sent more than once: summed): the whole request's time and its tokens for throughput
    (``time_per_token``), its decode time and decoded tokens for ``tpot``. Ratios of these
    sums are the block's figures (specfleet.paired)."""
    collected: dict[str, tuple[float, float]] = {}
    for run in (cell(bench, workload, level) or {}).get("runs") or []:
        for request in run.get("requests") or []:
            if request.get("failed") or request.get("bursty") or not request.get("prompt"):
                continue
            tokens = request.get("tokens")
            if figure == "tpot":
                tpot = request.get("tpot_ms")
                found = (tpot * (tokens - 1), tokens - 1) if tpot and tokens and tokens > 1 else None
            else:
                e2e = request.get("e2e_ms")
                found = (e2e, tokens) if tokens and e2e else None
            if found and found[0] > 0:
                time, count = collected.get(request["prompt"], (0.0, 0.0))
                collected[request["prompt"]] = (time + float(found[0]), count + float(found[1]))
    return collected


def cleaned_blocks(benches: Sequence[Mapping[str, Any]], sides: Sequence[str], workload: str, level: str,
                   figure: str, either_side: bool = False) -> list[paired.Block]:
    """The blocks' figures (``prompt_figures``), their stalls and cold starts mended
    (specfleet.paired.cleaned)."""
    return paired.cleaned([prompt_figures(bench, workload, level, figure) for bench in benches], sides, either_side)


def _estimate(benches: Sequence[Mapping[str, Any]], sides: Sequence[str], weights: Sequence[float],
              workload: str, level: str, figure: str, block_noise: float,
              noise: Mapping[str, float]) -> paired.Estimate | None:
    return paired.estimate(cleaned_blocks(benches, sides, workload, level, figure), sides, weights, block_noise, noise)


def request_noise(benches: Sequence[Mapping[str, Any]], sides: Sequence[str],
                  workloads: Sequence[str], either_side: bool = False) -> dict[str, dict[str, float]]:
    """Per concurrency, per side, the unit's relative request noise, pooled over the gated
    workloads (specfleet.paired.noise_by_side): requests batched at c=8 vary otherwise than one
    at a time. ``either_side``: with each side's stalls cleaned even while the other's cannot
    be (for the drift checks, which compare a side with itself)."""
    return {level: paired.noise_by_side([cleaned_blocks(benches, sides, workload, level, "time_per_token", either_side)
                                         for workload in workloads], sides)
            for level in (SINGLE, LOADED)}


def _side_median(benches: Sequence[Mapping[str, Any]], sides: Sequence[str], side: str, workload: str) -> float | None:
    """TPOT p50 (ms) over the side's blocks at concurrency 1: the median of its prompts' TPOT."""
    values = sorted(time / count for bench, which in zip(benches, sides, strict=True) if which == side
                    for time, count in prompt_figures(bench, workload, SINGLE, "tpot").values())
    return values[len(values) // 2] if values else None


# ---- looks: the error the policy allows, spent over the blocks the budget allows ------------------
def looks(budget: int) -> int:
    """How many times the gate may decide within ``budget`` blocks: after A B A, then after each
    further pair."""
    return max(1, 1 + (budget - 3) // 2)


def look_confidence(confidence: float, blocks: int, budget: int, compared: int = 1, alone: bool = False) -> float:
    """The confidence of the bounds at the look ``blocks`` measured make, so that the
    policy's ``confidence`` holds over every look the budget allows.

    The policy's error (1 - confidence) is spent over the looks with Lan and DeMets' Pocock-type
    spending function, alpha * ln(1 + (e - 1) t), t = look / looks (Lan and DeMets, "Discrete
    sequential boundaries for clinical trials", Biometrika 70, 1983): most of it early, so a unit
    far from every threshold is decided at its first look. Each look's boundary is the one at
    which a keep, at a true speedup on the threshold, happens there and at no earlier look with
    exactly that look's share of the error (``boundaries``), so the looks together keep wrongly
    with at most the policy's error. The guards against harm take the same bounds (a guard that
    fires wrongly at some look reverts a good unit). ``alone``: this look judges blocks that do not contain the
    earlier looks' (some were left out, ``judged_from``), so it takes its share of the error
    alone, which the looks' sum bounds whatever their correlation. ``compared``: the keep is the
    best of that many candidates (a sweep's k), each judged at its share of the error."""
    error = (1 - confidence) / compared
    if error <= 0:
        return 1.0
    total = looks(budget)
    look = min(total, looks(blocks))  # the looks these blocks allowed: this one is the last
    if alone:
        return 1 - (_spent(error, look / total) - _spent(error, (look - 1) / total))
    return statistics.NormalDist().cdf(boundaries(error, total)[look - 1])


def _spent(error: float, fraction: float) -> float:
    """The Pocock-type spending function: the error spent by ``fraction`` of the looks."""
    return error * math.log(1 + (math.e - 1) * fraction)


def _crossing(grid: Sequence[float], density: Sequence[float], step: float, edge: float, spread: float) -> float:
    """The probability that the score, at ``grid`` with ``density`` now, is at ``edge`` or
    above after an independent normal increment of sd ``spread``."""
    normal = statistics.NormalDist()
    return step * sum(weight * (1 - normal.cdf((edge - value) / spread))
                      for value, weight in zip(grid, density, strict=True))


@functools.lru_cache(maxsize=64)
def boundaries(error: float, total: int) -> tuple[float, ...]:
    """Per look, the standardised boundary of a one-sided group-sequential test spending
    ``error`` over ``total`` looks (``_spent``), computed by numerical integration over
    the score's distribution given it crossed at no earlier look (Jennison and Turnbull, Group
    Sequential Methods with Applications to Clinical Trials, 2000, chapter 19). The information
    at each look is the design's: 1 / sum of the contrast's squared weights after 3, 5, 7, ...
    blocks (A B A, A B A B A, ...)."""

    information = [1 / sum(w * w for w in paired.contrast_weights(
        [paired.BASELINE if i % 2 == 0 else paired.SPECULATIVE for i in range(3 + 2 * k)])) for k in range(total)]
    normal = statistics.NormalDist()
    found: list[float] = []
    # The score S = Z * sqrt(information), on a grid; `density` is that of S at the last look
    # among the paths that crossed no boundary yet.
    step = 0.02
    grid: list[float] = []
    density: list[float] = []
    for index, info in enumerate(information):
        increment = _spent(error, (index + 1) / total) - _spent(error, index / total)
        if index == 0:
            bound = normal.inv_cdf(1 - increment)
            sd = math.sqrt(info)
            grid = [x * step for x in range(int(-8 * sd / step), int(bound * sd / step) + 1)]
            density = [normal.pdf(value / sd) / sd for value in grid]
            found.append(bound)
            continue
        spread = math.sqrt(info - information[index - 1])
        low, high = -2.0, 8.0
        for _ in range(50):
            middle = (low + high) / 2
            crossed = _crossing(grid, density, step, middle * math.sqrt(info), spread)
            low, high = (low, middle) if crossed < increment else (middle, high)
        bound = (low + high) / 2
        found.append(bound)
        edge = bound * math.sqrt(info)
        start = min(grid[0], -8 * math.sqrt(info))
        targets = [start + x * step for x in range(int((edge - start) / step) + 1)]
        density = [step * sum(weight * normal.pdf((target - value) / spread) / spread
                              for value, weight in zip(grid, density, strict=True)) for target in targets]
        grid = targets
    return tuple(found)


# ---- checks ---------------------------------------------------------------------------------------
def _bounded(found: paired.Estimate | None, confidence: float, invert: bool, allowance: float = 0.0) -> dict[str, Any]:
    """A ratio estimate as the gate reports it: value and one-sided bounds, as a change from 1
    (+0.35 = +35 %). ``invert`` turns a time ratio into a speed ratio. ``allowance``: a bias the
    bounds make room for, on the log scale (a move of the unit, ``decide``)."""
    if found is None:
        return {"value": None, "lower": None, "upper": None, "prompts": 0}
    value = found.ratio
    lower = found.lower(confidence) * math.exp(-allowance)
    upper = found.upper(confidence) * math.exp(allowance)
    if invert:
        value, lower, upper = 1 / value, 1 / upper, 1 / lower
    return {"value": round(value - 1, 4), "lower": round(lower - 1, 4), "upper": round(upper - 1, 4),
            "prompts": found.prompts}


def _verdict(lower: float, upper: float, threshold: float) -> str:
    """At least ``threshold``: pass when even the lower bound clears it, fail when even the
    upper bound misses it, inconclusive in between."""
    if lower >= threshold:
        return PASS
    if upper < threshold:
        return FAIL
    return OPEN


def _workload_checks(workload: str, primary: bool, benches: Sequence[Mapping[str, Any]], sides: Sequence[str],
                     policy: Mapping[str, Any], request: Mapping[str, Mapping[str, float]], confidence: float,
                     allowance: float = 0.0) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(checks, figures) of one gated workload, from the blocks judged; each check: {workload,
    check, verdict, reason}; ``request``: the unit's relative request noise per concurrency and
    side (``request_noise``). The primary workload's checks decide a keep, the others guard
    against harm; both at ``confidence`` (the look's, ``look_confidence``)."""
    noise = policy["specfleet_gate_block_noise"]
    margin = policy["specfleet_gate_margin"]
    weights = paired.contrast_weights(sides)
    level_pct = f"{confidence * 100:.3g}% bounds"
    checks: list[dict[str, Any]] = []

    def check(name: str, verdict: str, reason: str) -> None:
        checks.append({"workload": workload, "check": name, "verdict": verdict, "reason": f"{workload}: {reason}"})

    def bounded(level: str, figure: str, invert: bool) -> dict[str, Any]:
        per_side = request[level]
        if not primary:  # a guard: a stall in a side measured once is no loss
            measured = cleaned_blocks(benches, sides, workload, level, "time_per_token")
            per_side = paired.with_spread(measured, sides, per_side)
        found = _estimate(benches, sides, weights, workload, level, figure, noise, per_side)
        return _bounded(found, confidence, invert, allowance)

    gain = bounded(SINGLE, "time_per_token", True)
    tpot = bounded(SINGLE, "tpot", False)
    load = bounded(LOADED, "time_per_token", True)
    acceptance = [cell_acceptance(cell(bench, workload, SINGLE)) for bench, side in zip(benches, sides, strict=True)
                  if side == paired.SPECULATIVE]
    first_acceptance = acceptance[0] if acceptance else None
    figures = {
        "throughput_gain_c1": gain,
        "tpot_drop_c1": {
            "value": None if tpot["value"] is None else round(-tpot["value"], 4),
            "lower": None if tpot["upper"] is None else round(-tpot["upper"], 4),
            "upper": None if tpot["lower"] is None else round(-tpot["lower"], 4),
            "prompts": tpot["prompts"],
            "baseline": _side_median(benches, sides, paired.BASELINE, workload),
            "candidate": _side_median(benches, sides, paired.SPECULATIVE, workload),
        },
        "throughput_change_c8": load,
        "acceptance_c1": first_acceptance,
        "acceptance_c1_text": _acceptance_text(first_acceptance) if acceptance else "not measured",
    }

    def line(label: str, found: dict[str, Any], unit: str = "") -> str:
        return (f"{label} {_pct(found['value'])}{unit} ({level_pct} {_pct(found['lower'])} .. {_pct(found['upper'])}, "
                f"{found['prompts']} prompts paired over {len(sides)} blocks)")

    if primary:
        min_gain = policy["specfleet_gate_min_throughput_gain"]
        floor = policy["specfleet_gate_disable_below"]
        if gain["value"] is None:
            check("throughput_c1", FAIL, "no throughput measurement at concurrency 1 on both sides")
        else:
            text = line("throughput at c=1", gain)
            verdict = _verdict(gain["lower"], gain["upper"], min_gain)
            if gain["upper"] < floor:
                check("disable_below", FAIL, f"{text} is under the {_pct(floor)} floor: speculation always off")
            elif verdict == PASS:
                check("throughput_c1", PASS, f"{text} clears the {_pct(min_gain)} needed")
            elif verdict == FAIL:
                check("throughput_c1", FAIL, f"{text} is below the {_pct(min_gain)} needed")
            else:
                check("throughput_c1", OPEN, f"{text} straddles the {_pct(min_gain)} needed")
        min_drop = policy["specfleet_gate_min_tpot_drop"]
        drop = figures["tpot_drop_c1"]
        if drop["value"] is None:
            check("tpot_c1", FAIL, "no TPOT at concurrency 1 on both sides")
        else:
            text = (f"TPOT at c=1 {_pct(-drop['value'])} ({_num(drop['baseline'])} -> {_num(drop['candidate'])} ms; "
                    f"drop {level_pct} {_pct(drop['lower'], False)} .. {_pct(drop['upper'], False)})")
            verdict = _verdict(drop["lower"], drop["upper"], min_drop)
            wording = {PASS: f"clears the {_pct(min_drop, False)} drop",
                       FAIL: f"a drop of at least {_pct(min_drop, False)} is needed",
                       OPEN: f"straddles the {_pct(min_drop, False)} drop needed"}[verdict]
            check("tpot_c1", verdict, f"{text}: {wording}")
    else:
        # A guard against harm: the data must show a loss beyond the margin to revert. Asking
        # them to prove no loss would revert most units whose chat is break-even (the seeds
        # measured EAGLE-3 at 0.99x on chat) at any affordable number of blocks.
        # At concurrency 8 the primary workload's non-inferiority decides; here a regression is
        # reported (a per-batch-size table, where the image has one, turns speculation off
        # under load), not gated: reverting every unit whose chat loses under load would revert
        # nearly every EAGLE-3 unit (vLLM issues #27379, #31014 report such losses).
        if gain["value"] is None:
            check("throughput_c1", FAIL, "no throughput measurement at concurrency 1 on both sides")
        elif gain["upper"] < -margin:
            check("throughput_c1", FAIL, f"{line('throughput at c=1', gain)}: regresses beyond the "
                                         f"{_pct(margin, False)} margin")
        else:
            check("throughput_c1", PASS, f"{line('throughput at c=1', gain)}: no regression beyond the "
                                         f"{_pct(margin, False)} margin shown")
        if load["value"] is not None and load["upper"] < -margin:
            checks.append({"workload": workload, "check": "throughput_c8", "verdict": NOTE,
                           "reason": f"{workload}: {line('throughput at c=8', load)}: regresses under load "
                                     f"(reported, not gated: only the primary workload's c=8 is)"})
        return checks, figures
    if load["value"] is None:
        check("throughput_c8", FAIL, "no throughput measurement at concurrency 8 on both sides: "
                                     "a regression under load cannot be ruled out")
    else:
        verdict = _verdict(load["lower"], load["upper"], -margin)
        wording = {PASS: "no regression under load", FAIL: "regresses under load",
                   OPEN: "cannot rule out a regression under load"}[verdict]
        check("throughput_c8", verdict, f"{line('throughput at c=8', load)}: {wording} "
                                        f"(margin {_pct(margin, False)})")
    return checks, figures


def _variant_check(workload: str, variant: Mapping[str, Any], plain: Mapping[str, Any],
                   margin: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """(check, figure): a variant's throughput at c=1 against the plain serving it varies, both
    measured against the same baseline, as the ratio of their speedups. The two are independent
    estimates (the one baseline block they share only correlates them, which narrows their
    ratio's spread), so in log space their half-widths add in quadrature. A guard against harm,
    like the other workloads': it fails only when even the upper bound is below ``-margin``. A
    per-batch-size table's cost shows here: the PIECEWISE CUDA graphs vLLM's V1 model runner
    falls back to with one slow every step, its k=0 band's too (vllm-project/vllm#48494, #49652)."""
    mine, theirs = variant.get("throughput_gain_c1") or {}, plain.get("throughput_gain_c1") or {}
    names = ("value", "lower", "upper")
    if any(mine.get(name) is None or theirs.get(name) is None for name in names):
        figure = {"value": None, "lower": None, "upper": None}
        return ({"workload": workload, "check": "variant_c1", "verdict": FAIL,
                 "reason": f"{workload}: no throughput at c=1 of both the variant and the serving it varies"}, figure)

    def log_speed(change: float) -> float:
        # A bound rounded to -100% (a side some 10,000 times slower) stays finite.
        return math.log1p(max(change, -0.9999))

    def log_half_width(found: Mapping[str, float]) -> float:
        return (log_speed(found["upper"]) - log_speed(found["lower"])) / 2

    centre = log_speed(mine["value"]) - log_speed(theirs["value"])
    half = math.hypot(log_half_width(mine), log_half_width(theirs))
    figure = {"value": round(math.expm1(centre), 4), "lower": round(math.expm1(centre - half), 4),
              "upper": round(math.expm1(centre + half), 4)}
    text = (f"throughput at c=1 against plain speculation {_pct(figure['value'])} "
            f"({_pct(figure['lower'])} .. {_pct(figure['upper'])})")
    if figure["upper"] < -margin:
        return ({"workload": workload, "check": "variant_c1", "verdict": FAIL,
                 "reason": f"{workload}: {text}: costs more than the {_pct(margin, False)} margin where "
                           f"speculation pays"}, figure)
    return ({"workload": workload, "check": "variant_c1", "verdict": PASS,
             "reason": f"{workload}: {text}: no cost beyond the {_pct(margin, False)} margin shown"}, figure)


def _acceptance_text(acceptance: Mapping[str, Any] | None) -> str:
    if not acceptance:
        return "unavailable (the server exposes no spec-decode counters)"
    rate, length = acceptance.get("rate"), acceptance.get("mean_length")
    if rate is None or length is None:
        return f"unavailable (no drafts in the window: {acceptance.get('drafts', 0)} drafts)"
    per_position = acceptance.get("per_position") or []
    positions = "/".join(f"{p:.2f}" for p in per_position)
    return f"{rate * 100:.1f}% accepted, mean acceptance length {length:.2f}" + (
        f", per position {positions}" if positions else ""
    )


def drift(benches: Sequence[Mapping[str, Any]], sides: Sequence[str], workload: str,
          policy: Mapping[str, Any], request: Mapping[str, Mapping[str, float]]) -> dict[str, Any] | None:
    """How far the unit moved while it was measured (time per token at c=1; +0.04 = 4 % slower)
    in a way the interleaving does not cancel, the largest of: the baseline between its blocks
    (two: the change; three or more: each against its neighbours' mean, so a steady drift
    cancels and a step or a wander shows; specfleet.paired.drift_weights), and a step inside a block
    (between two blocks of one side, at each eighth of the sending order, the prompts after it
    against those before it; the prompts go out in the same order every block:
    specfleet.paired.step_within; a step between baseline blocks is reported as the step, not
    as the half of it a mean of neighbours reads). Each with its two-sided interval at the
    policy's confidence, the error shared half to the contrasts between blocks and half to the
    points of the scans, against the block noise of a unit that does not move. ``beyond_noise``
    when any is beyond ``specfleet_gate_max_drift`` and surely not zero (then the one that moved
    a block's level most is reported): the interleaving cancels a steady drift, not a step
    (clocks, heat, a neighbour, a cold start). ``allowance``: the most that move can have biased the
    comparison (log scale), the level it moved (``_moved_level``) times the most weight a block of
    its side, or every block from some point on, has in the comparison
    (specfleet.paired.exposure). With every stall cleaned, on either side
    (specfleet.paired.cleaned), and ``request`` measured so (``request_noise(...,
    either_side=True)``): a stall is no move, and its noise must not hide one."""
    noise = policy["specfleet_gate_block_noise"]
    blocks = cleaned_blocks(benches, sides, workload, SINGLE, "time_per_token", either_side=True)
    # where, the contrast, and how far one of the side's block's level moved for it to read so.
    found: list[tuple[str, str, paired.Estimate, float]] = []
    looked = 0  # the points of each scan inside blocks, beyond the one reported
    prompts = paired.common_prompts(blocks)
    for weights in paired.drift_weights(sides):
        between = paired.estimate(blocks, sides, weights, noise, request[SINGLE], steady=True)
        if between is not None:
            # A step between two of three baseline blocks reads as half of it against their
            # mean: the step is what is reported, and held to the limit (a one-block blip of the
            # middle one reads as twice itself so: an upper estimate).
            scale = paired.lasting_step(weights)
            step = paired.Estimate(between.log_ratio / scale, between.se / scale, between.prompts)
            found.append((BETWEEN_BASELINES, paired.BASELINE, step, abs(step.log_ratio)))
    if len(prompts) >= 4:
        for side, earlier, later in paired.same_side_pairs(sides):
            levels = paired.estimate(blocks, sides, paired.difference_weights(len(sides), earlier, later), noise,
                                     request[SINGLE], steady=True)
            splits = paired.step_within(blocks[earlier], blocks[later], prompts, request[SINGLE][side])
            looked += len(splits) - 1
            # The point where the step shows most surely is where it was.
            step, *shares = max(splits, key=lambda split: abs(split[0].log_ratio) / max(split[0].se, 1e-12))
            found.append((f"inside a {side} block", side, step, _moved_level(step, *shares, levels)))
    if not found:
        return None
    # Two-sided, the policy's error shared half and half between the two kinds of contrast and
    # within each among those looked at (Bonferroni, every point of every scan): the largest of
    # several is not taken for a step by chance, and the many points of the scans do not blunt
    # the few contrasts between blocks.
    error = 1 - policy["specfleet_gate_confidence"]
    between_count = sum(1 for item in found if item[0] == BETWEEN_BASELINES)
    counts = {True: between_count, False: len(found) - between_count + looked}

    def confidence(item: tuple[str, str, paired.Estimate, float]) -> float:
        return 1 - error / (2 * 2 * counts[item[0] == BETWEEN_BASELINES])

    limit = policy["specfleet_gate_max_drift"]

    def beyond(item: tuple[str, str, paired.Estimate, float]) -> bool:
        estimate, two_sided = item[2], confidence(item)
        surely_moved = estimate.lower(two_sided) > 1 or estimate.upper(two_sided) < 1
        return abs(estimate.ratio - 1) > limit and surely_moved

    moved = [item for item in found if beyond(item)]
    reported = max(moved or found, key=lambda item: item[3])
    where, side, largest, level = reported
    lower, upper = largest.lower(confidence(reported)), largest.upper(confidence(reported))
    return {"value": round(largest.ratio - 1, 4), "lower": round(lower - 1, 4), "upper": round(upper - 1, 4),
            "where": where, "beyond_noise": bool(moved),
            # The most such a move can have biased the comparison, on the log scale: the level it
            # moved, times the most weight one block, or every block from one on, has in it.
            "allowance": round(level * paired.exposure(paired.contrast_weights(sides), sides, side), 4)}


def _moved_level(step: paired.Estimate, earlier_before: float, later_before: float,
                 levels: paired.Estimate | None) -> float:
    """How far the blocks' levels moved (log scale) for a step ``step`` found inside one of two
    blocks of a side; ``*_before``: the share of each block's time before the point. Either the
    earlier block's part before it was off (a cold start: its level moved by that part's share,
    measured in the block it did not touch, of the step) or the later block's part after it. What
    the two blocks' level change (``levels``, later against earlier) leaves unexplained by the
    reading moved a level too (a cold start in the first block can hide a step in the next one);
    of the two readings, the one that needs the least movement in all."""
    factor = math.exp(step.log_ratio) - 1
    cold = math.log1p(later_before * factor)  # the earlier block's level, read against the later
    stepped = math.log1p((1 - earlier_before) * factor)  # the later block's level
    readings = ((-cold, abs(cold)), (stepped, abs(stepped)))
    change = levels.log_ratio if levels is not None else None
    return min(moved + (abs(change - expected) if change is not None else 0.0) for expected, moved in readings)


def judged_from(benches: Sequence[Mapping[str, Any]], sides: Sequence[str], workloads: Sequence[str],
                policy: Mapping[str, Any]) -> tuple[int, dict[str, Any] | None]:
    """(the first block the verdict judges, the drift over the blocks judged). All of them while
    the unit did not move beyond ``specfleet_gate_max_drift``; when it did, the blocks after the
    move, from a baseline block on, if they alone hold a speculative block between two baseline
    blocks and show no move (a cold first block, a clock that stepped down once: what came
    before is left behind, and the look takes its own share of the error alone,
    ``look_confidence``). Else all, with the drift that makes the verdict inconclusive."""
    shifted = drift(benches, sides, workloads[0], policy, request_noise(benches, sides, workloads, either_side=True))
    if shifted is None or not shifted["beyond_noise"]:
        return 0, shifted
    for start in range(1, len(sides) - 2):
        part = sides[start:]
        # From a baseline block: a speculative block first would be compared with one
        # neighbour only, which a steady drift, or a step right after it, moves.
        if part[0] != paired.BASELINE or not any(
                part[i] == paired.SPECULATIVE and paired.BASELINE == part[i - 1] == part[i + 1]
                for i in range(1, len(part) - 1)):
            continue
        later = drift(benches[start:], part, workloads[0], policy,
                      request_noise(benches[start:], part, workloads, either_side=True))
        if later is not None and not later["beyond_noise"]:
            left_behind = f"drift {shifted['where']} {_pct(shifted['value'])}"
            return start, {**later, "left_behind": left_behind}
    return 0, shifted


# ---- the output check -------------------------------------------------------------------------------
# How a first divergence between two answers to the same request is judged, on either side and
# against the reference alike: where the lead of the answer's top token over the next is within
# the tie gap it is a numerics tie (reported), beyond it a confident divergence, and where the
# server sent no alternative the prompt is inconclusive (never a divergence).
TIE, CONFIDENT, INCONCLUSIVE = "tie", "confident", "inconclusive"


def first_divergence(base: Sequence[str], cand: Sequence[str]) -> int | None:
    """Index of the first token where the two answers differ (one ending early counts); None
    when they are the same."""
    for index, (left, right) in enumerate(zip(base, cand, strict=False)):
        if left != right:
            return index
    return None if len(base) == len(cand) else min(len(base), len(cand))


def _lead(answer: Mapping[str, Any], index: int) -> float | None:
    """The answer's lead at token ``index`` (its logprob over the best alternative's); None where
    the server sent no alternative or the answer ended before it."""
    margins = answer.get("margins") or []
    return margins[index] if index < len(margins) else None


def divergence_kind(index: int, references: Sequence[Mapping[str, Any]], tie_gap: float) -> tuple[str, float | None]:
    """A divergence from ``references[0]`` at token ``index``, judged by every reference answer
    that reached that token (its tokens before it the same), whatever their order: confident
    only when they all took the reference's token there, each leading by more than ``tie_gap``;
    a tie when one led by ``tie_gap`` or less; inconclusive when one sent no alternative, when
    the answers ended there (no logprob is sent for the end), or when they answer otherwise
    there with none near a tie (the baseline is not deterministic at that token). Returns
    (kind, the smallest lead seen)."""
    reference = references[0]["tokens"]
    leads: list[float | None] = []
    split = False  # a baseline answer took another token there, or ended where another went on
    for answer in references:
        tokens = answer.get("tokens") or []
        if tokens[:index] != reference[:index]:
            continue  # it went elsewhere before: it did not reach this token
        here = tokens[index] if index < len(tokens) else None
        there = reference[index] if index < len(reference) else None
        split = split or here != there
        if here is not None:
            leads.append(_lead(answer, index))
    known = [lead for lead in leads if lead is not None]
    smallest = min(known, default=None)
    if smallest is not None and smallest <= tie_gap:
        return TIE, smallest
    if split or not leads or None in leads:
        return INCONCLUSIVE, smallest
    return CONFIDENT, smallest


def self_disagreement(answer: Mapping[str, Any], tie_gap: float) -> dict[str, Any] | None:
    """The same request answered twice by one server (the check's repeat), judged by the tie
    rule over both answers; None when they agree (or there is no repeat)."""
    repeat = answer.get("repeat") or {}
    if not answer.get("tokens") or not repeat.get("tokens"):
        return None
    index = first_divergence(answer["tokens"], repeat["tokens"])
    if index is None:
        return None
    # Each answer's own lead for the token it took there (one that ended has none to give).
    reached = [sent for sent in (answer, repeat) if index < len(sent["tokens"])]
    leads = [_lead(sent, index) for sent in reached]
    if not reached or None in leads:
        return {"position": index, "lead": None, "kind": INCONCLUSIVE}
    lead = min(lead for lead in leads if lead is not None)
    return {"position": index, "lead": lead, "kind": TIE if lead <= tie_gap else CONFIDENT}


# Drafts an answer must show to count as drafted for: vLLM adds a step's counts after it sends
# the step's tokens, so one step of the request before can fall into an answer's window.
DRAFTED_MIN = 2


def _drafted(answer: Mapping[str, Any]) -> bool | None:
    """Whether the server drafted while giving the answer compared (not its repeat); None
    without counters."""
    drafts = answer.get("drafts")
    return None if drafts is None else drafts >= DRAFTED_MIN


def fisher_one_sided(hits_a: int, total_a: int, hits_b: int, total_b: int) -> float:
    """P(A shows ``hits_a`` or more of the hits) when hits fall on A's and B's answers alike
    (Fisher's exact test, one-sided): how surprising A's excess is."""
    hits, total = hits_a + hits_b, total_a + total_b
    ways = math.comb(total, hits)
    return sum(math.comb(total_a, k) * math.comb(total_b, hits - k)
               for k in range(hits_a, min(hits, total_a) + 1)) / ways if ways else 1.0


def output_check(benches: Sequence[Mapping[str, Any]], sides: Sequence[str], tie_gap: float,
                 reference: Mapping[str, Any] | None = None, confidence: float = 0.9) -> dict[str, Any]:
    """Token by token, each speculative block's answers against the baseline's (``reference``'s,
    else the first baseline block's; every baseline answer that reached a token judges it):
    ``diverged`` (confident divergences: revert), ``ties``, ``inconclusive`` (a reference that
    sent no alternative there, or answers itself otherwise), ``compared``, ``identical``;
    ``self`` (per side, the same request answered twice otherwise: ``tie``, ``confident``,
    ``inconclusive``); ``drafting`` (the speculative answers its server drafted for:
    ``confirmed``, ``not_drafted``, ``unknown``); ``batched`` (the answers of a batch against
    the reference, the speculative side's confident divergences tested against the baseline's
    own at ``confidence``)."""
    result: dict[str, Any] = {"compared": 0, "identical": 0, "ties": [], "diverged": [], "inconclusive": [],
                              "unavailable": [], "self": {paired.BASELINE: [], paired.SPECULATIVE: []},
                              "drafting": {"confirmed": 0, "not_drafted": 0, "unknown": 0},
                              "repeats": None, "batched": None}
    pairs = list(zip(benches, sides, strict=True))
    # A reference measured before these blocks (a variant's, a later draft length's) counts as
    # one of their baseline blocks: its answers judge, its own repeat and batch are the baseline's.
    if reference is not None and not any(bench is reference for bench, _ in pairs):
        pairs.insert(0, (reference, paired.BASELINE))
    baselines = [bench for bench, side in pairs if side == paired.BASELINE and bench.get("outputs")]
    baselines = ([reference] if reference is not None else []) + [b for b in baselines if b is not reference]
    for bench, side in pairs:
        result["repeats"] = result["repeats"] or (bench.get("output_check") or {}).get("repeats")
        for workload, answers in (bench.get("outputs") or {}).items():
            for prompt, answer in answers.items():
                found = self_disagreement(answer, tie_gap)
                if found is not None:
                    result["self"][side].append({"workload": workload, "prompt": prompt, **found})
    if not baselines:
        return result
    confidently_unstable = {(entry["workload"], entry["prompt"]) for entry in result["self"][paired.BASELINE]
                            if entry["kind"] == CONFIDENT}

    def references(workload: str, prompt: str) -> list[Mapping[str, Any]]:
        found = [((bench.get("outputs") or {}).get(workload) or {}).get(prompt) for bench in baselines]
        answers = [answer for answer in found if answer and answer.get("tokens")]
        return answers + [answer["repeat"] for answer in answers if (answer.get("repeat") or {}).get("tokens")]

    def judged(workload: str, prompt: str, answer: Mapping[str, Any]) -> dict[str, Any] | None:
        """None: identical; else the divergence with its kind; raises LookupError: nothing to compare."""
        base = references(workload, prompt)
        if not base or not answer.get("tokens"):
            raise LookupError
        index = first_divergence(base[0]["tokens"], answer["tokens"])
        if index is None:
            return None
        kind, gap = divergence_kind(index, base, tie_gap)
        if (workload, prompt) in confidently_unstable:
            kind = INCONCLUSIVE  # the baseline disagrees with itself there: no reference
        tokens = base[0]["tokens"]
        return {"workload": workload, "prompt": prompt, "position": index, "baseline_gap": gap, "kind": kind,
                "baseline_token": tokens[index] if index < len(tokens) else None,
                "speculative_token": answer["tokens"][index] if index < len(answer["tokens"]) else None}

    for bench, side in pairs:
        if side != paired.SPECULATIVE:
            continue
        for workload, answers in (bench.get("outputs") or {}).items():
            for prompt, answer in answers.items():
                try:
                    found = judged(workload, prompt, answer)
                except LookupError:
                    result["unavailable"].append({"workload": workload, "prompt": prompt})
                    continue
                result["compared"] += 1
                drafted = _drafted(answer)
                result["drafting"]["unknown" if drafted is None else "confirmed" if drafted else "not_drafted"] += 1
                if found is None:
                    result["identical"] += 1
                else:
                    {TIE: result["ties"], CONFIDENT: result["diverged"],
                     INCONCLUSIVE: result["inconclusive"]}[found.pop("kind")].append(found)
    result["batched"] = _batched(pairs, judged, confidence)
    return result


def _batched(pairs: Sequence[tuple[Mapping[str, Any], str]], judged: Any, confidence: float) -> dict[str, Any] | None:
    """Each side's answers of a batch against the reference answers (at c=1): how many each
    side diverged from confidently, and whether the speculative side's count is beyond the
    baseline's own at ``confidence`` (one-sided Fisher)."""
    counts = {paired.BASELINE: [0, 0], paired.SPECULATIVE: [0, 0]}
    first: dict[str, Any] | None = None
    level = None
    for bench, side in pairs:
        for workload, batch in (bench.get("outputs_batched") or {}).items():
            level = batch.get("concurrency") or level
            for prompt, answer in (batch.get("answers") or {}).items():
                try:
                    found = judged(workload, prompt, answer)
                except LookupError:
                    continue
                counts[side][1] += 1
                if found is not None and found["kind"] == CONFIDENT:
                    counts[side][0] += 1
                    if side == paired.SPECULATIVE and first is None:
                        first = {key: found[key] for key in ("workload", "prompt", "position")}
    if not counts[paired.SPECULATIVE][1] or not counts[paired.BASELINE][1]:
        return None
    (spec_hits, spec_total), (base_hits, base_total) = counts[paired.SPECULATIVE], counts[paired.BASELINE]
    p_value = fisher_one_sided(spec_hits, spec_total, base_hits, base_total)
    return {"concurrency": level, "speculative": {"diverged": spec_hits, "compared": spec_total},
            "baseline": {"diverged": base_hits, "compared": base_total}, "p_value": round(p_value, 4),
            "beyond": spec_hits > 0 and p_value < 1 - confidence, "first": first}


def _output_checks(found: Mapping[str, Any], tie_gap: float, confidence: float) -> list[dict[str, Any]]:
    checks = []
    unstable = [entry for entry in found["self"][paired.SPECULATIVE] if entry["kind"] == CONFIDENT]
    if unstable:
        first = unstable[0]
        checks.append({"workload": first["workload"], "check": "output_check", "verdict": FAIL,
                       "reason": f"{first['workload']}: the speculative server answered the same request "
                                 f"differently twice at temperature 0 where it was confident ({len(unstable)} "
                                 f"prompt(s), first {first['prompt']} at token {first['position']}, its lead "
                                 f"{first['lead']:.3f} > {tie_gap})"})
    if found["diverged"]:
        first = found["diverged"][0]
        checks.append({"workload": first["workload"], "check": "output_check", "verdict": FAIL,
                       "reason": f"{first['workload']}: speculation changed the output where the baseline was "
                                 f"confident ({len(found['diverged'])} of {found['compared']} answers; first at "
                                 f"token {first['position']} of {first['prompt']}: {first['baseline_token']!r} -> "
                                 f"{first['speculative_token']!r}, the baseline's lead "
                                 f"{first['baseline_gap']:.3f} > {tie_gap} in every baseline answer)"})
    batched = found.get("batched")
    if batched and batched["beyond"]:
        spec, base, first = batched["speculative"], batched["baseline"], batched["first"]
        checks.append({"workload": first["workload"], "check": "output_check", "verdict": FAIL,
                       "reason": f"{first['workload']}: in a batch of {batched['concurrency']} speculation changed "
                                 f"the output where the baseline was confident in {spec['diverged']} of "
                                 f"{spec['compared']} answers, the baseline's own batch in {base['diverged']} of "
                                 f"{base['compared']} (p {batched['p_value']:.3f} < {1 - confidence:.2f}; first at "
                                 f"token {first['position']} of {first['prompt']})"})
    drafting = found["drafting"]
    if found["compared"] and not drafting["confirmed"]:
        why = ("an image whose vLLM serves a request asking for logprobs without speculation, vllm#34497, or a "
               "drafter that proposed nothing" if drafting["not_drafted"] else "its /metrics showed no drafting "
               "counters")
        checks.append({"workload": "outputs", "check": "output_check", "verdict": NOTE,
                       "reason": f"outputs: {NOT_CHECKED_WITH_SPECULATION}: the speculative server was not seen "
                                 f"drafting for any of its {found['compared']} checked answers ({why})"})
    elif found["compared"] and not checks:
        ties = f"; {len(found['ties'])} diverged at a numerics tie (lead <= {tie_gap})" if found["ties"] else ""
        checks.append({"workload": "outputs", "check": "output_check", "verdict": PASS,
                       "reason": f"outputs: {found['identical']} of {found['compared']} answers identical token by "
                                 f"token with and without speculation{ties}; {drafting_text(drafting)}"})
    return checks


NOT_CHECKED_WITH_SPECULATION = "outputs not checked with speculation on"


def drafting_text(drafting: Mapping[str, int]) -> str:
    """How many checked answers the speculative server was seen drafting for; the others were
    not checked with speculation on."""
    total = sum(drafting.values())
    text = f"{drafting['confirmed']} of {total} checked with drafting confirmed on"
    unchecked = total - drafting["confirmed"]
    if unchecked:
        text += (f" (the other {unchecked} not checked with speculation on"
                 + (f", {drafting['unknown']} without counters)" if drafting["unknown"] else ")"))
    return text


def output_notes(found: Mapping[str, Any], tie_gap: float) -> list[str]:
    """What the output check found that decides nothing: self-disagreements at a tie (either
    side: the same rule), a baseline that disagrees with itself where it was confident, prompts
    left inconclusive, how the repeats avoided the prefix cache."""
    notes = []
    for side in (paired.BASELINE, paired.SPECULATIVE):
        ties = [entry for entry in found["self"][side] if entry["kind"] != CONFIDENT]
        if ties:
            notes.append(f"outputs: the {side} answered the same request differently twice at a numerics tie "
                         f"or without alternatives ({len(ties)} prompt(s), lead <= {tie_gap}): noted, as on "
                         "either side")
    confident = [entry for entry in found["self"][paired.BASELINE] if entry["kind"] == CONFIDENT]
    if confident:
        notes.append(f"outputs: the baseline answered the same request differently twice where it was confident "
                     f"({len(confident)} prompt(s)): its own numerics are not deterministic, those prompts are "
                     "inconclusive")
    if found["inconclusive"]:
        notes.append(f"outputs: {len(found['inconclusive'])} answer(s) inconclusive (the baseline sent no "
                     "alternative there, or answers otherwise itself)")
    if found.get("repeats"):
        notes.append(f"outputs: each answer repeated: {found['repeats']}")
    batched = found.get("batched")
    if batched and not batched["beyond"]:
        notes.append(f"outputs in a batch of {batched['concurrency']}: speculation diverged confidently in "
                     f"{batched['speculative']['diverged']} of {batched['speculative']['compared']} answers, the "
                     f"baseline in {batched['baseline']['diverged']} of {batched['baseline']['compared']}: "
                     "within the baseline's own")
    return notes


def checked_reference(blocks: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The bench of the first baseline block that ran the output check: what every speculative
    serving's answers are compared with (the baseline's answers are checked once)."""
    return next((block["bench"] for block in blocks
                 if block["side"] == paired.BASELINE and block["bench"].get("outputs")), None)


# ---- the decision ---------------------------------------------------------------------------------
def decide(blocks: Sequence[Mapping[str, Any]], policy: Mapping[str, Any], compared: int = 1,
           reference: Mapping[str, Any] | None = None, variant_of: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Keep, revert, or measure one more pair of blocks, from the blocks measured so far.

    ``blocks``: in measuring order, each {"side": "baseline" | "speculative", "bench": ...}.
    ``compared``: how many candidates this one is the best of (a sweep's k): its keep is judged
    at the policy's error shared among them. ``reference``: the baseline bench whose answers the
    output check compares with, when ``blocks`` are a window of a measurement whose first
    baseline block is not among them (a serving's answers are checked in its first block only;
    ``checked_reference``). ``variant_of``: the verdict of the speculative serving these blocks
    measure a variant of (a per-batch-size table of the same speculation, specfleet.batch_table),
    measured against the same baseline: the variant also reverts when its own cost shows at c=1,
    its throughput there below the plain serving's by more than the margin (``_variant_check``).
    Returns ``decision`` (keep | revert | measure),
    ``next`` (the sides to measure next when measuring), ``reasons`` (sentences with numbers,
    the deciding ones first), ``figures`` (per gated workload), ``checks``, ``drift``,
    ``left_out`` (blocks before a move, not judged), ``keep_confidence``, ``output_check``,
    ``blocks`` and ``thresholds``.
    """
    defaults = gate_defaults()
    merged = {**defaults, **{k: v for k, v in (policy or {}).items() if k.startswith("specfleet_gate_")}}
    sides = [block["side"] for block in blocks]
    benches = [bench_of(block["bench"]) for block in blocks]
    workloads = list(merged["specfleet_gate_workloads"] or defaults["specfleet_gate_workloads"])
    budget = merged["specfleet_gate_max_blocks"]
    failing: list[str] = []
    opened: list[str] = []
    passing: list[str] = []
    notes: list[str] = []
    result: dict[str, Any] = {"figures": {}, "checks": [], "drift": None, "left_out": 0, "keep_confidence": None,
                              "output_check": None, "blocks": sides, "gate_workloads": workloads,
                              "thresholds": {k: merged[k] for k in defaults}}

    for side, bench in zip(sides, benches, strict=True):
        if not bench.get("ok", False):
            failure = bench.get("failure") or {}
            failing.append(f"{side} benchmark failed ({failure.get('class', 'unknown')}): "
                           f"{failure.get('message', 'no reason given')}")
    if paired.SPECULATIVE not in sides or paired.BASELINE not in sides or sides.count(paired.BASELINE) < 2:
        failing.append(f"blocks {'/'.join(sides) or 'none'}: a comparison needs a speculative block between two "
                       "baseline blocks (baseline, speculative, baseline)")
    if failing:
        return {**result, "decision": REVERT, "next": [],
                "reasons": [f"revert to the baseline: {len(failing)} check(s) failed", *failing]}

    start, shifted = judged_from(benches, sides, workloads, merged)
    result["drift"], result["left_out"] = shifted, start
    judged, judged_sides = benches[start:], sides[start:]
    request = request_noise(judged, judged_sides, workloads)
    keep_confidence = look_confidence(merged["specfleet_gate_confidence"], len(sides), budget, compared,
                                      alone=start > 0)
    result["keep_confidence"] = round(keep_confidence, 4)

    # A move the interleaving does not cancel biases the comparison by at most the drift's
    # allowance: with one, every bound makes room for it, and a verdict that stands so (a unit
    # far from every threshold) cannot have been decided by the move.
    moved = shifted is not None and shifted["beyond_noise"]
    # On three blocks, a step in the second baseline block can hide in their difference behind
    # a cold start of the first; only the scan inside them shows it, surely beyond the noise or not.
    hidden = shifted is not None and len(judged_sides) == 3 and shifted["where"] != BETWEEN_BASELINES
    allowance = shifted["allowance"] if moved or hidden else 0.0
    for number, workload in enumerate(workloads):
        workload_checks, result["figures"][workload] = _workload_checks(
            workload, number == 0, judged, judged_sides, merged, request, keep_confidence, allowance)
        result["checks"].extend(workload_checks)
        notes.append(f"{workload}: speculative acceptance at c=1 {result['figures'][workload]['acceptance_c1_text']}")
    if variant_of is not None:
        primary = workloads[0]
        check, result["figures"][primary]["variant_change_c1"] = _variant_check(
            primary, result["figures"][primary], (variant_of.get("figures") or {}).get(primary) or {},
            merged["specfleet_gate_margin"])
        result["checks"].append(check)
    moved = moved and any(item["verdict"] == OPEN for item in result["checks"])
    if start:
        notes.append(f"the first {start} block(s) left out: the unit moved there ({result['drift']['left_behind']}); "
                     f"blocks {start + 1} to {len(sides)} compared")
    if shifted is not None:
        text = (f"drift {shifted['where']} {_pct(shifted['value'])} "
                f"({_pct(shifted['lower'])} .. {_pct(shifted['upper'])})")
        if moved:
            verdict, said = OPEN, ": beyond the noise, the comparison is not trusted"
        elif shifted["beyond_noise"]:
            verdict, said = NOTE, ": beyond the noise, too little to change the verdict (bounds widened by it)"
        else:
            verdict, said = PASS, ": within the noise"
        result["checks"].append({"workload": workloads[0], "check": "drift", "verdict": verdict,
                                 "reason": f"{workloads[0]}: {text}{said}"})
    tie_gap = merged["specfleet_gate_tie_logprob_gap"]
    found = output_check(benches, sides, tie_gap, bench_of(reference) if reference is not None else None,
                         merged["specfleet_gate_confidence"])
    result["output_check"] = found
    result["checks"].extend(_output_checks(found, tie_gap, merged["specfleet_gate_confidence"]))
    if not found["compared"]:
        notes.append("outputs: token-level comparison unavailable (no output check on both sides)")
    notes.extend(output_notes(found, tie_gap))

    for item in result["checks"]:
        {FAIL: failing, OPEN: opened, PASS: passing, NOTE: notes}[item["verdict"]].append(item["reason"])
    if failing:
        decision, headline = REVERT, f"revert to the baseline: {len(failing)} check(s) failed"
    elif opened and len(sides) + 2 <= budget:
        decision, headline = MEASURE, (f"measure one more pair of blocks: {len(opened)} check(s) inconclusive "
                                       f"after {len(sides)} blocks")
    elif opened:
        decision, headline = REVERT, (f"revert to the baseline: still inconclusive after {len(sides)} blocks "
                                      f"(budget {budget}, specfleet_gate_max_blocks)")
    else:
        decision, headline = KEEP, "keep speculation: every gated check passed"
    return {**result, "decision": decision,
            # A revert no check failed: the budget ran out while some stayed open.
            "inconclusive": decision == REVERT and not failing,
            # The check a revert comes down to (the first failed, else the first still open): the
            # attention list's cause, wherever other reasons (a sweep's) stand before the headline.
            "deciding": (failing or opened)[0] if decision == REVERT else None,
            "next": [paired.SPECULATIVE, paired.BASELINE] if decision == MEASURE else [],
            "reasons": [headline, *failing, *opened, *passing, *notes]}


# ---- draft length ------------------------------------------------------------------------
# NVIDIA's jetson-speculative-decoding skill: "num_speculative_tokens: start at 5 on Thor, 3 on
# AGX Orin. Higher values pay off only if the draft acceptance rate is >0.6."
DRAFT_LENGTH_ACCEPTANCE = 0.6


def draft_length_advice(acceptance_rate: float | None, tokens: int | None, start_tokens: int | None,
                        max_tokens: int) -> str | None:
    """What the measured acceptance says about ``num_speculative_tokens`` (``tokens``, against
    the class's starting value ``start_tokens``): a longer draft is worth measuring only above
    the rule's rate, and a draft already longer than the start does not pay at or below it."""
    if acceptance_rate is None or tokens is None:
        return None
    share = f"{acceptance_rate * 100:.0f}% of drafted tokens accepted at c=1"
    if acceptance_rate > DRAFT_LENGTH_ACCEPTANCE and tokens < max_tokens:
        return (f"draft length: {share} (> {DRAFT_LENGTH_ACCEPTANCE:.0%}) with num_speculative_tokens {tokens}: "
                f"a longer draft may pay; measure {tokens + 1} (specfleet_spec_tokens)")
    if acceptance_rate <= DRAFT_LENGTH_ACCEPTANCE and start_tokens is not None and tokens > start_tokens:
        return (f"draft length: only {share} (<= {DRAFT_LENGTH_ACCEPTANCE:.0%}) with num_speculative_tokens "
                f"{tokens}, above the class's start {start_tokens}: the longer draft does not pay; go back to "
                f"{start_tokens}")
    return None
