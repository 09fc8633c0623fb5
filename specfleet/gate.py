"""The gate: keep or revert speculative decoding on a unit from two spec_bench results.

Pure functions, no Ansible. Input: the ``bench`` dicts spec_bench returns for the
baseline (no speculation) and the candidate (speculation on), measured on the same unit
with the same prompts, seed and settings; and the merged policy (``specfleet_gate_*``).

Rules (seed 000, thresholds are policy variables):
- keep only when, on every workload in ``specfleet_gate_workloads``, throughput at
  concurrency 1 rises by at least ``specfleet_gate_min_throughput_gain`` AND TPOT p50 at
  concurrency 1 drops by at least ``specfleet_gate_min_tpot_drop`` AND throughput at
  concurrency 8 does not fall by more than ``specfleet_gate_max_c8_regression``;
- a gain below ``specfleet_gate_disable_below`` always reverts;
- either benchmark not ``ok`` reverts, with its failure;
- noise: every check must hold at the *worst-case pairing* of the repetitions, not only
  at the medians (see ``_ratio``); a keep the spread cannot support is a revert;
- greedy outputs must match (see ``decide``).

Anything not measured (acceptance on a server without spec-decode counters, a missing
concurrency level) is reported as unavailable, never filled in.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from ansible_collections.specfleet.fleet.plugins.module_utils.spec_bench_client import (
    bench_of,
    cell,
    cell_acceptance,
    median_throughput,
    throughput_runs,
    tpot_p50,
    tpot_runs,
)

from specfleet.policy import defaults as policy_defaults

SINGLE = "c1"
LOADED = "c8"
MIN_RUNS = 2  # one run per side has no spread: the noise cannot be judged


def gate_defaults() -> dict[str, Any]:
    """The ``specfleet_gate_*`` defaults, from the one place they are documented (policy.yml)."""
    return {name: value for name, value in policy_defaults().items() if name.startswith("specfleet_gate_")}


def _pct(value: float | None, signed: bool = True) -> str:
    if value is None:
        return "n/a"
    return f"{value * 100:+.1f}%" if signed else f"{value * 100:.1f}%"


def _num(value: float | None, unit: str = "") -> str:
    if value is None:
        return "n/a"
    return f"{value:.1f}{unit}" if abs(value) >= 10 else f"{value:.2f}{unit}"


def _spread(values: list[float]) -> float | None:
    if len(values) < 2:
        return 0.0 if values else None
    middle = statistics.median(values)
    return (max(values) - min(values)) / middle if middle else None


def _ratio(point_base: float | None, point_cand: float | None, base_runs: list[float], cand_runs: list[float],
           higher_is_better: bool) -> dict[str, Any]:
    """candidate / baseline at the medians, and its worst and best case over the runs.

    Worst-case pairing: the candidate's worst run against the baseline's best run. It
    needs no distribution assumption, is deterministic, and with 3-5 runs per side is
    about as strict as a 90 % bootstrap bound; a keep must survive it.
    """
    figure: dict[str, Any] = {"ratio": None, "worst": None, "best": None, "baseline": point_base,
                              "candidate": point_cand, "baseline_spread": _spread(base_runs),
                              "candidate_spread": _spread(cand_runs), "runs": [len(base_runs), len(cand_runs)]}
    if not point_base or point_cand is None:
        return figure
    figure["ratio"] = point_cand / point_base
    if base_runs and cand_runs:
        if higher_is_better:
            figure["worst"] = min(cand_runs) / max(base_runs)
            figure["best"] = max(cand_runs) / min(base_runs)
        else:
            figure["worst"] = max(cand_runs) / min(base_runs)
            figure["best"] = min(cand_runs) / max(base_runs)
    return figure


def _acceptance_text(acceptance: Mapping[str, Any] | None) -> str:
    if not acceptance:
        return "unavailable (the server exposes no spec-decode counters)"
    rate, length = acceptance.get("rate"), acceptance.get("mean_length")
    if rate is None:
        return f"unavailable (no drafts in the window: {acceptance.get('drafts', 0)} drafts)"
    per_position = acceptance.get("per_position") or []
    positions = "/".join(f"{p:.2f}" for p in per_position)
    return f"{rate * 100:.1f}% accepted, mean acceptance length {length:.2f}" + (
        f", per position {positions}" if positions else ""
    )


def _workload_checks(
    workload: str, baseline: Mapping[str, Any], candidate: Mapping[str, Any], policy: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(checks, figures) of one workload; each check: {check, passed, reason}."""
    min_gain = policy["specfleet_gate_min_throughput_gain"]
    min_drop = policy["specfleet_gate_min_tpot_drop"]
    floor = policy["specfleet_gate_disable_below"]
    max_regression = policy["specfleet_gate_max_c8_regression"]
    checks: list[dict[str, Any]] = []

    def check(name: str, passed: bool, reason: str) -> None:
        checks.append({"workload": workload, "check": name, "passed": passed, "reason": f"{workload}: {reason}"})

    base1, cand1 = cell(baseline, workload, SINGLE), cell(candidate, workload, SINGLE)
    base8, cand8 = cell(baseline, workload, LOADED), cell(candidate, workload, LOADED)

    gain = _ratio(median_throughput(base1), median_throughput(cand1), throughput_runs(base1),
                  throughput_runs(cand1), higher_is_better=True)
    tpot = _ratio(tpot_p50(base1), tpot_p50(cand1), tpot_runs(base1), tpot_runs(cand1), higher_is_better=False)
    load = _ratio(median_throughput(base8), median_throughput(cand8), throughput_runs(base8),
                  throughput_runs(cand8), higher_is_better=True)
    figures = {
        "throughput_gain_c1": _as_change(gain),
        "tpot_drop_c1": _as_drop(tpot),
        "throughput_change_c8": _as_change(load),
        "acceptance_c1": cell_acceptance(cand1) if cand1 else None,
        "acceptance_c1_text": _acceptance_text(cell_acceptance(cand1)) if cand1 else "not measured",
    }

    # Throughput at concurrency 1.
    if gain["ratio"] is None:
        check("throughput_c1", False, "no throughput measurement at concurrency 1 on both sides")
    else:
        value, worst = gain["ratio"] - 1.0, (gain["worst"] - 1.0) if gain["worst"] is not None else None
        line = (f"throughput at c=1 {_pct(value)} ({_num(gain['baseline'])} -> {_num(gain['candidate'])} tok/s; "
                f"run spread baseline {_pct(gain['baseline_spread'], False)}, "
                f"speculative {_pct(gain['candidate_spread'], False)}; worst-case pairing {_pct(worst)})")
        if value < floor:
            check("disable_below", False, f"{line} is under the {_pct(floor)} floor: speculation always off")
        elif value < min_gain:
            check("throughput_c1", False, f"{line} is below the {_pct(min_gain)} needed")
        elif min(gain["runs"]) < MIN_RUNS:
            check("noise", False, f"{line} rests on {min(gain['runs'])} run(s) per side: no spread to judge noise")
        elif worst is None or worst < min_gain:
            check("noise", False, f"{line}: the spread cannot support it, the worst-case pairing is below the "
                                  f"{_pct(min_gain)} needed")
        else:
            check("throughput_c1", True, f"{line} meets {_pct(min_gain)}")

    # TPOT p50 at concurrency 1.
    if tpot["ratio"] is None:
        check("tpot_c1", False, "no TPOT p50 at concurrency 1 on both sides")
    else:
        drop = 1.0 - tpot["ratio"]
        worst = (1.0 - tpot["worst"]) if tpot["worst"] is not None else None
        line = (f"TPOT p50 at c=1 {_pct(-drop)} ({_num(tpot['baseline'])} -> {_num(tpot['candidate'])} ms; "
                f"worst-case pairing {_pct(-worst) if worst is not None else 'n/a'})")
        if drop < min_drop:
            check("tpot_c1", False, f"{line}: a drop of at least {_pct(min_drop, False)} is needed")
        elif worst is None or worst < min_drop or min(tpot["runs"]) < MIN_RUNS:
            check("noise", False, f"{line}: the spread cannot support a {_pct(min_drop, False)} drop")
        else:
            check("tpot_c1", True, f"{line} meets the {_pct(min_drop, False)} drop")

    # Throughput at concurrency 8.
    if load["ratio"] is None:
        check("throughput_c8", False, "no throughput measurement at concurrency 8 on both sides: "
                                      "a regression under load cannot be ruled out")
    else:
        change = load["ratio"] - 1.0
        worst = (load["worst"] - 1.0) if load["worst"] is not None else None
        line = (f"throughput at c=8 {_pct(change)} ({_num(load['baseline'])} -> {_num(load['candidate'])} tok/s; "
                f"worst-case pairing {_pct(worst)})")
        allowed = f"{_pct(-max_regression)}" if max_regression else "no loss"
        if change < -max_regression:
            check("throughput_c8", False, f"{line}: regresses under load (allowed: {allowed})")
        elif worst is None or worst < -max_regression or min(load["runs"]) < MIN_RUNS:
            check("noise", False, f"{line}: the spread cannot rule out a regression under load (allowed: {allowed})")
        else:
            check("throughput_c8", True, f"{line}: no regression under load")
    return checks, figures


def _as_change(figure: dict[str, Any]) -> dict[str, Any]:
    """A ratio figure as a signed change (+0.35 = +35 %)."""
    return {
        "value": None if figure["ratio"] is None else round(figure["ratio"] - 1.0, 4),
        "worst_case": None if figure["worst"] is None else round(figure["worst"] - 1.0, 4),
        "best_case": None if figure["best"] is None else round(figure["best"] - 1.0, 4),
        "baseline": figure["baseline"],
        "candidate": figure["candidate"],
        "baseline_spread": None if figure["baseline_spread"] is None else round(figure["baseline_spread"], 4),
        "candidate_spread": None if figure["candidate_spread"] is None else round(figure["candidate_spread"], 4),
        "runs": figure["runs"],
    }


def _as_drop(figure: dict[str, Any]) -> dict[str, Any]:
    """A TPOT ratio as a drop (+0.25 = 25 % lower TPOT)."""
    change = _as_change(figure)
    for key in ("value", "worst_case", "best_case"):
        if change[key] is not None:
            change[key] = round(-change[key], 4)
    return change


def decide(baseline: Mapping[str, Any], candidate: Mapping[str, Any], policy: Mapping[str, Any]) -> dict[str, Any]:
    """Keep or revert speculation from a baseline and a candidate spec_bench result.

    Returns ``decision`` ("keep" | "revert"), ``reasons`` (sentences with numbers, the ones
    that decided first), ``figures`` (per gated workload: throughput gain at c=1, TPOT drop
    at c=1 and throughput change at c=8, each with worst/best case and both sides' run
    spreads; candidate acceptance or null), ``checks`` and ``output_mismatch``.

    Output mismatch forces a revert. At temperature 0 vLLM's speculative decoding verifies
    every drafted token against the target's own argmax, so the greedy text must be the
    one the baseline produced; a different text means a broken drafter/verifier setup, a
    runtime bug, or numerics that differ between the two servers (e.g. another kernel
    path). None of these should reach users silently, and a throughput gain bought with
    different outputs is not the same service, so the gate reverts and says so. If either
    side's own repetitions disagree (``output_stable`` false), outputs are not
    deterministic on that server at all and the comparison cannot blame speculation: it
    is reported as inconclusive and does not by itself revert.
    """
    defaults = gate_defaults()
    merged = {**defaults, **{k: v for k, v in (policy or {}).items() if k.startswith("specfleet_gate_")}}
    base, cand = bench_of(baseline), bench_of(candidate)
    workloads = list(merged["specfleet_gate_workloads"] or defaults["specfleet_gate_workloads"])
    failing: list[str] = []
    passing: list[str] = []
    notes: list[str] = []

    for side, bench in (("baseline", base), ("speculative", cand)):
        if not bench:
            failing.append(f"{side} benchmark result is missing")
        elif not bench.get("ok", False):
            failure = bench.get("failure") or {}
            failing.append(
                f"{side} benchmark failed ({failure.get('class', 'unknown')}): "
                f"{failure.get('message', 'no reason given')}"
            )

    checks: list[dict[str, Any]] = []
    figures: dict[str, Any] = {}
    for workload in workloads:
        workload_checks, workload_figures = _workload_checks(workload, base, cand, merged)
        checks.extend(workload_checks)
        figures[workload] = workload_figures
        notes.append(f"{workload}: speculative acceptance at c=1 {workload_figures['acceptance_c1_text']}")
    for item in checks:
        (passing if item["passed"] else failing).append(item["reason"])

    # Greedy outputs: every measured workload, not only the gated ones.
    mismatch = False
    base_hashes = base.get("output_hashes") or {}
    cand_hashes = cand.get("output_hashes") or {}
    for workload in sorted(set(base_hashes) | set(cand_hashes)):
        left, right = base_hashes.get(workload), cand_hashes.get(workload)
        if not left or not right:
            notes.append(f"{workload}: greedy output comparison unavailable (no complete run on both sides)")
            continue
        if left == right:
            passing.append(f"{workload}: greedy outputs identical with and without speculation")
            continue
        unstable = [
            side for side, bench in (("baseline", base), ("speculative", cand))
            if (bench.get("output_stable") or {}).get(workload) is False
        ]
        if unstable:
            notes.append(
                f"{workload}: greedy outputs differ, but the {' and '.join(unstable)} server's own runs already "
                "disagree at temperature 0: output comparison inconclusive"
            )
        else:
            mismatch = True
            failing.append(
                f"{workload}: greedy outputs differ with speculation (sha256 {left[:12]} vs {right[:12]}); "
                "at temperature 0 speculative decoding must not change outputs"
            )

    decision = "revert" if failing else "keep"
    headline = (
        "keep speculation: every gated check passed"
        if decision == "keep"
        else f"revert to the baseline: {len(failing)} check(s) failed"
    )
    return {
        "decision": decision,
        "reasons": [headline, *failing, *passing, *notes],
        "figures": figures,
        "checks": checks,
        "output_mismatch": mismatch,
        "gate_workloads": workloads,
        "thresholds": {k: merged[k] for k in defaults},
    }


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
