"""specfleet.gate.decide: keep, revert or measure more, from interleaved blocks of synthesized
bench results (tests/benches.py: per request, per prompt, with the output check's tokens)."""

from __future__ import annotations

import math
import random

import pytest

from specfleet import gate
from specfleet import policy as policy_module
from tests.benches import ACCEPTANCE, aba, bench, blocks

POLICY = policy_module.merge({})


CASES = [
    # name, speculative side (speeds of the code-edit c=1, c=8 and chat), decision, deciding phrase
    ("clear keep", {"candidate_speed": 1.8, "c8_speed": 1.2, "chat_speed": 1.1}, "keep", "every gated check passed"),
    ("slower", {"candidate_speed": 0.9}, "revert", "under the +10.0% floor"),
    ("below +10%", {"candidate_speed": 1.05}, "revert", "speculation always off"),
    ("between floor and +30%", {"candidate_speed": 1.2}, "revert", "below the +30.0% needed"),
    ("c=8 regression", {"candidate_speed": 1.8, "c8_speed": 0.9}, "revert", "regresses under load"),
    ("chat regression", {"candidate_speed": 1.8, "c8_speed": 1.1, "chat_speed": 0.9}, "revert",
     "chat: throughput at c=1"),
]


@pytest.mark.parametrize(("name", "speeds", "decision", "phrase"), CASES, ids=[case[0] for case in CASES])
def test_gate_table(name, speeds, decision, phrase):
    verdict = gate.decide(aba(**speeds), POLICY)
    assert verdict["decision"] == decision, verdict["reasons"]
    assert any(phrase in reason for reason in verdict["reasons"]), verdict["reasons"]
    assert verdict["blocks"] == ["baseline", "speculative", "baseline"]


def test_chat_losing_under_load_is_reported_not_gated():
    verdict = gate.decide(aba(1.8, c8_speed=1.2, chat_speed=1.0, chat_c8_speed=0.8), POLICY)
    assert verdict["decision"] == "keep", verdict["reasons"]
    (note,) = [check for check in verdict["checks"] if check["verdict"] == "note"]
    assert (note["workload"], note["check"]) == ("chat", "throughput_c8")
    assert any("regresses under load (reported, not gated" in reason for reason in verdict["reasons"])


def test_figures_carry_the_estimate_and_its_bounds():
    verdict = gate.decide(aba(1.8, c8_speed=1.2, chat_speed=1.1), POLICY)
    code = verdict["figures"]["code_edit"]
    gain = code["throughput_gain_c1"]
    # E2E includes the TTFT, which speculation does not shorten: a little under 1.8x end to end.
    tpots = [50.0 * (1 + 0.5 * index / 16) for index in range(16)]
    expected = math.exp(sum(math.log((80 + t * 127) / (80 + t / 1.8 * 127)) for t in tpots) / 16)
    assert gain["value"] == pytest.approx(expected - 1, abs=0.001)
    # No per-request noise: only the block-noise floor (2%, sqrt(1.5) for A B A) widens the bounds.
    assert gain["lower"] < gain["value"] < gain["upper"] and gain["prompts"] == 16
    assert code["tpot_drop_c1"]["value"] == pytest.approx(1 - 1 / 1.8, abs=0.01)
    assert code["tpot_drop_c1"]["baseline"] > code["tpot_drop_c1"]["candidate"]
    assert code["throughput_change_c8"]["value"] == pytest.approx(0.2, abs=0.01)
    assert code["acceptance_c1"] == ACCEPTANCE and "35.7% accepted" in code["acceptance_c1_text"]
    assert verdict["drift"]["value"] == pytest.approx(0.0, abs=1e-9) and not verdict["drift"]["beyond_noise"]


def test_a_straddling_bound_measures_one_more_pair_then_reverts_at_the_budget():
    # 1.33x before the TTFT: about 1.32x end to end, +-3% at 90% from the block-noise floor.
    sides = [("baseline", bench("baseline")),
             ("speculative", bench("speculative", 1.33, c8_speed=1.2, chat_speed=1.1, acceptance=ACCEPTANCE)),
             ("baseline", bench("baseline"))]
    verdict = gate.decide(blocks(*sides), POLICY)
    assert verdict["decision"] == "measure" and verdict["next"] == ["speculative", "baseline"], verdict["reasons"]
    assert verdict["reasons"][0].startswith("measure one more pair of blocks")
    assert any("straddles the +30.0% needed" in reason for reason in verdict["reasons"])
    at_budget = gate.decide(blocks(*sides), {**POLICY, "specfleet_gate_max_blocks": 3})
    assert at_budget["decision"] == "revert"
    assert at_budget["reasons"][0].startswith("revert to the baseline: still inconclusive after 3 blocks")
    assert at_budget["inconclusive"] and not verdict["inconclusive"]
    # The check it came down to: the first still open (none failed); a verdict that measures on has none.
    assert "straddles the +30.0% needed" in at_budget["deciding"] and verdict["deciding"] is None


def test_more_blocks_only_add_power():
    """The same true speedup, measured over five blocks instead of three, gets narrower bounds."""
    def run(count):
        sides = []
        for index in range(count):
            side = "baseline" if index % 2 == 0 else "speculative"
            sides.append((side, bench(side, 1.5 if side == "speculative" else 1.0, noise=0.08, seed=index,
                                      acceptance=ACCEPTANCE)))
        return gate.decide(blocks(*sides), POLICY)["figures"]["code_edit"]["throughput_gain_c1"]
    three, five = run(3), run(5)
    assert (five["upper"] - five["lower"]) < (three["upper"] - three["lower"])


def test_a_linear_drift_cancels_but_a_step_makes_it_inconclusive():
    drifting = blocks(("baseline", bench("baseline", 1.00)),
                      ("speculative", bench("speculative", 1.8 * 1.03, c8_speed=1.2 * 1.03, chat_speed=1.1 * 1.03,
                                            acceptance=ACCEPTANCE)),
                      ("baseline", bench("baseline", 1.03 ** 2)))
    verdict = gate.decide(drifting, POLICY)
    assert verdict["decision"] == "keep", verdict["reasons"]
    assert verdict["drift"]["value"] == pytest.approx(1 / 1.03 ** 2 - 1, abs=0.002)
    stepped = blocks(("baseline", bench("baseline", 1.0)),
                     ("speculative", bench("speculative", 1.8, c8_speed=1.2, chat_speed=1.1, acceptance=ACCEPTANCE)),
                     ("baseline", bench("baseline", 1.25)))
    verdict = gate.decide(stepped, POLICY)
    assert verdict["drift"]["beyond_noise"], verdict["drift"]
    assert verdict["decision"] == "measure"
    assert any("beyond the noise, the comparison is not trusted" in reason for reason in verdict["reasons"])


def test_a_numerics_tie_is_reported_and_keeps():
    tie = {"code_edit-p00": 5, "code_edit-p01": 15}  # the baseline led by 0.02 there
    verdict = gate.decide(aba(1.8, c8_speed=1.2, chat_speed=1.1, diverge_at=tie), POLICY)
    assert verdict["decision"] == "keep", verdict["reasons"]
    found = verdict["output_check"]
    assert [entry["position"] for entry in found["ties"]] == [5, 15] and not found["diverged"]
    assert any("2 diverged at a numerics tie" in reason for reason in verdict["reasons"])


def test_a_confident_divergence_reverts():
    verdict = gate.decide(aba(1.8, c8_speed=1.2, chat_speed=1.1, diverge_at={"code_edit-p03": 3}), POLICY)
    assert verdict["decision"] == "revert"
    (first,) = verdict["output_check"]["diverged"]
    assert (first["position"], first["baseline_gap"]) == (3, 2.5)
    assert any("speculation changed the output where the baseline was confident" in reason
               and "token 3 of code_edit-p03" in reason for reason in verdict["reasons"])


def test_a_speculative_server_that_disagrees_with_itself_reverts():
    verdict = gate.decide(aba(1.8, c8_speed=1.2, chat_speed=1.1, unstable=True), POLICY)
    assert verdict["decision"] == "revert"
    assert any("answered the same request differently twice" in reason for reason in verdict["reasons"])


def test_an_unstable_baseline_is_noted_not_blamed_on_speculation():
    sides = blocks(("baseline", bench("baseline", unstable=True)),
                   ("speculative", bench("speculative", 1.8, c8_speed=1.2, chat_speed=1.1, acceptance=ACCEPTANCE)),
                   ("baseline", bench("baseline")))
    verdict = gate.decide(sides, POLICY)
    assert verdict["decision"] == "keep", verdict["reasons"]
    assert any("the baseline answered the same request differently twice" in reason for reason in verdict["reasons"])


def test_missing_acceptance_is_reported_unavailable_not_invented():
    sides = blocks(("baseline", bench("baseline")), ("speculative", bench("speculative", 1.8, c8_speed=1.2)),
                   ("baseline", bench("baseline")))
    verdict = gate.decide(sides, POLICY)
    assert verdict["figures"]["code_edit"]["acceptance_c1"] is None
    assert "code_edit: speculative acceptance at c=1 unavailable" in " ".join(verdict["reasons"])


def test_missing_c8_reverts():
    sides = blocks(("baseline", bench("baseline", levels=(1,))),
                   ("speculative", bench("speculative", 1.8, levels=(1,), acceptance=ACCEPTANCE)),
                   ("baseline", bench("baseline", levels=(1,))))
    verdict = gate.decide(sides, POLICY)
    assert verdict["decision"] == "revert"
    assert any("no throughput measurement at concurrency 8" in reason for reason in verdict["reasons"])


def test_a_failed_block_reverts_with_its_failure():
    failed = bench("speculative", ok=False, failure={"class": "server_died", "message": "gone"})
    verdict = gate.decide(blocks(("baseline", bench("baseline")), ("speculative", failed)), POLICY)
    assert verdict["decision"] == "revert"
    assert "speculative benchmark failed (server_died): gone" in verdict["reasons"]
    # A registered module result ({"bench": ...}) is read the same way.
    whole = gate.decide([{"side": "baseline", "bench": {"bench": bench("baseline")}},
                         {"side": "speculative", "bench": {"bench": failed}}], POLICY)
    assert whole["decision"] == "revert"


def test_gated_workloads_and_thresholds_come_from_the_policy():
    only_code = {**POLICY, "specfleet_gate_workloads": ["code_edit"]}
    verdict = gate.decide(aba(1.8, c8_speed=1.2, chat_speed=0.8), only_code)
    assert verdict["decision"] == "keep" and list(verdict["figures"]) == ["code_edit"]
    strict = {**POLICY, "specfleet_gate_min_throughput_gain": 0.9, "specfleet_gate_disable_below": 0.1}
    assert gate.decide(aba(1.8, c8_speed=1.2, chat_speed=1.1), strict)["decision"] == "revert"
    lenient = {**POLICY, "specfleet_gate_margin": 0.15}
    assert gate.decide(aba(1.8, c8_speed=0.9, chat_speed=1.1), lenient)["decision"] == "keep"
    assert gate.decide(aba(1.8, c8_speed=0.9, chat_speed=1.1), POLICY)["thresholds"]["specfleet_gate_margin"] == 0.03


@pytest.mark.parametrize(("overrides", "problem"), [
    ({"specfleet_gate_workloads": []}, "specfleet_gate_workloads: must be a non-empty list"),
    ({"specfleet_gate_workloads": ["poetry"]}, "specfleet_gate_workloads: unknown workload 'poetry'"),
    ({"specfleet_gate_confidence": 1.0}, "specfleet_gate_confidence: must be a probability"),
    ({"specfleet_gate_max_blocks": 4}, "specfleet_gate_max_blocks: must be an odd integer >= 3"),
    ({"specfleet_gate_margin": -0.1}, "specfleet_gate_margin: must be a share"),
    ({"specfleet_gate_block_noise": "2%"}, "specfleet_gate_block_noise: must be a share"),
    ({"specfleet_gate_tie_logprob_gap": -1}, "specfleet_gate_tie_logprob_gap: must be a number of nats"),
])
def test_policy_validates_the_gate(overrides, problem):
    from specfleet.catalog import load_catalog
    problems = policy_module.validate(policy_module.merge(overrides), load_catalog())
    assert any(found.startswith(problem) for found in problems), problems


def test_first_divergence():
    assert gate.first_divergence(["a", "b"], ["a", "b"]) is None
    assert gate.first_divergence(["a", "b"], ["a", "c"]) == 1
    assert gate.first_divergence(["a", "b"], ["a"]) == 1


def test_the_policys_error_is_spent_over_the_looks_the_budget_allows():
    assert [gate.looks(budget) for budget in (3, 5, 7, 9)] == [1, 2, 3, 4]
    assert gate.look_confidence(0.9, 3, 3) == pytest.approx(0.9)
    assert gate.boundaries(0.1, 2) == pytest.approx((1.538, 1.477), abs=0.005)
    # At a true speedup exactly on the threshold, the looks together keep 10% of the time: the
    # scores of A B A and A B A B A as the design correlates them (information 1/1.5, 1/0.875).
    generator = random.Random(5)
    kept, trials = 0, 40000
    for _ in range(trials):
        first = generator.gauss(0, math.sqrt(1 / 1.5))
        second = first + generator.gauss(0, math.sqrt(1 / 0.875 - 1 / 1.5))
        kept += first / math.sqrt(1 / 1.5) >= 1.538 or second / math.sqrt(1 / 0.875) >= 1.477
    assert kept / trials == pytest.approx(0.10, abs=0.006)
    verdict = gate.decide(aba(1.8, c8_speed=1.2, chat_speed=1.1), POLICY)
    assert "(94% bounds" in next(reason for reason in verdict["reasons"] if "throughput at c=1" in reason)
