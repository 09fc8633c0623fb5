"""Policy validation: each bad value is reported, naming its variable."""

from __future__ import annotations

import pytest

from specfleet import policy
from specfleet.catalog import load_catalog

CATALOG = load_catalog()


def test_defaults_are_valid():
    assert policy.validate(policy.merge({}), CATALOG) == []


def test_every_default_is_documented():
    text = policy._defaults_text()
    for name in policy.variable_names():
        # Each variable sits in a block (no blank line) that opens with its comment;
        # closely related variables share one.
        block = text[: text.index(f"\n{name}:")].split("\n\n")[-1]
        assert block.lstrip().startswith("#"), f"{name} has no comment above it in policy.yml"


def test_per_class_override_merges_class_by_class():
    merged = policy.merge({"specfleet_spec_tokens": {"thor": 4}})
    assert merged["specfleet_spec_tokens"] == {"thor": 4, "agx_orin": 3, "orin_nx": 3, "orin_nano": 3, "dgx_spark": 5}


@pytest.mark.parametrize(
    ("overrides", "variable"),
    [
        ({"specfleet_spec_tokens": {"thor": 0}}, "specfleet_spec_tokens.thor"),
        ({"specfleet_spec_tokens": {"agx_orin": 50}}, "specfleet_spec_tokens.agx_orin"),
        ({"specfleet_spec_tokens": {"thor": "5"}}, "specfleet_spec_tokens.thor"),
        ({"specfleet_spec_tokens": 5}, "specfleet_spec_tokens"),
        ({"specfleet_spec_tokens": {"xavier": 3}}, "specfleet_spec_tokens"),
        ({"specfleet_spec_methods": ["eagle3", "medusa"]}, "specfleet_spec_methods"),
        ({"specfleet_spec_methods": []}, "specfleet_spec_methods"),
        ({"specfleet_spec_methods": ["ngram", "ngram"]}, "specfleet_spec_methods"),
        ({"specfleet_spec_methods_denied": {"thor": {"medusa": "x"}}}, "specfleet_spec_methods_denied.thor"),
        ({"specfleet_gpu_memory_utilization": {"thor": 1.2}}, "specfleet_gpu_memory_utilization.thor"),
        ({"specfleet_gpu_memory_utilization": {"thor": 0}}, "specfleet_gpu_memory_utilization.thor"),
        ({"specfleet_gpu_memory_utilization": {"thor": 0.04}}, "specfleet_spec_memory_drop"),
        ({"specfleet_model": "no-such-model"}, "specfleet_model"),
        ({"specfleet_model": 7}, "specfleet_model"),
        ({"specfleet_ngram_prompt_lookup_min": 6}, "specfleet_ngram_prompt_lookup_min"),
        ({"specfleet_max_num_seqs": 4}, "specfleet_max_num_seqs"),
        ({"specfleet_max_model_len": {"thor": "long"}}, "specfleet_max_model_len.thor"),
        ({"specfleet_capability_check": "yes"}, "specfleet_capability_check"),
        ({"specfleet_spec_batch_table": "on"}, "specfleet_spec_batch_table"),
        ({"specfleet_port": 70000}, "specfleet_port"),
        ({"specfleet_image_mirror": "http://registry.lan:5000"}, "specfleet_image_mirror"),
        ({"specfleet_gate_min_throughput_gain": -0.1}, "specfleet_gate_min_throughput_gain"),
        ({"specfleet_gate_min_tpot_drop": 1.5}, "specfleet_gate_min_tpot_drop"),
        ({"specfleet_gate_disable_below": 0.5}, "specfleet_gate_disable_below"),
        ({"specfleet_gate_margin": True}, "specfleet_gate_margin"),
        ({"specfleet_min_kv_cache_gib": -1}, "specfleet_min_kv_cache_gib"),
    ],
)
def test_bad_value_names_the_variable(overrides, variable):
    problems = policy.validate(policy.merge(overrides), CATALOG)
    assert problems, f"{overrides} was accepted"
    assert any(problem.startswith(variable + ":") for problem in problems), problems


def test_all_problems_reported_at_once():
    with pytest.raises(policy.PolicyError) as raised:
        policy.resolve({"specfleet_spec_tokens": {"thor": 0}, "specfleet_model": "nope"}, CATALOG)
    assert len(raised.value.problems) == 2


def test_unrelated_inventory_variables_are_ignored():
    assert "ansible_user" not in policy.merge({"ansible_user": "nvidia"})


THOR_FACTS = {"device_class": "thor", "l4t": "38.2.0", "memory_mb": 125771, "cuda": "13.0", "jetpack": "7.0"}


def test_declared_facts_like_the_inventories_are_valid():
    assert policy.expected_facts_problems(THOR_FACTS) == []


@pytest.mark.parametrize(
    ("changes", "variable"),
    [
        ({"device_class": "xavier"}, "specfleet_expected_facts.device_class"),
        ({"l4t": 38.2}, "specfleet_expected_facts.l4t"),  # unquoted in YAML: a float
        ({"l4t": "r36.4"}, "specfleet_expected_facts.l4t"),
        ({"memory_mb": "64G"}, "specfleet_expected_facts.memory_mb"),
        ({"memory_mb": 0}, "specfleet_expected_facts.memory_mb"),
        ({"cuda": 13.0}, "specfleet_expected_facts.cuda"),
        ({"device_class": None}, "specfleet_expected_facts.device_class"),
        ({"memory_mb": 1_000_000}, "specfleet_expected_facts.memory_mb"),  # more than any Thor has
        ({"memory_mb": 7441}, "specfleet_expected_facts.memory_mb"),  # an Orin Nano's, not a Thor's
        ({"memroy_mb": 1}, "specfleet_expected_facts.memroy_mb"),
    ],
)
def test_bad_declared_facts_name_the_key(changes, variable):
    problems = policy.expected_facts_problems({**THOR_FACTS, **changes})
    assert [problem.split(":")[0] for problem in problems] == [variable], problems


def test_impossible_memory_and_misspelt_keys_say_why():
    assert policy.expected_facts_problems({**THOR_FACTS, "memory_mb": 7441, "memroy_mb": 3}) == [
        "specfleet_expected_facts.memory_mb: 7441 MiB cannot be a thor's memory (32..128 GiB, 32768..131072 MiB)",
        "specfleet_expected_facts.memroy_mb: not a fact of a unit; did you mean memory_mb?",
    ]
    # A facts file is what a unit reported: keys a newer module adds are not refused.
    assert policy.expected_facts_problems({**THOR_FACTS, "new_fact": 1}, name="facts") == []


def test_declared_facts_missing_what_the_plan_needs():
    problems = policy.expected_facts_problems({"device_class": "thor"})
    assert problems == [
        "specfleet_expected_facts.l4t: missing; the plan needs it",
        "specfleet_expected_facts.memory_mb: missing; the plan needs it",
    ]


@pytest.mark.parametrize("declared", ["thor", ["thor"], None, 3])
def test_declared_facts_must_be_a_map(declared):
    assert policy.expected_facts_problems(declared)[0].startswith("specfleet_expected_facts: must be a map")


def test_only_denied_methods_left_for_the_class_is_a_conflict():
    merged = policy.merge({"specfleet_spec_methods": ["eagle3"]})
    assert policy.class_conflicts(merged, "orin_nano") == [
        "specfleet_spec_methods: every method listed (eagle3) is denied on orin_nano by "
        "specfleet_spec_methods_denied.orin_nano; the unit could never speculate"
    ]


@pytest.mark.parametrize(
    ("overrides", "device_class"),
    [
        ({"specfleet_spec_methods": ["eagle3"]}, "thor"),  # allowed there
        ({"specfleet_spec_methods": ["eagle3"]}, None),  # class not known yet: no contradiction
        ({"specfleet_spec_methods": ["eagle3"]}, "xavier"),  # the plan refuses unknown classes itself
        ({}, "orin_nano"),  # defaults: only EAGLE-3 denied, the rest remain
        ({"specfleet_spec_methods_denied": "nope"}, "orin_nano"),  # validate() reports it; no crash here
        ({"specfleet_spec_methods": "eagle3"}, "orin_nano"),
    ],
)
def test_no_conflict(overrides, device_class):
    assert policy.class_conflicts(policy.merge(overrides), device_class) == []
