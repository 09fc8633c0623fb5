"""What a unit's GPU can run (specfleet/data/capability.yml) and how the plan uses it:
a checkpoint the GPU cannot start is swapped for another precision of the same model, or
the unit is refused naming the compute capability; never planned to fail on the night."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from specfleet import capability, serving
from specfleet import policy as policy_module
from specfleet.catalog import Catalog, load_catalog
from specfleet.plan import plan_unit
from tests.conftest import REPO, plan_for

CATALOG = load_catalog()
TABLE = capability.load_table()
FP8 = "nvidia/Llama-3.1-8B-Instruct-FP8"
FP4 = "nvidia/Llama-3.1-8B-Instruct-FP4"
BF16 = "meta-llama/Llama-3.1-8B-Instruct"


def test_every_catalog_checkpoint_has_a_format_the_table_knows():
    for model in CATALOG.models:
        assert model.weights_format in TABLE.formats, model.repo
    for device_class in ("thor", "agx_orin", "orin_nx", "orin_nano", "dgx_spark"):
        assert TABLE.capability(device_class) is not None


def test_precisions_of_one_model_share_its_tokenizer():
    for model in CATALOG.models:
        for other in CATALOG.precisions_of(model):
            assert (other.family, other.vocab_size) == (model.family, model.vocab_size), (model.repo, other.repo)
    assert {m.repo for m in CATALOG.precisions_of(CATALOG.model(FP8))} == {FP8, FP4, BF16}


@pytest.mark.parametrize(("device_class", "repo", "runs", "fallback"), [
    ("agx_orin", FP8, False, False),  # ModelOpt FP8 asks 8.9; Orin is 8.7
    ("agx_orin", FP4, True, True),    # NVFP4 from 7.5, on Marlin below 10.0
    ("agx_orin", BF16, True, False),
    ("agx_orin", "openai/gpt-oss-120b", True, True),  # MXFP4 from 8.0
    ("thor", FP8, True, False),
    ("thor", FP4, True, False),       # Blackwell: FP4 tensor cores
    ("dgx_spark", FP4, True, False),
])
def test_verdict_follows_the_table(device_class, repo, runs, fallback):
    found = capability.verdict(TABLE, device_class, CATALOG.model(repo))
    assert (found.runs, found.fallback) == (runs, fallback), found.why


def test_agx_orin_asked_for_fp8_serves_a_precision_it_runs(unit_facts):
    plan = plan_for(unit_facts("agx-orin-64gb-r36"), FP8)
    assert not plan["refused"], plan["reasons"]
    # Native kernels first: BF16 fits in 64 GB, so it beats NVFP4 on Marlin.
    assert (plan["requested_model"], plan["model"], plan["weights_format"]) == (FP8, BF16, "bf16")
    assert plan["compute_capability"] == "8.7"
    assert serving.argv(plan["serving"])[2] == serving.argv(plan["baseline_serving"])[2] == BF16
    swap = plan["reasons"][0]
    assert "compute capability 8.9" in swap and "8.7" in swap and f"serving {BF16}" in swap
    assert plan["gated"] is True  # the BF16 base is gated: prepare must fetch it with a token


def test_orin_nx_asked_for_fp8_serves_nvfp4_on_marlin(unit_facts):
    """BF16 does not fit in 16 GB; NVFP4 runs on Orin through Marlin, and the plan says so."""
    plan = plan_for(unit_facts("orin-nx-16gb-r36"), FP8)
    assert not plan["refused"], plan["reasons"]
    assert (plan["model"], plan["weights_format"]) == (FP4, "modelopt_fp4")
    assert any("Marlin" in note for note in plan["notes"]), plan["notes"]


def test_an_fp8_only_model_is_refused_on_orin_naming_the_capability(unit_facts):
    fp8 = CATALOG.model(FP8)
    alone = dataclasses.replace(fp8, base_model=None)  # no other precision of it in this catalog
    catalog = Catalog(models=(alone,), heads=CATALOG.heads, images=CATALOG.images)
    for fixture in ("agx-orin-64gb-r36", "orin-nx-16gb-r36"):
        policy = policy_module.resolve({"specfleet_model": FP8}, CATALOG)
        plan = plan_unit("unit-1", unit_facts(fixture), alone, policy, catalog)
        assert plan["refused"] and plan["serving"] is None and plan["baseline_serving"] is None
        (reason,) = plan["reasons"]
        assert "compute capability 8.9" in reason and "GPU is 8.7" in reason, reason
        assert "no other precision of it in the catalog runs there" in reason


def test_thor_keeps_nvfp4(unit_facts):
    plan = plan_for(unit_facts("thor-r38"), FP4)
    assert (plan["model"], plan["requested_model"], plan["compute_capability"]) == (FP4, FP4, "11.0")
    assert not any("Marlin" in note for note in plan["notes"])
    assert not any("compute capability" in reason for reason in plan["reasons"])
    assert plan["speculative"]["method"] == "eagle3"


def test_capability_check_off_starts_what_was_asked(unit_facts):
    plan = plan_for(unit_facts("orin-nx-16gb-r36"), FP8, specfleet_capability_check=False)
    assert not plan["refused"] and plan["model"] == FP8
    assert serving.argv(plan["baseline_serving"])[2] == FP8
    assert any("capability check off" in note for note in plan["notes"])


def test_a_draft_model_the_gpu_cannot_run_is_skipped(unit_facts):
    target = CATALOG.model("meta-llama/Llama-3.1-8B-Instruct")
    fp8_draft = dataclasses.replace(CATALOG.model("meta-llama/Llama-3.2-1B-Instruct"), weights_format="modelopt")
    models = tuple(fp8_draft if m.repo == fp8_draft.repo else m for m in CATALOG.models)
    catalog = Catalog(models=models, heads=CATALOG.heads, images=CATALOG.images)
    policy = policy_module.resolve({"specfleet_model": target.repo, "specfleet_spec_methods": ["draft_model", "ngram"]},
                                   CATALOG)
    plan = plan_unit("unit-1", unit_facts("agx-orin-64gb-r36"), target, policy, catalog)
    assert plan["speculative"]["method"] == "ngram"
    assert any("draft model skipped" in r and "compute capability 8.9" in r for r in plan["reasons"]), plan["reasons"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specfleet.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_cli_plans_fp8_on_orin_and_keeps_nvfp4_on_thor(facts_file):
    fp8 = _cli("plan", "--format", "json", "--model", FP8,
               "--facts", facts_file("agx-orin-64gb-r36"), "--facts", facts_file("orin-nx-16gb-r36"),
               "--facts", facts_file("orin-nano-8gb-r36"))
    assert fp8.returncode == 0, fp8.stderr
    plans = {plan["host"]: plan for plan in json.loads(fp8.stdout)}
    assert plans["agx-orin-64gb-r36"]["model"] == BF16
    assert plans["orin-nx-16gb-r36"]["model"] == FP4
    nano = plans["orin-nano-8gb-r36"]
    assert nano["refused"] and "compute capability 8.9" in nano["reasons"][0]
    table = _cli("plan", "--model", FP8, "--facts", facts_file("orin-nano-8gb-r36"))
    # The table folds its reasons column: the words are there, maybe on two lines.
    assert "REFUSED" in table.stdout and "capability 8.9;" in table.stdout, table.stdout
    thor = _cli("plan", "--format", "json", "--facts", facts_file("thor-r38"))
    (plan,) = json.loads(thor.stdout)
    assert (plan["model"], plan["weights_format"], plan["refused"]) == (FP4, "modelopt_fp4", False)
