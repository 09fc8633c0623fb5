"""DGX Spark plans: `trtllm-serve` and its extra LLM API options, per seed 004."""

from __future__ import annotations

import json

import pytest
import yaml

from specfleet import cache, cli, plan_trtllm, render, serving
from specfleet import plan as plan_module
from specfleet import policy as policy_module
from specfleet.catalog import load_catalog
from tests.conftest import plan_for

CATALOG = load_catalog()
SEED_IMAGE = "nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6"


@pytest.fixture
def spark(unit_facts) -> dict:
    return unit_facts("dgx-spark")


def test_eagle3_plan_is_seed_004_option_1(spark):
    plan = plan_for(spark, "openai/gpt-oss-120b")
    assert not plan["refused"], plan["reasons"]
    assert (plan["backend"], plan["image"], plan["trtllm_version"], serving.speculation(plan["serving"])["method"]) == (
        "trtllm", SEED_IMAGE, "1.2.0rc6", "eagle3")
    assert (plan["serving"]["engine"], plan["serving"]["kind"], plan["serving"]["image"]) == (
        "trtllm", "speculative", SEED_IMAGE)
    assert serving.argv(plan["serving"]) == [
        "trtllm-serve", "openai/gpt-oss-120b", "--host", "0.0.0.0", "--port", "8000",
        "--backend", "pytorch", "--tp_size", "1", "--max_batch_size", "1", "--max_seq_len", "8192",
        "--extra_llm_api_options", "/etc/specfleet/trtllm/speculative.yml",
    ]
    # TensorRT-LLM takes speculation in its options file, never as vLLM's config.
    assert plan["serving"]["speculative_config"] is None
    options = plan["serving"]["engine_options"]
    # Every value below is what seed 004's EAGLE-3 YAML sets, but the head: the playbook's
    # -long-context head is superseded by NVIDIA's v3 head (the catalog's, specfleet/data/catalog.yml).
    assert options == {
        "enable_attention_dp": False,
        "enable_autotuner": False,
        "disable_overlap_scheduler": False,
        "cuda_graph_config": {"max_batch_size": 1},
        "speculative_config": {
            "decoding_type": "Eagle",  # the seed image's name; newer TRT-LLM: Eagle3, Eagle an alias
            "max_draft_len": 5,
            "speculative_model_dir": "/root/.cache/huggingface/checkpoints/nvidia/gpt-oss-120b-Eagle3-v3",
        },
        "kv_cache_config": {"free_gpu_memory_fraction": 0.9, "enable_block_reuse": False},
    }
    assert plan["speculator"] == {"repo": "nvidia/gpt-oss-120b-Eagle3-v3",
                                  "dir": options["speculative_config"]["speculative_model_dir"]}
    assert any("TIKTOKEN_ENCODINGS_BASE" in note for note in plan["notes"])


def test_baseline_is_the_same_without_speculation(spark):
    plan = plan_for(spark, "openai/gpt-oss-120b")
    assert plan["baseline_serving"]["flags"] == plan["serving"]["flags"]
    argv, baseline_argv = serving.argv(plan["serving"]), serving.argv(plan["baseline_serving"])
    assert baseline_argv[:-1] == argv[:-1]
    assert baseline_argv[-1] == "/etc/specfleet/trtllm/baseline.yml"
    baseline = plan["baseline_serving"]["engine_options"]
    assert "speculative_config" not in baseline
    assert baseline == {k: v for k, v in plan["serving"]["engine_options"].items() if k != "speculative_config"}


def test_draft_target_plan_is_seed_004_option_2(spark):
    plan = plan_for(spark, "nvidia/Llama-3.3-70B-Instruct-FP4", specfleet_spec_methods=["draft_model", "ngram"])
    assert serving.speculation(plan["serving"])["method"] == "draft_model"
    options = plan["serving"]["engine_options"]
    # Seed 004's Draft Target YAML: overlap scheduler off, no cuda_graph_config, 4 draft tokens.
    assert options == {
        "print_iter_log": False,
        "disable_overlap_scheduler": True,
        "speculative_config": {
            "decoding_type": "DraftTarget",
            "max_draft_len": 4,
            "speculative_model_dir": "/root/.cache/huggingface/checkpoints/nvidia/Llama-3.1-8B-Instruct-FP4",
        },
        "kv_cache_config": {"free_gpu_memory_fraction": 0.9, "enable_block_reuse": False},
    }
    # The baseline keeps the overlap scheduler on: only speculation needs it off.
    assert plan["baseline_serving"]["engine_options"]["disable_overlap_scheduler"] is False


def test_ngram_uses_trtllm_keys(spark):
    plan = plan_for(spark, "Qwen/Qwen3-8B", specfleet_spec_methods=["ngram"])
    options = plan["serving"]["engine_options"]
    assert options["speculative_config"] == {"decoding_type": "NGram", "max_draft_len": 5, "max_matching_ngram_size": 4}
    assert options["disable_overlap_scheduler"] is True
    assert plan["speculator"] is None


def test_policy_overrides_reach_the_options(spark):
    plan = plan_for(spark, "openai/gpt-oss-120b", specfleet_trtllm_max_batch_size=8,
                    specfleet_gpu_memory_utilization={"dgx_spark": 0.8}, specfleet_spec_tokens={"dgx_spark": 3})
    options = plan["serving"]["engine_options"]
    assert (options["cuda_graph_config"]["max_batch_size"], options["kv_cache_config"]["free_gpu_memory_fraction"],
            options["speculative_config"]["max_draft_len"]) == (8, 0.8, 3)
    assert dict(serving.engine_flags(plan["serving"]))["--max_batch_size"] == "8"


# A fleet's own entry for a TensorRT-LLM whose drafter takes max_concurrency (1.3.0 on).
NEWER_TRTLLM = {
    "name": "site-tensorrt-llm-1.3", "ref": "registry.site.internal/tensorrt-llm/release:1.3.0rc27",
    "trtllm_version": "1.3.0rc27", "backend": "trtllm", "cuda": "13.0", "classes": ["dgx_spark"],
    "l4t_min": None, "methods": ["eagle3", "draft_model", "ngram", "mtp"], "source": "a site's mirror",
}


def test_a_trtllm_that_stops_speculating_under_load_batches_and_drafts_at_batch_1_only(spark):
    """TensorRT-LLM's separate drafter skips a step with more requests than max_concurrency:
    the server batches like a Jetson's vLLM (8) and speculates for one request at a time, the
    same edge as a vLLM unit's per-batch-size table; its baseline batches the same."""
    newer = {"specfleet_images": [NEWER_TRTLLM], "specfleet_image": "site-tensorrt-llm-1.3"}
    plan = plan_for(spark, "Qwen/Qwen3-8B", specfleet_spec_methods=["ngram"], **newer)
    assert not plan["refused"], plan["reasons"]
    options, baseline = plan["serving"]["engine_options"], plan["baseline_serving"]["engine_options"]
    assert options["speculative_config"]["max_concurrency"] == 1
    assert options["cuda_graph_config"] == baseline["cuda_graph_config"] == {"max_batch_size": 8}
    assert dict(serving.engine_flags(plan["serving"]))["--max_batch_size"] == "8"
    assert dict(serving.engine_flags(plan["baseline_serving"]))["--max_batch_size"] == "8"
    assert "speculative_config" not in baseline
    assert any(note.startswith("trtllm max_batch_size 8, speculating for at most 1 request(s) a step")
               for note in plan["notes"]), plan["notes"]
    # A batch size set by the fleet still batches that much, speculating at batch 1 alone.
    four = plan_for(spark, "Qwen/Qwen3-8B", specfleet_spec_methods=["ngram"], specfleet_trtllm_max_batch_size=4,
                    **newer)
    assert four["serving"]["engine_options"]["cuda_graph_config"] == {"max_batch_size": 4}
    assert four["serving"]["engine_options"]["speculative_config"]["max_concurrency"] == 1
    # One-model EAGLE-3 drafts in the target's step, which the field is not known to switch off.
    eagle = plan_for(spark, "openai/gpt-oss-120b", **newer)
    assert "max_concurrency" not in eagle["serving"]["engine_options"]["speculative_config"]
    assert eagle["serving"]["engine_options"]["cuda_graph_config"] == {"max_batch_size": 1}
    assert any("eagle3 drafts in the target's own step" in note for note in eagle["notes"]), eagle["notes"]


@pytest.mark.parametrize(("version", "known"), [
    ("1.2.0rc6", False), ("1.3.0rc1", False), ("1.3.0rc27", True), ("1.3.0", True), ("1.4.0rc1", True),
    (None, False), ("latest", False),
])
def test_max_concurrency_is_taken_from_the_oldest_release_checked(version, known):
    assert plan_trtllm.stops_under_load(version) is known


def test_the_playbook_image_keeps_a_batch_of_one_without_the_switch(spark):
    """1.2.0rc6 is not known to take max_concurrency: one request at a time, saying why."""
    plan = plan_for(spark, "Qwen/Qwen3-8B", specfleet_spec_methods=["ngram"])
    assert "max_concurrency" not in plan["serving"]["engine_options"]["speculative_config"]
    (note,) = [note for note in plan["notes"] if note.startswith("trtllm max_batch_size 1")]
    assert "TensorRT-LLM 1.2.0rc6 is not known to take max_concurrency (from 1.3.0rc27)" in note


@pytest.mark.parametrize(
    ("memory_mb", "model", "says"),
    [
        # 60.8 GiB of weights on 62 GiB: 1.2 GiB free, 0.12 GiB left beside the KV cache.
        (62 * 1024, "openai/gpt-oss-120b", "below the 2.00 GiB headroom"),
        (48 * 1024, "openai/gpt-oss-120b", "needs 60.80 GiB of weights, the unit has 48.00 GiB"),
    ],
)
def test_a_model_too_big_is_refused_with_the_reason(spark, memory_mb, model, says):
    plan = plan_for({**spark, "memory_mb": memory_mb}, model)
    assert plan["refused"]
    assert plan["serving"] is None and plan["baseline_serving"] is None
    assert any(reason.startswith("does not fit:") and says in reason for reason in plan["reasons"]), plan["reasons"]


def test_a_speculator_that_does_not_fit_downgrades(spark):
    # 82 GiB: the target leaves 2.12 GiB beside its KV cache, target + EAGLE-3 head 1.93 GiB
    # (under the 2 GiB headroom); the draft model does not fit either; n-gram needs nothing.
    plan = plan_for({**spark, "memory_mb": 82 * 1024}, "openai/gpt-oss-120b")
    assert not plan["refused"]
    assert any(reason.startswith("EAGLE-3 does not fit on dgx_spark") for reason in plan["reasons"])
    assert serving.speculation(plan["serving"])["method"] == "ngram"


def test_unknown_driver_cuda_refuses(spark):
    plan = plan_for({**spark, "cuda": None}, "openai/gpt-oss-120b")
    assert plan["refused"]
    assert "NVIDIA driver version was not read" in plan["reasons"][0]


def test_a_vllm_image_pinned_on_a_spark_is_refused(spark):
    plan = plan_for(spark, "openai/gpt-oss-120b", specfleet_image="upstream-vllm-0.26-cu130")
    assert plan["refused"]
    assert "pinned image 'upstream-vllm-0.26-cu130'" in plan["reasons"][0]


def test_no_method_serves_the_baseline_yaml(spark):
    plan = plan_for(spark, "openai/gpt-oss-20b", specfleet_spec_methods=["eagle3"])
    assert plan["speculative"] is None
    # The serving slot holds the baseline: its flags and options, no speculation.
    assert plan["serving"] == {**plan["baseline_serving"], "kind": "speculative"}
    assert "speculative_config" not in plan["serving"]["engine_options"]
    assert serving.speculation(plan["serving"]) == {"method": None, "num_speculative_tokens": None}
    # Each serving names the options file of its own kind; both files hold the baseline's options.
    assert serving.argv(plan["serving"])[:-1] == serving.argv(plan["baseline_serving"])[:-1]
    assert (serving.argv(plan["serving"])[-1], serving.argv(plan["baseline_serving"])[-1]) == (
        "/etc/specfleet/trtllm/speculative.yml", "/etc/specfleet/trtllm/baseline.yml")
    assert list(serving.files(plan["serving"]).values()) == list(serving.files(plan["baseline_serving"]).values())
    assert plan["reasons"][-1] == "no speculative method fits: serving the baseline only"


def test_fp4_runs_on_spark(spark):
    assert not plan_for(spark, "nvidia/Llama-3.1-8B-Instruct-FP4")["refused"]


def test_cli_prints_command_and_yaml(capsys, facts_file):
    path = facts_file("dgx-spark")
    assert cli.main(["plan", "--facts", path, "--model", "gpt-oss-120b"]) == 0
    out = capsys.readouterr().out
    assert "trtllm-serve openai/gpt-oss-120b --host 0.0.0.0" in out
    yaml_text = out.split("# /etc/specfleet/trtllm/speculative.yml\n", 1)[1].split("## baseline", 1)[0]
    assert yaml.safe_load(yaml_text)["speculative_config"]["max_draft_len"] == 5

    assert cli.main(["plan", "--facts", path, "--model", "gpt-oss-120b", "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)[0]
    assert plan["serving"]["engine_options"]["kv_cache_config"]["free_gpu_memory_fraction"] == 0.9


def test_jetson_plans_print_no_trtllm_block(unit_facts):
    plans = [plan_for(unit_facts("thor-r38"), "openai/gpt-oss-120b")]
    assert render.trtllm_details(plans) == ""


def test_policy_accepts_dgx_spark_and_checks_its_new_variables():
    assert policy_module.validate(policy_module.merge({"specfleet_spec_tokens": {"dgx_spark": 4}}), CATALOG) == []
    problems = policy_module.validate(policy_module.merge({
        "specfleet_spec_tokens_by_method": {"dgx_spark": {"medusa": 2, "draft_model": 0}},
        "specfleet_trtllm_max_batch_size": 0,
    }), CATALOG)
    assert any(p.startswith("specfleet_spec_tokens_by_method.dgx_spark.medusa: unknown method") for p in problems)
    assert any(p.startswith("specfleet_spec_tokens_by_method.dgx_spark.draft_model: must be") for p in problems)
    assert any(p.startswith("specfleet_trtllm_max_batch_size:") for p in problems)


def test_expected_facts_for_a_spark_need_no_l4t():
    assert policy_module.expected_facts_problems({"device_class": "dgx_spark", "memory_mb": 124545}) == []
    spark = {"device_class": "dgx_spark", "memory_mb": 124545}
    assert policy_module.expected_facts_problems({**spark, "l4t": "36.4.3"}) == [
        "specfleet_expected_facts.l4t: dgx_spark runs no L4T; leave it out or null, got '36.4.3'"]
    # A Jetson still needs its L4T.
    assert policy_module.expected_facts_problems({"device_class": "thor", "memory_mb": 125771}) == [
        "specfleet_expected_facts.l4t: missing; the plan needs it"]


def test_each_variant_carries_the_options_file_its_argv_names(spark):
    plan = plan_for(spark, "gpt-oss-120b")
    for spec in (plan["serving"], plan["baseline_serving"]):
        argv, files = serving.argv(spec), serving.files(spec)
        path = argv[argv.index("--extra_llm_api_options") + 1]
        assert list(files) == [path]
        assert yaml.safe_load(files[path]) == spec["engine_options"]
        assert list(yaml.safe_load(files[path])) == sorted(spec["engine_options"])  # canonical: keys sorted
    assert serving.files(plan["serving"]) != serving.files(plan["baseline_serving"])


def test_jetson_plans_have_no_serving_files(unit_facts):
    plan = plan_for(unit_facts("thor-r38"), "openai/gpt-oss-120b")
    assert serving.files(plan["serving"]) == {} and serving.files(plan["baseline_serving"]) == {}
    assert plan["serving"]["engine_options"] is None and plan["baseline_serving"]["engine_options"] is None


def test_the_hf_cache_provides_the_target_and_the_speculator_directory(spark):
    eagle3 = plan_for(spark, "openai/gpt-oss-120b")
    assert plan_module.needed_repos(eagle3) == ["openai/gpt-oss-120b", "nvidia/gpt-oss-120b-Eagle3-v3"]
    assert plan_module.checkpoint_repos(eagle3) == ["nvidia/gpt-oss-120b-Eagle3-v3"]
    ngram = plan_for(spark, "openai/gpt-oss-120b", specfleet_spec_methods=["ngram"])
    assert (plan_module.needed_repos(ngram), plan_module.checkpoint_repos(ngram)) == (["openai/gpt-oss-120b"], [])


def test_a_jetson_speculator_is_read_by_repo_id(unit_facts):
    plan = plan_for(unit_facts("thor-r38"), "meta-llama/Llama-3.1-8B-Instruct")
    assert plan["speculative"]["method"] == "eagle3", plan["reasons"]
    assert plan_module.needed_repos(plan) == ["meta-llama/Llama-3.1-8B-Instruct", plan["speculative"]["model"]]
    assert plan_module.checkpoint_repos(plan) == []


def test_a_refused_plan_needs_no_repo():
    assert plan_module.needed_repos({"model": "m", "refused": True, "speculator": {"repo": "s"}}) == []


@pytest.mark.parametrize(("repo", "target"), [
    ("nvidia/gpt-oss-120b-Eagle3-v3",
     "../../hub/models--nvidia--gpt-oss-120b-Eagle3-v3/snapshots/0123abc"),
    ("gpt2", "../hub/models--gpt2/snapshots/0123abc"),
])
def test_a_checkpoint_path_links_to_the_snapshot_relatively(repo, target):
    # checkpoints/<repo> sits one folder deeper per '/' in the repo id.
    assert cache.checkpoint_link(repo, "0123abc\n") == target


@pytest.mark.parametrize("revision", ["", "  \n", "../x"])
def test_a_checkpoint_path_needs_a_revision(revision):
    with pytest.raises(ValueError, match="refs/main"):
        cache.checkpoint_link("org/name", revision)


def test_a_benchmark_names_the_software_each_kind_of_unit_runs(spark, unit_facts):
    assert render.hardware_line(spark) == "NVIDIA GB10 Grace Blackwell (dgx_spark), DGX OS 7.3.1"
    orin = unit_facts("agx-orin-64gb-r36")
    assert render.hardware_line(orin) == f"{orin['module']} (agx_orin), JetPack 6.2, L4T 36.4.3"


def test_speculation_reads_the_same_for_both_engines(spark, unit_facts):
    assert plan_module.speculation(plan_for(spark, "openai/gpt-oss-120b")) == {
        "method": "eagle3", "num_speculative_tokens": 5}
    thor = plan_for(unit_facts("thor-r38"), "meta-llama/Llama-3.1-8B-Instruct")
    assert plan_module.speculation(thor) == {
        "method": "eagle3", "num_speculative_tokens": thor["speculative"]["num_speculative_tokens"]}
    baseline_only = plan_for(spark, "openai/gpt-oss-120b", specfleet_spec_methods=["mtp"])
    assert plan_module.speculation(baseline_only) == {"method": None, "num_speculative_tokens": None}


def test_a_trtllm_serving_says_its_method_from_its_options(spark):
    plan = plan_for(spark, "openai/gpt-oss-120b")
    assert plan["serving"]["engine_options"]["speculative_config"]["decoding_type"] == "Eagle"  # this image's name
    assert serving.speculation(plan["serving"]) == {"method": "eagle3", "num_speculative_tokens": 5}
    assert serving.speculation(plan["baseline_serving"]) == {"method": None, "num_speculative_tokens": None}


def test_a_spark_plan_says_its_outputs_are_not_checked(spark):
    from specfleet.plan import TRTLLM_OUTPUTS_NOTE

    plan = plan_for(spark, "gpt-oss-120b")
    assert TRTLLM_OUTPUTS_NOTE in plan["notes"] and "TensorRT-LLM#12546" in TRTLLM_OUTPUTS_NOTE


def test_the_image_not_the_device_class_decides_the_engine(unit_facts):
    """images.yml (or a fleet's specfleet_images) names each image's backend: an AGX Orin pinned
    to a TensorRT-LLM image is planned for trtllm-serve, options file and all, and one pinned to
    an image that does not list its class is refused naming the pin."""
    orin = unit_facts("agx-orin-64gb-r39")
    jetson_trtllm = {**NEWER_TRTLLM, "name": "site-tensorrt-llm-orin", "classes": ["agx_orin"], "cuda": "13.0"}
    plan = plan_for(orin, "Qwen/Qwen3-8B", specfleet_spec_methods=["ngram"], specfleet_images=[jetson_trtllm],
                    specfleet_image="site-tensorrt-llm-orin")
    assert not plan["refused"], plan["reasons"]
    assert (plan["backend"], plan["serving"]["engine"], plan["baseline_serving"]["engine"]) == ("trtllm",) * 3
    assert serving.argv(plan["serving"])[:2] == ["trtllm-serve", "Qwen/Qwen3-8B"]
    assert set(serving.files(plan["serving"])) == {serving.TRTLLM_OPTIONS_PATHS["speculative"]}
    # The same unit unpinned runs the catalog's vLLM image for its class.
    assert plan_for(orin, "Qwen/Qwen3-8B")["serving"]["engine"] == "vllm"
    # A pin that does not list the unit's class is refused, whatever engine it runs.
    refused = plan_for(orin, "Qwen/Qwen3-8B", specfleet_images=[NEWER_TRTLLM], specfleet_image="site-tensorrt-llm-1.3")
    assert refused["refused"] and any("pinned image 'site-tensorrt-llm-1.3'" in reason
                                      for reason in refused["reasons"]), refused["reasons"]
