"""The `specfleet` command as a user runs it (a real subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specfleet import serving
from tests.conftest import FIXTURE_UNITS, REPO


def specfleet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specfleet.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_facts_root_prints_the_module_json(unit_facts):
    result = specfleet("facts", "--root", str(FIXTURE_UNITS / "thor-r38"))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == unit_facts("thor-r38")


def test_facts_broken_root_names_the_file(tmp_path):
    (tmp_path / "proc").mkdir()
    result = specfleet("facts", "--root", str(tmp_path))
    assert result.returncode == 1
    assert str(tmp_path / "proc" / "meminfo") in result.stderr
    assert "Traceback" not in result.stderr


def test_plan_json_for_all_kinds(facts_file):
    result = specfleet("plan", "--format", "json",
                       "--facts", facts_file("thor-r38"), "--facts", facts_file("orin-nano-8gb-r36"))
    assert result.returncode == 0, result.stderr
    plans = {plan["host"]: plan for plan in json.loads(result.stdout)}
    assert plans["thor-r38"]["speculative"]["method"] == "eagle3"
    # The default model is FP4: the Nano cannot run it and says so.
    assert plans["orin-nano-8gb-r36"]["refused"]
    for plan in plans.values():
        assert {"host", "device_class", "image", "speculative", "gpu_memory_utilization",
                "serving", "baseline_serving", "refused", "reasons"} <= set(plan)
    # The JSON carries the structured serving: what the unit runs renders from it alone.
    thor = plans["thor-r38"]
    assert (thor["serving"]["kind"], thor["serving"]["engine"]) == ("speculative", "vllm")
    assert thor["serving"]["speculative_config"] == thor["speculative"]
    assert serving.argv(thor["serving"])[:3] == ["vllm", "serve", thor["model"]]
    assert plans["orin-nano-8gb-r36"]["serving"] is None


def test_plan_tokens_by_method_from_a_policy_file(tmp_path, facts_file):
    path = tmp_path / "policy.yml"
    path.write_text("specfleet_spec_tokens_by_method: {thor: {eagle3: 2}}\n")
    result = specfleet("plan", "--facts", facts_file("thor-r38"), "--policy", str(path), "--format", "json")
    assert result.returncode == 0, result.stderr
    (plan,) = json.loads(result.stdout)
    assert (plan["speculative"]["method"], plan["speculative"]["num_speculative_tokens"]) == ("eagle3", 2)
    assert serving.speculation(plan["serving"]) == {"method": "eagle3", "num_speculative_tokens": 2}
    argv = serving.argv(plan["serving"])
    assert json.loads(argv[argv.index("--speculative-config") + 1])["num_speculative_tokens"] == 2


def test_plan_model_by_repo_id_and_catalog_name(facts_file):
    for name in ("nvidia/Llama-3.1-8B-Instruct-FP4", "llama-3.1-8b-instruct-fp4"):
        result = specfleet("plan", "--format", "json", "--facts", facts_file("thor-r38"), "--model", name)
        assert json.loads(result.stdout)[0]["model"] == "nvidia/Llama-3.1-8B-Instruct-FP4"


@pytest.mark.parametrize(
    ("policy", "variables"),
    [
        ("specfleet_spec_tokens: {thor: 0}\n", ["specfleet_spec_tokens.thor"]),
        ("specfleet_spec_tokens: {thor: 50}\nspecfleet_spec_methods: [eagle3, medusa]\n",
         ["specfleet_spec_tokens.thor", "specfleet_spec_methods"]),
        ("specfleet_gpu_memory_utilization: {orin_nano: 1.5}\n", ["specfleet_gpu_memory_utilization.orin_nano"]),
        ("specfleet_spec_token: 3\n",
         ["not policy variables: specfleet_spec_token; did you mean specfleet_spec_tokens?"]),
    ],
)
def test_bad_policy_exits_2_naming_each_variable(tmp_path, facts_file, policy, variables):
    path = tmp_path / "policy.yml"
    path.write_text(policy)
    result = specfleet("plan", "--facts", facts_file("thor-r38"), "--policy", str(path))
    assert result.returncode == 2
    assert result.stdout == ""
    for variable in variables:
        assert variable in result.stderr


def test_unknown_model_exits_2(facts_file):
    result = specfleet("plan", "--facts", facts_file("thor-r38"), "--model", "meta-llama/Llama-9-400B")
    assert result.returncode == 2 and "specfleet_model: unknown model" in result.stderr


def test_plan_inventory_from_expected_facts():
    result = specfleet("plan", "-i", "inventory/mixed", "--format", "json")
    assert result.returncode == 0, result.stderr
    methods = {plan["host"]: (plan["device_class"], (plan["speculative"] or {}).get("method"))
               for plan in json.loads(result.stdout)}
    assert methods == {
        "thor-01": ("thor", "eagle3"),
        "agxorin-jp6-01": ("agx_orin", "eagle3"),
        "agxorin-jp72-01": ("agx_orin", "eagle3"),
        "orinnx-01": ("orin_nx", "draft_model"),
        "orinnano-01": ("orin_nano", "ngram"),
    }


def test_workshop_inventory_plans_60_thor_units():
    result = specfleet("plan", "-i", "inventory/workshop", "--format", "json")
    plans = json.loads(result.stdout)
    assert len(plans) == 60
    assert {(p["device_class"], p["speculative"]["method"], p["speculative"]["num_speculative_tokens"])
            for p in plans} == {("thor", "eagle3", 5)}


def test_bad_inventory_value_names_variable_and_hosts(tmp_path):
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "hosts.yml").write_text("all:\n  children:\n    thor:\n      hosts:\n"
                                        + "".join(f"        t{i}:\n" for i in range(6)))
    (tmp_path / "group_vars" / "thor.yml").write_text(
        "specfleet_spec_tokens: {thor: 0}\nspecfleet_expected_facts:\n  device_class: thor\n"
        "  l4t: 38.2.0\n  cuda: '13.0'\n  memory_mb: 125771\n")
    result = specfleet("plan", "-i", str(tmp_path))
    assert result.returncode == 2
    assert "specfleet_spec_tokens.thor: must be 1..16, got 0 [host: t0, t1, t2, t3 and 2 more]" in result.stderr

