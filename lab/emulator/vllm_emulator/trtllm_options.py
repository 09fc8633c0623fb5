"""`trtllm-serve`'s LLM arguments: CLI + extra options YAML, validated like TorchLlmArgs.

What the real server does with them (tensorrt_llm/commands/serve.py, llmapi/llm_args.py):
the CLI builds the LLM arguments with a `KvCacheConfig(free_gpu_memory_fraction=...)`; the
YAML is merged over them (`llm_args | yaml`: the YAML wins, `kv_cache_config` is deep-merged
and re-validated as `KvCacheConfig(**...)` on the spot); then `TorchLlmArgs(**llm_args)`
validates the rest. Both are pydantic models with extra keys forbidden, so a bad key or value
ends the process with a `pydantic_core._pydantic_core.ValidationError` naming the model and
the location, e.g. `speculative_config.Eagle3.max_draft_lenn` (the speculative config is a
union discriminated by `decoding_type`; its member validators raise "Value error, ...").

Everything here is a pure function of (CLI, YAML value): `resolve_llm_args` returns the
effective arguments or raises `LlmArgsError` carrying the exception text to print.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import DEFAULT_EMULATED_TRTLLM_VERSION
from .trtllm_cli import ServeArgs

PYDANTIC_DOCS = "https://errors.pydantic.dev/2.12/v"
DEFAULT_FREE_GPU_MEMORY_FRACTION = 0.9

# decoding_type -> the emulator's method (the names its performance model knows).
# "Eagle" is kept as a backward-compatible alias of "Eagle3" on the PyTorch backend.
EMULATED_DECODING_TYPES = {
    "Eagle3": "eagle3",
    "Eagle": "eagle3",
    "DraftTarget": "draft_model",
    "NGram": "ngram",
    "MTP": "mtp",
}
# Tags of TorchLlmArgs' SpeculativeConfig union that the emulator does not model.
TRT_BACKEND_ONLY = ("Lookahead", "Medusa")
NOT_EMULATED = ("PARD", "AUTO", "SaveState", "User_Provided")
DECODING_TYPES = tuple("DraftTarget Eagle Eagle3 Lookahead Medusa MTP NGram User_Provided SaveState PARD AUTO".split())

# Field names of the pydantic models (llm_args.py). Only those the emulator uses are
# type-checked; the others are accepted as the real models accept them.
_DECODING_BASE_FIELDS = tuple(
    """decoding_type max_draft_len max_total_draft_tokens speculative_model speculative_model_dir
    max_concurrency draft_len_schedule load_format acceptance_window acceptance_length_threshold
    allow_advanced_sampling""".split()
)
# The drafter's switches by batch size, in the LLM API reference from 1.3.0rc27 (the oldest
# checked; specfleet/plan_trtllm.py MAX_CONCURRENCY_SINCE). An older emulated release refuses
# them as unknown keys: whether it has them is unconfirmed, and the emulator is never kinder.
LOAD_SWITCHES = ("max_concurrency", "draft_len_schedule")
LOAD_SWITCHES_SINCE = "1.3.0rc27"


def release_key(version: str) -> tuple[tuple[int, ...], float]:
    """``"1.3.0rc27"`` -> ((1, 3, 0), 27); a final release sorts after its candidates."""
    numbers = tuple(int(part) for part in re.findall(r"\d+", version.split("rc")[0])[:3])
    candidate = re.search(r"rc(\d+)", version)
    return numbers, (int(candidate.group(1)) if candidate else math.inf)


def decoding_base_fields(version: str) -> tuple[str, ...]:
    """DecodingBaseConfig's fields in the emulated TensorRT-LLM ``version``."""
    if release_key(version) >= release_key(LOAD_SWITCHES_SINCE):
        return _DECODING_BASE_FIELDS
    return tuple(name for name in _DECODING_BASE_FIELDS if name not in LOAD_SWITCHES)
_EAGLE_FIELDS = tuple(
    """eagle_choices greedy_sampling posterior_threshold use_dynamic_tree dynamic_tree_max_topK
    num_eagle_layers max_non_leaves_per_layer eagle3_one_model eagle3_layers_to_capture
    eagle3_model_arch""".split()
)
_MEMBER_FIELDS: dict[str, tuple[str, ...]] = {
    "Eagle3": _EAGLE_FIELDS,
    "Eagle": _EAGLE_FIELDS,
    "NGram": ("max_matching_ngram_size", "is_keep_all", "is_use_oldest", "is_public_pool"),
    "DraftTarget": (),
    "MTP": tuple(
        """num_nextn_predict_layers use_relaxed_acceptance_for_thinking relaxed_topk relaxed_delta
        use_mtp_vanilla mtp_eagle_one_model begin_thinking_phase_token end_thinking_phase_token""".split()
    ),
}
KV_CACHE_FIELDS = tuple(
    """enable_block_reuse max_tokens max_attention_window sink_token_length free_gpu_memory_fraction
    host_cache_size onboard_blocks cross_kv_cache_fraction secondary_offload_min_priority
    event_buffer_max_size attention_dp_events_gather_period_ms enable_partial_reuse
    copy_on_partial_reuse use_uvm max_gpu_total_bytes dtype mamba_ssm_cache_dtype tokens_per_block
    use_kv_cache_manager_v2 max_util_for_resume""".split()
)
CUDA_GRAPH_FIELDS = ("batch_sizes", "max_batch_size", "enable_padding")
# TorchLlmArgs (BaseLlmArgs + the PyTorch backend's fields), plus the keys serve.py itself
# sets or pops before constructing it (build_config, disagg_cluster).
TORCH_LLM_ARGS_FIELDS = tuple(
    """model tokenizer tokenizer_mode custom_tokenizer skip_tokenizer_init trust_remote_code
    tensor_parallel_size dtype revision tokenizer_revision model_kwargs pipeline_parallel_size
    context_parallel_size gpus_per_node moe_cluster_parallel_size moe_tensor_parallel_size
    moe_expert_parallel_size enable_attention_dp enable_lm_head_tp_in_adp pp_partition cp_config
    load_format enable_lora lora_config kv_cache_config enable_chunked_prefill guided_decoding_backend
    batched_logits_processor iter_stats_max_iterations request_stats_max_iterations peft_cache_config
    scheduler_config cache_transceiver_config sparse_attention_config speculative_config max_batch_size
    max_input_len max_seq_len max_beam_width max_num_tokens gather_generation_logits
    num_postprocess_workers postprocess_tokenizer_dir reasoning_parser decoding_config
    otlp_traces_endpoint backend return_perf_metrics perf_metrics_max_requests orchestrator_type
    env_overrides garbage_collection_gen0_threshold cuda_graph_config attention_dp_config
    disable_overlap_scheduler moe_config nvfp4_gemm_config attn_backend sampler_type
    sampler_force_async_worker enable_iter_perf_stats enable_iter_req_stats print_iter_log
    batch_wait_timeout_ms batch_wait_timeout_iters batch_wait_max_tokens_ratio torch_compile_config
    enable_autotuner enable_layerwise_nvtx_marker enable_min_latency stream_interval
    force_dynamic_quantization allreduce_strategy checkpoint_loader checkpoint_format
    kv_connector_config mm_encoder_only ray_worker_extension_cls ray_placement_config enable_sleep
    use_cute_dsl_blockscaling_mm use_cute_dsl_blockscaling_bmm disable_flashinfer_sampling
    max_stats_len layer_wise_benchmarks_config build_config disagg_cluster""".split()
)
# TorchLlmArgs.validate_speculative_config, when `decoding_type: Eagle` reaches the PyTorch backend.
EAGLE_ALIAS_WARNING = (
    "speculative_config.decoding_type 'Eagle' is not supported on the PyTorch backend; only 'Eagle3' is supported. "
    "'Eagle' is treated as 'Eagle3' for backward compatibility. EAGLE (v1/v2) draft checkpoints are incompatible "
    "with Eagle3—use an Eagle3 draft model."
)
_OPTIONAL_INT_FIELDS = ("max_batch_size", "max_num_tokens", "max_seq_len", "max_beam_width")
_INT_FIELDS = ("tensor_parallel_size", "pipeline_parallel_size", "max_stats_len")
_BOOL_FIELDS = (
    "trust_remote_code",
    "disable_overlap_scheduler",
    "enable_attention_dp",
    "enable_autotuner",
    "print_iter_log",
    "enable_iter_perf_stats",
    "enable_chunked_prefill",
)
_TORCH_DEFAULTS: dict[str, Any] = {
    "disable_overlap_scheduler": False,
    "enable_attention_dp": False,
    "enable_autotuner": True,
    "print_iter_log": False,
    "enable_iter_perf_stats": False,
    "enable_chunked_prefill": False,
    "max_stats_len": 1000,
}
_BOOL_STRINGS = {
    "0": False,
    "off": False,
    "f": False,
    "false": False,
    "n": False,
    "no": False,
    "1": True,
    "on": True,
    "t": True,
    "true": True,
    "y": True,
    "yes": True,
}


class LlmArgsError(Exception):
    """Ends `trtllm-serve` before the engine starts; ``text`` is the printed exception."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


@dataclass(frozen=True)
class FieldError:
    """One pydantic error line: location, message, error type, offending input."""

    loc: tuple[str, ...]
    message: str
    kind: str
    input_value: Any


def _input_repr(value: Any) -> str:
    text = repr(value)
    # pydantic-core shortens long inputs in the middle.
    return text if len(text) <= 50 else f"{text[:25]}...{text[-24:]}"


def validation_error_text(model: str, errors: list[FieldError]) -> str:
    """The text pydantic prints for a ValidationError (one block per error)."""
    noun = "error" if len(errors) == 1 else "errors"
    lines = [f"pydantic_core._pydantic_core.ValidationError: {len(errors)} validation {noun} for {model}"]
    for error in errors:
        if error.loc:
            lines.append(".".join(error.loc))
        lines.append(
            f"  {error.message} [type={error.kind}, input_value={_input_repr(error.input_value)}, "
            f"input_type={type(error.input_value).__name__}]"
        )
        lines.append(f"    For further information visit {PYDANTIC_DOCS}/{error.kind}")
    return "\n".join(lines)


# --- pydantic's lax-mode coercions (the subset the options use) ----------------------------


def coerce_int(
    value: Any, loc: tuple[str, ...], errors: list[FieldError], gt: int | None = None, ge: int | None = None
) -> int | None:
    """An int field: ints, bools, integral floats and numeric strings pass, as in pydantic."""
    number: int | None = None
    if isinstance(value, bool) or isinstance(value, int):
        number = int(value)
    elif isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            errors.append(
                FieldError(
                    loc, "Input should be a valid integer, got a number with a fractional part", "int_from_float", value
                )
            )
            return None
        number = int(value)
    elif isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            errors.append(
                FieldError(
                    loc, "Input should be a valid integer, unable to parse string as an integer", "int_parsing", value
                )
            )
            return None
    else:
        errors.append(FieldError(loc, "Input should be a valid integer", "int_type", value))
        return None
    return number if within_bounds(number, value, loc, errors, gt=gt, ge=ge) else None


def within_bounds(
    number: float,
    value: Any,
    loc: tuple[str, ...],
    errors: list[FieldError],
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
) -> bool:
    """pydantic's gt/ge/le constraints; the first one broken is the error."""
    checks = (
        (gt, lambda bound: number <= bound, "greater than", "greater_than"),
        (ge, lambda bound: number < bound, "greater than or equal to", "greater_than_equal"),
        (le, lambda bound: number > bound, "less than or equal to", "less_than_equal"),
    )
    for bound, broken, words, kind in checks:
        if bound is not None and broken(bound):
            shown = f"{bound:g}" if isinstance(bound, float) else str(bound)
            errors.append(FieldError(loc, f"Input should be {words} {shown}", kind, value))
            return False
    return True


def coerce_float(
    value: Any, loc: tuple[str, ...], errors: list[FieldError], ge: float | None = None, le: float | None = None
) -> float | None:
    number: float | None = None
    if isinstance(value, (bool, int, float)):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            errors.append(
                FieldError(
                    loc, "Input should be a valid number, unable to parse string as a number", "float_parsing", value
                )
            )
            return None
    else:
        errors.append(FieldError(loc, "Input should be a valid number", "float_type", value))
        return None
    return number if within_bounds(number, value, loc, errors, ge=ge, le=le) else None


def coerce_bool(value: Any, loc: tuple[str, ...], errors: list[FieldError]) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _BOOL_STRINGS:
        return _BOOL_STRINGS[value.strip().lower()]
    if isinstance(value, (int, float, str)):
        errors.append(
            FieldError(loc, "Input should be a valid boolean, unable to interpret input", "bool_parsing", value)
        )
    else:
        errors.append(FieldError(loc, "Input should be a valid boolean", "bool_type", value))
    return None


def _extra_keys(data: Mapping[Any, Any], known: tuple[str, ...], loc: tuple[str, ...]) -> list[FieldError]:
    return [
        FieldError(loc + (str(key),), "Extra inputs are not permitted", "extra_forbidden", value)
        for key, value in data.items()
        if key not in known
    ]


def _model_type(value: Any, loc: tuple[str, ...], model: str) -> FieldError:
    return FieldError(loc, f"Input should be a valid dictionary or instance of {model}", "model_type", value)


# --- the effective arguments --------------------------------------------------------------


@dataclass(frozen=True)
class SpeculativeOptions:
    """`speculative_config` after TorchLlmArgs: ``decoding_type`` as it resolves it."""

    decoding_type: str  # Eagle3 | DraftTarget | NGram | MTP
    requested_type: str  # as written ("Eagle" is the alias of "Eagle3")
    max_draft_len: int
    speculative_model: str | None
    max_matching_ngram_size: int | None = None
    num_nextn_predict_layers: int | None = None
    # The drafter skips a step with more requests than this (None: every step drafts).
    max_concurrency: int | None = None
    # Drafting inside the target's own step (one-model EAGLE-3, the default, and MTP): there is
    # no separate drafter to ask should_use_spec_decode, so max_concurrency switches nothing off.
    one_model: bool = False

    @property
    def method(self) -> str:
        return EMULATED_DECODING_TYPES[self.decoding_type]


@dataclass(frozen=True)
class LlmArgs:
    """The arguments the emulated engine runs with (CLI, then the YAML over it)."""

    model: str
    backend: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    trust_remote_code: bool
    max_batch_size: int
    max_num_tokens: int
    max_seq_len: int | None
    max_beam_width: int
    free_gpu_memory_fraction: float
    enable_block_reuse: bool
    kv_cache_dtype: str
    cuda_graph_max_batch_size: int | None  # None: cuda_graph_config is null, no CUDA graphs
    disable_overlap_scheduler: bool
    enable_attention_dp: bool
    enable_autotuner: bool
    print_iter_log: bool
    enable_iter_perf_stats: bool
    max_stats_len: int
    speculative: SpeculativeOptions | None
    # Lines TensorRT-LLM logs while building these arguments, (level, message).
    log_lines: tuple[tuple[str, str], ...] = ()


def validate_cli_kv_fraction(fraction: float) -> None:
    """serve.py builds `KvCacheConfig(free_gpu_memory_fraction=...)` from the CLI at once."""
    errors: list[FieldError] = []
    coerce_float(fraction, ("free_gpu_memory_fraction",), errors, ge=0, le=1)
    if errors:
        raise LlmArgsError(validation_error_text("KvCacheConfig", errors))


def _merge_kv_cache_config(cli_fraction: float, options: dict[Any, Any]) -> tuple[float, bool, str]:
    """`update_llm_args_with_extra_dict`: CLI kv config | YAML kv config -> KvCacheConfig(**merged)."""
    merged: dict[Any, Any] = {"free_gpu_memory_fraction": cli_fraction}
    if "kv_cache_config" in options:
        yaml_kv = options["kv_cache_config"]
        if not isinstance(yaml_kv, dict):
            raise LlmArgsError(f"TypeError: unsupported operand type(s) for |: 'dict' and '{type(yaml_kv).__name__}'")
        merged |= yaml_kv
    errors: list[FieldError] = []
    fraction: float | None = DEFAULT_FREE_GPU_MEMORY_FRACTION  # the field is Optional: null keeps the default
    if merged["free_gpu_memory_fraction"] is not None:
        fraction = coerce_float(merged["free_gpu_memory_fraction"], ("free_gpu_memory_fraction",), errors, ge=0, le=1)
    reuse = coerce_bool(merged.get("enable_block_reuse", True), ("enable_block_reuse",), errors)
    dtype = merged.get("dtype", "auto")
    errors += _extra_keys(merged, KV_CACHE_FIELDS, ())
    if errors:
        raise LlmArgsError(validation_error_text("KvCacheConfig", errors))
    assert fraction is not None and reuse is not None
    return fraction, reuse, str(dtype)


def _cuda_graph_max_batch_size(value: Any, errors: list[FieldError]) -> int | None:
    """cuda_graph_config: null disables CUDA graphs; a mapping sizes them (default 128)."""
    loc = ("cuda_graph_config",)
    if value is None:
        return None
    if not isinstance(value, dict):
        errors.append(_model_type(value, loc, "CudaGraphConfig"))
        return None
    found = len(errors)
    errors += _extra_keys(value, CUDA_GRAPH_FIELDS, loc)
    size = coerce_int(value.get("max_batch_size", 0), loc + ("max_batch_size",), errors, ge=0)
    if "enable_padding" in value:
        coerce_bool(value["enable_padding"], loc + ("enable_padding",), errors)
    batch_sizes = value.get("batch_sizes")
    if batch_sizes is not None:
        if not isinstance(batch_sizes, list):
            errors.append(FieldError(loc + ("batch_sizes",), "Input should be a valid list", "list_type", batch_sizes))
        else:
            sizes = [coerce_int(item, loc + ("batch_sizes", str(i)), errors) for i, item in enumerate(batch_sizes)]
            if size == 0 and sizes and all(s is not None for s in sizes):
                size = max(s for s in sizes if s is not None)
    if len(errors) > found:
        return None
    return size or 128


def _speculative(value: Any, errors: list[FieldError], version: str) -> SpeculativeOptions | None:
    """One member of the discriminated union, with its own validators (llm_args.py), in the
    emulated TensorRT-LLM ``version``."""
    loc = ("speculative_config",)
    if value is None:
        return None
    if not isinstance(value, dict):
        errors.append(
            FieldError(
                loc,
                "Input should be a valid dictionary or object to extract fields from",
                "model_attributes_type",
                value,
            )
        )
        return None
    tag = value.get("decoding_type")
    if tag is None:
        errors.append(
            FieldError(loc, "Unable to extract tag using discriminator 'decoding_type'", "union_tag_not_found", value)
        )
        return None
    if tag not in DECODING_TYPES:
        expected = ", ".join(f"'{name}'" for name in DECODING_TYPES)
        errors.append(
            FieldError(
                loc,
                f"Input tag {str(tag)!r} found using 'decoding_type' does not match any of the expected tags: "
                f"{expected}",
                "union_tag_invalid",
                value,
            )
        )
        return None
    if tag not in EMULATED_DECODING_TYPES:
        return None  # TRT-backend-only and not-emulated tags are refused after field validation
    member = loc + (str(tag),)
    found = len(errors)
    errors += _extra_keys(value, decoding_base_fields(version) + _MEMBER_FIELDS[tag], member)
    draft_len = value.get("max_draft_len")
    if draft_len is not None:
        draft_len = coerce_int(draft_len, member + ("max_draft_len",), errors, ge=0)
    # `speculative_model_dir` is a validation alias of `speculative_model` (the first found wins).
    model_key = "speculative_model" if "speculative_model" in value else "speculative_model_dir"
    model = value.get(model_key)
    if model is not None and not isinstance(model, str):
        errors.append(FieldError(member + (model_key,), "Input should be a valid string", "string_type", model))
    ngram_size = layers = None
    if tag == "NGram":
        ngram_size = coerce_int(
            value.get("max_matching_ngram_size", 2), member + ("max_matching_ngram_size",), errors, gt=0
        )
    if tag == "MTP":
        layers = coerce_int(
            value.get("num_nextn_predict_layers", 1), member + ("num_nextn_predict_layers",), errors, gt=0
        )
    concurrency = value.get("max_concurrency")
    if concurrency is not None:  # DecodingBaseConfig: Annotated[int, Gt(gt=0)] | None
        concurrency = coerce_int(concurrency, member + ("max_concurrency",), errors, gt=0)
    one_model = tag == "MTP"
    if tag in ("Eagle", "Eagle3"):
        one_model = True  # EagleDecodingConfig.eagle3_one_model defaults to True
        if "eagle3_one_model" in value:
            one_model = coerce_bool(value["eagle3_one_model"], member + ("eagle3_one_model",), errors)
    if len(errors) > found:
        return None

    # Model validators ("after"): they run only once the member's fields are valid.
    def value_error(message: str) -> None:
        errors.append(FieldError(member, f"Value error, {message}", "value_error", value))

    if tag in ("Eagle", "Eagle3"):
        if not draft_len:
            value_error("max_draft_len must be > 0 for Eagle")
            return None
        if model is None:
            value_error("Draft model must be provided for EAGLE")
            return None
    elif tag == "DraftTarget":
        if not draft_len:
            value_error("max_draft_len must be > 0 for DraftTarget")
            return None
        if model is None:
            value_error("speculative_model must be specified for DraftTarget")
            return None
    elif tag == "NGram":
        if not draft_len:
            value_error("max_draft_len must be > 0 for NGram")
            return None
    elif tag == "MTP":
        # MTPDecodingConfig sets max_draft_len = num_nextn_predict_layers: a different
        # max_draft_len is overwritten, not rejected.
        assert layers is not None
        draft_len = layers
    assert draft_len is not None
    return SpeculativeOptions(
        decoding_type="Eagle3" if tag == "Eagle" else str(tag),
        requested_type=str(tag),
        max_draft_len=draft_len,
        speculative_model=model,
        max_matching_ngram_size=ngram_size,
        num_nextn_predict_layers=layers,
        max_concurrency=concurrency,
        one_model=bool(one_model),
    )


def cli_llm_args(cli: ServeArgs) -> dict[str, Any]:
    """What serve.py's get_llm_args hands TorchLlmArgs (kv_cache_config aside)."""
    return {
        "model": cli.model,
        "tokenizer": cli.tokenizer,
        "tensor_parallel_size": cli.tp_size,
        "pipeline_parallel_size": cli.pp_size,
        "moe_expert_parallel_size": cli.ep_size,
        "moe_cluster_parallel_size": cli.cluster_size,
        "gpus_per_node": cli.gpus_per_node,
        "trust_remote_code": cli.trust_remote_code,
        "max_batch_size": cli.max_batch_size,
        "max_num_tokens": cli.max_num_tokens,
        "max_beam_width": cli.max_beam_width,
        "max_seq_len": cli.max_seq_len,
        "backend": cli.backend,
        "num_postprocess_workers": cli.num_postprocess_workers,
        "reasoning_parser": cli.reasoning_parser,
        "enable_chunked_prefill": cli.enable_chunked_prefill,
    }


def resolve_llm_args(cli: ServeArgs, options: Any, version: str = DEFAULT_EMULATED_TRTLLM_VERSION) -> LlmArgs:
    """CLI + parsed YAML -> LlmArgs, failing the way TensorRT-LLM fails (LlmArgsError).

    ``options`` is what `yaml.safe_load` returned for the file (None for an empty file);
    without `--extra_llm_api_options` pass {}.
    """
    validate_cli_kv_fraction(cli.kv_cache_free_gpu_memory_fraction)
    if options is None:
        raise LlmArgsError("TypeError: argument of type 'NoneType' is not iterable")
    if not isinstance(options, dict):
        raise LlmArgsError(f"TypeError: unsupported operand type(s) for |: 'dict' and '{type(options).__name__}'")
    fraction, block_reuse, kv_dtype = _merge_kv_cache_config(cli.kv_cache_free_gpu_memory_fraction, options)
    log_lines: list[tuple[str, str]] = []
    if "kv_cache_config" in options:
        log_lines.append(("warning", "Overriding kv_cache_config "))

    merged = cli_llm_args(cli) | {key: value for key, value in options.items() if key != "kv_cache_config"}
    errors: list[FieldError] = []
    typed: dict[str, Any] = {}
    for key in _OPTIONAL_INT_FIELDS:
        typed[key] = None if merged.get(key) is None else coerce_int(merged[key], (key,), errors)
    for key in _INT_FIELDS:
        typed[key] = coerce_int(merged.get(key, _TORCH_DEFAULTS.get(key, 1)), (key,), errors)
    for key in _BOOL_FIELDS:
        typed[key] = coerce_bool(merged.get(key, _TORCH_DEFAULTS.get(key, False)), (key,), errors)
    graphs = _cuda_graph_max_batch_size(merged.get("cuda_graph_config", {}), errors)
    speculative = _speculative(merged.get("speculative_config"), errors, version)
    errors += _extra_keys(merged, TORCH_LLM_ARGS_FIELDS, ())
    if errors:
        raise LlmArgsError(validation_error_text("TorchLlmArgs", errors))

    raw_spec = merged.get("speculative_config")
    tag = raw_spec.get("decoding_type") if isinstance(raw_spec, dict) else None
    if tag in TRT_BACKEND_ONLY:
        raise LlmArgsError(
            validation_error_text(
                "TorchLlmArgs",
                [
                    FieldError(
                        (),
                        f"Value error, Speculation type {tag} does not support backend pytorch",
                        "value_error",
                        merged,
                    )
                ],
            )
        )
    if tag in NOT_EMULATED:
        raise LlmArgsError(
            f"NotImplementedError: specfleet TensorRT-LLM EMULATOR: decoding_type {tag!r} is accepted by "
            f"TensorRT-LLM but not emulated (emulated: {', '.join(EMULATED_DECODING_TYPES)})"
        )
    if speculative is not None and speculative.requested_type == "Eagle":
        log_lines.append(("warning", EAGLE_ALIAS_WARNING))
    max_batch = typed["max_batch_size"] if typed["max_batch_size"] is not None else 2048
    max_tokens = typed["max_num_tokens"] if typed["max_num_tokens"] is not None else 8192
    if max_batch > max_tokens:
        log_lines.append(
            ("warning", f"max_batch_size [{max_batch}] should be less than or equal to max_num_tokens [{max_tokens}]")
        )
    return LlmArgs(
        model=str(merged["model"]),
        backend=str(merged.get("backend") or "pytorch"),
        tensor_parallel_size=typed["tensor_parallel_size"],
        pipeline_parallel_size=typed["pipeline_parallel_size"],
        trust_remote_code=typed["trust_remote_code"],
        max_batch_size=max_batch,
        max_num_tokens=max_tokens,
        max_seq_len=typed["max_seq_len"],
        max_beam_width=typed["max_beam_width"] if typed["max_beam_width"] is not None else 1,
        free_gpu_memory_fraction=fraction,
        enable_block_reuse=block_reuse,
        kv_cache_dtype=kv_dtype,
        cuda_graph_max_batch_size=graphs,
        disable_overlap_scheduler=typed["disable_overlap_scheduler"],
        enable_attention_dp=typed["enable_attention_dp"],
        enable_autotuner=typed["enable_autotuner"],
        print_iter_log=typed["print_iter_log"],
        enable_iter_perf_stats=typed["enable_iter_perf_stats"],
        max_stats_len=typed["max_stats_len"],
        speculative=speculative,
        log_lines=tuple(log_lines),
    )


def vllm_speculative_config(spec: SpeculativeOptions | None) -> dict[str, Any] | None:
    """The same speculation in the `--speculative-config` shape the emulator engine reads."""
    if spec is None:
        return None
    config: dict[str, Any] = {"method": spec.method, "num_speculative_tokens": spec.max_draft_len}
    if spec.method in ("eagle3", "draft_model"):
        config["model"] = spec.speculative_model
    if spec.method == "ngram":
        # TensorRT-LLM matches the longest suffix first and falls back down to one token.
        config["prompt_lookup_max"] = spec.max_matching_ngram_size
        config["prompt_lookup_min"] = 1
    return config


def engine_namespace(llm: LlmArgs, cli: ServeArgs) -> argparse.Namespace:
    """The `vllm serve`-shaped namespace the emulator engine consumes, flavour `trtllm`.

    max_seq_len -> max_model_len, max_batch_size -> max_num_seqs, max_num_tokens ->
    max_num_batched_tokens, speculative_config -> --speculative-config; the overlap scheduler
    is what vLLM calls async scheduling, and `cuda_graph_config: null` runs without CUDA
    graphs (vLLM's --enforce-eager).
    """
    return argparse.Namespace(
        flavour="trtllm",
        model=llm.model,
        served_model_name=None,
        host=cli.host,
        port=cli.port,
        max_model_len=llm.max_seq_len,
        max_num_seqs=llm.max_batch_size,
        max_num_batched_tokens=llm.max_num_tokens,
        speculative_config=vllm_speculative_config(llm.speculative),
        speculative_decoding_type=llm.speculative.requested_type if llm.speculative else None,
        # Only a separate drafter asks max_concurrency (Drafter.should_use_spec_decode).
        speculative_max_concurrency=(llm.speculative.max_concurrency
                                     if llm.speculative and not llm.speculative.one_model else None),
        kv_cache_free_gpu_memory_fraction=llm.free_gpu_memory_fraction,
        kv_cache_dtype="fp8" if llm.kv_cache_dtype == "fp8" else "auto",
        enforce_eager=llm.cuda_graph_max_batch_size is None,
        cuda_graph_max_batch_size=llm.cuda_graph_max_batch_size,
        async_scheduling=not llm.disable_overlap_scheduler,
        enable_autotuner=llm.enable_autotuner,
        tensor_parallel_size=llm.tensor_parallel_size,
        pipeline_parallel_size=llm.pipeline_parallel_size,
        trust_remote_code=llm.trust_remote_code,
        backend=llm.backend,
        enable_iter_perf_stats=llm.enable_iter_perf_stats,
        print_iter_log=llm.print_iter_log,
        max_stats_len=llm.max_stats_len,
        log_level=cli.log_level,
        quantization=None,
        dtype="auto",
        seed=0,
        api_key=None,
        generation_config="auto",
        enable_force_include_usage=False,
        disable_log_stats=True,
        compilation_config=None,
    )
