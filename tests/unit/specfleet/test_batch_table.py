"""specfleet.batch_table: speculation where it pays, off where it loses."""

from __future__ import annotations

import pytest

from specfleet import batch_table, gate, serving
from specfleet import policy as policy_module
from tests.benches import ACCEPTANCE, bench

POLICY = policy_module.merge({})
EAGLE3 = {"method": "eagle3", "model": "head", "num_speculative_tokens": 3}


def plan(vllm_version: str | None = "0.31.0", **fields) -> dict:
    spec = serving.make("speculative", engine="vllm", image="img:1", model="m", port=8000, flags=[],
                        speculative_config=EAGLE3)
    return {"host": "u", "refused": False, "speculative": EAGLE3, "serving": spec, "vllm_version": vllm_version,
            **fields}


@pytest.mark.parametrize(("version", "supported"), [
    ("0.24.0", True), ("0.31.0", True), ("1.0", True), ("0.24.0rc1", True),
    ("0.23.1", False), ("0.20.2", False), ("0.14.0", False), (None, False), ("latest", False),
])
def test_only_a_vllm_known_to_have_the_field_is_given_a_table(version, supported):
    assert batch_table.supported(version) is supported


def test_the_plan_offers_a_table_where_the_image_and_the_policy_allow_one():
    assert batch_table.for_plan(plan(), POLICY) == {"speculate_up_to": 1, "max_batch": 8}
    assert batch_table.for_plan(plan(), {**POLICY, "specfleet_max_num_seqs": 16})["max_batch"] == 16
    assert batch_table.for_plan(plan("0.20.2"), POLICY) is None
    assert batch_table.for_plan(plan(), {**POLICY, "specfleet_spec_batch_table": False}) is None
    assert batch_table.for_plan(plan(refused=True), POLICY) is None
    assert batch_table.for_plan(plan(speculative=None), POLICY) is None
    trtllm = {**plan(), "serving": {**plan()["serving"], "engine": "trtllm"}}
    assert batch_table.for_plan(trtllm, POLICY) is None


@pytest.mark.parametrize(("method", "offered"), [("eagle3", True), ("eagle", True), ("draft_model", False),
                                                 ("ngram", False), ("mtp", False)])
def test_a_table_is_offered_only_with_the_methods_vllm_tested_it_with(method, offered):
    speculative = {**EAGLE3, "method": method}
    assert (batch_table.for_plan(plan(speculative=speculative), POLICY) is not None) is offered


def test_the_table_drafts_at_batch_1_and_turns_speculation_off_above_it():
    bands = batch_table.table(3, {"speculate_up_to": 1, "max_batch": 8})
    assert bands == [[1, 1, 3], [2, 8, 0]]
    placed = {**plan()["serving"], "spec_id": "old"}
    variant = batch_table.with_table(placed, bands)
    assert variant["speculative_config"]["num_speculative_tokens_per_batch_size"] == bands
    assert variant["spec_id"] == serving.spec_id(variant) != "old"
    assert placed["speculative_config"] == EAGLE3  # the candidate itself is unchanged
    assert batch_table.describe(bands) == "k=3 at batch 1, off at batch 2-8"
    assert batch_table.report_text({"table": bands, "decision": "keep"}) == "k=3 at batch 1, off at batch 2-8: keep"
    assert batch_table.report_text(None) is None


def verdict(c8_speed: float, chat_speed: float = 1.1, speed: float = 1.8) -> dict:
    candidate = bench("speculative", speed, c8_speed=c8_speed, chat_speed=chat_speed, acceptance=ACCEPTANCE)
    blocks = [{"side": "baseline", "bench": bench("baseline")}, {"side": "speculative", "bench": candidate},
              {"side": "baseline", "bench": bench("baseline")}]
    return gate.decide(blocks, POLICY)


def test_a_table_applies_to_a_revert_for_c8_alone():
    assert batch_table.applies(verdict(0.8))
    assert not batch_table.applies(verdict(1.2))  # kept
    assert not batch_table.applies(verdict(0.8, chat_speed=0.8))  # chat loses at c=1 as well
    assert not batch_table.applies(verdict(0.8, speed=1.05))  # c=1 does not pay either
    failed = {"decision": gate.REVERT, "checks": [], "gate_workloads": ["code_edit"], "reasons": ["bench failed"]}
    assert not batch_table.applies(failed)
    # c=8 not measured at all: nothing says speculation loses under load.
    alone = bench("speculative", 1.8, chat_speed=1.1, acceptance=ACCEPTANCE, levels=(1,))
    unmeasured = gate.decide([{"side": "baseline", "bench": bench("baseline", levels=(1,))},
                              {"side": "speculative", "bench": alone},
                              {"side": "baseline", "bench": bench("baseline", levels=(1,))}], POLICY)
    assert unmeasured["decision"] == gate.REVERT and not batch_table.applies(unmeasured)
