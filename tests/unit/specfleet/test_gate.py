"""specfleet.gate.decide: keep, revert or measure more, from interleaved blocks of synthesized
bench results (tests/benches.py: per request, per prompt, with the output check's tokens)."""

from __future__ import annotations

import math
import random

import pytest

from specfleet import gate, paired
from specfleet import policy as policy_module
from tests.benches import ACCEPTANCE, aba, bench, blocks

POLICY = policy_module.merge({})


CASES = [
    # name, speculative side (speeds of the code-edit c=1, c=8 and chat), decision, deciding phrase
    ("clear keep", {"candidate_speed": 1.8, "c8_speed": 1.2, "chat_speed": 1.1}, "keep", "every gated check passed"),
    ("slower", {"candidate_speed": 0.9}, "revert", "under the +10.0% floor"),
    ("below +10%", {"candidate_speed": 1.03}, "revert", "speculation always off"),
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
    # E2E includes the TTFT, which speculation does not shorten: a little under 1.8x end to end,
    # total time over total time (the prompts' tokens are equal).
    tpots = [50.0 * (1 + 0.5 * index / 16) for index in range(16)]
    expected = sum(80 + t * 127 for t in tpots) / sum(80 + t / 1.8 * 127 for t in tpots)
    assert gain["value"] == pytest.approx(expected - 1, abs=1e-4)
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
    verdict = gate.decide(aba(1.8, c8_speed=1.2, chat_speed=1.1, unstable="confident"), POLICY)
    assert verdict["decision"] == "revert"
    assert any("answered the same request differently twice" in reason for reason in verdict["reasons"])


def test_an_unstable_baseline_is_noted_not_blamed_on_speculation():
    sides = blocks(("baseline", bench("baseline", unstable="confident")),
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
    verdict = gate.decide(aba(1.8, c8_speed=1.2, chat_speed=1.1), {**POLICY, "specfleet_gate_max_blocks": 5})
    assert "(93.8% bounds" in next(reason for reason in verdict["reasons"] if "throughput at c=1" in reason)
    # The shipped budget, thirteen blocks: six looks, 97.5% bounds at the first.
    assert gate.decide(aba(1.8, c8_speed=1.2, chat_speed=1.1), POLICY)["keep_confidence"] == pytest.approx(0.9748)


def heterogeneous(speedups: list[float]) -> dict:
    """A speculative block whose prompts draft unequally: prompt i at speedups[i]."""
    found = bench("speculative", 1.0, c8_speed=1.2, chat_speed=1.1, acceptance=ACCEPTANCE)
    for request in found["results"]["code_edit"]["c1"]["runs"][0]["requests"]:
        speed = speedups[int(request["prompt"][-2:])]
        request["tpot_ms"] /= speed
        request["e2e_ms"] = 80 + request["tpot_ms"] * 127
    return found


def test_prompts_that_draft_unequally_are_judged_on_total_time():
    # Half the prompts 2.5x faster, half 0.85x: per prompt the speedups' mean is ~1.46x, but the
    # set's throughput (total tokens over total time) gains about +27%: below the +30% needed.
    speedups = [2.5 if index % 2 else 0.85 for index in range(16)]
    measured = blocks(("baseline", bench("baseline")), ("speculative", heterogeneous(speedups)),
                      ("baseline", bench("baseline")))
    verdict = gate.decide(measured, {**POLICY, "specfleet_gate_max_blocks": 3})
    gain = verdict["figures"]["code_edit"]["throughput_gain_c1"]
    assert gain["value"] == pytest.approx(0.27, abs=0.01) and gain["upper"] > 0.30
    assert math.exp(sum(math.log(speed) for speed in speedups) / 16) > 1.45
    assert verdict["decision"] == "revert" and verdict["inconclusive"], verdict["reasons"]


def stepped_aba(speed: float) -> list[dict]:
    """A B A whose second baseline block's clocks stepped down 25 % halfway through it."""
    stepped = bench("baseline")
    for request in stepped["results"]["code_edit"]["c1"]["runs"][0]["requests"][8:]:
        request["e2e_ms"] *= 1.25
        request["tpot_ms"] *= 1.25
    return blocks(("baseline", bench("baseline")),
                  ("speculative", bench("speculative", speed, c8_speed=1.2, chat_speed=1.1, acceptance=ACCEPTANCE)),
                  ("baseline", stepped))


def test_a_step_inside_a_baseline_block_is_inconclusive_where_it_could_decide():
    verdict = gate.decide(stepped_aba(1.45), POLICY)
    assert verdict["drift"]["beyond_noise"], verdict["drift"]
    # About half of the block's time stepped (the longer half): the second baseline block is
    # ~13 % slower than the first, and the comparison (weight 1/2 on it) moves by at most half that.
    assert verdict["drift"]["allowance"] == pytest.approx(0.5 * math.log1p(0.25 * 0.53), rel=0.1)
    assert verdict["decision"] == "measure", verdict["reasons"]
    assert any(reason.startswith("code_edit: drift") and "not trusted" in reason for reason in verdict["reasons"])


def test_a_step_too_small_to_change_the_verdict_does_not_hold_it_up():
    verdict = gate.decide(stepped_aba(1.8), POLICY)
    assert verdict["drift"]["beyond_noise"] and verdict["decision"] == "keep", verdict["reasons"]
    assert any("too little to change the verdict" in reason for reason in verdict["reasons"])
    # The bounds it was kept on made room for the move.
    plain = gate.decide(blocks(("baseline", bench("baseline")),
                               ("speculative", bench("speculative", 1.8, c8_speed=1.2, chat_speed=1.1,
                                                     acceptance=ACCEPTANCE)),
                               ("baseline", bench("baseline"))), POLICY)
    gain, plain_gain = (found["figures"]["code_edit"]["throughput_gain_c1"] for found in (verdict, plain))
    assert gain["lower"] < plain_gain["lower"]
    # Exactly the allowance wider than the bound of the same blocks as measured.
    measured = stepped_aba(1.8)
    benches, sides = [block["bench"] for block in measured], [block["side"] for block in measured]
    found = gate._estimate(benches, sides, paired.contrast_weights(sides), "code_edit", "c1", "time_per_token",
                           POLICY["specfleet_gate_block_noise"],
                           gate.request_noise(benches, sides, ["code_edit", "chat"])["c1"])
    plain_lower = 1 / found.upper(verdict["keep_confidence"])
    assert 1 + gain["lower"] == pytest.approx(plain_lower * math.exp(-verdict["drift"]["allowance"]), abs=2e-4)
    assert gain["value"] == pytest.approx(1 / found.ratio - 1, abs=1e-4)


def test_two_blocks_are_no_comparison_and_revert_saying_so():
    for sides in (("baseline", "speculative"), ("speculative", "baseline")):
        measured = blocks(*[(side, bench(side, 1.8 if side == "speculative" else 1.0, acceptance=ACCEPTANCE))
                            for side in sides])
        verdict = gate.decide(measured, POLICY)
        assert verdict["decision"] == "revert"
        assert "needs a speculative block between two baseline blocks" in verdict["reasons"][1]


def test_a_cold_start_reads_as_the_first_blocks_own_move():
    cold = bench("baseline")
    for request in cold["results"]["code_edit"]["c1"]["runs"][0]["requests"][:2]:
        request["e2e_ms"] *= 1.6  # the first two requests after the start
        request["tpot_ms"] *= 1.6
    measured = blocks(("baseline", cold),
                      ("speculative", bench("speculative", 1.8, c8_speed=1.2, chat_speed=1.1, acceptance=ACCEPTANCE)),
                      ("baseline", bench("baseline")))
    verdict = gate.decide(measured, POLICY)
    assert verdict["drift"]["beyond_noise"] and verdict["drift"]["where"] == "inside a baseline block"
    # The first eighth of the first block was 60 % slower: that block's level moved by its share
    # of the time, and the comparison (weight 1/2 on it) by half that, not by the whole step.
    first = cold["results"]["code_edit"]["c1"]["runs"][0]["requests"]
    share = sum(r["e2e_ms"] / 1.6 for r in first[:2]) / sum(
        r["e2e_ms"] / (1.6 if i < 2 else 1.0) for i, r in enumerate(first))
    assert verdict["drift"]["allowance"] == pytest.approx(0.5 * math.log1p(share * 0.6), rel=0.02)
    assert verdict["decision"] == "keep", verdict["reasons"]


def test_after_a_step_the_blocks_from_the_next_baseline_block_on_are_judged_alone():
    # The unit 15 % slower from the second baseline block on (every block after it too): the
    # speculative block before the step, held against one slower neighbour, would read 15 % fast.
    speed = {"c8_speed": 1.2, "chat_speed": 1.1, "acceptance": ACCEPTANCE}
    measured = blocks(("baseline", bench("baseline")), ("speculative", bench("speculative", 1.5, **speed)),
                      *[(side, bench(side, (1.5 if side == "speculative" else 1.0) / 1.15,
                                     **(speed if side == "speculative" else {})))
                        for side in ("baseline", "speculative", "baseline", "speculative", "baseline")])
    verdict = gate.decide(measured, POLICY)
    assert verdict["decision"] == "keep" and verdict["left_out"] == 2, verdict["reasons"]
    assert verdict["figures"]["code_edit"]["throughput_gain_c1"]["value"] == pytest.approx(0.5, abs=0.01)
    assert verdict["keep_confidence"] == pytest.approx(gate.look_confidence(0.9, 7, 13, alone=True), abs=1e-4)
    assert any(reason.startswith("the first 2 block(s) left out") for reason in verdict["reasons"])


def test_a_step_inside_a_block_moved_the_level_the_blocks_levels_agree_with():
    step = paired.Estimate(log_ratio=math.log(1.25), se=0.01, prompts=16)
    cold, stepped = math.log1p(0.47 * 0.25), math.log1p(0.5 * 0.25)

    def levels(change: float) -> paired.Estimate:
        return paired.Estimate(log_ratio=change, se=0.01, prompts=16)

    # The later block slower by what its part after the point would make it: a step there.
    assert gate._moved_level(step, 0.5, 0.47, levels(stepped)) == pytest.approx(stepped)
    # The earlier block slower by what its part before the point would make it: a cold start.
    assert gate._moved_level(step, 0.5, 0.47, levels(-cold)) == pytest.approx(cold)
    # Neither: a cold start hid a step in the next block; both moved.
    assert gate._moved_level(step, 0.5, 0.47, levels(0.0)) == pytest.approx(2 * cold)


def test_after_three_blocks_the_bounds_make_room_for_the_scan_inside_them():
    # The first two requests of the first baseline block 6 % slower: within the noise, yet on
    # three blocks the bound makes room for it (a step could hide behind it).
    cold = bench("baseline")
    for request in cold["results"]["code_edit"]["c1"]["runs"][0]["requests"][:2]:
        request["e2e_ms"] *= 1.06
        request["tpot_ms"] *= 1.06
    measured = blocks(("baseline", cold),
                      ("speculative", bench("speculative", 1.8, c8_speed=1.2, chat_speed=1.1, acceptance=ACCEPTANCE)),
                      ("baseline", bench("baseline")))
    verdict = gate.decide(measured, POLICY)
    assert not verdict["drift"]["beyond_noise"] and verdict["drift"]["where"] == "inside a baseline block"
    assert verdict["drift"]["allowance"] > 0 and verdict["decision"] == "keep"
    benches, sides = [block["bench"] for block in measured], [block["side"] for block in measured]
    found = gate._estimate(benches, sides, paired.contrast_weights(sides), "code_edit", "c1", "time_per_token",
                           POLICY["specfleet_gate_block_noise"],
                           gate.request_noise(benches, sides, ["code_edit", "chat"])["c1"])
    gain = verdict["figures"]["code_edit"]["throughput_gain_c1"]
    assert 1 + gain["lower"] == pytest.approx(
        math.exp(-verdict["drift"]["allowance"]) / found.upper(verdict["keep_confidence"]), abs=2e-4)


def test_a_tie_on_self_repeat_gives_the_same_verdict_on_either_side():
    spec_tie = gate.decide(aba(1.8, c8_speed=1.2, chat_speed=1.1, unstable="tie"), POLICY)
    base_tie = gate.decide(blocks(("baseline", bench("baseline", unstable="tie")),
                                  ("speculative", bench("speculative", 1.8, c8_speed=1.2, chat_speed=1.1,
                                                        acceptance=ACCEPTANCE)),
                                  ("baseline", bench("baseline"))), POLICY)
    assert spec_tie["decision"] == base_tie["decision"] == "keep", (spec_tie["reasons"], base_tie["reasons"])
    for verdict, side in ((spec_tie, "speculative"), (base_tie, "baseline")):
        assert any(f"the {side} answered the same request differently twice at a numerics tie" in reason
                   for reason in verdict["reasons"]), verdict["reasons"]
        assert [entry["kind"] for entry in verdict["output_check"]["self"][side]] == ["tie"] * 16


def test_a_divergence_is_confident_only_where_every_baseline_answer_was():
    """The first baseline block led by 2.5 where speculation diverged; the second baseline
    block, reaching the same token, led by 0.1 only: a tie, not a revert."""
    second = bench("baseline", seed=3)
    for answers in second["outputs"].values():
        for found in answers.values():
            found["margins"] = [0.1 if position == 3 else margin for position, margin in enumerate(found["margins"])]
    sides = blocks(("baseline", bench("baseline", seed=1)),
                   ("speculative", bench("speculative", 1.8, c8_speed=1.2, chat_speed=1.1, acceptance=ACCEPTANCE,
                                         diverge_at={"code_edit-p03": 3})),
                   ("baseline", second))
    verdict = gate.decide(sides, POLICY)
    assert verdict["decision"] == "keep", verdict["reasons"]
    (tie,) = verdict["output_check"]["ties"]
    assert (tie["prompt"], tie["position"], tie["baseline_gap"]) == ("code_edit-p03", 3, 0.1)


def test_a_baseline_that_sent_no_alternative_leaves_the_prompt_inconclusive():
    reference = bench("baseline", seed=1)
    for answers in reference["outputs"].values():
        for found in answers.values():
            found["margins"] = [None] * len(found["margins"])
            found["repeat"]["margins"] = [None] * len(found["margins"])
    sides = blocks(("baseline", reference),
                   ("speculative", bench("speculative", 1.8, c8_speed=1.2, chat_speed=1.1, acceptance=ACCEPTANCE,
                                         diverge_at={"code_edit-p03": 3})),
                   ("baseline", bench("baseline", seed=3, levels=(1, 8))))
    sides[2]["bench"]["outputs"] = {}  # the reference is the only baseline answer
    verdict = gate.decide(sides, POLICY)
    assert verdict["decision"] == "keep", verdict["reasons"]
    found = verdict["output_check"]
    assert not found["diverged"] and [entry["prompt"] for entry in found["inconclusive"]] == ["code_edit-p03"]


def test_a_check_the_speculative_server_did_not_draft_for_is_not_called_identical():
    verdict = gate.decide(aba(1.8, c8_speed=1.2, chat_speed=1.1, drafted=False), POLICY)
    assert verdict["output_check"]["drafting"] == {"confirmed": 0, "not_drafted": 16, "unknown": 0}
    assert any(gate.NOT_CHECKED_WITH_SPECULATION in reason for reason in verdict["reasons"]), verdict["reasons"]
    assert not any("answers identical token by token" in reason for reason in verdict["reasons"])
    drafted = gate.decide(aba(1.8, c8_speed=1.2, chat_speed=1.1), POLICY)
    assert any("16 of 16 answers identical" in reason and "16 of 16 checked with drafting confirmed on" in reason
               for reason in drafted["reasons"]), drafted["reasons"]


def test_a_divergence_only_in_a_batch_reverts_and_the_baselines_own_rate_is_the_bar():
    everywhere = {f"{workload}-p{index:02d}": 3 for workload in ("code_edit", "chat") for index in range(8)}
    verdict = gate.decide(aba(1.8, c8_speed=1.2, chat_speed=1.1, batched_diverge_at=everywhere), POLICY)
    assert verdict["decision"] == "revert", verdict["reasons"]
    batched = verdict["output_check"]["batched"]
    assert batched["speculative"] == {"diverged": 16, "compared": 16} and batched["baseline"]["diverged"] == 0
    assert any("in a batch of 8 speculation changed the output" in reason for reason in verdict["reasons"])
    # The baseline's own batch diverging as often: within its own rate, kept.
    sides = aba(1.8, c8_speed=1.2, chat_speed=1.1, batched_diverge_at=everywhere)
    for block in sides:
        if block["side"] == "baseline":
            for workload, batch in block["bench"]["outputs_batched"].items():
                batch["answers"] = {prompt: answer for prompt, answer in
                                    sides[1]["bench"]["outputs_batched"][workload]["answers"].items()}
    assert gate.decide(sides, POLICY)["decision"] == "keep"


def test_fisher_one_sided():
    assert gate.fisher_one_sided(3, 16, 0, 16) == pytest.approx(560 / 4960)
    assert gate.fisher_one_sided(0, 16, 0, 16) == 1.0
    assert gate.fisher_one_sided(16, 16, 0, 16) < 1e-8


def test_a_reference_from_before_the_blocks_judges_the_batch_and_its_own_repeats():
    """A variant (a per-batch-size table, a later draft length) is judged on the blocks after
    the first decision: no baseline among them ran the check; the first baseline block's did."""
    everywhere = {f"{workload}-p{index:02d}": 3 for workload in ("code_edit", "chat") for index in range(8)}
    later = bench("baseline", seed=3)
    later["outputs"], later["outputs_batched"] = {}, {}
    spec = bench("speculative", 1.8, c8_speed=1.2, chat_speed=1.1, acceptance=ACCEPTANCE, batched_diverge_at=everywhere)
    sides = ["baseline", "speculative", "baseline"]
    found = gate.output_check([later, spec, later], sides, 0.1, bench("baseline", seed=1))
    assert found["batched"]["beyond"] and found["batched"]["baseline"] == {"diverged": 0, "compared": 16}
    # The reference's own repeat: a baseline that answers itself otherwise leaves its prompts inconclusive.
    found = gate.output_check([later, spec, later], sides, 0.1, bench("baseline", seed=1, unstable="confident"))
    assert {entry["kind"] for entry in found["self"]["baseline"]} == {"confident"}
    assert found["batched"]["speculative"]["diverged"] == 0 and not found["batched"]["beyond"]


def test_a_check_without_drafting_counters_is_not_called_identical_either():
    sides = aba(1.8, c8_speed=1.2, chat_speed=1.1)
    for answers in sides[1]["bench"]["outputs"].values():
        for found in answers.values():
            found["drafts"] = found["repeat"]["drafts"] = None
    verdict = gate.decide(sides, POLICY)
    assert verdict["output_check"]["drafting"] == {"confirmed": 0, "not_drafted": 0, "unknown": 16}
    assert any(gate.NOT_CHECKED_WITH_SPECULATION in reason and "no drafting counters" in reason
               for reason in verdict["reasons"]), verdict["reasons"]
    # Drafting is judged on the answer compared, not on its repeat; one spilled step is not drafting.
    sides = aba(1.8, c8_speed=1.2, chat_speed=1.1)
    for answers in sides[1]["bench"]["outputs"].values():
        for found in answers.values():
            found["drafts"], found["repeat"]["drafts"] = 1, 20
    assert gate.decide(sides, POLICY)["output_check"]["drafting"]["confirmed"] == 0


def test_a_divergence_is_judged_alike_whatever_the_order_of_the_baseline_answers():
    def answer(tokens, margins):
        return {"tokens": tokens, "margins": margins}

    reference, other = answer(["a", "b"], [2.5, 2.5]), answer(["a", "c"], [2.5, 2.5])
    silent = answer(["a", "b"], [2.5, None])
    assert gate.divergence_kind(1, [reference, other], 0.1) == ("inconclusive", 2.5)  # the baseline splits there
    assert gate.divergence_kind(1, [silent, other], 0.1)[0] == gate.divergence_kind(1, [other, silent], 0.1)[0]
    near = answer(["a", "b"], [2.5, 0.05])
    assert gate.divergence_kind(1, [reference, near], 0.1) == ("tie", 0.05)
    assert gate.divergence_kind(1, [reference, answer(["a", "b"], [2.5, 3.0])], 0.1) == ("confident", 2.5)
    # Where the reference ended (no logprob is sent for the end), nothing is confident.
    assert gate.divergence_kind(2, [reference], 0.1)[0] == "inconclusive"
