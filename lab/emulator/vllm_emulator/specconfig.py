"""`--speculative-config` validation with vLLM 0.20's rules and messages.

The fields are those of the emulated version (`emulated_vllm_version()`): a field a newer
vLLM added is an unknown keyword to an older one (e.g. `num_speculative_tokens_per_batch_size`,
dynamic speculative decoding, from vLLM 0.24.0; see DYNAMIC_SD_SINCE), and a field vLLM
removed is an unknown keyword from then on (`disable_by_batch_size`; see
DISABLE_BY_BATCH_SIZE_UNTIL).

vLLM's SpeculativeConfig is a pydantic dataclass: field errors (unknown keys, a method
outside the Literal, non-positive numbers) and the ValueErrors its `__post_init__` and
`_verify_args` raise both surface as a pydantic ValidationError for SpeculativeConfig,
whose "Value error, ..." line carries vLLM's own message. Other exceptions (ImportError,
NotImplementedError, hub errors for the draft) are not wrapped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import emulated_vllm_version, version_tuple
from .errors import ENGINE_FRAMES, FRONTEND_FRAMES, VLLM_SITE, StartupFailure
from .hub import ModelInfo

SPECULATIVE_METHODS = (
    "ngram",
    "medusa",
    "mlp_speculator",
    "draft_model",
    "suffix",
    "custom_class",
    "eagle",
    "eagle3",
    "extract_hidden_states",
    "deepseek_mtp",
    "mimo_mtp",
    "glm4_moe_mtp",
    "ernie_mtp",
    "qwen3_next_mtp",
    "longcat_flash_mtp",
    "mtp",
    "pangu_ultra_moe_mtp",
    "ngram_gpu",
)
MTP_ALIASES = tuple(m for m in SPECULATIVE_METHODS if m.endswith("_mtp"))
# Methods whose performance and acceptance the emulator models.
EMULATED_METHODS = ("ngram", "eagle", "eagle3", "draft_model", "mtp")
# vLLM 0.20 keeps async scheduling only for these; others log that it is disabled.
ASYNC_CAPABLE_METHODS = ("eagle", "eagle3", "mtp", "draft_model", "ngram_gpu")

INT_POSITIVE_FIELDS = ("num_speculative_tokens",)
INT_AT_LEAST_ONE_FIELDS = ("draft_tensor_parallel_size", "max_model_len", "prompt_lookup_max", "prompt_lookup_min")
KNOWN_FIELDS = (
    "enforce_eager",
    "num_speculative_tokens",
    "model",
    "method",
    "draft_tensor_parallel_size",
    "tensor_parallel_size",
    "quantization",
    "moe_backend",
    "attention_backend",
    "kv_cache_dtype",
    "max_model_len",
    "revision",
    "code_revision",
    "disable_padded_drafter_batch",
    "use_local_argmax_reduction",
    "use_heterogeneous_vocab",
    "prompt_lookup_max",
    "prompt_lookup_min",
    "parallel_drafting",
    "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob",
    "draft_load_config",
    "rejection_sample_method",
    "draft_sample_method",
)

# Dynamic speculative decoding (vllm-project/vllm PR #32374 "[V1][Spec Decode] Add Dynamic SD",
# merged in the week ending 2026-06-19, after v0.23.0 was tagged; first released in v0.24.0 of
# 2026-07-01): `num_speculative_tokens_per_batch_size: list[tuple[int, int, int]] | None` in
# vllm/config/speculative.py, checked when the engine core builds its Scheduler by
# vllm/v1/spec_decode/dynamic/utils.py `build_dynamic_sd_schedule_lookup`
# (docs/features/speculative_decoding/dynamic_speculative_decoding.md). Older versions'
# SpeculativeConfig refuses the key as an unexpected keyword argument.
DYNAMIC_SD_FIELD = "num_speculative_tokens_per_batch_size"
DYNAMIC_SD_SINCE = (0, 24, 0)

# V0's auto-disable (`disable_by_batch_size`), accepted but unused since v0.10.0, left
# SpeculativeConfig with vllm-project/vllm PR #35060 ("Remove unused disable_by_batch_size from
# SpeculativeConfig"), merged in the week ending 2026-02-27 (vLLM's weekly summary). No source
# found says whether v0.16.0 (out by 2026-03-04) or v0.17.0 is the first release without it, so
# the emulator refuses it from 0.16.0 on: never kinder than vLLM. An unknown keyword, as vLLM
# refuses any key its SpeculativeConfig lacks.
DISABLE_BY_BATCH_SIZE_FIELD = "disable_by_batch_size"
DISABLE_BY_BATCH_SIZE_UNTIL = (0, 16, 0)


def known_fields(vllm_version: str) -> tuple[str, ...]:
    """SpeculativeConfig's fields in the emulated vLLM version."""
    version = version_tuple(vllm_version)
    fields = KNOWN_FIELDS
    if version < DISABLE_BY_BATCH_SIZE_UNTIL:
        fields += (DISABLE_BY_BATCH_SIZE_FIELD,)
    if version >= DYNAMIC_SD_SINCE:
        fields += (DYNAMIC_SD_FIELD,)
    return fields


SPEC_FRAMES = FRONTEND_FRAMES + [
    (
        f"{VLLM_SITE}/vllm/engine/arg_utils.py",
        1198,
        "create_speculative_config",
        "return SpeculativeConfig(**self.speculative_config)",
    ),
]


@dataclass(frozen=True)
class ResolvedSpeculation:
    method: str
    model: str | None
    num_speculative_tokens: int
    prompt_lookup_min: int | None
    prompt_lookup_max: int | None
    draft: ModelInfo | None
    draft_tensor_parallel_size: int
    # Dynamic speculative decoding: the (start, end, k) bands as given (pydantic-coerced);
    # None: off. Validated and expanded when the engine core starts (dynamic_sd_lookup).
    num_speculative_tokens_per_batch_size: tuple[tuple[int, int, int], ...] | None = None

    @property
    def async_scheduling(self) -> bool:
        return self.method in ASYNC_CAPABLE_METHODS and self.method != "ngram"

    @property
    def uses_draft_kv_cache(self) -> bool:
        return self.method in ("eagle", "eagle3", "mtp", "draft_model")

    def vllm_repr(self) -> str:
        """How vLLM's EngineCore config line prints the resolved config."""
        model = "None" if self.model is None or self.method == "ngram" else repr(self.model)
        return (
            f"SpeculativeConfig(method={self.method!r}, model={model}, num_spec_tokens={self.num_speculative_tokens})"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "model": self.model,
            "num_speculative_tokens": self.num_speculative_tokens,
            "prompt_lookup_min": self.prompt_lookup_min,
            "prompt_lookup_max": self.prompt_lookup_max,
            "async_scheduling": self.async_scheduling,
            DYNAMIC_SD_FIELD: None
            if self.num_speculative_tokens_per_batch_size is None
            else [list(band) for band in self.num_speculative_tokens_per_batch_size],
        }


class SpecConfigError(Exception):
    """Carries the full printed error text (pydantic-style or plain exception line)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def to_failure(self) -> StartupFailure:
        return StartupFailure(exception_text=self.text, frames=SPEC_FRAMES)


def _input_repr(raw: dict[str, Any]) -> str:
    inner = ", ".join(f"{key!r}: {value!r}" for key, value in raw.items())
    return f"ArgsKwargs((), {{{inner}}})"


def _value_error(message: str, raw: dict[str, Any]) -> SpecConfigError:
    return SpecConfigError(
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for "
        f"SpeculativeConfig\n  Value error, {message} [type=value_error, "
        f"input_value={_input_repr(raw)}, input_type=ArgsKwargs]\n"
        "    For further information visit https://errors.pydantic.dev/2.12/v/value_error"
    )


def _int_error(value: Any) -> str | None:
    """pydantic's (lax) int validation of one value; None when it is an int."""
    kind = type(value).__name__
    if isinstance(value, bool):
        # pydantic would take a bool as 0/1; the emulator refuses it (stricter, never kinder).
        return f"Input should be a valid integer [type=int_type, input_value={value!r}, input_type={kind}]"
    if isinstance(value, int):
        return None
    if isinstance(value, float):
        if value.is_integer():
            return None
        return (
            "Input should be a valid integer, got a number with a fractional part "
            f"[type=int_from_float, input_value={value!r}, input_type={kind}]"
        )
    if isinstance(value, str):
        try:
            int(value.strip())
            return None
        except ValueError:
            return (
                "Input should be a valid integer, unable to parse string as an integer "
                f"[type=int_parsing, input_value={value!r}, input_type={kind}]"
            )
    return f"Input should be a valid integer [type=int_type, input_value={value!r}, input_type={kind}]"


def _schedule_errors(value: Any) -> list[str]:
    """pydantic's errors for `list[tuple[int, int, int]] | None` (the field's annotation)."""
    name = DYNAMIC_SD_FIELD
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        return [
            f"{name}\n  Input should be a valid list [type=list_type, input_value={value!r}, "
            f"input_type={type(value).__name__}]"
        ]
    errors: list[str] = []
    for index, entry in enumerate(value):
        loc = f"{name}.{index}"
        if not isinstance(entry, list | tuple):
            errors.append(
                f"{loc}\n  Input should be a valid tuple [type=tuple_type, input_value={entry!r}, "
                f"input_type={type(entry).__name__}]"
            )
            continue
        for position, item in enumerate(entry[:3]):
            error = _int_error(item)
            if error is not None:
                errors.append(f"{loc}.{position}\n  {error}")
        if len(entry) > 3:
            errors.append(
                f"{loc}\n  Tuple should have at most 3 items after validation, not {len(entry)} "
                f"[type=too_long, input_value={entry!r}, input_type={type(entry).__name__}]"
            )
        for position in range(len(entry), 3):
            errors.append(
                f"{loc}.{position}\n  Field required [type=missing, input_value={entry!r}, "
                f"input_type={type(entry).__name__}]"
            )
    return errors


def _schedule(value: Any) -> tuple[tuple[int, int, int], ...] | None:
    """The bands as pydantic hands them to SpeculativeConfig (after _schedule_errors passed)."""
    if value is None:
        return None
    return tuple((int(entry[0]), int(entry[1]), int(entry[2])) for entry in value)


def _field_errors(raw: dict[str, Any], vllm_version: str | None = None) -> list[str]:
    """Pydantic field-level errors, in field order like pydantic reports them."""
    errors: list[str] = []
    fields = known_fields(emulated_vllm_version() if vllm_version is None else vllm_version)
    for key, value in raw.items():
        if key not in fields:
            errors.append(
                f"{key}\n  Unexpected keyword argument [type=unexpected_keyword_"
                f"argument, input_value={value!r}, input_type={type(value).__name__}]"
            )
    method = raw.get("method")
    if method is not None and method not in SPECULATIVE_METHODS:
        allowed = ", ".join(repr(m) for m in SPECULATIVE_METHODS[:-1])
        errors.append(
            f"method\n  Input should be {allowed} or {SPECULATIVE_METHODS[-1]!r} "
            f"[type=literal_error, input_value={method!r}, "
            f"input_type={type(method).__name__}]"
        )
    for key in INT_POSITIVE_FIELDS + INT_AT_LEAST_ONE_FIELDS:
        value = raw.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            errors.append(
                f"{key}\n  Input should be a valid integer [type=int_type, "
                f"input_value={value!r}, input_type={type(value).__name__}]"
            )
        elif key in INT_POSITIVE_FIELDS and value <= 0:
            errors.append(
                f"{key}\n  Input should be greater than 0 [type=greater_than, input_value={value}, input_type=int]"
            )
        elif key in INT_AT_LEAST_ONE_FIELDS and value < 1:
            errors.append(
                f"{key}\n  Input should be greater than or equal to 1 "
                f"[type=greater_than_equal, input_value={value}, input_type=int]"
            )
    model = raw.get("model")
    if model is not None and not isinstance(model, str):
        errors.append(
            f"model\n  Input should be a valid string [type=string_type, "
            f"input_value={model!r}, input_type={type(model).__name__}]"
        )
    if DYNAMIC_SD_FIELD in fields:
        errors.extend(_schedule_errors(raw.get(DYNAMIC_SD_FIELD)))
    return errors


def _raise_field_errors(errors: list[str]) -> None:
    if not errors:
        return
    count = len(errors)
    noun = "error" if count == 1 else "errors"
    body = "\n".join(errors)
    raise SpecConfigError(
        f"pydantic_core._pydantic_core.ValidationError: {count} validation {noun} for SpeculativeConfig\n{body}"
    )


def detect_method(model: str | None, draft: ModelInfo | None) -> str:
    """vLLM's auto-detection when `method` is omitted."""
    if model in ("ngram", "[ngram]"):
        return "ngram"
    name = (model or "").lower()
    if "eagle-" in name:
        return "eagle"
    if "eagle3" in name:
        return "eagle3"
    if draft is not None and draft.model_type.endswith("mtp"):
        return "mtp"
    return "draft_model"


def validate_speculative_config(
    raw: Any,
    target: ModelInfo,
    target_tensor_parallel_size: int,
    load_draft: Callable[[str], ModelInfo],
    vllm_version: str | None = None,
) -> ResolvedSpeculation:
    """Resolve a `--speculative-config` dict like vLLM or raise SpecConfigError.

    `load_draft` resolves a draft model name (it may raise StartupFailure for a missing
    or gated draft, which callers let through unchanged). `vllm_version`: the vLLM whose
    SpeculativeConfig is emulated (default: `emulated_vllm_version()`).
    """
    if not isinstance(raw, dict):
        raise SpecConfigError(
            "pydantic_core._pydantic_core.ValidationError: 1 validation error for "
            f"SpeculativeConfig\n  Input should be a dictionary or an instance of "
            f"SpeculativeConfig [type=dataclass_type, input_value={raw!r}, "
            f"input_type={type(raw).__name__}]"
        )
    _raise_field_errors(_field_errors(raw, vllm_version))

    method: str | None = raw.get("method")
    model: str | None = raw.get("model")
    k: int | None = raw.get("num_speculative_tokens")
    lookup_min: int | None = raw.get("prompt_lookup_min")
    lookup_max: int | None = raw.get("prompt_lookup_max")

    # __post_init__: infer the method, then fill in the model for model-less methods.
    if method is None:
        method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    if method in MTP_ALIASES:
        method = "mtp"  # vLLM warns "method `%s` is deprecated and replaced with mtp."
    if model is None and k is not None:
        if method == "mtp":
            model = target.name
        elif method in ("ngram", "ngram_gpu", "suffix", "extract_hidden_states"):
            model = method
        elif method == "custom_class":
            raise _value_error(
                "method='custom_class' requires 'model' to contain the "
                "custom proposer module path (e.g., "
                "'my_module.MyProposer').",
                raw,
            )
        else:
            raise _value_error("num_speculative_tokens was provided but without speculative model.", raw)

    draft: ModelInfo | None = None
    draft_tp = target_tensor_parallel_size
    if method in ("ngram", "ngram_gpu"):
        if lookup_min is None and lookup_max is None:
            lookup_min = lookup_max = 5
        elif lookup_min is None:
            lookup_min = lookup_max
        elif lookup_max is None:
            lookup_max = lookup_min
        assert lookup_min is not None and lookup_max is not None
        if lookup_min > lookup_max:
            raise _value_error(f"prompt_lookup_min={lookup_min} must be <= prompt_lookup_max={lookup_max}", raw)
    elif method == "suffix":
        raise SpecConfigError(
            "ImportError: Arctic Inference is required for suffix decoding. Install via "
            "`pip install arctic-inference==0.1.1`."
        )
    elif model is not None:
        draft = target if method == "mtp" and model == target.name else load_draft(model)
        if raw.get("method") is None:
            method = detect_method(model, draft)
        if k is None and draft.n_predict is not None:
            k = draft.n_predict
        requested_tp = raw.get("draft_tensor_parallel_size")
        if requested_tp is not None and requested_tp not in (1, target_tensor_parallel_size):
            raise _value_error(
                f"speculative_draft_tensor_parallel_size={requested_tp} cannot be other "
                f"value than 1 or target model tensor_parallel_size="
                f"{target_tensor_parallel_size}",
                raw,
            )
        draft_tp = requested_tp or target_tensor_parallel_size
        if method == "draft_model" and not raw.get("use_heterogeneous_vocab") and draft.vocab_size != target.vocab_size:
            raise _value_error(
                "Target and draft model should have the same vocabulary size. Target model "
                f"vocab_size={target.vocab_size}. Draft model vocab_size={draft.vocab_size}. "
                "Using models with different tokenizers can cause out-of-bounds errors "
                "during speculative decoding.",
                raw,
            )

    # _verify_args (model validator, runs after __post_init__)
    if raw.get("tensor_parallel_size") is not None:
        raise _value_error(
            "'tensor_parallel_size' is not a valid argument in the "
            "speculative_config. Please pass 'draft_tensor_parallel_size' "
            "instead.",
            raw,
        )
    if k is None:
        raise _value_error(
            "num_speculative_tokens must be provided with speculative model "
            "unless the draft model config contains an n_predict parameter.",
            raw,
        )
    if method not in EMULATED_METHODS:
        raise SpecConfigError(
            f"NotImplementedError: specfleet emulator: speculative method {method!r} is "
            f"accepted by vLLM but not emulated (emulated: {', '.join(EMULATED_METHODS)})"
        )
    return ResolvedSpeculation(
        method=method,
        model=model,
        num_speculative_tokens=k,
        prompt_lookup_min=lookup_min,
        prompt_lookup_max=lookup_max,
        draft=draft,
        draft_tensor_parallel_size=draft_tp,
        num_speculative_tokens_per_batch_size=_schedule(raw.get(DYNAMIC_SD_FIELD)),
    )


# --- dynamic speculative decoding: the engine core's check -------------------------------------

DYNAMIC_SD_FRAMES = ENGINE_FRAMES[:2] + [
    (f"{VLLM_SITE}/vllm/v1/engine/core.py", 140, "__init__", "self.scheduler: SchedulerInterface = Scheduler("),
    (
        f"{VLLM_SITE}/vllm/v1/core/sched/scheduler.py",
        253,
        "__init__",
        "self.dynamic_sd_lookup = build_dynamic_sd_schedule_lookup(",
    ),
    (
        f"{VLLM_SITE}/vllm/v1/spec_decode/dynamic/utils.py",
        95,
        "build_dynamic_sd_schedule_lookup",
        "parsed_schedule = validate_and_normalize_dynamic_sd_schedule(",
    ),
    (f"{VLLM_SITE}/vllm/v1/spec_decode/dynamic/utils.py", 44, "validate_and_normalize_dynamic_sd_schedule",
     "raise ValueError("),
]


class DynamicScheduleError(ValueError):
    """vLLM's ValueError for a bad `num_speculative_tokens_per_batch_size` (engine core)."""

    def to_failure(self) -> StartupFailure:
        return StartupFailure(
            exception_text=f"ValueError: {self}",
            in_engine_core=True,
            error_lines=["EngineCore failed to start."],
            frames=DYNAMIC_SD_FRAMES,
        )


def dynamic_sd_lookup(
    schedule: tuple[tuple[int, int, int], ...] | None, max_batch_size: int, num_speculative_tokens: int
) -> tuple[int, ...] | None:
    """The Scheduler's batch size -> k table (index = batch size, 0 unused), or None when
    dynamic speculation is off (no table, or an empty one: the Scheduler only builds the
    lookup for a non-empty list). Raises DynamicScheduleError with vLLM's texts.

    vllm/v1/spec_decode/dynamic/utils.py (vllm-project/vllm@a6f6bb1d): every band must be
    positive with start <= end and k >= 0; after sorting by start the bands must not overlap;
    the first must start at 1. Gaps are not errors: a batch size between two bands, or past
    the last, takes the k of the band before it (carry-forward); every k is clamped to
    `num_speculative_tokens` (the maximum draft length, which sizes the buffers), silently.
    No method is refused (the docs: tested with EAGLE, EAGLE-3 and DFlash).
    """
    if not schedule:
        return None
    for start, end, k in schedule:
        if start <= 0 or end <= 0:
            raise DynamicScheduleError(f"Batch-size range ({start}, {end}) must be positive.")
        if start > end:
            raise DynamicScheduleError(f"Batch-size range start must be <= end for ({start}, {end}, {k}).")
        if k < 0:
            raise DynamicScheduleError("num_speculative_tokens_per_batch_size values must be >= 0.")
    bands = sorted(schedule, key=lambda band: band[0])
    previous_end = 0
    for start, end, _ in bands:
        if start <= previous_end:
            raise DynamicScheduleError("Batch-size ranges must be non-overlapping and sorted.")
        previous_end = end
    if bands[0][0] != 1:
        raise DynamicScheduleError(
            "The first batch-size range must start at 1 so every runtime batch size has a defined schedule."
        )
    lookup = [0] * (max_batch_size + 1)
    band = 0
    for batch_size in range(1, max_batch_size + 1):
        while band + 1 < len(bands) and bands[band + 1][0] <= batch_size:
            band += 1
        lookup[batch_size] = min(num_speculative_tokens, bands[band][2])
    return tuple(lookup)


def json_loads_for_argparse(value: str) -> Any:
    """Parse the flag's JSON; argparse turns the raised error into vLLM's usage error."""
    import argparse

    try:
        return json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"Value {value} cannot be converted to {json.loads}.") from exc
