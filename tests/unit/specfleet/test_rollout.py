"""specfleet.rollout: every path of a unit's rollout, step by step, as the playbook drives it."""

from __future__ import annotations

import json

import pytest

from specfleet import policy as policy_module
from specfleet import release, rollout, serving, sweep
from tests.benches import ACCEPTANCE, bench

POLICY = policy_module.merge({})
ENV = {"HF_HUB_OFFLINE": "1"}
MOUNTS = ["/var/lib/specfleet/huggingface:/root/.cache/huggingface"]
EAGLE3 = {"method": "eagle3", "model": "head", "num_speculative_tokens": 5}


def make(kind: str, config: dict | None = None) -> dict:
    return serving.make(kind, engine="vllm", image="img:1", model="m", port=8000,
                        flags=[["--seed", "0"]], speculative_config=config)


PLAN = {"host": "u", "device_class": "thor", "model": "m", "image": "img:1", "refused": False,
        "reasons": ["planned eagle3"], "speculative": EAGLE3,
        "serving": make("speculative", EAGLE3), "baseline_serving": make("baseline")}
BASELINE_ONLY = {**PLAN, "speculative": None, "reasons": ["no speculative method fits: serving the baseline only"],
                 "serving": {**make("baseline"), "kind": "speculative"}}
BASELINE_BENCH = bench("baseline")
FAST = bench("speculative", 1.8, c8_speed=1.2, chat_speed=1.1, acceptance=ACCEPTANCE)
SLOW = bench("speculative", 0.99, acceptance=ACCEPTANCE)
RUN = "r0"  # the run that measures, in the trial marker


def started(record: dict | None = None, plan: dict = PLAN, remeasure: bool = False, secrets=("HF_TOKEN",)) -> dict:
    text = json.dumps(record) if record is not None else None
    return rollout.start(plan, text, ENV, MOUNTS, list(secrets), remeasure)


def measured_baseline(state: dict, plan: dict = PLAN) -> dict:
    """The first baseline block measured: the speculative side is next."""
    return rollout.block_measured(rollout.baseline_serving(state, plan, RUN), plan, BASELINE_BENCH, POLICY)


def gated(state: dict, candidate: dict, plan: dict = PLAN, closing: dict = BASELINE_BENCH) -> dict:
    """The speculative block, then the closing baseline block, after which the gate decides."""
    state = rollout.block_measured(state, plan, candidate, POLICY,
                                   {"resolved_speculative_config": {"method": "eagle3"}, "startup_seconds": 41.5,
                                    "compile_cache": "miss"})
    assert state["next"] == "baseline" and state["next_serving"] == state["baseline"]
    return rollout.block_measured(state, plan, closing, POLICY)


def test_a_refused_plan_is_reported_and_touches_nothing():
    state = started(plan={**PLAN, "refused": True, "reasons": ["no vLLM image"]})
    assert state["done"] and state["serve"] is None and state["candidate"] is None
    assert state["outcome"] == {"decision": "failed", "reasons": ["plan refused: no vLLM image"], "serving": None}
    assert rollout.finish(state, "r1")["record"] == release.empty()


def test_a_first_rollout_kept_becomes_the_known_good():
    state = started()
    assert not state["done"] and state["serve"] is None
    assert state["candidate"]["secret_env_names"] == ["HF_TOKEN"] and state["candidate"]["env"] == ENV
    serving_baseline = rollout.baseline_serving(state, PLAN, RUN)
    assert (serving_baseline["next"], serving_baseline["next_serving"]) == ("baseline", state["baseline"])
    state = measured_baseline(state)
    assert state["record"]["known_good"] == state["record"]["current"] == state["baseline"]
    assert (state["next"], state["next_serving"]) == ("speculative", state["candidate"])
    state = gated(state, FAST)
    # Kept after baseline, speculative, baseline: the candidate serves again, as the known-good.
    assert state["done"] and state["serve"] == state["candidate"] and state["next"] is None
    assert (state["outcome"]["decision"], state["outcome"]["serving"]) == ("kept", "speculative")
    assert state["outcome"]["measurement"]["blocks"] == ["baseline", "speculative", "baseline"]
    assert state["outcome"]["resolved_speculative_config"] == {"method": "eagle3"}
    # Only the speculative side was started for its block (the baseline already served).
    assert state["outcome"]["startup"] == {"speculative": {"seconds": 41.5, "compile_cache": "miss"}}
    # The record keeps the figures, not every request.
    assert "requests" not in state["outcome"]["speculative"]["results"]["code_edit"]["c1"]["runs"][0]
    assert "outputs" not in state["outcome"]["speculative"]
    assert state["outcome"]["reasons"][0] == "planned eagle3"
    final = rollout.finish(state, "r1")
    assert final["record"]["known_good"] == final["record"]["current"] == state["candidate"]
    assert final["record"]["decisions"][state["candidate"]["spec_id"]]["run_id"] == "r1"
    # The next run finds the decision and serves the candidate again without measuring.
    again = started(final["record"])
    assert again["done"] and again["serve"] == state["candidate"]
    assert again["outcome"]["reused_from"] == "r1" and again["outcome"]["decision"] == "kept"
    assert rollout.finish(again, "r2")["record"] == again["record"]


def test_a_kept_decision_served_again_becomes_the_known_good_in_place_of_another():
    """The record names another vetted serving as known-good (a draft length a sweep kept, say)
    while the plan's candidate was kept in an earlier run: serving that decision again makes it
    what a rollback returns to, so the record's current and known-good agree."""
    kept = rollout.finish(gated(measured_baseline(started()), FAST), "r1")["record"]
    other = serving.for_unit(make("speculative", {**EAGLE3, "num_speculative_tokens": 2}), ENV, MOUNTS, ["HF_TOKEN"])
    record = {**kept, "current": other, "known_good": other}
    again = started(record)
    assert again["serve"] == again["candidate"] and again["outcome"]["reused_from"] == "r1"
    final = rollout.finish(again, "r2")["record"]
    assert final["known_good"] == final["current"] == again["candidate"]


def test_a_revert_serves_the_known_good_again():
    state = gated(measured_baseline(started()), SLOW)
    assert state["outcome"]["decision"] == "reverted" and state["outcome"]["serving"] == "baseline"
    assert state["serve"] == state["baseline"] and state["record"]["current"] == state["baseline"]
    again = started(rollout.finish(state, "r1")["record"])
    assert again["serve"] == state["baseline"]  # the known-good, not the candidate
    assert started(rollout.finish(state, "r1")["record"], remeasure=True)["serve"] is None


def test_no_method_that_fits_keeps_the_baseline():
    state = measured_baseline(started(plan=BASELINE_ONLY), BASELINE_ONLY)
    assert state["done"] and state["serve"] is None and state["next"] is None
    assert state["outcome"] == {"decision": "reverted", "reasons": BASELINE_ONLY["reasons"],
                                "baseline": rollout.slim(BASELINE_BENCH), "serving": "baseline"}


def test_an_inconclusive_verdict_measures_one_more_pair():
    borderline = bench("speculative", 1.31, c8_speed=1.2, chat_speed=1.1, acceptance=ACCEPTANCE)
    state = gated(measured_baseline(started()), borderline)
    assert not state["done"] and state["next"] == "speculative" and state["next_serving"] == state["candidate"]
    budget = POLICY["specfleet_gate_max_blocks"]
    for _ in range((budget - 3) // 2):
        state = gated(state, borderline)
    assert state["done"] and len(state["blocks"]) == budget
    assert any(reason.startswith(f"revert to the baseline: still inconclusive after {budget} blocks")
               for reason in state["outcome"]["reasons"]), state["outcome"]["reasons"]
    assert state["outcome"]["measurement"]["inconclusive"]
    assert "straddles" in state["outcome"]["measurement"]["deciding"], state["outcome"]["measurement"]


def test_each_serving_runs_the_output_check_in_its_first_block_only():
    """The gate compares a serving's answers once: its later blocks measure only what it reads."""
    borderline = bench("speculative", 1.31, c8_speed=1.2, chat_speed=1.1, acceptance=ACCEPTANCE)
    state = rollout.baseline_serving(started(), PLAN, RUN)
    assert state["next_output_check"]
    state = rollout.block_measured(state, PLAN, BASELINE_BENCH, POLICY)
    assert state["next"] == "speculative" and state["next_output_check"]
    state = rollout.block_measured(state, PLAN, borderline, POLICY)
    assert state["next"] == "baseline" and not state["next_output_check"]
    unchecked = {**BASELINE_BENCH, "outputs": {}}
    state = rollout.block_measured(state, PLAN, unchecked, POLICY)
    assert state["next"] == "speculative" and not state["next_output_check"]
    assert [block["spec_id"] for block in state["blocks"]] == [state["baseline"]["spec_id"],
                                                               state["candidate"]["spec_id"],
                                                               state["baseline"]["spec_id"]]
    # A serving whose first block brought no answers (an output check of 0) checks in its next.
    fresh = rollout.block_measured(rollout.baseline_serving(started(), PLAN, RUN), PLAN, unchecked, POLICY)
    assert fresh["next"] == "speculative" and fresh["next_output_check"]
    fresh = rollout.block_measured(fresh, PLAN, borderline, POLICY)
    assert fresh["next"] == "baseline" and fresh["next_output_check"]


def test_an_earlier_decision_that_no_longer_starts_is_measured_again():
    kept = rollout.finish(gated(measured_baseline(started()), FAST), "r1")
    state = rollout.earlier_did_not_start(started(kept["record"]), "spec_config_rejected")
    assert not state["done"] and state["record"]["known_good"] is None
    assert state["remeasure_reasons"] == [
        "the speculative serving decided in run r1 did not start again (spec_config_rejected): measured again"]
    state = gated(measured_baseline(state), SLOW)
    assert state["outcome"]["reasons"][-1].startswith("the speculative serving decided in run r1")


def test_secrets_configured_now_reach_the_known_good():
    record = rollout.finish(gated(measured_baseline(started(secrets=())), SLOW), "r1")["record"]
    assert record["known_good"]["secret_env_names"] == []
    state = started(record, secrets=["VLLM_API_KEY"])
    assert state["record"]["known_good"]["secret_env_names"] == ["VLLM_API_KEY"]
    assert state["record"]["known_good"]["spec_id"] == serving.spec_id(state["record"]["known_good"])


def test_a_failure_before_the_baseline_was_measured_decides_nothing():
    failure = {"failure_class": "oom_at_start", "msg": "no memory"}
    state = rollout.failed(rollout.baseline_serving(started(), PLAN, RUN), "Serve the baseline", failure)
    assert state["serve"] == state["baseline"]  # the baseline is the known-good of a first run
    final = rollout.finish(rollout.rolled_back(state), "r1")
    assert final["failed"] and final["record"]["decisions"] == {}
    assert final["outcome"]["reasons"] == ["Serve the baseline: oom_at_start: no memory",
                                           "rolled back to the known-good baseline serving"]


def test_a_failed_candidate_rolls_back_and_is_remembered():
    state = measured_baseline(started())
    failed_bench = {"label": "speculative", "ok": False,
                    "failure": {"class": "server_died", "message": "connection reset"}}
    state = rollout.failed(state, "Benchmark the speculative (block 2)", {"bench": failed_bench})
    final = rollout.finish(rollout.rolled_back(state), "r1")
    assert final["outcome"]["failure"] == {"task": "Benchmark the speculative (block 2)",
                                           "failure_class": "server_died",
                                           "message": "connection reset", "decisive_lines": []}
    assert final["outcome"]["speculative"]["failure"] == failed_bench["failure"]
    assert final["outcome"]["baseline"] == rollout.slim(BASELINE_BENCH) and final["outcome"]["serving"] == "baseline"
    assert final["record"]["current"] == final["record"]["known_good"] == state["baseline"]
    assert final["record"]["decisions"][state["candidate"]["spec_id"]]["decision"] == "failed"


def test_a_known_good_that_does_not_start_yields_to_the_baseline_then_to_nothing():
    earlier = make("speculative", {"method": "ngram"})
    placed = serving.for_unit(earlier, ENV, MOUNTS, ["HF_TOKEN"])
    record = release.known_good(release.empty(), placed)
    state = rollout.failed(measured_baseline(started(record)), "Serve the speculative plan", {"failure_class": "x"})
    assert state["serve"] == placed
    to_baseline = rollout.rollback_did_not_start(state, "oom_at_start")
    assert to_baseline["serve"] == state["baseline"]
    served = rollout.finish(rollout.rolled_back(to_baseline), "r1")
    assert served["record"]["known_good"] == state["baseline"]
    assert served["outcome"]["reasons"][1] == (
        "the known-good speculative serving did not start again (oom_at_start); "
        "serving this run's measured baseline, now the known-good")
    nothing = rollout.finish(rollout.rollback_did_not_start(to_baseline, "failed"), "r1")
    assert nothing["record"]["known_good"] is None and nothing["record"]["current"] is None
    assert nothing["outcome"]["serving"] is None
    assert nothing["outcome"]["reasons"][1].endswith("the unit serves nothing")


def test_the_unit_record_carries_the_plan():
    state = gated(measured_baseline(started()), FAST)
    record = rollout.unit_record(state, PLAN, "thor-01", "r1")
    assert (record["host"], record["run_id"], record["method"], record["num_speculative_tokens"]) == (
        "thor-01", "r1", "eagle3", 5)
    assert record["plan_reasons"] == PLAN["reasons"] and record["decision"] == "kept"


def test_rollback_serves_the_known_good_or_says_there_is_none():
    assert rollout.rollback(None)["serve"] is None
    placed = serving.for_unit(make("baseline"), ENV, MOUNTS, [])
    state = rollout.rollback(json.dumps(release.known_good(release.empty(), placed)))
    assert state["serve"] == placed and state["record"]["current"] == placed


# ---- out of memory at start: the plan's lighter variant, once --------------------------------
LIGHTER = make("speculative", {**EAGLE3})
LIGHTER["flags"] = [["--seed", "0"], ["--gpu-memory-utilization", "0.70"]]
RETRY_PLAN = {**PLAN, "oom_retry": {"serving": LIGHTER, "change": "--gpu-memory-utilization 0.70 (was 0.80)"}}
OOM = {"failure_class": "oom_at_start", "msg": "vLLM did not start",
       "decisive_lines": ["ValueError: Free memory on device cuda:0 (40.1/62.8 GiB) on startup is less than desired"]}


def test_out_of_memory_at_start_starts_the_lighter_variant_once_and_keeps_it():
    state = rollout.candidate_did_not_start(measured_baseline(started(plan=RETRY_PLAN), RETRY_PLAN), RETRY_PLAN,
                                            "Start the spec and wait until it serves", OOM)
    retry = state["retry"]["serving"]
    assert state["serve"] == retry and retry["flags"] == LIGHTER["flags"]
    # Every later speculative block measures the variant too.
    assert (state["next"], state["next_serving"]) == ("speculative", retry)
    assert (retry["env"], retry["mounts"]) == (ENV, MOUNTS) and retry["spec_id"] != state["candidate"]["spec_id"]
    assert state["retry"]["reason"] == (
        "the speculative serving ran out of memory at start (ValueError: Free memory on device cuda:0 "
        "(40.1/62.8 GiB) on startup is less than desired); started once more with "
        "--gpu-memory-utilization 0.70 (was 0.80)")
    kept = gated(state, FAST, RETRY_PLAN)
    assert kept["outcome"]["decision"] == "kept" and state["retry"]["reason"] in kept["outcome"]["reasons"]
    assert kept["serve"] == retry
    final = rollout.finish(kept, "r1")
    assert final["record"]["known_good"] == final["record"]["current"] == retry
    # Remembered under the planned candidate: the next run serves the variant without measuring.
    decision = final["record"]["decisions"][state["candidate"]["spec_id"]]
    assert decision["retried_spec_id"] == retry["spec_id"]
    again = started(final["record"], plan=RETRY_PLAN)
    assert again["done"] and again["serve"] == retry
    # A plan whose variant changed since (another drop) measures again.
    changed = {**RETRY_PLAN, "oom_retry": {**RETRY_PLAN["oom_retry"], "serving": make("speculative", {**EAGLE3})}}
    changed["oom_retry"]["serving"]["flags"] = [["--seed", "0"], ["--gpu-memory-utilization", "0.60"]]
    assert not started(final["record"], plan=changed)["done"]


def test_a_second_failure_or_another_cause_or_no_variant_fails_as_the_start_failed():
    first_block = measured_baseline(started(plan=RETRY_PLAN), RETRY_PLAN)
    task = "Start the spec and wait until it serves"
    once = rollout.candidate_did_not_start(first_block, RETRY_PLAN, task, OOM)
    twice = rollout.candidate_did_not_start(once, RETRY_PLAN, task, OOM)
    rejected = rollout.candidate_did_not_start(first_block, RETRY_PLAN, task,
                                               {"failure_class": "spec_config_rejected", "msg": "bad"})
    no_variant = rollout.candidate_did_not_start(measured_baseline(started()), PLAN, task, OOM)
    for state in (twice, rejected, no_variant):
        assert state["serve"] is None and state["failure"]["task"] == task
    assert (twice["failure"]["failure_class"], rejected["failure"]["failure_class"]) == ("oom_at_start",
                                                                                        "spec_config_rejected")
    # The playbook fails with that failure; the rescue's `failed` keeps the first task's name and
    # the retry's reason reaches the unit's record.
    handed_on = {"failed_task": task, "failure_class": "oom_at_start", "msg": "vLLM did not start",
                 "decisive_lines": OOM["decisive_lines"]}
    final = rollout.finish(rollout.rolled_back(rollout.failed(twice, "Take the failed start", handed_on)), "r1")
    assert final["outcome"]["reasons"][0] == f"{task}: oom_at_start: vLLM did not start"
    assert once["retry"]["reason"] in final["outcome"]["reasons"]
    assert final["record"]["current"] == final["record"]["known_good"] == once["baseline"]


def test_a_kept_unit_whose_drafts_are_mostly_accepted_is_told_to_measure_a_longer_draft():
    accepted = bench("speculative", 1.8, c8_speed=1.2, chat_speed=1.1,
                     acceptance={"rate": 0.72, "mean_length": 4.6, "per_position": [0.9], "drafts": 700})
    state = gated(measured_baseline(started()), accepted)
    assert state["outcome"]["decision"] == "kept"
    assert ("draft length: 72% of drafted tokens accepted at c=1 (> 60%) with num_speculative_tokens 5: "
            "a longer draft may pay; measure 6 (specfleet_spec_tokens)") in state["outcome"]["reasons"]
    # FAST accepts 36%: at the class's start (5 on Thor) there is nothing to say.
    kept = gated(measured_baseline(started()), FAST)
    assert not any(reason.startswith("draft length") for reason in kept["outcome"]["reasons"])


def test_draft_length_rule():
    from specfleet.gate import draft_length_advice
    assert draft_length_advice(0.61, 3, 3, 16).endswith("measure 4 (specfleet_spec_tokens)")
    assert draft_length_advice(0.61, 16, 3, 16) is None          # already the longest
    assert draft_length_advice(0.60, 3, 3, 16) is None           # the rule asks for more than 0.6
    assert draft_length_advice(0.45, 6, 3, 16).endswith("the longer draft does not pay; go back to 3")
    assert draft_length_advice(None, 3, 3, 16) is None           # no spec-decode counters
    assert draft_length_advice(0.9, None, 3, 16) is None         # nothing drafted (baseline only)


# ---- a key's canary sweeps the draft length ---------------------------------------------------
KEY = sweep.key(PLAN)
SWEEP_PLAN = {**PLAN, "sweep": {"key": KEY, "tokens": [2, 5]}}
# As the emulator's Thor FP4 + EAGLE-3: the longer draft wins code edits and loses chat.
SHORT_DRAFT = bench("speculative", 1.52, c8_speed=1.2, chat_speed=0.99, acceptance=ACCEPTANCE, seed=3)
LONG_DRAFT = bench("speculative", 1.69, c8_speed=1.2, chat_speed=0.74, acceptance=ACCEPTANCE, seed=5)


def canary_start(record: dict | None = None, plan: dict = SWEEP_PLAN, remeasure: bool = False) -> dict:
    """The start as the action takes it on the key's canary: its own record may keep the choice."""
    own = release.parse(json.dumps(record) if record else None)
    unit_plan, sweeping = sweep.unit_plan(plan, "u", {KEY: "u"}, own, None, remeasure)
    return rollout.start(unit_plan, json.dumps(record) if record else None, ENV, MOUNTS, ["HF_TOKEN"], remeasure,
                         sweeping, 5), unit_plan


def swept(first: dict, second: dict, plan: dict = SWEEP_PLAN) -> list[dict]:
    """The canary's states after each block: A, B(k=2), A, B(k=5), A."""
    state = measured_baseline(canary_start(plan=plan)[0], plan)
    states = [state]
    for candidate in (first, second):
        state = rollout.block_measured(state, plan, candidate, POLICY,
                                       {"resolved_speculative_config": {"method": "eagle3", "k": len(states)}})
        states.append(state)
        state = rollout.block_measured(state, plan, BASELINE_BENCH, POLICY)
        states.append(state)
    return states


def test_a_canary_measures_each_draft_length_and_keeps_the_best():
    states = swept(SHORT_DRAFT, LONG_DRAFT)
    first = states[0]
    assert first["max_blocks"] == 7  # 1 + a pair for each k and for one longer
    two = serving.speculation(first["next_serving"])["num_speculative_tokens"]
    assert (first["next"], first["next_tokens"], two) == ("speculative", 2, 2)
    assert first["next_serving"]["spec_id"] != first["candidate"]["spec_id"]
    assert (states[2]["next"], states[2]["next_tokens"]) == ("speculative", 5)
    assert states[2]["next_serving"]["spec_id"] == first["candidate"]["spec_id"]  # the plan's own k
    state = states[-1]
    assert [block.get("tokens") for block in state["blocks"]] == [None, 2, None, 5, None]
    # k=5 loses chat; k=2 keeps: the canary serves k=2, as its known-good and its candidate.
    outcome = state["outcome"]
    assert state["done"] and outcome["decision"] == "kept" and outcome["sweep"]["chosen"] == 2
    assert [(entry["tokens"], entry["decision"]) for entry in outcome["sweep"]["measured"]] == [(2, "keep"),
                                                                                               (5, "revert")]
    assert serving.speculation(state["serve"])["num_speculative_tokens"] == 2
    assert state["serve"] == state["candidate"]
    assert outcome["resolved_speculative_config"] == {"method": "eagle3", "k": 1}  # k=2's own block
    assert outcome["measurement"]["blocks"] == ["baseline", "speculative", "baseline"]
    assert any(reason.startswith("draft length measured: k=2 keep") for reason in outcome["reasons"])
    final = rollout.finish(state, "r1")
    assert final["record"]["known_good"] == state["serve"]
    assert final["record"]["sweeps"][KEY]["chosen"] == 2 and final["record"]["sweeps"][KEY]["canary"] == "u"
    assert rollout.unit_record(final, SWEEP_PLAN, "u", "r1")["num_speculative_tokens"] == 2
    # A re-run plans the kept k from the record and reuses the decision: nothing measured.
    again, again_plan = canary_start(final["record"])
    assert again_plan["speculative"]["num_speculative_tokens"] == 2 and again["sweep"] is None
    assert again["done"] and again["serve"] == state["serve"]
    assert rollout.finish(again, "r2")["record"] == final["record"]  # the same record: nothing written
    assert rollout.unit_record(again, again_plan, "u", "r2")["sweep"]["chosen"] == 2
    # Asked to measure again, it sweeps again.
    assert canary_start(final["record"], remeasure=True)[0]["sweep"] is not None
    # The sweep turned off: the planned k is measured again, not the swept one reused.
    assert not started(final["record"], plan={**SWEEP_PLAN, "sweep": None})["done"]


def test_a_later_unit_keeps_its_canarys_choice_in_its_own_record():
    canary_state = rollout.finish(swept(SHORT_DRAFT, LONG_DRAFT)[-1], "r1")
    later_plan, sweeping = sweep.unit_plan(SWEEP_PLAN, "v", {KEY: "u"}, release.empty(), canary_state, False)
    assert not sweeping and later_plan["sweep"] == {"key": KEY, "tokens": [2, 5], "canary": "u", "chosen": 2}
    state = rollout.start(later_plan, None, ENV, MOUNTS, [], False, False, 5)
    assert state["record"]["sweeps"][KEY] == {"chosen": 2, "canary": "u", "tokens": [2, 5]}
    assert serving.speculation(state["candidate"])["num_speculative_tokens"] == 2
    # Run alone later, the unit is its key's first in the play: its record keeps the choice.
    alone, sweeping = sweep.unit_plan(SWEEP_PLAN, "v", {KEY: "v"}, state["record"], None, False)
    assert not sweeping and alone["serving"] == later_plan["serving"]
    assert rollout.start(alone, json.dumps(state["record"]), ENV, MOUNTS, [], False, False, 5)["record"] == \
        state["record"]
    # Another sweep (other k) is not that choice: the unit sweeps.
    other = {**SWEEP_PLAN, "sweep": {"key": KEY, "tokens": [2, 3]}}
    assert sweep.unit_plan(other, "v", {KEY: "v"}, state["record"], None, False)[1]


def test_a_canary_that_keeps_no_draft_length_reverts_with_the_planned_ks_reasons():
    state = swept(SLOW, LONG_DRAFT)[-1]
    outcome = state["outcome"]
    assert outcome["decision"] == "reverted" and outcome["sweep"]["chosen"] is None
    assert state["serve"] == state["baseline"]
    assert any("chat: throughput at c=1" in reason for reason in outcome["reasons"])  # k=5's own
    assert outcome["reasons"][-1].endswith("no k kept")
    final = rollout.finish(state, "r1")
    assert final["record"]["sweeps"][KEY]["chosen"] is None
    again, again_plan = canary_start(final["record"])
    assert again["done"] and again["serve"] == state["baseline"]  # the revert, reused
    assert again_plan["reasons"][-1] == "num_speculative_tokens 5 as planned: u's sweep kept no draft length"


def test_one_longer_draft_is_measured_when_the_longest_is_best_and_mostly_accepted():
    accepted = {"rate": 0.72, "mean_length": 4.6, "per_position": [0.9], "drafts": 700}
    fast = bench("speculative", 1.8, c8_speed=1.2, chat_speed=1.1, acceptance=accepted)
    state = swept(SHORT_DRAFT, fast)[-1]
    assert (state["next"], state["next_tokens"]) == ("speculative", 6)
    state = rollout.block_measured(state, SWEEP_PLAN, fast, POLICY)
    state = rollout.block_measured(state, SWEEP_PLAN, BASELINE_BENCH, POLICY)
    # Only one longer: even a kept and accepted k=6 asks for no k=7.
    assert state["done"] and len(state["blocks"]) == state["max_blocks"] == 7
    assert [entry["tokens"] for entry in state["outcome"]["sweep"]["measured"]] == [2, 5, 6]


def test_a_draft_length_that_does_not_start_is_a_revert_and_the_sweep_goes_on():
    plan = {**RETRY_PLAN, "sweep": {"key": KEY, "tokens": [2, 5]}}
    state = measured_baseline(rollout.start(plan, None, ENV, MOUNTS, [], False, True, 5), plan)
    failed = rollout.candidate_did_not_start(state, plan, "Start the speculative serving", OOM)
    # The baseline serves in its place and is measured in this block; no lighter retry.
    assert failed["serve"] == failed["baseline"] and failed["retry"] is None and failed["failure"] is None
    assert (failed["next"], failed["next_serving"]) == ("baseline", failed["baseline"])
    state = rollout.block_measured(failed, plan, BASELINE_BENCH, POLICY)
    assert (state["next"], state["next_tokens"]) == ("speculative", 5)
    state = rollout.block_measured(state, plan, SHORT_DRAFT, POLICY)
    state = rollout.block_measured(state, plan, BASELINE_BENCH, POLICY)
    found = state["outcome"]["sweep"]
    assert (found["measured"][0]["decision"], found["measured"][0]["reason"]) == ("revert",
                                                                                 "did not start (oom_at_start)")
    assert found["chosen"] == 5 and state["outcome"]["decision"] == "kept"
    # Not the canary: the unit measures its planned k, with its retry.
    later = measured_baseline(rollout.start(plan, None, ENV, MOUNTS, [], False), plan)
    assert later["next_tokens"] is None and later["next_serving"] == later["candidate"]
    assert rollout.candidate_did_not_start(later, plan, "Start", OOM)["retry"] is not None


def test_a_canary_none_of_whose_draft_lengths_starts_reverts_saying_so():
    state = measured_baseline(rollout.start(SWEEP_PLAN, None, ENV, MOUNTS, [], False, True, 5), SWEEP_PLAN)
    for _ in range(2):
        state = rollout.candidate_did_not_start(state, SWEEP_PLAN, "Start", OOM)
        state = rollout.block_measured(state, SWEEP_PLAN, BASELINE_BENCH, POLICY)
    assert state["done"] and state["outcome"]["decision"] == "reverted" and state["serve"] == state["baseline"]
    assert state["outcome"]["reasons"][1].startswith("revert to the baseline: no draft length started (k=2: ValueError")


# ---- the per-batch-size table ----------------------------------------------------------------
TABLE_PLAN = {**PLAN, "batch_table": {"speculate_up_to": 1, "max_batch": 8}}
LOSES_UNDER_LOAD = bench("speculative", 1.8, c8_speed=0.8, chat_speed=1.1, acceptance=ACCEPTANCE)
# c=8 at +0.5%: within the 3% margin, shown so only with the second pair (the bounds of 5 blocks)
TABLED = bench("speculative", 1.8, c8_speed=1.005, chat_speed=1.1, acceptance=ACCEPTANCE)
BANDS = [[1, 1, 5], [2, 8, 0]]


def test_a_unit_that_wins_at_c1_and_loses_at_c8_is_measured_with_a_table_and_keeps_it():
    budget = POLICY["specfleet_gate_max_blocks"]
    # Room in the playbook's measuring loop for the table's blocks, a budget of their own.
    assert rollout.start(TABLE_PLAN, None, ENV, MOUNTS, [], False, max_blocks=budget)["max_blocks"] == 2 * budget - 1
    state = started(plan=TABLE_PLAN)
    state = gated(measured_baseline(state, TABLE_PLAN), LOSES_UNDER_LOAD, TABLE_PLAN)
    # Reverted for c=8 alone: the candidate once more, drafting at batch 1 only.
    assert not state["done"] and state["next"] == "speculative"
    tabled = state["next_serving"]
    assert tabled["speculative_config"] == {**EAGLE3, "num_speculative_tokens_per_batch_size": BANDS}
    assert tabled["spec_id"] not in (state["candidate"]["spec_id"], state["baseline"]["spec_id"])
    assert '"num_speculative_tokens_per_batch_size":[[1,1,5],[2,8,0]]' in " ".join(serving.argv(tabled))
    # At c=8 the table serves as the baseline does: one pair cannot show it is within the margin,
    # so the gate measures another, within a budget of the table's own.
    state = gated(state, TABLED, TABLE_PLAN)
    assert not state["done"] and (state["next"], state["next_serving"]) == ("speculative", tabled)
    state = gated(state, TABLED, TABLE_PLAN)
    outcome = state["outcome"]
    assert state["done"] and (outcome["decision"], outcome["serving"]) == ("kept", "speculative")
    assert state["serve"] == tabled and state["record"]["known_good"] == tabled
    assert outcome["batch_table"] == {"table": BANDS, "decision": "keep"}
    assert [block.get("batch_table") for block in state["blocks"]] == [None, None, None, BANDS, None, BANDS, None]
    # Judged on its own blocks: the baseline before its first, then its two pairs.
    assert outcome["measurement"]["blocks"] == ["baseline", "speculative", "baseline", "speculative", "baseline"]
    (why,) = [reason for reason in outcome["reasons"] if reason.startswith("per-batch-size table")]
    assert why.startswith("per-batch-size table (k=5 at batch 1, off at batch 2-8) measured after code_edit: "
                          "throughput at c=8 -19.9%")
    assert why.endswith(": kept: speculation where it pays, off under load")
    # The decision is the candidate's; a re-run serves the same table without measuring.
    final = rollout.finish(state, "r1")
    assert final["record"]["decisions"][state["candidate"]["spec_id"]]["batch_table"]["decision"] == "keep"
    again = started(final["record"], plan=TABLE_PLAN)
    assert again["done"] and again["serve"] == tabled


def test_a_table_that_loses_too_reverts_and_one_that_does_not_start_reverts_as_measured_without():
    first = gated(measured_baseline(started(plan=TABLE_PLAN), TABLE_PLAN), LOSES_UNDER_LOAD, TABLE_PLAN)
    lost = gated(first, LOSES_UNDER_LOAD, TABLE_PLAN)
    assert (lost["outcome"]["decision"], lost["serve"]) == ("reverted", lost["baseline"])
    assert lost["outcome"]["batch_table"] == {"table": BANDS, "decision": "revert"}
    assert started(rollout.finish(lost, "r1")["record"], plan=TABLE_PLAN)["serve"] == lost["baseline"]
    result = {"failure_class": "spec_config_rejected", "msg": "start failed",
              "decisive_lines": ["ValueError: num_speculative_tokens_per_batch_size ..."]}
    refused = rollout.candidate_did_not_start(first, TABLE_PLAN, "Start the speculative serving", result, POLICY)
    assert refused["done"] and refused["next"] is None and refused["failure"] is None
    assert (refused["outcome"]["decision"], refused["serve"]) == ("reverted", first["baseline"])
    assert refused["outcome"]["batch_table"] == {"table": BANDS, "decision": "did not start"}
    assert refused["outcome"]["reasons"][-1] == ("the per-batch-size table did not start (spec_config_rejected: "
                                                 "ValueError: num_speculative_tokens_per_batch_size ...)")


def test_a_table_that_costs_more_than_the_margin_at_c1_against_plain_speculation_reverts():
    """Within the margin at c=8, but its PIECEWISE graphs cost where speculation pays: 1.6x at
    c=1 against plain speculation's 1.8x (-11%) is beyond the 3% margin, so it is not kept."""
    state = gated(measured_baseline(started(plan=TABLE_PLAN), TABLE_PLAN), LOSES_UNDER_LOAD, TABLE_PLAN)
    costly = bench("speculative", 1.6, c8_speed=1.005, chat_speed=1.1, acceptance=ACCEPTANCE)
    state = gated(state, costly, TABLE_PLAN)
    outcome = state["outcome"]
    assert state["done"] and (outcome["decision"], state["serve"]) == ("reverted", state["baseline"])
    assert outcome["batch_table"] == {"table": BANDS, "decision": "revert"}
    (cost,) = [reason for reason in outcome["reasons"] if "against plain speculation" in reason]
    assert cost.startswith("code_edit: throughput at c=1 against plain speculation -10.9% (")
    assert cost.endswith("costs more than the 3.0% margin where speculation pays")
    figure = outcome["figures"]["code_edit"]["variant_change_c1"]
    assert figure["value"] == pytest.approx(1.6 / 1.8 - 1, abs=0.003)
    assert figure["lower"] <= figure["value"] <= figure["upper"] < -0.03
    # The same table at plain speculation's speed passes that check (and is kept: above).
    kept = gated(gated(gated(measured_baseline(started(plan=TABLE_PLAN), TABLE_PLAN), LOSES_UNDER_LOAD,
                             TABLE_PLAN), TABLED, TABLE_PLAN), TABLED, TABLE_PLAN)
    (passed,) = [reason for reason in kept["outcome"]["reasons"] if "against plain speculation" in reason]
    assert passed.endswith("no cost beyond the 3.0% margin shown")


def test_no_table_without_one_planned_or_when_more_than_c8_fails():
    plain = gated(measured_baseline(started()), LOSES_UNDER_LOAD)
    assert plain["done"] and plain["outcome"]["decision"] == "reverted" and "batch_table" not in plain["outcome"]
    chat_loses = bench("speculative", 1.8, c8_speed=0.8, chat_speed=0.8, acceptance=ACCEPTANCE)
    both = gated(measured_baseline(started(plan=TABLE_PLAN), TABLE_PLAN), chat_loses, TABLE_PLAN)
    assert both["done"] and both["outcome"]["decision"] == "reverted"
    assert not any(block.get("batch_table") for block in both["blocks"])


def kept_with_table() -> dict:
    """A unit kept with its per-batch-size table (the first table pair inconclusive, the second
    showing c=8 within the margin), and its run finished."""
    state = gated(measured_baseline(started(plan=TABLE_PLAN), TABLE_PLAN), LOSES_UNDER_LOAD, TABLE_PLAN)
    state = gated(gated(state, TABLED, TABLE_PLAN), TABLED, TABLE_PLAN)
    assert state["outcome"]["batch_table"]["decision"] == "keep"
    return rollout.finish(state, "r1")


def test_a_table_kept_earlier_is_on_trial_when_measured_again_and_a_revert_serves_the_baseline():
    kept = kept_with_table()
    tabled = kept["serve"]
    assert kept["record"]["decisions"][kept["candidate"]["spec_id"]]["served_spec_id"] == tabled["spec_id"]
    again = rollout.baseline_serving(started(kept["record"], plan=TABLE_PLAN, remeasure=True), TABLE_PLAN, RUN)
    assert again["record"]["known_good"] == again["baseline"]  # the table does not count while on trial
    state = rollout.block_measured(again, TABLE_PLAN, BASELINE_BENCH, POLICY)
    state = gated(gated(state, LOSES_UNDER_LOAD, TABLE_PLAN), LOSES_UNDER_LOAD, TABLE_PLAN)
    assert (state["outcome"]["decision"], state["outcome"]["serving"], state["serve"]) == (
        "reverted", "baseline", state["baseline"])


def test_a_kept_table_is_served_again_only_while_the_plan_may_have_one():
    kept = kept_with_table()
    assert started(kept["record"], plan=TABLE_PLAN)["serve"] == kept["serve"]
    without = started(kept["record"], plan={**TABLE_PLAN, "batch_table": None})
    assert not without["done"] and without["serve"] is None  # measured again, without a table


def test_a_table_that_stops_starting_reports_the_blocks_the_verdict_without_it_saw():
    first = gated(measured_baseline(started(plan=TABLE_PLAN), TABLE_PLAN), LOSES_UNDER_LOAD, TABLE_PLAN)
    unsure = gated(first, TABLED, TABLE_PLAN)
    assert unsure["next"] == "speculative"  # one more table pair
    result = {"failure_class": "server_died", "msg": "exited", "decisive_lines": []}
    stopped = rollout.candidate_did_not_start(unsure, TABLE_PLAN, "Start the speculative serving", result, POLICY)
    assert stopped["outcome"]["decision"] == "reverted"
    assert stopped["outcome"]["speculative"] == rollout.slim(LOSES_UNDER_LOAD)  # not the table's block
    assert stopped["outcome"]["batch_table"] == {"table": BANDS, "decision": "did not start"}


# ---- the trial marker: an interrupted run's candidate is never left serving ---------------------
REFUSED = {**PLAN, "refused": True, "reasons": ["no vLLM image"]}


def saved_on_trial(record: dict | None = None, plan: dict = PLAN) -> dict:
    """The record as the run saved it right after its baseline started: what a run killed (or cut
    off from its unit) once its candidate started leaves on the unit."""
    return rollout.baseline_serving(started(record, plan=plan), plan, RUN)["record"]


def test_the_trial_marker_is_saved_before_the_candidate_starts_and_goes_with_the_decision():
    state = rollout.baseline_serving(started(), PLAN, RUN)
    assert state["record"]["trial"] == {
        "spec_id": state["candidate"]["spec_id"], "kind": "speculative", "method": "eagle3",
        "num_speculative_tokens": 5, "run_id": RUN, "known_good_spec_id": state["baseline"]["spec_id"]}
    state = rollout.block_measured(state, PLAN, BASELINE_BENCH, POLICY)
    assert state["next"] == "speculative" and state["record"]["trial"]["spec_id"] == state["candidate"]["spec_id"]
    for verdict in (FAST, SLOW):
        final = rollout.finish(gated(state, verdict), "r1")
        assert "trial" not in final["record"], verdict
    failed = rollout.finish(rollout.rolled_back(rollout.failed(state, "Serve the speculative plan",
                                                               {"failure_class": "server_died"})), "r1")
    assert "trial" not in failed["record"]
    # Nothing but the baseline starts without a speculative method: no trial.
    assert "trial" not in rollout.baseline_serving(started(plan=BASELINE_ONLY), BASELINE_ONLY, RUN)["record"]


def test_a_rerun_after_a_clean_rollout_writes_the_record_it_read():
    for verdict in (FAST, SLOW):
        record = rollout.finish(gated(measured_baseline(started()), verdict), "r1")["record"]
        again = started(record)
        assert again["interrupted_trial"] is None and again["done"]
        assert json.dumps(rollout.finish(again, "r2")["record"], sort_keys=True) == json.dumps(record, sort_keys=True)


def test_an_interrupted_trial_puts_the_known_good_back_first_and_says_so():
    saved = saved_on_trial()
    candidate, baseline = started()["candidate"], started()["baseline"]
    state = started(saved)
    assert state["interrupted_trial"]["known_good"] == baseline and state["interrupted_trial"]["reason"] is None
    assert not state["done"]  # nothing was decided: measured, once the known-good serves
    state = rollout.trial_rolled_back(state)
    assert "trial" not in state["record"] and state["record"]["current"] == baseline
    final = rollout.finish(gated(measured_baseline(state), FAST), "r2")
    sentence = (f"the previous run was interrupted during the trial of the speculative serving "
                f"{candidate['spec_id'][:8]} (eagle3, k=5) in run {RUN}: rolled back to the known-good baseline "
                f"serving {baseline['spec_id'][:8]} first")
    assert final["outcome"]["reasons"][-1] == sentence
    assert rollout.unit_record(final, PLAN, "u", "r2")["reasons"][-1] == sentence
    # The decision is about the candidate: a later reuse does not repeat the interruption.
    assert sentence not in final["record"]["decisions"][candidate["spec_id"]]["reasons"]
    assert "trial" not in final["record"] and final["record"]["known_good"] == candidate


def test_an_interrupted_remeasure_goes_back_to_the_baseline_then_serves_the_earlier_decision():
    kept = rollout.finish(gated(measured_baseline(started()), FAST), "r1")["record"]
    # r2 measured the kept candidate again and was killed on its trial: the baseline is what it
    # returns to (the candidate does not count as known-good while it is on trial).
    saved = rollout.baseline_serving(started(kept, remeasure=True), PLAN, RUN)["record"]
    assert saved["known_good"]["kind"] == "baseline"
    assert saved["trial"]["known_good_spec_id"] == saved["known_good"]["spec_id"]
    state = started(saved)
    assert state["interrupted_trial"]["known_good"] == saved["known_good"]
    assert state["done"] and state["serve"] == state["candidate"]  # the decision of r1, reused
    state = rollout.trial_rolled_back(state)
    assert state["record"]["current"] == state["candidate"] and "trial" not in state["record"]
    final = rollout.finish(state, "r3")
    assert final["outcome"]["reused_from"] == "r1" and final["outcome"]["reasons"][-1].endswith(" first")
    assert final["record"]["decisions"] == kept["decisions"]


def test_a_known_good_that_does_not_start_after_an_interrupted_trial_is_forgotten_and_the_unit_measured():
    earlier = serving.for_unit(make("speculative", {"method": "ngram"}), ENV, MOUNTS, ["HF_TOKEN"])
    reverted = rollout.finish(gated(measured_baseline(started(release.known_good(release.empty(), earlier))),
                                    SLOW), "r1")["record"]
    assert reverted["known_good"] == earlier
    state = started(saved_on_trial(reverted))
    assert state["done"] and state["serve"] == earlier  # reverted before: the known-good, reused
    state = rollout.trial_rollback_did_not_start(state, "spec_config_rejected")
    assert not state["done"] and state["earlier"] is None and state["serve"] is None
    assert state["record"]["known_good"] is None
    state = measured_baseline(state)
    assert state["record"]["known_good"] == state["baseline"]  # what rollback returns to now
    final = rollout.finish(gated(state, SLOW), "r2")
    assert final["outcome"]["reasons"][-1].endswith(
        f"its known-good speculative serving {earlier['spec_id'][:8]} did not start again (spec_config_rejected): "
        "measured again from the baseline")


def test_an_interrupted_trial_with_no_known_good_is_measured_not_reused():
    record = rollout.finish(gated(measured_baseline(started()), SLOW), "r1")["record"]
    candidate = started()["candidate"]
    lost = {**release.on_trial(record, candidate, RUN), "known_good": None}  # a hand-edited record
    state = started(lost)
    assert state["interrupted_trial"]["known_good"] is None and not state["done"]
    final = rollout.finish(gated(measured_baseline(state), SLOW), "r2")
    assert final["outcome"]["reasons"][-1].endswith("there was no known-good serving to return to")
    assert "trial" not in final["record"]


def test_a_refused_plan_still_puts_the_known_good_back_after_an_interrupted_trial():
    saved = saved_on_trial()
    state = started(saved, plan=REFUSED)
    assert state["done"] and state["serve"] is None and state["candidate"] is None
    assert state["interrupted_trial"]["known_good"] == saved["known_good"]
    final = rollout.finish(rollout.trial_rolled_back(state), "r2")
    assert final["record"] == release.serving(release.trial_over(saved), saved["known_good"])
    assert final["outcome"]["reasons"][0] == "plan refused: no vLLM image"
    assert final["outcome"]["reasons"][-1].endswith(" first")
    # The known-good did not start: the record keeps its marker and known-good for the next run.
    kept = rollout.finish(rollout.trial_rollback_did_not_start(started(saved, plan=REFUSED), "never_ready"), "r2")
    assert kept["record"] == saved and kept["outcome"]["reasons"][-1].endswith(": the next run tries again")
    # No trial left: a refused plan has nothing to put back (and record.yml writes nothing).
    assert started(release.trial_over(saved), plan=REFUSED)["interrupted_trial"] is None


def test_rollback_ends_an_interrupted_trial():
    saved = saved_on_trial()
    state = rollout.rollback(json.dumps(saved))
    assert state["serve"] == saved["known_good"] and "trial" not in state["record"]
    assert state["record"]["current"] == saved["known_good"]
    assert state["interrupted_trial"]["reason"].startswith("the previous run was interrupted during the trial of "
                                                           "the speculative serving")
    assert rollout.rollback(json.dumps(rollout.finish(gated(measured_baseline(started()), SLOW), "r1")["record"]))[
        "interrupted_trial"] is None


def test_a_record_that_cannot_be_read_stops_the_start_and_the_rollback():
    with pytest.raises(release.UnreadableRecord, match="not valid JSON"):
        rollout.start(PLAN, '{"version": 2, "known_g', ENV, MOUNTS, [], False)
    with pytest.raises(release.UnreadableRecord, match="not a JSON object"):
        rollout.rollback("[]")
    with pytest.raises(release.UnreadableRecord, match="record version 3"):
        rollout.start(REFUSED, json.dumps({**release.empty(), "version": 3}), ENV, MOUNTS, [], False)


# ---- side by side: the candidate measured beside the baseline --------------------------------
def with_memory(spec: dict, utilisation: str) -> dict:
    return {**spec, "flags": [["--gpu-memory-utilization", utilisation], ["--seed", "0"]]}


SHARED = {"port": 8001, "baseline": 0.37, "speculative": 0.43}
SHARED_PLAN = {**PLAN, "serving": with_memory(PLAN["serving"], "0.80"),
               "baseline_serving": with_memory(PLAN["baseline_serving"], "0.85"), "side_by_side": SHARED,
               "oom_retry": {"serving": with_memory(LIGHTER, "0.70"), "change": "--gpu-memory-utilization 0.70"}}


def flags_and_port(spec: dict) -> tuple:
    return dict(serving.engine_flags(spec))["--gpu-memory-utilization"], spec["port"]


@pytest.mark.parametrize(("candidate", "decision"), [(FAST, "kept"), (SLOW, "reverted")])
def test_a_unit_that_holds_both_switches_the_traffic_not_the_server(candidate, decision):
    state = started(plan=SHARED_PLAN)
    # The baseline serves with its share on the serving port: that is what a rollback returns to
    # until a serving with its whole budget has started.
    assert flags_and_port(state["measured_baseline"]) == ("0.37", 8000)
    serving_baseline = rollout.baseline_serving(state, SHARED_PLAN, RUN)
    assert serving_baseline["next_serving"] == state["measured_baseline"] and not serving_baseline["next_beside"]
    assert serving_baseline["record"]["known_good"] == serving_baseline["record"]["current"] == \
        state["measured_baseline"]
    state = measured_baseline(state, SHARED_PLAN)
    # The candidate starts beside it, with its share, on the trial port; its answers are checked,
    # on the very requests the baseline answered (no salt in either side's first block).
    assert state["next"] == "speculative" and state["next_beside"] and state["next_output_check"]
    assert state["next_nonce_salt"] == ""
    assert flags_and_port(state["next_serving"]) == ("0.43", 8001)
    assert state["next_serving"]["spec_id"] == serving.for_unit(state["next_serving"], ENV, MOUNTS,
                                                                ["HF_TOKEN"])["spec_id"]
    state = rollout.block_measured(state, SHARED_PLAN, candidate, POLICY,
                                   {"resolved_speculative_config": {"method": "eagle3"}, "startup_seconds": 30.0})
    # Back to the baseline that never stopped: the same serving, so nothing restarts, and its
    # answers were checked in its first block; its requests get other nonces than there (its
    # prefix cache holds those), while both sides' first blocks sent the same requests.
    assert state["next_serving"] == state["measured_baseline"] and not state["next_beside"]
    assert not state["next_output_check"] and state["next_nonce_salt"] == "block3"
    state = rollout.block_measured(state, SHARED_PLAN, BASELINE_BENCH, POLICY)
    assert state["done"] and state["outcome"]["decision"] == decision
    assert state["outcome"]["measurement"]["side_by_side"] is True
    assert state["outcome"]["measurement"]["started"] == [False, True, False]
    # The decided serving serves alone with its whole budget on the serving port, and is the
    # known-good once it has started (until then, the baseline that served with its share).
    expected = state["candidate"] if decision == "kept" else state["baseline"]
    assert state["serve"] == expected and flags_and_port(expected) == (("0.80", 8000) if decision == "kept"
                                                                        else ("0.85", 8000))
    assert state["record"]["known_good"] == state["measured_baseline"]
    assert rollout.failed(state, "Start the spec", OOM)["serve"] == state["measured_baseline"]
    state = rollout.decided_started(state)
    assert rollout.finish(state, "r1")["record"]["known_good"] == expected
    assert rollout.decided_started(state) == state  # nothing pending: nothing changes


def test_out_of_memory_beside_the_baseline_starts_alone_then_falls_back_to_restarts():
    state = measured_baseline(started(plan=SHARED_PLAN), SHARED_PLAN)
    state = rollout.candidate_did_not_start(state, SHARED_PLAN, "Start the spec and wait until it serves", OOM)
    # The planned candidate alone on the serving port first; every later block restarts its side.
    assert state["sharing"] is None and state["next_alone"] and not state["next_beside"]
    assert state["serve"] == state["next_serving"] == state["candidate"] and state["retry"] is None
    assert state["unshared"].startswith("the speculative serving ran out of memory beside the other one "
                                        "(ValueError: Free memory on device")
    # Out of memory alone too: its lighter variant, once, as on a unit that never shared.
    retried = rollout.replacement_did_not_start(state, SHARED_PLAN, "Start it", OOM)
    assert retried["serve"] == retried["retry"]["serving"] and flags_and_port(retried["serve"]) == ("0.70", 8000)
    assert not retried["next_alone"]
    state = rollout.block_measured(retried, SHARED_PLAN, FAST, POLICY)
    assert state["next_serving"] == state["baseline"] and flags_and_port(state["baseline"]) == ("0.85", 8000)
    kept = rollout.block_measured(state, SHARED_PLAN, BASELINE_BENCH, POLICY)
    assert kept["outcome"]["reasons"][1] == retried["unshared"]
    # Anything else started in the candidate's place that does not start fails as it failed.
    assert rollout.replacement_did_not_start(retried, SHARED_PLAN, "Start it", OOM)["failure"] is not None


def test_a_baseline_that_does_not_start_with_its_share_starts_alone():
    state = started(plan=SHARED_PLAN)
    alone = rollout.baseline_did_not_start(state, "Start the baseline", OOM)
    assert alone["serve"] == alone["measured_baseline"] == state["baseline"] and alone["sharing"] is None
    assert rollout.baseline_serving(alone, SHARED_PLAN, RUN)["next_serving"] == state["baseline"]
    other = {**OOM, "failure_class": "spec_config_rejected"}
    assert rollout.baseline_did_not_start(state, "Start the baseline", other)["serve"] is None
    assert rollout.baseline_did_not_start(alone, "Start the baseline alone", OOM)["failure"] is not None


def test_a_draft_length_that_does_not_start_beside_the_baseline_is_tried_alone():
    plan = {**SHARED_PLAN, "sweep": {"key": KEY, "tokens": [2, 5]}}
    state = measured_baseline(rollout.start(plan, None, ENV, MOUNTS, [], False, True, 5), plan)
    assert state["next_beside"] and flags_and_port(state["next_serving"]) == ("0.43", 8001)
    alone = rollout.candidate_did_not_start(state, plan, "Start the speculative serving", OOM)
    assert alone["serve"] == sweep.with_tokens(alone["candidate"], 2) and alone["next_alone"]
    # Alone it does not start either: a revert for that k, and the baseline (whole) serves in its place.
    failed = rollout.replacement_did_not_start(alone, plan, "Start it", OOM)
    assert failed["serve"] == failed["baseline"] and failed["sweep"]["not_started"][0]["tokens"] == 2


def test_a_baseline_only_plan_shares_nothing():
    state = started(plan={**BASELINE_ONLY, "side_by_side": SHARED})
    assert state["sharing"] is None and state["measured_baseline"] == state["baseline"]


def test_a_units_record_keeps_no_output_check_tokens():
    slim = rollout.slim(bench("baseline"))
    assert "outputs" not in slim and "outputs_batched" not in slim and slim["output_check"]
