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
    assert merged["specfleet_spec_tokens"] == {"thor": 4, "agx_orin": 3, "orin_nx": 3, "orin_nano": 3}


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
        ({"specfleet_class_precisions": {"thor": ["fp3"]}}, "specfleet_class_precisions.thor"),
        ({"specfleet_port": 70000}, "specfleet_port"),
        ({"specfleet_image_mirror": "http://registry.lan:5000"}, "specfleet_image_mirror"),
        ({"specfleet_gate_min_throughput_gain": -0.1}, "specfleet_gate_min_throughput_gain"),
        ({"specfleet_gate_min_tpot_drop": 1.5}, "specfleet_gate_min_tpot_drop"),
        ({"specfleet_gate_disable_below": 0.5}, "specfleet_gate_disable_below"),
        ({"specfleet_gate_max_c8_regression": True}, "specfleet_gate_max_c8_regression"),
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
