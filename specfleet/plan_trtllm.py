"""TensorRT-LLM serving for a DGX Spark: `trtllm-serve` argv and its extra LLM API options.

Pure functions; specfleet.plan decides *whether* and *which method*, this module says how
TensorRT-LLM is told. Figures come from seed 004 (NVIDIA's DGX Spark speculative decoding
playbook, image nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6) and the option keys from
reference/serving-facts.md §5 (NVIDIA/TensorRT-LLM docs `features/speculative-decoding.md`,
`commands/trtllm-serve`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

# Where the unit's launch puts the options files inside the container. Two files, so the
# baseline and the speculative argv each name their own and a rollback to the baseline never
# depends on which variant was written last.
OPTIONS_FLAG = "--extra_llm_api_options"
OPTIONS_DIR = "/etc/specfleet/trtllm"
OPTIONS_PATHS = {"speculative": f"{OPTIONS_DIR}/speculative.yml", "baseline": f"{OPTIONS_DIR}/baseline.yml"}
# Seed 004 downloads the EAGLE-3 head / draft model with `hf download REPO --local-dir DIR`
# and points speculative_model_dir at DIR: TensorRT-LLM reads it as a checkpoint directory,
# not a repo id. A unit has it in its HF cache already, so the hf_cache role gives each such
# repo a plain path, checkpoints/REPO, linked to the live snapshot (specfleet.cache
# checkpoint_link). This root is that folder as the serving container sees the cache: the
# HF_HOME both vLLM and the NGC image use, where seed 004 mounts it (the role's
# specfleet_hf_cache_container_dir).
CHECKPOINT_ROOT = "/root/.cache/huggingface/checkpoints"

# specfleet method -> TensorRT-LLM speculative_config.decoding_type (serving-facts §5:
# MTP, Eagle3, NGram, DraftTarget, ...). EAGLE-3's name can differ per image (see
# images.yml `trtllm_eagle3_decoding_type`): "Eagle" is the older spelling, still an alias.
DECODING_TYPES = {"eagle3": "Eagle3", "draft_model": "DraftTarget", "ngram": "NGram", "mtp": "MTP"}

# decoding_type -> specfleet method, for reading a serving back ("Eagle" is EAGLE-3's alias).
METHODS = {**{name: method for method, name in DECODING_TYPES.items()}, "Eagle": "eagle3"}

# The overlap scheduler must be off for the two-model methods: TensorRT-LLM's DraftTarget
# and NGram examples pass disable_overlap_scheduler=True (serving-facts §5) and seed 004's
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


def options_yaml(options: Mapping[str, Any]) -> str:
    """The options file's text, keys in the plan's order (the order seed 004 writes them)."""
    return yaml.safe_dump(dict(options), sort_keys=False, default_flow_style=False)


def options_path_in(args: Sequence[str]) -> str | None:
    """The options file a trtllm-serve argv names (None when it names none)."""
    args = list(args)
    if OPTIONS_FLAG not in args:
        return None
    index = args.index(OPTIONS_FLAG) + 1
    return args[index] if index < len(args) else None


def speculation_in_files(args: Sequence[str], files: Mapping[str, str]) -> dict[str, Any] | None:
    """Method and draft length of a trtllm-serve serving, from the options file its argv
    names (None when it does not speculate or the file is not there)."""
    path = options_path_in(args)
    text = files.get(path) if path else None
    try:
        options = yaml.safe_load(text) if text else None
    except yaml.YAMLError:
        return {"method": "unparsed"}
    spec = options.get("speculative_config") if isinstance(options, dict) else None
    if not isinstance(spec, dict):
        return None
    return {"method": METHODS.get(spec.get("decoding_type"), spec.get("decoding_type")),
            "num_speculative_tokens": spec.get("max_draft_len")}


def speculator_dir(repo: str) -> str:
    return f"{CHECKPOINT_ROOT}/{repo}"


def speculative_config(
    method: str, artifact: str | None, tokens: int, policy: Mapping, eagle3_name: str = "Eagle3"
) -> dict[str, Any]:
    """speculative_config for one method; ``tokens`` is max_draft_len."""
    decoding_type = eagle3_name if method == "eagle3" else DECODING_TYPES[method]
    config: dict[str, Any] = {"decoding_type": decoding_type, "max_draft_len": tokens}
    if artifact:
        # speculative_model_dir: seed 004's key; newer docs call it speculative_model and keep
        # speculative_model_dir as an alias, so both image generations read it.
        config["speculative_model_dir"] = speculator_dir(artifact)
    if method == "ngram":
        # The longest n-gram matched in the prompt: the vLLM plan's prompt_lookup_max.
        config["max_matching_ngram_size"] = policy["specfleet_ngram_prompt_lookup_max"]
    if method == "mtp":
        # "num_nextn_predict_layers must match max_draft_len" (serving-facts §5).
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


def serve_args(model_repo: str, policy: Mapping, device_class: str, options_path: str) -> list[str]:
    """`trtllm-serve` argv as seed 004 runs it (pytorch backend, tp 1, its max batch size),
    plus host/port so the benchmark reaches it like a vLLM unit and the class's context cap.
    The KV fraction lives in the YAML only: one place, nothing for a CLI flag to override."""
    return [
        "trtllm-serve", model_repo,
        "--host", "0.0.0.0",
        "--port", str(policy["specfleet_port"]),
        "--backend", "pytorch",
        "--tp_size", "1",
        "--max_batch_size", str(policy["specfleet_trtllm_max_batch_size"]),
        "--max_seq_len", str(policy["specfleet_max_model_len"][device_class]),
        OPTIONS_FLAG, options_path,
    ]


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
