"""The event manifest (specfleet_event_models): what prepare stages beyond the plan, per unit."""

from __future__ import annotations

from specfleet import cache, plan
from specfleet import policy as policy_module
from specfleet.catalog import load_catalog
from tests.conftest import plan_for

CATALOG = load_catalog()


def test_without_a_manifest_a_unit_stages_what_its_plan_serves(unit_facts):
    thor = plan_for(unit_facts("thor-r38"), "nvidia/Llama-3.1-8B-Instruct-FP4")
    assert thor["event"] == {"repos": [], "skipped": [], "servings": [], "needs_tiktoken": False}
    assert plan.stage_repos(thor) == ["nvidia/Llama-3.1-8B-Instruct-FP4", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"]


def test_two_event_models_are_staged_with_their_speculators(unit_facts):
    thor = plan_for(unit_facts("thor-r38"), "nvidia/Llama-3.1-8B-Instruct-FP4",
                    specfleet_event_models=["openai/gpt-oss-20b", "qwen3-8b"])
    assert plan.stage_repos(thor) == [
        "nvidia/Llama-3.1-8B-Instruct-FP4", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        "openai/gpt-oss-20b", "Qwen/Qwen3-8B", "RedHatAI/Qwen3-8B-speculator.eagle3", "Qwen/Qwen3-0.6B",
    ]


def test_an_event_model_the_gpu_cannot_run_is_left_out_with_the_reason(unit_facts):
    orin = plan_for(unit_facts("agx-orin-64gb-r36"), "meta-llama/Llama-3.1-8B-Instruct",
                    specfleet_event_models=["nvidia/Llama-3.1-8B-Instruct-FP8", "nvidia/Llama-3.1-8B-Instruct-FP4"])
    assert "nvidia/Llama-3.1-8B-Instruct-FP8" not in plan.stage_repos(orin)
    assert "nvidia/Llama-3.1-8B-Instruct-FP4" in plan.stage_repos(orin)
    (why,) = orin["event"]["skipped"]
    assert why.startswith("nvidia/Llama-3.1-8B-Instruct-FP8 is FP8") and "compute capability 8.9" in why


def test_unknown_event_models_are_refused_before_any_unit_is_touched():
    problems = policy_module.validate(policy_module.merge({"specfleet_event_models": ["gpt-5"]}), CATALOG)
    assert any(p.startswith("specfleet_event_models: unknown model(s) 'gpt-5'") for p in problems), problems
    problems = policy_module.validate(policy_module.merge({"specfleet_event_models": "qwen3-8b"}), CATALOG)
    assert any(p.startswith("specfleet_event_models: must be a list") for p in problems), problems


def test_holdings_line():
    line = cache.holdings_line([["a/x", True], ["b/y", True], ["c/z", False]], ["d/w is FP8 ..."])
    assert line == "holds 2/3 models: a/x, b/y; NOT held: c/z; not staged (the unit cannot serve them): d/w is FP8 ..."
    assert cache.holdings_line([], []) == "holds 0/0 models: none"


def test_event_models_carry_the_servings_prewarm_compiles_and_their_tiktoken_need(unit_facts):
    thor = plan_for(unit_facts("thor-r38"), "nvidia/Llama-3.1-8B-Instruct-FP4",
                    specfleet_event_models=["openai/gpt-oss-20b", "qwen3-8b"])
    event = thor["event"]
    assert event["needs_tiktoken"] is True  # gpt-oss reads the harmony encodings
    models = [(serving["model"], serving["kind"]) for serving in event["servings"]]
    assert ("openai/gpt-oss-20b", "baseline") in models and ("Qwen/Qwen3-8B", "speculative") in models
    qwen = next(s for s in event["servings"] if s["model"] == "Qwen/Qwen3-8B" and s["kind"] == "speculative")
    assert qwen["speculative_config"]["model"] == "RedHatAI/Qwen3-8B-speculator.eagle3"
    assert {serving["image"] for serving in event["servings"]} == {thor["image"]}
    assert plan_for(unit_facts("thor-r38"), "nvidia/Llama-3.1-8B-Instruct-FP4",
                    specfleet_event_models=["qwen3-8b"])["event"]["needs_tiktoken"] is False


def test_an_event_model_that_does_not_fit_is_left_out_not_swapped(unit_facts):
    nx = plan_for(unit_facts("orin-nx-16gb-r36"), "nvidia/Llama-3.1-8B-Instruct-FP4",
                  specfleet_event_models=["meta-llama/Llama-3.1-8B-Instruct"])
    (why,) = nx["event"]["skipped"]
    assert why.startswith("meta-llama/Llama-3.1-8B-Instruct: does not fit"), why
    assert "meta-llama/Llama-3.1-8B-Instruct" not in plan.stage_repos(nx)
    assert nx["event"]["servings"] == []
