"""What vLLM asks of the GPU: a quantization method's minimum capability, bfloat16 from 8.0.

Real vLLM keeps this knowledge in its own code (each QuantizationConfig's
get_min_capability(), CudaPlatform.supported_dtypes and check_if_supports_dtype), and so does
the emulator: it never reads the product's capability table (specfleet/data/capability.yml).
Two independent copies are the point: the product's plan is tested against an engine that
refuses on its own terms, not against a mirror of the plan's data.

Capabilities are compared as vLLM compares them, major * 10 + minor (8.7 -> 87). Pure
functions; startup.py turns the messages into vLLM-shaped failures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# get_min_capability() of each QuantizationConfig in vLLM main. A method missing here is not
# checked: the emulator would rather let through what it does not know than refuse what vLLM
# starts.
MIN_CAPABILITY: dict[str, int] = {
    "modelopt": 89,  # ModelOptFp8Config: FP8 tensor cores (Ada and later)
    "modelopt_fp4": 75,  # ModelOptNvFp4Config: Marlin weight-only kernels below 10.0
    "mxfp4": 80,  # Mxfp4Config
    "fp8": 75,  # Fp8Config, also online `--quantization fp8` (Marlin weight-only below 8.9)
    "awq": 75,
    "gptq": 60,
    "compressed-tensors": 70,
    "bitsandbytes": 70,
}
BF16_MIN_CAPABILITY = 80  # CudaPlatform: "Ampere and Hopper or later NVIDIA GPUs"


def _modelopt_algo(quantization_config: Mapping[str, Any]) -> str | None:
    """quant_algo of a ModelOpt config, upper-cased, or None for another method.

    As ModelOptQuantConfigBase._extract_modelopt_quant_algo reads it: the legacy
    hf_quant_config.json layout nests it under `quantization`, config.json has it on top.
    """
    if not str(quantization_config.get("quant_method", "")).lower().startswith("modelopt"):
        return None
    nested = quantization_config.get("quantization")
    if "quantization" in quantization_config:
        return str(nested.get("quant_algo", "")).upper() if isinstance(nested, dict) else None
    return str(quantization_config.get("quant_algo", "")).upper()


def effective_quantization(quantization_config: object, cli_quantization: str | None) -> str | None:
    """The method vLLM resolves into model_config.quantization.

    A checkpoint's own quantization_config decides (startup refuses a `--quantization` that
    contradicts it before this is asked), with vLLM's override: a ModelOpt checkpoint whose
    quant_algo names FP4 is `modelopt_fp4` (ModelOptNvFp4Config.override_quantization_method),
    one whose quant_algo is FP8 stays `modelopt`. A checkpoint without one is quantized online
    by `--quantization`, if given.
    """
    if isinstance(quantization_config, Mapping):
        algo = _modelopt_algo(quantization_config)
        if algo is not None and "FP4" in algo:  # "NVFP4" and "W4A16_NVFP4" contain it too
            return "modelopt_fp4"
        method = str(quantization_config.get("quant_method", "")).lower()
        if method:
            return method
    return cli_quantization


def capability_refusal(method: str | None, capability: int) -> str | None:
    """vLLM's message when `method` needs more than `capability`, else None.

    VllmConfig._get_quantization_config (vllm/config/vllm.py) raises it as a ValueError.
    """
    minimum = MIN_CAPABILITY.get(method or "")
    if minimum is None or capability >= minimum:
        return None
    return (
        f"The quantization method {method} is not supported for the current GPU. "
        f"Minimum capability: {minimum}. Current capability: {capability}."
    )


def supported_dtypes(capability: int) -> tuple[str, ...]:
    """CudaPlatform.supported_dtypes, best first (the first is what `auto` falls back to)."""
    if capability >= BF16_MIN_CAPABILITY:
        return ("bfloat16", "float16", "float32")
    if capability >= 60:
        return ("float16", "float32")  # Pascal, Volta, Turing: no bfloat16
    return ("float32",)


CLI_DTYPES = {"half": "float16", "float16": "float16", "float": "float32", "float32": "float32", "bfloat16": "bfloat16"}


def resolve_dtype(cli_dtype: str, config_dtype: str, capability: int) -> tuple[str, bool]:
    """(torch dtype name the model runs in, whether `auto` fell back from the checkpoint's).

    vllm/config/model.py _get_and_verify_dtype: an explicit `--dtype` is taken as given (the
    engine core then refuses bfloat16 below 8.0); `auto` takes the checkpoint's torch_dtype when
    the GPU supports it, else the GPU's preferred dtype with a warning. A float32 checkpoint is
    downcast to the preferred dtype.
    """
    if cli_dtype != "auto":
        return CLI_DTYPES.get(cli_dtype, cli_dtype), False
    supported = supported_dtypes(capability)
    wanted = supported[0] if config_dtype == "float32" else config_dtype
    if wanted in supported:
        return wanted, False
    return supported[0], True


def auto_dtype_fallback_warning(gpu_name: str, version: str, config_dtype: str, dtype: str) -> str:
    """The warning _resolve_auto_dtype logs when the GPU cannot run the checkpoint's dtype."""
    return (
        f"Your device {gpu_name!r} (with compute capability {version}) doesn't support "
        f"torch.{config_dtype}. Falling back to torch.{dtype} for compatibility."
    )


def bf16_refusal(dtype: str, capability: int, gpu_name: str, version: str) -> str | None:
    """vLLM's message for bfloat16 on a GPU below 8.0 (CudaPlatform.check_if_supports_dtype,
    raised in the engine core's worker init_device), else None."""
    if dtype != "bfloat16" or capability >= BF16_MIN_CAPABILITY:
        return None
    return (
        "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
        f"Your {gpu_name} GPU has compute capability {version}. "
        "You can use float16 instead by explicitly setting the `dtype` flag in CLI, "
        "for example: --dtype=half."
    )
