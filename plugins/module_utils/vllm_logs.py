# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Read a serving engine's log: why it failed to start, and what it resolved at start.

Unit-side, standard library only. The patterns are vLLM's, TensorRT-LLM's (`trtllm-serve`)
and huggingface_hub's own messages (vllm-project/vllm `vllm/config/speculative.py` and
`vllm/v1/worker/utils.py`; NVIDIA/TensorRT-LLM; the NVIDIA container runtime on Jetson,
NVIDIA-AI-IOT/jetson-ai-lab issue #421; openai/harmony, vllm-project/vllm issue #22525).
vLLM prints the decisive error inside the engine process and then wraps it ("Engine core
initialization failed"), so the whole log is searched, not only its last line.
"""

from __future__ import annotations

import re

# (failure class, patterns). Order matters: the first class with a match wins, so the
# specific causes come before the generic ones that often follow them in the same log.
FAILURE_PATTERNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("tiktoken_missing", (
        r"HarmonyError: error downloading or loading vocab file",
    )),
    ("gated_repo", (
        r"GatedRepoError",
        r"Cannot access gated repo",
        r"You are trying to access a gated repo",
    )),
    ("model_missing_offline", (
        r"LocalEntryNotFoundError",
        r"Cannot find the requested files in the local cache",
        r"We couldn't connect to 'https://huggingface\.co'",
        r"Invalid repository ID or local directory specified",
        r"is not a local folder and is not a valid model identifier",
    )),
    # The GPU cannot run what was asked (vllm/config/vllm.py _get_quantization_config,
    # vllm/platforms/cuda.py check_if_supports_dtype, compressed-tensors' scheme check): no
    # memory setting or retry helps, only another checkpoint or dtype. Ahead of the generic
    # classes, whose broad patterns (any line naming NVML) may match elsewhere in the same log.
    ("gpu_unsupported", (
        r"is not supported for the current GPU\. Minimum capability",
        r"Bfloat16 is only supported on GPUs with compute capability of at least",
        r"Quantization scheme is not supported for",
    )),
    ("spec_config_rejected", (
        r"validation errors? for SpeculativeConfig",
        r"is not a valid argument in the speculative_config",
        r"num_speculative_tokens was provided but without speculative model",
        r"prompt_lookup_min=\d+ must be <= prompt_lookup_max",
        r"Target and draft model should have the same vocabulary size",
        r"Arctic Inference is required for suffix decoding",
        r"--speculative-config(/-sc)?: Value .* cannot be converted",
    )),
    ("oom_at_start", (
        # TensorRT-LLM re-raises the CUDA OOM of its executor with this line.
        r"Executor creation failed due to insufficient GPU memory",
        r"Free memory on device .* on startup is less than desired GPU memory utilization",
        r"OutOfMemoryError",
        r"CUDA out of memory",
        r"No available memory for the cache blocks",
        r"larger than the available KV cache memory",
    )),
    ("nvml_runtime_error", (
        r"Failed to infer device type",
        r"NVML",
        r"No CUDA GPUs are available",
        r"failed to create NVIDIA Container Runtime",
        r"unknown or invalid runtime name",
        r"could not select device driver",
        r"no kernel image is available for execution on the device",
    )),
    ("bad_arguments", (
        r"vllm serve: error:",
        r"unrecognized arguments",
        # trtllm-serve (click): an unknown option; an options YAML it refuses outside
        # speculative_config (see trtllm_options_errors).
        r"^Error: No such option",
        r"validation errors? for (TorchLlmArgs|KvCacheConfig)",
    )),
)

_COMPILED = tuple((name, tuple(re.compile(p) for p in patterns)) for name, patterns in FAILURE_PATTERNS)

_SPEC_CONFIG_RE = re.compile(
    r"speculative_config=SpeculativeConfig\(method='(?P<method>[^']+)',\s*model=(?P<model>'[^']*'|None),"
    r"\s*num_spec_tokens=(?P<tokens>\d+)\)"
)
READY_LINE = "Application startup complete."


# An exception line ("RuntimeError: Insufficient space in /dev/shm ..."), minus vLLM's
# generic wrappers, which only say that the engine process failed.
# Only where a traceback puts it: the start of the line, or right after vLLM's log prefix
# ("(EngineCore pid=24) ERROR 11-22 04:01:58 [core.py:1510] "); not a mention in a warning.
_EXCEPTION_RE = re.compile(r"(?:^|\] )(?P<cause>[A-Z][\w.]*(?:Error|Exception): \S)")
_WRAPPERS = ("Engine core initialization failed", "EngineCore failed to start")


def root_cause_lines(log: str, count: int = 3) -> list[str]:
    """The distinct exception lines of a log, first first, without the wrappers."""
    found: list[str] = []
    for line in log.splitlines():
        text = line.strip()
        match = _EXCEPTION_RE.search(text)
        if match and not any(w in text for w in _WRAPPERS):
            cause = text[match.start("cause"):]
            if cause not in found:
                found.append(cause)
    return found[:count]


# pydantic's ValidationError as TensorRT-LLM raises it for its LLM API options (the
# `--extra_llm_api_options` YAML): a header naming the model, then per error a location line
# (`speculative_config.Eagle3.max_draft_len`) and an indented message line.
_LLM_ARGS_HEADER_RE = re.compile(r"\d+ validation errors? for (?P<model>TorchLlmArgs|KvCacheConfig)\s*$")


def trtllm_options_errors(log: str) -> list[tuple[str, str, str]]:
    """(model, location, message) of each error TensorRT-LLM found in its options YAML."""
    errors: list[tuple[str, str, str]] = []
    lines = log.splitlines()
    for index, line in enumerate(lines):
        header = _LLM_ARGS_HEADER_RE.search(line)
        if not header:
            continue
        position = index + 1
        while position + 1 < len(lines):
            location, message = lines[position], lines[position + 1]
            if not location.strip() or location[0].isspace() or not re.match(r"  \S", message):
                break  # past the error list
            errors.append((header.group("model"), location.strip(), message.strip()))
            position += 2
            while position < len(lines) and lines[position].startswith("    "):
                position += 1  # "For further information visit ..."
    return errors


def classify(log: str) -> tuple[str | None, list[str]]:
    """(failure class, decisive lines) from a server log. With no known cause the class is
    None and the decisive lines are the log's exception lines (possibly none)."""
    # TensorRT-LLM reads speculation from the options YAML: an error located under
    # speculative_config is a rejected speculative config, as vLLM's SpeculativeConfig errors are.
    speculative = [f"{model}: {location}: {message}" for model, location, message in trtllm_options_errors(log)
                   if location == "speculative_config" or location.startswith("speculative_config.")]
    if speculative:
        return "spec_config_rejected", speculative[:5]
    lines = log.splitlines()
    for name, patterns in _COMPILED:
        decisive = [line.strip() for line in lines if any(p.search(line) for p in patterns)]
        if decisive:
            return name, decisive[:5]
    return None, root_cause_lines(log)


def resolved_spec_config(log: str) -> dict | None:
    """The speculative config vLLM resolved, from its engine config line, or None."""
    match = _SPEC_CONFIG_RE.search(log)
    if not match:
        return None
    model = match.group("model")
    return {
        "method": match.group("method"),
        "model": None if model == "None" else model.strip("'"),
        "num_speculative_tokens": int(match.group("tokens")),
    }


# vLLM's torch.compile messages at start (vllm/compilation/backends.py; "for dynamic shape" in
# older releases, "for compile range (1, 8192)" in newer): a cache hit loads the compiled graphs,
# a miss compiles them (tens of seconds on a Jetson).
_COMPILE_CACHE_HIT_RE = re.compile(r"Directly load the compiled graph\(s\) for .+? from the cache")
_COMPILE_CACHE_MISS_RE = re.compile(r"Compiling a graph for .+? takes")


def compile_cache_state(log: str) -> str | None:
    """"hit" when vLLM loaded its compiled graphs from the cache, "miss" when it compiled them,
    None when the log says neither (enforce-eager, compilation off, another engine)."""
    if _COMPILE_CACHE_MISS_RE.search(log):
        return "miss"
    if _COMPILE_CACHE_HIT_RE.search(log):
        return "hit"
    return None


def last_lines(log: str, count: int = 20) -> list[str]:
    return [line for line in log.splitlines() if line.strip()][-count:]
