"""TensorRT-LLM serving for a DGX Spark: the `trtllm-serve` serving and its extra LLM API options.

Pure functions; specfleet.plan decides *whether* and *which method*, this module says how
TensorRT-LLM is told. Figures come from seed 004 (NVIDIA's DGX Spark speculative decoding
playbook, build.nvidia.com/spark/speculative-decoding, image
nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6) and the option keys from TensorRT-LLM's docs
(NVIDIA/TensorRT-LLM `docs/source/features/speculative-decoding.md`,
`docs/source/commands/trtllm-serve/trtllm-serve.rst`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specfleet import serving as serving_spec
from specfleet.batch_table import SPECULATE_UP_TO
from specfleet.catalog import release_key, version_key

# Seed 004 downloads the EAGLE-3 head / draft model with `hf download REPO --local-dir DIR`
# and points speculative_model_dir at DIR: TensorRT-LLM reads it as a checkpoint directory,
# not a repo id. A unit has it in its HF cache already, so the hf_cache role gives each such
# repo a plain path, checkpoints/REPO, linked to the live snapshot (specfleet.cache
# checkpoint_link). This root is that folder as the serving container sees the cache: the
# HF_HOME both vLLM and the NGC image use, where seed 004 mounts it (the role's
# specfleet_hf_cache_container_dir).
CHECKPOINT_ROOT = "/root/.cache/huggingface/checkpoints"

# specfleet method -> TensorRT-LLM speculative_config.decoding_type (TensorRT-LLM
# docs/source/features/speculative-decoding.md: MTP, Eagle3, NGram, DraftTarget, ...).
# EAGLE-3's name can differ per image (see images.yml `trtllm_eagle3_decoding_type`): "Eagle"
# is the older spelling, still an alias.
DECODING_TYPES = {"eagle3": "Eagle3", "draft_model": "DraftTarget", "ngram": "NGram", "mtp": "MTP"}

# The overlap scheduler must be off for the two-model methods: TensorRT-LLM's DraftTarget
# and NGram examples pass disable_overlap_scheduler=True (features/speculative-decoding.md) and seed 004's
# Draft Target YAML sets it true; its EAGLE-3 YAML keeps it on (false).
OVERLAP_OFF = ("draft_model", "ngram")

# Further keys seed 004 writes for each method, kept so a plan serves what the seed measured.
# enable_block_reuse: false is in both of its YAMLs, so it is in every variant (baseline too)
# and the comparison differs only by speculation.
SEED_KEYS: dict[str, dict[str, Any]] = {
    "eagle3": {"enable_attention_dp": False, "enable_autotuner": False},
    "draft_model": {"print_iter_log": False},
}
# Seed 004's Draft Target YAML sets no cuda_graph_config; its EAGLE-3 YAML does.
NO_CUDA_GRAPH_CONFIG = ("draft_model",)


# TensorRT-LLM's drafter skips a step whose batch holds more requests than the speculative
# config's max_concurrency: speculation where it pays, none under load, as vLLM's per-batch-size
# table does (tensorrt_llm/_torch/speculative/drafter.py `should_use_spec_decode`;
# DecodingBaseConfig.max_concurrency). The oldest release whose published LLM API reference
# shows the field, as checked: 1.3.0rc27 (nvidia.github.io/TensorRT-LLM/1.3.0rc27, the
# Eagle3DecodingConfig page; newer ones also take draft_len_schedule). An older image may have
# it too, unconfirmed: it keeps a batch of one (NVIDIA's DGX Spark playbook).
MAX_CONCURRENCY_SINCE = "1.3.0rc27"
# Only a separate drafter asks should_use_spec_decode: DraftTarget and NGram here. EAGLE-3 runs
# one-model by default (eagle3_one_model) and MTP in the target's own step, where the field is
# not known to switch anything off; those keep a batch of one. Speculation stays on up to
# batch_table.SPECULATE_UP_TO, the edge of a vLLM unit's per-batch-size table.
SEPARATE_DRAFTER_METHODS = ("draft_model", "ngram")


def stops_under_load(trtllm_version: str | None) -> bool:
    """Whether an image's TensorRT-LLM is known to take max_concurrency (unknown: not)."""
    if not trtllm_version or not version_key(trtllm_version):
        return False
    return release_key(trtllm_version) >= release_key(MAX_CONCURRENCY_SINCE)


def batching(policy: Mapping, trtllm_version: str | None, method: str | None) -> tuple[int, int | None, str]:
    """(max_batch_size, max_concurrency, why) of a Spark serving of ``method`` (None: no
    speculation). Where the image's TensorRT-LLM turns a separate drafter off above a
    concurrency, the server batches like a Jetson's vLLM (specfleet_max_num_seqs) and
    speculates up to SPECULATE_UP_TO; elsewhere it serves one request at a time, as NVIDIA's
    playbook does, since it would draft for every request under load.
    specfleet_trtllm_max_batch_size, when set, is the batch size either way."""
    asked = policy["specfleet_trtllm_max_batch_size"]
    version = trtllm_version or "(version unknown)"
    if method is not None and method in SEPARATE_DRAFTER_METHODS and stops_under_load(trtllm_version):
        batch = asked or int(policy["specfleet_max_num_seqs"])
        if batch > SPECULATE_UP_TO:
            return batch, SPECULATE_UP_TO, (
                f"trtllm max_batch_size {batch}, speculating for at most {SPECULATE_UP_TO} request(s) a step "
                f"(speculative_config.max_concurrency, TensorRT-LLM {version}): off under load")
        return batch, None, f"trtllm max_batch_size {batch} (specfleet_trtllm_max_batch_size)"
    if asked:
        return asked, None, f"trtllm max_batch_size {asked} (specfleet_trtllm_max_batch_size)"
    if method is None:
        why = "no speculation to switch off"
    elif method not in SEPARATE_DRAFTER_METHODS:
        why = (f"{method} drafts in the target's own step, which max_concurrency is not known to switch off "
               "(only a separate drafter, draft_model or ngram, asks it)")
    else:
        why = f"TensorRT-LLM {version} is not known to take max_concurrency (from {MAX_CONCURRENCY_SINCE})"
    return 1, None, ("trtllm max_batch_size 1 (as in NVIDIA's DGX Spark speculative decoding playbook): "
                     f"concurrent requests queue in the server; {why}; set specfleet_trtllm_max_batch_size "
                     "to measure batching")


def speculator_dir(repo: str) -> str:
    return f"{CHECKPOINT_ROOT}/{repo}"


def speculative_config(
    method: str, artifact: str | None, tokens: int, policy: Mapping, eagle3_name: str = "Eagle3",
    max_concurrency: int | None = None,
) -> dict[str, Any]:
    """speculative_config for one method; ``tokens`` is max_draft_len, ``max_concurrency`` the
    most requests a step speculates for (None: every step, the engine's default)."""
    decoding_type = eagle3_name if method == "eagle3" else DECODING_TYPES[method]
    config: dict[str, Any] = {"decoding_type": decoding_type, "max_draft_len": tokens}
    if max_concurrency is not None:
        config["max_concurrency"] = max_concurrency
    if artifact:
        # speculative_model_dir: seed 004's key; newer docs call it speculative_model and keep
        # speculative_model_dir as an alias, so both image generations read it.
        config["speculative_model_dir"] = speculator_dir(artifact)
    if method == "ngram":
        # The longest n-gram matched in the prompt: the vLLM plan's prompt_lookup_max.
        config["max_matching_ngram_size"] = policy["specfleet_ngram_prompt_lookup_max"]
    if method == "mtp":
        # "num_nextn_predict_layers must match max_draft_len" (TensorRT-LLM features/speculative-decoding.md).
        config["num_nextn_predict_layers"] = tokens
    return config


def extra_llm_api_options(method: str | None, spec_config: dict | None, fraction: float, max_batch: int) -> dict:
    """The options YAML as a dict for a method; ``method`` None serves without speculation."""
    options: dict[str, Any] = dict(SEED_KEYS.get(method or "", {}))
    options["disable_overlap_scheduler"] = method in OVERLAP_OFF
    if method not in NO_CUDA_GRAPH_CONFIG:
        options["cuda_graph_config"] = {"max_batch_size": max_batch}
    if spec_config:
        options["speculative_config"] = dict(spec_config)
    options["kv_cache_config"] = {"free_gpu_memory_fraction": fraction, "enable_block_reuse": False}
    return options


def baseline_options(speculative_options: Mapping) -> dict:
    """The speculative YAML without speculation: every other key stays, so the comparison
    differs only by it, except the overlap scheduler, which only the two-model methods need
    off; the baseline keeps it on, as it would serve without speculation."""
    options = {key: value for key, value in speculative_options.items() if key != "speculative_config"}
    options["disable_overlap_scheduler"] = False
    return options


def serving(
    kind: str, image_ref: str, model_repo: str, policy: Mapping, device_class: str, options: Mapping[str, Any],
    max_batch: int,
) -> dict[str, Any]:
    """A `trtllm-serve` serving as seed 004 runs it (pytorch backend, tp 1, its max batch
    size), on the policy's port so the benchmark reaches it like a vLLM unit, with the class's
    context cap. The KV fraction lives in the options file only: one place, nothing for a CLI
    flag to override."""
    return serving_spec.make(
        kind,
        engine="trtllm",
        image=image_ref,
        model=model_repo,
        port=policy["specfleet_port"],
        flags=[
            ["--backend", "pytorch"],
            ["--tp_size", "1"],
            ["--max_batch_size", str(max_batch)],
            ["--max_seq_len", str(policy["specfleet_max_model_len"][device_class])],
        ],
        engine_options=options,
    )


def memory_problem(
    what: str, weights_gib: float, fraction: float, unit_gib: float, min_kv_gib: float, headroom_gib: float
) -> str | None:
    """Why TensorRT-LLM cannot hold ``weights_gib`` on ``unit_gib``, or None.

    TensorRT-LLM loads the weights (target and draft) first, then gives the KV cache
    ``fraction`` of the memory still free; the rest is what the OS, Docker and the client
    keep on a unified-memory unit. Both parts must be large enough.
    """
    free = unit_gib - weights_gib
    if free <= 0:
        return f"{what} needs {weights_gib:.2f} GiB of weights, the unit has {unit_gib:.2f} GiB"
    kv = fraction * free
    if kv < min_kv_gib:
        return (
            f"{what} leaves {kv:.2f} GiB of KV cache ({fraction:.2f} x {free:.2f} GiB free after the weights), "
            f"below the {min_kv_gib:.2f} GiB minimum"
        )
    if free - kv < headroom_gib:
        return (
            f"{what} leaves {free - kv:.2f} GiB outside TensorRT-LLM (1 - {fraction:.2f} of {free:.2f} GiB free), "
            f"below the {headroom_gib:.2f} GiB headroom"
        )
    return None


def kv_cache_gib(weights_gib: float, fraction: float, unit_gib: float) -> float:
    return round(fraction * max(unit_gib - weights_gib, 0.0), 2)
