"""What the emulated GPU can run: compute capability in gpu.json, quantization and dtype checks."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import THOR_GPU
from specfleet_lab.config import LabConfig
from specfleet_lab.fixtures import gpu_json
from specfleet_lab.profiles import Unit, load_kinds
from vllm_emulator.gpu import parse_gpu_spec
from vllm_emulator.quantization import (
    auto_dtype_fallback_warning,
    bf16_refusal,
    capability_refusal,
    effective_quantization,
    resolve_dtype,
)

ORIN = 87
# The lab's stand-ins (lab/specfleet_lab/models.py) and the legacy hf_quant_config.json layout.
MODELOPT_FP8 = {"quant_method": "modelopt", "quant_algo": "FP8"}
MODELOPT_NVFP4 = {"quant_method": "modelopt", "quant_algo": "NVFP4"}
LEGACY_NVFP4 = {"quant_method": "modelopt", "quantization": {"quant_algo": "NVFP4", "group_size": 16}}


# ---- gpu.json ---------------------------------------------------------------------------
def test_compute_capability_is_read_as_vllm_compares_and_prints_it() -> None:
    spark = parse_gpu_spec({**THOR_GPU, "device_class": "dgx_spark", "compute_capability": "12.1"})
    assert spark.compute_capability == (12, 1)
    assert (spark.capability, spark.capability_version) == (121, "12.1")
    assert parse_gpu_spec(THOR_GPU).capability == 110


def test_a_gpu_description_without_compute_capability_is_refused_naming_it() -> None:
    without = {key: value for key, value in THOR_GPU.items() if key != "compute_capability"}
    with pytest.raises(ValueError, match="missing field 'compute_capability'"):
        parse_gpu_spec(without)


@pytest.mark.parametrize("value", [8.7, 87, "87", "8.7.0", "8.10", "", None])
def test_compute_capability_must_be_a_major_minor_string(value: Any) -> None:
    with pytest.raises(ValueError, match="compute_capability must be a string"):
        parse_gpu_spec({**THOR_GPU, "compute_capability": value})


# NVIDIA's CUDA GPUs list (developer.nvidia.com/cuda-gpus), per device class.
NVIDIA_CAPABILITY = {"thor": 110, "agx_orin": 87, "orin_nx": 87, "orin_nano": 87, "dgx_spark": 121}
KINDS = load_kinds(LabConfig().profiles_dir)


@pytest.mark.parametrize("kind_id", sorted(KINDS))
def test_the_lab_writes_each_kinds_capability_where_the_emulator_reads_it(kind_id: str) -> None:
    unit = Unit("unit-01", 0, kind_id, KINDS[kind_id], "10.0.0.10")
    gpu = parse_gpu_spec(gpu_json(unit))
    assert gpu.capability == NVIDIA_CAPABILITY[unit.device_class]


# ---- quantization -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("config", "cli", "expected"),
    [
        (MODELOPT_FP8, None, "modelopt"),
        (MODELOPT_NVFP4, None, "modelopt_fp4"),
        (LEGACY_NVFP4, None, "modelopt_fp4"),
        ({"quant_method": "modelopt", "quant_algo": "W4A16_NVFP4"}, None, "modelopt_fp4"),
        # vLLM's override replaces what `--quantization` said for a ModelOpt FP4 checkpoint.
        (MODELOPT_NVFP4, "modelopt", "modelopt_fp4"),
        ({"quant_method": "mxfp4"}, None, "mxfp4"),
        ({"quant_method": "AWQ"}, None, "awq"),
        (None, "fp8", "fp8"),  # online quantization of a 16-bit checkpoint
        (None, None, None),
    ],
)
def test_effective_quantization_is_what_vllm_resolves(config: Any, cli: str | None, expected: str | None) -> None:
    assert effective_quantization(config, cli) == expected


def test_modelopt_fp8_is_refused_on_an_orin_with_vllms_message() -> None:
    assert capability_refusal("modelopt", ORIN) == (
        "The quantization method modelopt is not supported for the current GPU. "
        "Minimum capability: 89. Current capability: 87."
    )


@pytest.mark.parametrize("method", ["modelopt_fp4", "mxfp4", "fp8", "awq", "gptq", None])
def test_what_an_orin_runs_is_not_refused(method: str | None) -> None:
    assert capability_refusal(method, ORIN) is None


def test_the_minimum_is_inclusive_and_every_method_has_its_own() -> None:
    assert capability_refusal("modelopt", 89) is None
    assert capability_refusal("mxfp4", 75) is not None and "Minimum capability: 80." in capability_refusal("mxfp4", 75)
    assert "Minimum capability: 75. Current capability: 70." in capability_refusal("modelopt_fp4", 70)
    # A method the emulator has no minimum for is let through rather than refused by guess.
    assert capability_refusal("quark", 10) is None


# ---- dtype ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("cli", "config", "capability", "expected"),
    [
        ("auto", "bfloat16", ORIN, ("bfloat16", False)),
        ("auto", "bfloat16", 75, ("float16", True)),  # falls back instead of failing
        ("auto", "float16", 75, ("float16", False)),
        ("auto", "float32", ORIN, ("bfloat16", False)),  # float32 checkpoints are downcast
        ("auto", "float32", 75, ("float16", False)),
        ("bfloat16", "bfloat16", 75, ("bfloat16", False)),  # as given: the engine core refuses it
        ("half", "bfloat16", ORIN, ("float16", False)),
        ("float", "bfloat16", ORIN, ("float32", False)),
    ],
)
def test_dtype_resolution(cli: str, config: str, capability: int, expected: tuple[str, bool]) -> None:
    assert resolve_dtype(cli, config, capability) == expected


def test_bfloat16_below_8_0_is_refused_with_vllms_message() -> None:
    assert bf16_refusal("bfloat16", 75, "Tesla T4", "7.5") == (
        "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 GPU has "
        "compute capability 7.5. You can use float16 instead by explicitly setting the `dtype` flag in CLI, "
        "for example: --dtype=half."
    )
    assert bf16_refusal("bfloat16", 80, "A100", "8.0") is None
    assert bf16_refusal("float16", 75, "Tesla T4", "7.5") is None


def test_auto_fallback_warning_is_vllms() -> None:
    assert auto_dtype_fallback_warning("Tesla T4", "7.5", "bfloat16", "float16") == (
        "Your device 'Tesla T4' (with compute capability 7.5) doesn't support torch.bfloat16. "
        "Falling back to torch.float16 for compatibility."
    )
