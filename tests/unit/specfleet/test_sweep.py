"""specfleet.sweep: the canary's measured draft length."""

from __future__ import annotations

import math

import pytest

from specfleet import policy as policy_module
from specfleet import serving, sweep
from tests.benches import ACCEPTANCE, bench, blocks

POLICY = policy_module.merge({})
EAGLE3 = {"method": "eagle3", "model": "head", "num_speculative_tokens": 5}


SWEEP = {**POLICY, "specfleet_spec_tokens_sweep": {**POLICY["specfleet_spec_tokens_sweep"], "thor": [2, 3, 5],
                                                  "agx_orin": [2, 3]}}


def plan(host: str, device_class: str = "thor", image: str = "img:1", policy=SWEEP, **fields) -> dict:
    spec = serving.make("speculative", engine="vllm", image=image, model="m", port=8000, flags=[],
                        speculative_config=EAGLE3)
    found = {"host": host, "device_class": device_class, "model": "m", "image": image, "refused": False,
             "speculative": EAGLE3, "serving": spec, "reasons": ["planned eagle3"], **fields}
    return {**found, "sweep": sweep.for_plan(found, policy)}


def test_the_first_unit_of_each_key_is_its_canary():
    spark_policy = {**SWEEP, "specfleet_spec_tokens_sweep": {"dgx_spark": [3, 4]}}
    spark = plan("spark-01", "dgx_spark", policy=spark_policy)
    plans = [plan("thor-01"), plan("thor-02"), plan("orin-01", "agx_orin"), plan("thor-03", image="img:2"),
             plan("nano-01", "orin_nano"), plan("thor-04", refused=True), spark]
    # Orin Nano sweeps nothing here; a refused plan has nothing to sweep.
    assert [entry["sweep"] is not None for entry in plans] == [True, True, True, True, False, False, True]
    assert plans[0]["sweep"] == {"key": sweep.key(plans[0]), "tokens": [2, 3, 5]}
    # TensorRT-LLM (DGX Spark) has no vLLM speculative config to sweep.
    assert sweep.for_plan({**spark, "serving": {"engine": "trtllm"}}, spark_policy) is None
    # Every key has a canary, sweeping or not (Orin Nano sweeps nothing); a refused plan has none.
    found = sweep.canaries([*plans[:6], None])
    assert sorted(found.values()) == ["nano-01", "orin-01", "thor-01", "thor-03"]
    assert sweep.key(plans[0]) == sweep.key(plans[1]) != sweep.key(plans[3])
    # The key is what decides the figures, not whether the class sweeps.
    unswept = [plan(entry["host"], entry["device_class"], entry["image"], policy=POLICY) for entry in plans[:4]]
    assert sweep.canaries(unswept) == {key: host for key, host in found.items() if host != "nano-01"}


def test_a_variant_drafts_k_tokens_and_keeps_the_rest():
    base = plan("thor-01")["serving"]
    variant = sweep.with_tokens(base, 2)
    assert variant["speculative_config"] == {**EAGLE3, "num_speculative_tokens": 2}
    assert base["speculative_config"]["num_speculative_tokens"] == 5  # not changed in place
    assert serving.argv(variant)[:3] == serving.argv(base)[:3]


def sweep_blocks(speeds: dict[int, tuple[float, float]], acceptance=None) -> list[dict]:
    """A, B(k1), A, B(k2), A ... with (code c=1 speed, chat speed) per k."""
    blocks = [{"side": "baseline", "bench": bench("baseline", seed=0)}]
    for number, (tokens, (code, chat)) in enumerate(speeds.items()):
        blocks.append({"side": "speculative", "tokens": tokens,
                       "bench": bench("speculative", code, c8_speed=1.2, chat_speed=chat,
                                      acceptance=acceptance or ACCEPTANCE, seed=2 * number + 1)})
        blocks.append({"side": "baseline", "bench": bench("baseline", seed=2 * number + 2)})
    return blocks


def test_the_best_kept_k_is_chosen_by_its_lower_bound():
    # As the emulator's Thor FP4 + EAGLE-3: longer drafts win code edits and lose chat.
    judged = sweep.results(sweep_blocks({2: (1.52, 0.99), 3: (1.63, 0.87), 5: (1.69, 0.74)}), POLICY)
    assert [(entry["tokens"], entry["decision"]) for entry in judged] == [(2, "keep"), (3, "revert"),
                                                                         (5, "revert")]
    chosen = sweep.best(judged)
    assert chosen["tokens"] == 2
    assert "chat: throughput at c=1" in judged[2]["reason"]
    found = sweep.summary(judged, chosen, [2, 3, 5])
    assert found["chosen"] == 2 and [entry["tokens"] for entry in found["measured"]] == [2, 3, 5]
    text = sweep.sentence(found)
    assert text.startswith("draft length measured: k=2 keep (+") and text.endswith("k=2 chosen")
    assert "k=5 revert (+68%, 36% accepted)" in text


def test_every_k_is_checked_against_the_baselines_answers_from_its_first_block():
    """The baseline's answers are checked once (its first block): a later k, between baseline
    blocks without an output check, is still compared with them, and reverts where it diverges
    where the baseline was confident."""
    found = sweep_blocks({2: (1.52, 0.99), 3: (1.63, 0.99)})
    for block in found[2:]:
        if block["side"] == "baseline":
            block["bench"] = {**block["bench"], "outputs": {}}
    found[3]["bench"] = bench("speculative", 1.63, c8_speed=1.2, chat_speed=0.99, acceptance=ACCEPTANCE, seed=3,
                              diverge_at={"code_edit-p03": 3})
    judged = {entry["tokens"]: entry for entry in sweep.results(found, POLICY)}
    assert judged[2]["verdict"]["output_check"]["compared"] == 16
    assert judged[3]["verdict"]["output_check"]["compared"] == 16
    assert judged[3]["decision"] == "revert"
    assert any("speculation changed the output where the baseline was confident" in reason
               for reason in judged[3]["verdict"]["reasons"]), judged[3]["verdict"]["reasons"]


def test_the_planned_values_then_one_longer_only_above_60_percent_acceptance():
    planned = [2, 3]
    assert sweep.next_tokens([], planned, 16) == 2
    judged = sweep.results(sweep_blocks({2: (1.5, 1.0), 3: (1.7, 1.0)}), POLICY)
    assert sweep.next_tokens(judged[:1], planned, 16) == 3
    assert sweep.next_tokens(judged, planned, 16) is None  # 36% accepted: no longer draft
    high = {"rate": 0.72, "mean_length": 3.2, "per_position": [0.9, 0.8, 0.7], "drafts": 100}
    judged = sweep.results(sweep_blocks({2: (1.5, 1.0), 3: (1.7, 1.0)}, acceptance=high), POLICY)
    assert sweep.next_tokens(judged, planned, 16) == 4
    assert sweep.next_tokens(judged, planned, 3) is None  # the policy's longest
    none_kept = sweep.results(sweep_blocks({2: (1.0, 1.0)}), POLICY)
    assert sweep.best(none_kept) is None and sweep.next_tokens(none_kept, [2], 16) is None


def test_the_sweep_policy_is_validated():
    from specfleet.catalog import load_catalog
    bad = policy_module.validate(policy_module.merge({"specfleet_spec_tokens_sweep": {"thor": [0, 3]}}),
                                 load_catalog())
    assert any(problem.startswith("specfleet_spec_tokens_sweep.thor") for problem in bad), bad
    assert policy_module.validate(policy_module.merge({"specfleet_spec_tokens_sweep": {"thor": []}}),
                                  load_catalog()) == []


def test_a_later_unit_takes_the_recorded_choice_or_says_why_not():
    canary, later = plan("thor-01"), plan("thor-02")
    canaries = sweep.canaries([canary, later])
    assert sweep.unit_plan(canary, "thor-01", canaries, {}, None, False) == (canary, True)
    record = {"sweeps": {canary["sweep"]["key"]: {"chosen": 2, "canary": "thor-01", "tokens": [2, 3, 5]}}}
    chosen, sweeping = sweep.unit_plan(later, "thor-02", canaries, {}, {"record": record}, False)
    assert not sweeping and chosen["speculative"]["num_speculative_tokens"] == 2
    assert chosen["serving"]["speculative_config"]["num_speculative_tokens"] == 2
    assert chosen["reasons"][-1] == "num_speculative_tokens 2 (planned 5): chosen by thor-01's sweep"
    assert later["serving"]["speculative_config"]["num_speculative_tokens"] == 5  # not changed in place
    record["sweeps"][canary["sweep"]["key"]]["chosen"] = None
    same, _ = sweep.unit_plan(later, "thor-02", canaries, {}, {"record": record}, False)
    assert same["serving"] == later["serving"]
    assert same["reasons"][-1] == "num_speculative_tokens 5 as planned: thor-01's sweep kept no draft length"
    assert sweep.unit_plan(later, "thor-02", canaries, {}, None, False)[0]["reasons"][-1].endswith("did not finish")
    # No canaries picked (a plan without a sweep, or a play that did not pick them): as planned.
    assert sweep.unit_plan(later, "thor-02", {}, {}, None, False) == (later, False)


def test_a_failed_canary_keeps_its_candidate_off_its_keys_other_units():
    """Sweeping or not: the key's later units serve their baseline only, the canary named; a
    canary that decided (kept or reverted), did not finish, failed before its baseline was
    measured or by its own infrastructure lets them measure."""
    baseline = serving.make("baseline", engine="vllm", image="img:1", model="m", port=8000, flags=[])
    for policy in (SWEEP, POLICY):
        canary, later = plan("thor-01", policy=policy), plan("thor-02", policy=policy, baseline_serving=baseline,
                                                               oom_retry={"serving": {}}, batch_table={"x": 1})
        canaries = sweep.canaries([canary, later])
        failed = {"outcome": {"decision": "failed", "reasons": ["the speculative serving crashed", "more"],
                              "failure": {"failure_class": "crashed"}, "baseline": {"results": {}}}}
        found, sweeping = sweep.unit_plan(later, "thor-02", canaries, {}, failed, False)
        assert not sweeping and found["speculative"] is None
        assert found["serving"] == {**baseline, "kind": "speculative"}
        assert (found["oom_retry"], found["sweep"], found["batch_table"]) == (None, None, None)
        assert found["reasons"] == ["planned eagle3", "not tried here: thor-01, the canary of this unit's key, "
                                                      "failed (the speculative serving crashed); serving the baseline "
                                                      "only"]
        # The canary itself, and units of other keys, are not held back by it.
        assert sweep.unit_plan(canary, "thor-01", canaries, {}, failed, False)[0]["speculative"] == EAGLE3
        other = plan("orin-01", "agx_orin", policy=policy)
        assert sweep.unit_plan(other, "orin-01", canaries, {}, failed, False)[0]["speculative"] == EAGLE3
        outcome = failed["outcome"]
        not_the_candidate = ({"outcome": {**outcome, "baseline": None}},
                             {"outcome": {**outcome, "failure": {"failure_class": "docker_unavailable"}}},
                             {"outcome": {**outcome, "failure": {"failure_class": "unreachable"}}})
        for decided in ({"outcome": {"decision": "reverted", "reasons": []}}, {"outcome": None}, None,
                        *not_the_candidate):
            assert sweep.unit_plan(later, "thor-02", canaries, {}, decided, False)[0]["speculative"] == EAGLE3


def test_a_plan_carries_its_sweep_and_the_plan_summary_shows_it(unit_facts):
    from specfleet import render
    from tests.conftest import plan_for
    facts = unit_facts("agx-orin-64gb-r36")
    swept = plan_for(facts, "meta-llama/Llama-3.1-8B-Instruct", specfleet_spec_tokens_sweep={"agx_orin": [3, 2]})
    assert swept["sweep"] == {"key": sweep.key(swept), "tokens": [2, 3]}
    assert "eagle3 k=3 (sweep k=2,3)" in render.plan_summary_lines([swept])[0]
    assert plan_for(facts, "meta-llama/Llama-3.1-8B-Instruct")["sweep"] is None  # the default sweeps nothing


def test_each_k_is_judged_at_the_policys_error_shared_among_the_k_measured():
    measured = [("baseline", bench("baseline"))]
    for _ in range(4):
        measured += [("speculative", bench("speculative", 1.8, c8_speed=1.2, chat_speed=1.1, acceptance=ACCEPTANCE)),
                     ("baseline", bench("baseline"))]
    found = blocks(*measured)
    for index, tokens in zip((1, 3, 5, 7), (2, 3, 4, 5), strict=True):
        found[index]["tokens"] = tokens
    judged = sweep.results(found, POLICY)
    assert [entry["verdict"]["keep_confidence"] for entry in judged] == [pytest.approx(1 - 0.1 / 4)] * 4
    # The guards against harm (chat) at the same share: a guard that fires wrongly reverts a good k.
    chat = judged[0]["verdict"]["figures"]["chat"]["throughput_gain_c1"]
    assert any("(97.5% bounds" in reason and reason.startswith("chat:") for reason in judged[0]["verdict"]["reasons"])
    assert chat["lower"] < chat["value"]
    assert all(entry["decision"] == "keep" for entry in judged)


def test_each_k_is_judged_with_the_block_noise_the_sweeps_baseline_blocks_show():
    def swept(baseline_speeds: list[float]) -> list[dict]:
        measured = [("baseline", bench("baseline", baseline_speeds[0]))]
        for speed in baseline_speeds[1:]:
            measured += [("speculative", bench("speculative", 1.8, c8_speed=1.2, chat_speed=1.1,
                                               acceptance=ACCEPTANCE)),
                         ("baseline", bench("baseline", speed))]
        found = blocks(*measured)
        for index, tokens in zip((1, 3, 5, 7), (2, 3, 4, 5), strict=True):
            found[index]["tokens"] = tokens
        return sweep.results(found, POLICY)

    def width(entry: dict) -> float:
        return entry["gain_upper"] - entry["gain_lower"]

    calm = swept([1.0] * 5)
    # The unit wanders 7% between baseline blocks: what one k's three blocks cannot see.
    wandering = swept([1.0, 0.93, 1.0, 0.93, 1.0])
    placebo = 0.0725  # |log 0.93|: each middle baseline block against its neighbours' mean
    expected = math.sqrt((2 * 0.02 ** 2 + 3 * placebo ** 2 / 1.5) / 5)
    baselines = [{"side": "baseline", "bench": bench("baseline", speed)} for speed in (1.0, 0.93, 1.0, 0.93, 1.0)]
    assert sweep.block_noise(baselines, POLICY) == pytest.approx(expected, rel=0.02)
    assert [entry["block_noise"] for entry in calm] == [0.02] * 4
    assert [entry["block_noise"] for entry in wandering] == [pytest.approx(expected, rel=0.02)] * 4
    assert width(wandering[0]) > 1.8 * width(calm[0])
    assert [entry["verdict"]["keep_confidence"] for entry in wandering] == [pytest.approx(1 - 0.1 / 4)] * 4
