"""The serving plan, table-driven over the fixture units and the catalog."""

from __future__ import annotations

import json

import pytest

from specfleet import batch_table, render, serving
from specfleet import policy as policy_module
from specfleet.catalog import load_catalog, version_key
from specfleet.plan import expectation_mismatches, image_fits, mirrored, select_image
from tests.conftest import plan_for

CATALOG = load_catalog()
THOR_IMAGE = "vllm/vllm-openai:v0.26.0"
ORIN_JP6_IMAGE = "ghcr.io/nvidia-ai-iot/vllm:0.14.0-r36.4-tegra-aarch64-cu126-22.04"


@pytest.mark.parametrize(
    ("fixture", "model", "image", "method", "tokens", "util"),
    [
        ("thor-r38", "nvidia/Llama-3.1-8B-Instruct-FP4", THOR_IMAGE, "eagle3", 5, 0.80),
        ("thor-r38", "openai/gpt-oss-120b", THOR_IMAGE, "eagle3", 5, 0.80),
        ("thor-r38", "Qwen/Qwen3-8B", THOR_IMAGE, "eagle3", 5, 0.80),
        ("agx-orin-64gb-r36", "meta-llama/Llama-3.1-8B-Instruct", ORIN_JP6_IMAGE, "eagle3", 3, 0.80),
        ("agx-orin-64gb-r39", "meta-llama/Llama-3.1-8B-Instruct", THOR_IMAGE, "eagle3", 3, 0.80),
        ("orin-nx-16gb-r36", "nvidia/Llama-3.1-8B-Instruct-FP4", ORIN_JP6_IMAGE, "draft_model", 3, 0.75),
        ("orin-nano-8gb-r36", "meta-llama/Llama-3.2-1B-Instruct", ORIN_JP6_IMAGE, "ngram", 3, 0.65),
    ],
)
def test_plan_per_unit(unit_facts, fixture, model, image, method, tokens, util):
    plan = plan_for(unit_facts(fixture), model)
    assert not plan["refused"], plan["reasons"]
    assert (plan["image"], plan["speculative"]["method"], plan["speculative"]["num_speculative_tokens"],
            plan["gpu_memory_utilization"]) == (image, method, tokens, util)
    # The baseline is the known-good serving: same model, no speculation, 0.05 more memory.
    assert plan["baseline_serving"]["speculative_config"] is None
    assert "--speculative-config" not in serving.argv(plan["baseline_serving"])
    assert plan["baseline_gpu_memory_utilization"] == pytest.approx(util + 0.05)
    # The command line carries the plan's speculative config, as vLLM reads it.
    argv = serving.argv(plan["serving"])
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == plan["speculative"]
    assert argv[:3] == ["vllm", "serve", CATALOG.model(model).repo]
    assert (plan["serving"]["kind"], plan["baseline_serving"]["kind"]) == ("speculative", "baseline")
    assert plan["serving"]["image"] == plan["baseline_serving"]["image"] == image


def test_thor_gets_an_upstream_vllm_with_the_per_batch_size_table(unit_facts):
    """Thor's default image reads the table's key (vLLM 0.24.0 on), so the plan offers one."""
    plan = plan_for(unit_facts("thor-r38"), "nvidia/Llama-3.1-8B-Instruct-FP4")
    image = CATALOG.image("upstream-vllm-0.26-cu130")
    assert (plan["image"], plan["vllm_version"], plan["image_digest"]) == (image.ref, "0.26.0", image.digest)
    assert version_key(plan["vllm_version"]) >= batch_table.SUPPORTED_SINCE
    assert plan["batch_table"] == {"speculate_up_to": 1, "max_batch": 8}
    assert batch_table.for_plan(plan, policy_module.merge({})) == plan["batch_table"]
    # Pinned by the multi-arch index's digest: no note of a mutable tag.
    assert plan["image_digest"] == "sha256:ffb2d59b1c059a5bd8d781320c9f5189de8293693b7d95da54befddaa54abf52"
    assert not [note for note in plan["notes"] if "mutable tag" in note]
    # The table the rollout would try, as vLLM reads it in --speculative-config.
    bands = batch_table.table(plan["speculative"]["num_speculative_tokens"], plan["batch_table"])
    argv = serving.argv(batch_table.with_table(plan["serving"], bands))
    sent = json.loads(argv[argv.index("--speculative-config") + 1])
    assert sent["num_speculative_tokens_per_batch_size"] == [[1, 1, 5], [2, 8, 0]]


def test_the_plan_shows_each_units_engine_version_its_pin_and_its_table(unit_facts):
    """What `specfleet plan` prints (its table and plan.yml's lines): the image with the vLLM
    inside and whether its digest is pinned, and k with the table the rollout may measure."""
    thor = plan_for(unit_facts("thor-r38"), "nvidia/Llama-3.1-8B-Instruct-FP4")
    orin = plan_for(unit_facts("agx-orin-64gb-r36"), "meta-llama/Llama-3.1-8B-Instruct")
    assert render.image_text(thor) == "vllm/vllm-openai:v0.26.0 (vLLM 0.26.0, pinned)"
    assert render.image_text({**thor, "image_digest": None, "vllm_version": None}) == (
        "vllm/vllm-openai:v0.26.0 (vLLM unknown, tag only)")
    assert render.tokens_text(thor, 5) == "5 (per-batch-size table if c=8 loses)"
    assert render.tokens_text(orin, 3) == "3"
    thor_line, *_ = render.plan_summary_lines([thor])
    assert "eagle3 k=5 (per-batch-size table if c=8 loses) util=0.80 vllm/vllm-openai:v0.26.0 (vLLM 0.26.0, pinned)" \
        in thor_line
    cells = [list(column.cells) for column in render.plan_table([thor, orin]).columns]
    assert cells[5] == [render.image_text(thor), render.image_text(orin)] and cells[7] == [
        "5 (per-batch-size table if c=8 loses)", "3"]


def test_orin_on_jetpack_6_gets_the_versioned_image_and_no_table(unit_facts):
    for fixture, model in (("agx-orin-64gb-r36", "meta-llama/Llama-3.1-8B-Instruct"),
                           ("orin-nx-16gb-r36", "nvidia/Llama-3.1-8B-Instruct-FP4")):
        plan = plan_for(unit_facts(fixture), model)
        assert (plan["image"], plan["vllm_version"]) == (ORIN_JP6_IMAGE, "0.14.0"), fixture
        assert plan["image_digest"] == "sha256:2a90817f4d760094a25c546126a48aa8e8ae4fae1ae41bf72445fbc2c8bc2a7f"
        assert plan["batch_table"] is None  # vLLM 0.14.0 predates the key


def test_ngc_26_10_on_cuda_13_4_still_runs_on_jetpack_7_0(unit_facts):
    """CUDA is compared by major version: the CUDA 13.4 NGC image on Thor's CUDA 13.0 driver."""
    facts = unit_facts("thor-r38")
    ngc = CATALOG.image("ngc-vllm-26.10")
    assert (ngc.cuda, facts["cuda"]) == ("13.4", "13.0")
    assert image_fits(ngc, "thor", facts["l4t"], facts["cuda"])
    assert not image_fits(ngc, "thor", facts["l4t"], "12.6")
    plan = plan_for(facts, "nvidia/Llama-3.1-8B-Instruct-FP4", specfleet_image="ngc-vllm-26.10")
    assert not plan["refused"] and plan["image"] == ngc.ref and plan["batch_table"]


def test_every_vllm_image_knows_its_vllm_version():
    """An unknown version gets no per-batch-size table; every shipped vLLM image has one known."""
    for image in CATALOG.images:
        assert bool(image.vllm_version) == (image.backend == "vllm"), image.name


def test_vllm_command_lines(unit_facts):
    """The whole command line of each variant, flag by flag in the order vLLM gets them."""
    plan = plan_for(unit_facts("thor-r38"), "nvidia/Llama-3.1-8B-Instruct-FP4")
    common = ["--max-model-len", "8192", "--max-num-seqs", "8", "--seed", "42"]
    assert serving.argv(plan["serving"]) == [
        "vllm", "serve", "nvidia/Llama-3.1-8B-Instruct-FP4", "--host", "0.0.0.0", "--port", "8000",
        "--gpu-memory-utilization", "0.80", *common, "--speculative-config",
        # Keys sorted: equal configs render equally, however they travelled (serving.flag_text).
        '{"draft_tensor_parallel_size":1,"method":"eagle3","model":"yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",'
        '"num_speculative_tokens":5}',
    ]
    assert serving.argv(plan["baseline_serving"]) == [
        "vllm", "serve", "nvidia/Llama-3.1-8B-Instruct-FP4", "--host", "0.0.0.0", "--port", "8000",
        "--gpu-memory-utilization", "0.85", *common,
    ]
    assert serving.files(plan["serving"]) == {} and serving.files(plan["baseline_serving"]) == {}


@pytest.mark.parametrize(
    ("fixture", "model", "reason"),
    [
        ("orin-nano-8gb-r36", "meta-llama/Llama-3.2-1B-Instruct",
         "EAGLE-3 not allowed on orin_nano: not enough memory"),
        ("orin-nx-16gb-r36", "nvidia/Llama-3.1-8B-Instruct-FP4", "EAGLE-3 not allowed on orin_nx"),
        ("thor-r38", "openai/gpt-oss-20b", "no EAGLE-3 head in the catalog for openai/gpt-oss-20b"),
    ],
)
def test_downgrades_carry_reasons(unit_facts, fixture, model, reason):
    plan = plan_for(unit_facts(fixture), model)
    assert not plan["refused"]
    assert any(reason in line for line in plan["reasons"]), plan["reasons"]


@pytest.mark.parametrize(
    ("fixture", "model", "reason"),
    [
        ("orin-nano-8gb-r36", "nvidia/Llama-3.1-8B-Instruct-FP8", "do not fit"),
        ("orin-nano-8gb-r36", "openai/gpt-oss-120b", "does not fit"),
        ("orin-nano-8gb-r36", "nvidia/Llama-3.1-8B-Instruct-FP8", "compute capability 8.9"),
        ("orin-nx-16gb-r36", "Qwen/Qwen3-8B", "does not fit"),
        ("x86-server", "nvidia/Llama-3.1-8B-Instruct-FP4", "not a recognised Jetson"),
    ],
)
def test_refusals_carry_reasons(unit_facts, fixture, model, reason):
    plan = plan_for(unit_facts(fixture), model)
    assert plan["refused"] and plan["serving"] is None and plan["baseline_serving"] is None
    assert any(reason in line for line in plan["reasons"]), plan["reasons"]


def test_jetpack5_has_no_image(unit_facts):
    facts = {**unit_facts("agx-orin-64gb-r36"), "l4t": "35.6.0", "jetpack": "5.1.4", "cuda": "11.4"}
    plan = plan_for(facts, "meta-llama/Llama-3.1-8B-Instruct")
    assert plan["refused"] and "no vLLM image for agx_orin on L4T 35.6.0" in plan["reasons"][0]


def test_memory_too_tight_for_any_speculator_serves_baseline(unit_facts):
    plan = plan_for(unit_facts("orin-nano-8gb-r36"), "meta-llama/Llama-3.2-1B-Instruct",
                    specfleet_spec_methods=["eagle3", "draft_model"])
    assert plan["speculative"] is None
    # The serving slot holds the baseline: same flags, no speculation, the same command line.
    assert plan["serving"] == {**plan["baseline_serving"], "kind": "speculative"}
    assert serving.argv(plan["serving"]) == serving.argv(plan["baseline_serving"])
    assert serving.speculation(plan["serving"]) == {"method": None, "num_speculative_tokens": None}
    assert "no speculative method fits" in plan["reasons"][-1]


def test_token_counts_come_from_policy(unit_facts):
    plan = plan_for(unit_facts("thor-r38"), "nvidia/Llama-3.1-8B-Instruct-FP4",
                    specfleet_spec_tokens={"thor": 7})
    assert plan["speculative"]["num_speculative_tokens"] == 7


def test_token_counts_by_method_apply_to_a_vllm_plan(unit_facts):
    plan = plan_for(unit_facts("thor-r38"), "nvidia/Llama-3.1-8B-Instruct-FP4",
                    specfleet_spec_tokens_by_method={"thor": {"eagle3": 2}})
    assert plan["speculative"]["method"] == "eagle3", plan["reasons"]
    assert plan["speculative"]["num_speculative_tokens"] == 2
    argv = serving.argv(plan["serving"])
    assert json.loads(argv[argv.index("--speculative-config") + 1])["num_speculative_tokens"] == 2
    # Only the named method: n-gram on the same class keeps the class's count.
    ngram = plan_for(unit_facts("thor-r38"), "nvidia/Llama-3.1-8B-Instruct-FP4", specfleet_spec_methods=["ngram"],
                     specfleet_spec_tokens_by_method={"thor": {"eagle3": 2}})
    assert ngram["speculative"]["num_speculative_tokens"] == 5


def test_ngram_config_has_lookup_window(unit_facts):
    plan = plan_for(unit_facts("thor-r38"), "nvidia/Llama-3.1-8B-Instruct-FP4",
                    specfleet_spec_methods=["ngram"])
    assert plan["speculative"] == {"method": "ngram", "num_speculative_tokens": 5,
                                   "prompt_lookup_min": 2, "prompt_lookup_max": 4}


@pytest.mark.parametrize(
    ("ref", "mirror", "expected"),
    [
        ("vllm/vllm-openai:v0.20.2", None, "vllm/vllm-openai:v0.20.2"),
        ("vllm/vllm-openai:v0.20.2", "10.0.0.1:5000", "10.0.0.1:5000/vllm/vllm-openai:v0.20.2"),
        ("ghcr.io/nvidia-ai-iot/vllm:latest-jetson-orin", "registry.lan",
         "registry.lan/nvidia-ai-iot/vllm:latest-jetson-orin"),
        ("nvcr.io/nvidia/vllm:26.05-py3", "registry.lan:5000", "registry.lan:5000/nvidia/vllm:26.05-py3"),
        ("localhost/specfleet/engine:1", "m:5000", "m:5000/specfleet/engine:1"),
    ],
)
def test_mirror_rewrites_the_registry(ref, mirror, expected):
    assert mirrored(ref, mirror) == expected


def test_mirror_reaches_the_plan(unit_facts):
    plan = plan_for(unit_facts("agx-orin-64gb-r36"), "meta-llama/Llama-3.1-8B-Instruct",
                    specfleet_image_mirror="registry.lan:5000")
    assert plan["image"] == "registry.lan:5000/nvidia-ai-iot/vllm:0.14.0-r36.4-tegra-aarch64-cu126-22.04"


# Image-matrix invariants, over every class and every L4T release the facts table knows.
L4T_BY_CLASS = {
    "thor": ["38.1.0", "38.2.0", "38.4.0", "39.2.0"],
    "agx_orin": ["35.6.0", "36.3.0", "36.4.3", "36.4.7", "36.5.0", "39.2.0"],
    "orin_nx": ["36.4.3", "39.2.0"],
    "orin_nano": ["36.4.7", "39.2.0"],
}
CUDA = {"35": "11.4", "36": "12.6", "38": "13.0", "39": "13.2"}


@pytest.mark.parametrize(
    ("device_class", "l4t"), [(c, v) for c, versions in L4T_BY_CLASS.items() for v in versions]
)
def test_image_matrix_invariants(device_class, l4t):
    image = select_image(CATALOG, device_class, l4t, CUDA[l4t.split(".")[0]])
    if image is None:
        assert l4t.startswith("35.") or l4t == "36.3.0"
        return
    assert device_class in image.classes
    if device_class == "thor":
        assert "orin" not in image.ref, "never an Orin image on Thor"
    if l4t.startswith("36."):
        assert not image.cuda.startswith("13"), "never a CUDA 13 image on JetPack 6"
    if l4t.startswith(("38.", "39.")):
        # Upstream vLLM with the per-batch-size table (0.24.0 on).
        assert image.vllm_version and version_key(image.vllm_version) >= batch_table.SUPPORTED_SINCE


def test_catalog_has_the_seed_models_and_sources():
    for repo in ("meta-llama/Llama-3.1-8B-Instruct", "nvidia/Llama-3.1-8B-Instruct-FP8",
                 "nvidia/Llama-3.1-8B-Instruct-FP4", "openai/gpt-oss-20b", "openai/gpt-oss-120b",
                 "Qwen/Qwen3-8B"):
        model = CATALOG.model(repo)
        assert model is not None and model.weights_gib > 0 and model.source
    assert CATALOG.model("nvidia/Llama-3.1-8B-Instruct-FP4").eagle3 == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    # NVIDIA's v3 head supersedes its short-context, long-context and throughput heads.
    assert CATALOG.model("openai/gpt-oss-120b").eagle3 == "nvidia/gpt-oss-120b-Eagle3-v3"
    assert CATALOG.artifact_gib("nvidia/gpt-oss-120b-Eagle3-long-context") is None
    assert CATALOG.model("openai/gpt-oss-120b").needs_tiktoken
    for model in CATALOG.models:
        for draft in model.draft_models:
            assert CATALOG.model(draft).vocab_size == model.vocab_size, "draft shares the tokenizer"


def test_expectation_mismatch():
    assert expectation_mismatches({"device_class": "agx_orin", "l4t": "36.4.3"},
                                  {"device_class": "thor", "l4t": "36.4.3"}) == [
        "device_class is 'agx_orin', the inventory expects 'thor'"]
    assert expectation_mismatches({"device_class": "thor"}, None) == []


LAB_CPU_POLICY = {
    "specfleet_image": "lab-vllm-cpu-0.32",
    "specfleet_max_model_len": {"orin_nx": 1024},
    "specfleet_serve_extra_args": ["--dtype", "float32", "--enforce-eager"],
}


@pytest.mark.parametrize(
    ("methods", "expected"),
    [
        (["draft_model"], {"method": "draft_model", "model": "specfleet/tiny-llama-draft-copy"}),
        (["ngram"], {"method": "ngram"}),
    ],
)
def test_pinned_lab_image_serves_the_tiny_model(unit_facts, methods, expected):
    plan = plan_for(unit_facts("orin-nx-16gb-r36"), "specfleet/tiny-llama", specfleet_spec_methods=methods,
                    **LAB_CPU_POLICY)
    assert not plan["refused"], plan["reasons"]
    assert plan["image"] == "specfleet-lab/vllm-cpu:0.32.0"
    assert expected.items() <= plan["speculative"].items()
    # The extra args close both commands, after everything the plan sets.
    for spec in (plan["serving"], plan["baseline_serving"]):
        assert spec["extra_flags"] == [["--dtype", "float32"], ["--enforce-eager", None]]
        assert serving.argv(spec)[-3:] == ["--dtype", "float32", "--enforce-eager"]
        assert dict(serving.engine_flags(spec))["--max-model-len"] == "1024"


def test_pin_only_image_is_never_matched(unit_facts):
    for fixture in ("thor-r38", "agx-orin-64gb-r36", "agx-orin-64gb-r39", "orin-nx-16gb-r36"):
        facts = unit_facts(fixture)
        image = select_image(CATALOG, facts["device_class"], facts["l4t"], facts.get("cuda"))
        assert image is not None and not image.pin_only


def test_pinned_image_that_does_not_fit_is_refused(unit_facts):
    # The JetPack 6 image pinned on Thor: the pin names it, the class check still applies.
    plan = plan_for(unit_facts("thor-r38"), "nvidia/Llama-3.1-8B-Instruct-FP4",
                    specfleet_image="nvidia-ai-iot-vllm-0.14-orin")
    assert plan["refused"]
    assert any("pinned image 'nvidia-ai-iot-vllm-0.14-orin' (specfleet_image) does not run on thor" in r
               for r in plan["reasons"]), plan["reasons"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"specfleet_image": "no-such-image"}, "specfleet_image: must be an image name from images.yml"),
        ({"specfleet_image": ["lab-vllm-cpu-0.32"]}, "specfleet_image: must be an image name"),
        ({"specfleet_serve_extra_args": "--enforce-eager"}, "specfleet_serve_extra_args: must be a list"),
        ({"specfleet_serve_extra_args": ["--enforce-eager", 3]}, "specfleet_serve_extra_args: must be a list"),
        ({"specfleet_serve_extra_args": ["--port", "9000"]}, "specfleet_serve_extra_args: --port is set by the plan"),
        ({"specfleet_serve_extra_args": ["--speculative-config={}"]},
         "specfleet_serve_extra_args: --speculative-config is set by the plan"),
    ],
)
def test_pin_and_extra_args_are_validated(overrides, message):
    problems = policy_module.validate(policy_module.merge(overrides), CATALOG)
    assert any(problem.startswith(message) for problem in problems), problems


def test_gated_repos_come_from_the_catalog():
    from specfleet.catalog import load_catalog

    repos = ["meta-llama/Llama-3.1-8B-Instruct", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
             "nvidia/Llama-3.1-8B-Instruct-FP4", "meta-llama/Llama-3.2-1B-Instruct", "someone/not-in-catalog"]
    assert load_catalog().gated(repos) == ["meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"]


def test_repo_digest_picks_the_references_own_repository():
    from specfleet.plan import repo_digest

    digests = ["nvcr.io/nvidia/vllm@sha256:aaa", "registry.lan:5000/nvidia/vllm@sha256:bbb"]
    assert repo_digest("registry.lan:5000/nvidia/vllm:26.10-py3", digests) == "sha256:bbb"
    assert repo_digest("nvcr.io/nvidia/vllm:26.10-py3", digests) == "sha256:aaa"
    assert repo_digest("localhost:5000/x:1", digests) == ""
    assert repo_digest("nvcr.io/nvidia/vllm:26.10-py3", []) == ""


def test_the_oom_retry_variant_lowers_memory_and_takes_a_smaller_draft(unit_facts):
    from specfleet import serving as serving_module
    orin = plan_for(unit_facts("agx-orin-64gb-r36"), "meta-llama/Llama-3.1-8B-Instruct")
    retry = orin["oom_retry"]
    assert retry["change"] == "--gpu-memory-utilization 0.70 (was 0.80)"
    argv = serving_module.argv(retry["serving"])
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.70"
    assert serving_module.speculation(retry["serving"]) == serving_module.speculation(orin["serving"])
    off = plan_for(unit_facts("agx-orin-64gb-r36"), "meta-llama/Llama-3.1-8B-Instruct",
                   specfleet_oom_retry_memory_drop=0)
    assert off["oom_retry"] is None


def test_no_oom_retry_where_the_lighter_variant_cannot_hold_the_model(unit_facts):
    nx = plan_for(unit_facts("orin-nx-16gb-r36"), "nvidia/Llama-3.1-8B-Instruct-FP4",
                  specfleet_oom_retry_memory_drop=0.6)
    assert nx["oom_retry"] is None
    assert any(note.startswith("no retry on out of memory at start: --gpu-memory-utilization") for note in nx["notes"])


def test_the_oom_retry_takes_the_smallest_smaller_draft_model(unit_facts):
    import dataclasses

    from specfleet import policy as policy_module
    from specfleet import serving as serving_module
    from specfleet.catalog import Catalog, load_catalog
    from specfleet.plan import plan_unit

    shipped = load_catalog()
    small = shipped.model("Qwen/Qwen3-0.6B")
    middle = dataclasses.replace(small, name="qwen3-1.7b", repo="Qwen/Qwen3-1.7B", weights_gib=3.4)
    target = dataclasses.replace(shipped.model("Qwen/Qwen3-8B"), draft_models=("Qwen/Qwen3-1.7B", "Qwen/Qwen3-0.6B"))
    models = tuple(target if m.repo == target.repo else m for m in shipped.models) + (middle,)
    catalog = Catalog(models=models, heads=shipped.heads, images=shipped.images)
    policy = policy_module.resolve({"specfleet_model": target.repo, "specfleet_spec_methods": ["draft_model"]}, shipped)
    plan = plan_unit("unit-1", unit_facts("agx-orin-64gb-r36"), target, policy, catalog)
    assert plan["speculative"]["model"] == "Qwen/Qwen3-1.7B"
    retry = plan["oom_retry"]
    assert retry["serving"]["speculative_config"]["model"] == "Qwen/Qwen3-0.6B"
    assert retry["change"] == ("--gpu-memory-utilization 0.70 (was 0.80) and the smaller draft Qwen/Qwen3-0.6B "
                               "(was Qwen/Qwen3-1.7B)")
    assert serving_module.speculation(retry["serving"])["method"] == "draft_model"


@pytest.mark.parametrize(
    ("fixture", "model", "shares"),
    [
        # Each side's share of the candidate's 0.80, in proportion to what it needs.
        ("thor-r38", "nvidia/Llama-3.1-8B-Instruct-FP4", (0.37, 0.43)),
        ("agx-orin-64gb-r36", "meta-llama/Llama-3.1-8B-Instruct", (0.39, 0.41)),
        # The largest model, Orin NX and Nano: a share falls short, each block restarts.
        ("thor-r38", "openai/gpt-oss-120b", None),
        ("orin-nx-16gb-r36", "nvidia/Llama-3.1-8B-Instruct-FP4", None),
        ("orin-nano-8gb-r36", "meta-llama/Llama-3.2-1B-Instruct", None),
    ],
)
def test_the_candidate_is_measured_beside_the_baseline_where_the_unit_holds_both(unit_facts, fixture, model, shares):
    plan = plan_for(unit_facts(fixture), model)
    found = plan["side_by_side"]
    if shares is None:
        assert found is None
        assert any(note.startswith("measured with a restart per block: beside the other serving, the baseline "
                                   "serving's share") for note in plan["notes"]), plan["notes"]
        return
    assert found == {"port": 8001, "baseline": shares[0], "speculative": shares[1]}
    assert shares[0] + shares[1] == pytest.approx(plan["gpu_memory_utilization"])
    memory = plan["memory"]
    needs = (memory["target_gib"] + memory["min_kv_gib"],
             memory["target_gib"] + memory["speculator_gib"] + memory["min_kv_gib"])
    for share, need in zip(shares, needs, strict=True):
        assert share * memory["unit_gib"] >= need


def test_no_side_by_side_without_a_trial_port(unit_facts):
    plan = plan_for(unit_facts("thor-r38"), "nvidia/Llama-3.1-8B-Instruct-FP4", specfleet_trial_port=None)
    assert plan["side_by_side"] is None and not any("restart per block" in note for note in plan["notes"])


def test_two_servings_keep_the_headroom_each_outside_their_shares(unit_facts):
    # Thor keeps 0.20 x 122.82 = 24.56 GiB outside the candidate's 0.80: two 12 GiB headrooms fit, two 13 do not.
    assert plan_for(unit_facts("thor-r38"), "nvidia/Llama-3.1-8B-Instruct-FP4",
                    specfleet_memory_headroom_gib=12)["side_by_side"] is not None
    plan = plan_for(unit_facts("thor-r38"), "nvidia/Llama-3.1-8B-Instruct-FP4", specfleet_memory_headroom_gib=13)
    assert plan["side_by_side"] is None
    assert "two servings need 26.00 GiB outside their shares, the unit leaves 24.56 GiB" in " ".join(plan["notes"])


def test_the_plan_says_where_the_output_check_may_not_see_speculation():
    from specfleet.plan import logprob_drafting_note

    assert logprob_drafting_note("0.12.0").startswith("outputs not checked with speculation on: vLLM 0.12.0")
    assert logprob_drafting_note(None).startswith("outputs may not be checked with speculation on")
    assert logprob_drafting_note("0.14.0") is None and logprob_drafting_note("0.26.0") is None
