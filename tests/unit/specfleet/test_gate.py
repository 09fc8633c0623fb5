"""specfleet.gate.decide: table-driven keep/revert cases with synthesized bench results."""

from __future__ import annotations

import statistics

import pytest

from specfleet import policy as policy_module
from specfleet.gate import decide

POLICY = policy_module.merge({})


def cell(throughputs, tpots, acceptance=None):
    """A spec_bench cell from per-run throughputs (tok/s) and per-run TPOT p50s (ms)."""
    median = statistics.median(throughputs)
    tpot_median = statistics.median(tpots)
    return {
        "runs": [
            {"throughput_tok_s": t, "tpot_p50_ms": p, "failed_requests": 0}
            for t, p in zip(throughputs, tpots, strict=True)
        ],
        "throughput_tok_s": {"median": median, "runs": list(throughputs),
                             "spread": (max(throughputs) - min(throughputs)) / median},
        "tpot_ms": {"p50": tpot_median, "p90": tpot_median * 1.1, "mean": tpot_median},
        "acceptance": acceptance,
    }


def scaled(values, factor):
    return [round(v * factor, 3) for v in values]


BASE_C1 = [20.0, 20.2, 19.8]
BASE_TPOT = [50.0, 49.6, 50.4]
BASE_C8 = [120.0, 121.0, 119.0]
ACCEPTANCE = {"rate": 0.357, "mean_length": 2.78, "per_position": [0.5, 0.42, 0.35, 0.29, 0.23], "drafts": 744,
              "draft_tokens": 3720, "accepted": 1328}


def bench(c1, tpot, c8, acceptance=None, ok=True, failure=None, hashes=None, stable=None):
    return {
        "ok": ok,
        "failure": failure,
        "results": {"code_edit": {"c1": cell(c1, tpot, acceptance), "c8": cell(c8, [10.0] * len(c8), acceptance)}},
        "output_hashes": hashes if hashes is not None else {"code_edit": "a" * 64},
        "output_stable": stable or {"code_edit": True},
    }


BASELINE = bench(BASE_C1, BASE_TPOT, BASE_C8)


def candidate(gain, tpot_factor, c8_factor, **kwargs):
    return bench(scaled(BASE_C1, gain), scaled(BASE_TPOT, tpot_factor), scaled(BASE_C8, c8_factor),
                 acceptance=ACCEPTANCE, **kwargs)


CASES = [
    # name, candidate, decision, a phrase the deciding reason contains
    ("clear keep", candidate(1.8, 0.55, 1.3), "keep", "every gated check passed"),
    ("clear revert", candidate(0.9, 1.1, 0.8), "revert", "under the +10.0% floor"),
    ("below +10%", candidate(1.05, 0.95, 1.0), "revert", "speculation always off"),
    ("between floor and +30%", candidate(1.2, 0.83, 1.1), "revert", "below the +30.0% needed"),
    ("tpot drop too small", candidate(1.4, 0.9, 1.1), "revert", "a drop of at least 20.0% is needed"),
    ("c=8 regression", candidate(1.8, 0.55, 0.93), "revert", "regresses under load"),
    ("failure", candidate(1.8, 0.55, 1.3, ok=False, failure={"class": "server_died", "message": "gone"}), "revert",
     "speculative benchmark failed (server_died): gone"),
    ("output mismatch", candidate(1.8, 0.55, 1.3, hashes={"code_edit": "b" * 64}), "revert",
     "greedy outputs differ with speculation"),
]


@pytest.mark.parametrize("name,cand,decision,phrase", CASES, ids=[c[0] for c in CASES])
def test_gate_table(name, cand, decision, phrase):
    verdict = decide(BASELINE, cand, POLICY)
    assert verdict["decision"] == decision, verdict["reasons"]
    assert any(phrase in reason for reason in verdict["reasons"]), verdict["reasons"]
    assert verdict["output_mismatch"] is (name == "output mismatch")
    if decision == "revert":
        assert verdict["reasons"][0].startswith("revert to the baseline")


def test_noisy_borderline_keep_becomes_revert_with_the_spread_reason():
    noisy = bench([25.0, 29.0, 33.0], [40.0, 36.0, 33.0], scaled(BASE_C8, 1.2), acceptance=ACCEPTANCE)
    # median gain +45.0%, but worst-case pairing 25.0 / 20.2 = +23.8% < +30%
    verdict = decide(BASELINE, noisy, POLICY)
    assert verdict["decision"] == "revert"
    noise = [r for r in verdict["reasons"] if "spread cannot support" in r]
    assert noise and "+45.0%" in noise[0] and "+23.8%" in noise[0], verdict["reasons"]
    figure = verdict["figures"]["code_edit"]["throughput_gain_c1"]
    assert figure["value"] == pytest.approx(0.45, abs=1e-3) and figure["worst_case"] == pytest.approx(0.2376, abs=1e-3)
    assert figure["candidate_spread"] == pytest.approx(8 / 29, abs=1e-3)


def test_same_medians_with_tight_runs_keep():
    tight = bench([28.8, 29.0, 29.1], scaled(BASE_TPOT, 0.7), scaled(BASE_C8, 1.2), acceptance=ACCEPTANCE)
    assert decide(BASELINE, tight, POLICY)["decision"] == "keep"


def test_figures_carry_gain_tpot_drop_and_c8_change():
    verdict = decide(BASELINE, candidate(1.8, 0.55, 1.3), POLICY)
    figures = verdict["figures"]["code_edit"]
    assert figures["throughput_gain_c1"]["value"] == pytest.approx(0.8, abs=1e-3)
    assert figures["tpot_drop_c1"]["value"] == pytest.approx(0.45, abs=1e-3)
    assert figures["throughput_change_c8"]["value"] == pytest.approx(0.3, abs=1e-3)
    assert figures["acceptance_c1"] == ACCEPTANCE
    assert any("35.7% accepted, mean acceptance length 2.78" in r for r in verdict["reasons"])


def test_missing_acceptance_is_reported_unavailable_not_invented():
    cand = candidate(1.8, 0.55, 1.3)
    cand["results"]["code_edit"]["c1"]["acceptance"] = None
    verdict = decide(BASELINE, cand, POLICY)
    assert verdict["figures"]["code_edit"]["acceptance_c1"] is None
    assert any("acceptance at c=1 unavailable" in r for r in verdict["reasons"])
    assert verdict["decision"] == "keep"


def test_missing_c8_reverts():
    cand = candidate(1.8, 0.55, 1.3)
    del cand["results"]["code_edit"]["c8"]
    verdict = decide(BASELINE, cand, POLICY)
    assert verdict["decision"] == "revert"
    assert any("cannot be ruled out" in r for r in verdict["reasons"])


def test_baseline_failure_reverts_and_whole_module_result_is_accepted():
    failed = {"bench": {**BASELINE, "ok": False, "failure": {"class": "deadline", "message": "too slow"}}}
    verdict = decide(failed, {"bench": candidate(1.8, 0.55, 1.3)}, POLICY)
    assert verdict["decision"] == "revert"
    assert "baseline benchmark failed (deadline): too slow" in verdict["reasons"]


def test_unstable_outputs_make_the_comparison_inconclusive_not_a_revert():
    cand = candidate(1.8, 0.55, 1.3, hashes={"code_edit": "b" * 64}, stable={"code_edit": False})
    verdict = decide(BASELINE, cand, POLICY)
    assert verdict["decision"] == "keep" and verdict["output_mismatch"] is False
    assert any("inconclusive" in r for r in verdict["reasons"])


def test_single_run_cannot_keep():
    one = bench([36.0], [27.0], [156.0], acceptance=ACCEPTANCE)
    base = bench([20.0], [50.0], [120.0])
    verdict = decide(base, one, POLICY)
    assert verdict["decision"] == "revert"
    assert any("no spread to judge noise" in r for r in verdict["reasons"])


def test_gated_workloads_come_from_policy():
    cand = candidate(1.8, 0.55, 1.3)
    verdict = decide(BASELINE, cand, {**POLICY, "specfleet_gate_workloads": ["code_edit", "chat"]})
    assert verdict["decision"] == "revert"
    assert any(r.startswith("chat: no throughput measurement") for r in verdict["reasons"])


def test_thresholds_are_policy_variables():
    cand = candidate(1.2, 0.83, 1.1)
    relaxed = {**POLICY, "specfleet_gate_min_throughput_gain": 0.15, "specfleet_gate_min_tpot_drop": 0.1}
    assert decide(BASELINE, cand, relaxed)["decision"] == "keep"
    assert decide(BASELINE, candidate(1.8, 0.55, 0.97), {**POLICY, "specfleet_gate_max_c8_regression": 0.05})[
        "decision"
    ] == "keep"


@pytest.mark.parametrize(
    "value,problem",
    [([], "non-empty list"), (["code_edit", "poetry"], "unknown workload 'poetry'"), ("code_edit", "non-empty list")],
)
def test_policy_validates_gate_workloads(value, problem):
    from specfleet.catalog import load_catalog

    problems = policy_module.validate(policy_module.merge({"specfleet_gate_workloads": value}), load_catalog())
    assert any(p.startswith("specfleet_gate_workloads") and problem in p for p in problems), problems
