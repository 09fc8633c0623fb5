"""The unit-side startup-log classifier (vllm_container) against the emulator's real output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specfleet.fleet.plugins.module_utils.vllm_logs import classify, resolved_spec_config
from conftest import EAGLE3, GATED, GPT_OSS, TARGET, TARGET_FP4, TARGET_FP8, THOR_GPU

# An Orin NX 16GB as the lab's gpu.json describes it (lab/profiles/kinds.yml).
ORIN_NX_GPU = {"device_class": "orin_nx", "gpu_name": "Orin (nvgpu)", "memory_total_mib": 15288,
               "memory_bandwidth_gbps": 102.4, "compute_capability": "8.7"}


def failed_output(launch: Any, model: str, extra: list[str], env: dict[str, str]) -> str:
    process = launch(model, extra, env=env, ready=False)
    assert process.wait_exit() != 0
    return process.output


@pytest.mark.parametrize(
    ("model", "extra", "expected"),
    [
        ("meta-llama/Llama-9-400B", [], "model_missing_offline"),
        (GATED, [], "gated_repo"),
        (GPT_OSS, [], "tiktoken_missing"),
        (TARGET, ["--speculative-config", json.dumps(
            {"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": 3, "tensor_parallel_size": 1})],
         "spec_config_rejected"),
        (TARGET, ["--speculative-config", json.dumps(
            {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 5, "prompt_lookup_max": 2})],
         "spec_config_rejected"),
        (TARGET, ["--speculative-config", json.dumps({"method": "eagle9", "num_speculative_tokens": 3})],
         "spec_config_rejected"),
        (TARGET, ["--gpu-memory-utilization", "0.99"], "oom_at_start"),
        (TARGET, ["--no-such-flag"], "bad_arguments"),
    ],
)
def test_failure_classes(launch: Any, lab_env: dict[str, str], model: str, extra: list[str], expected: str) -> None:
    env = {key: value for key, value in lab_env.items() if key != "TIKTOKEN_ENCODINGS_BASE"}
    failure, decisive = classify(failed_output(launch, model, extra, env))
    assert failure == expected
    assert decisive


def test_weights_larger_than_the_budget(launch: Any, lab_env: dict[str, str], tmp_path: Path) -> None:
    small_gpu = tmp_path / "gpu.json"
    small_gpu.write_text(json.dumps({**THOR_GPU, "device_class": "orin_nano", "gpu_name": "Orin (nvgpu)",
                                     "memory_total_mib": 7441, "compute_capability": "8.7"}))
    env = {**lab_env, "SPECFLEET_EMULATOR_GPU_FILE": str(small_gpu)}
    failure, _ = classify(failed_output(launch, TARGET, ["--gpu-memory-utilization", "0.7"], env))
    assert failure == "oom_at_start"


def test_no_gpu(launch: Any, lab_env: dict[str, str], tmp_path: Path) -> None:
    env = {**lab_env, "SPECFLEET_EMULATOR_GPU_FILE": str(tmp_path / "absent.json")}
    assert classify(failed_output(launch, TARGET, [], env))[0] == "nvml_runtime_error"


def test_healthy_start_classifies_nothing_and_reports_the_resolved_config(launch: Any) -> None:
    server = launch(TARGET, ["--speculative-config", json.dumps(
        {"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": 3})])
    assert classify(server.output) == (None, [])
    assert resolved_spec_config(server.output) == {"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": 3}
    baseline = launch(TARGET, [])
    assert resolved_spec_config(baseline.output) is None


def gpu_env(lab_env: dict[str, str], tmp_path: Path, gpu: dict[str, Any]) -> dict[str, str]:
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(gpu))
    return {**lab_env, "SPECFLEET_EMULATOR_GPU_FILE": str(path)}


def test_modelopt_fp8_on_an_orin_is_gpu_unsupported_with_vllms_numbers(
    launch: Any, lab_env: dict[str, str], tmp_path: Path
) -> None:
    output = failed_output(launch, TARGET_FP8, ["--max-model-len", "4096"], gpu_env(lab_env, tmp_path, ORIN_NX_GPU))
    failure, decisive = classify(output)
    assert failure == "gpu_unsupported"
    assert len(decisive) == 1, decisive
    assert "Value error, The quantization method modelopt is not supported for the current GPU. " in decisive[0]
    assert "Minimum capability: 89. Current capability: 87." in decisive[0]
    assert "1 validation error for VllmConfig" in output  # the frontend's pydantic error, as vLLM V1
    assert "EngineCore" not in output, "refused before any engine core starts"


def test_the_capability_check_runs_after_the_speculative_config_and_before_async_scheduling(
    launch: Any, lab_env: dict[str, str], tmp_path: Path
) -> None:
    env = gpu_env(lab_env, tmp_path, ORIN_NX_GPU)
    bad_spec = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 5,
                           "prompt_lookup_max": 2})
    assert classify(failed_output(launch, TARGET_FP8, ["--speculative-config", bad_spec], env))[0] == (
        "spec_config_rejected")
    ngram = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4})
    output = failed_output(launch, TARGET_FP8, ["--speculative-config", ngram, "--async-scheduling"], env)
    assert classify(output)[0] == "gpu_unsupported"
    assert "async scheduling is only supported" not in output


def test_bfloat16_below_8_0_is_gpu_unsupported(launch: Any, lab_env: dict[str, str], tmp_path: Path) -> None:
    # No Jetson is below 8.0: a made-up GPU, to show the emulator as strict as vLLM for any gpu.json.
    turing = {**ORIN_NX_GPU, "gpu_name": "Tesla T4", "compute_capability": "7.5"}
    env = gpu_env(lab_env, tmp_path, turing)
    output = failed_output(launch, TARGET, ["--dtype", "bfloat16", "--max-model-len", "4096"], env)
    failure, decisive = classify(output)
    assert failure == "gpu_unsupported"
    assert decisive == [line.strip() for line in output.splitlines() if "Bfloat16 is only supported" in line]
    assert decisive[0].endswith(
        "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 GPU "
        "has compute capability 7.5. You can use float16 instead by explicitly setting the `dtype` flag in CLI, "
        "for example: --dtype=half.")
    assert "Engine core initialization failed" in output  # raised in the engine core's worker, as in vLLM


@pytest.mark.parametrize(
    ("model", "extra", "quantization"),
    [
        (TARGET_FP4, [], "modelopt_fp4"),  # Marlin weight-only below 10.0: minimum 7.5
        (TARGET, ["--quantization", "fp8"], "fp8"),  # online FP8: minimum 7.5
    ],
)
def test_what_an_orin_can_run_starts(
    launch: Any, lab_env: dict[str, str], tmp_path: Path, model: str, extra: list[str], quantization: str
) -> None:
    server = launch(model, ["--max-model-len", "4096", "--enforce-eager", *extra],
                    env=gpu_env(lab_env, tmp_path, ORIN_NX_GPU))
    assert classify(server.output) == (None, [])
    config_line = next(line for line in server.output.splitlines() if "Initializing a V1 LLM engine" in line)
    assert f"quantization={quantization}, " in config_line


def test_a_gpu_below_8_0_runs_a_bfloat16_checkpoint_in_float16_when_dtype_is_auto(
    launch: Any, lab_env: dict[str, str], tmp_path: Path
) -> None:
    turing = {**ORIN_NX_GPU, "gpu_name": "Tesla T4", "compute_capability": "7.5", "memory_total_mib": 40960}
    server = launch(TARGET, ["--max-model-len", "4096", "--enforce-eager"], env=gpu_env(lab_env, tmp_path, turing))
    assert "doesn't support torch.bfloat16. Falling back to torch.float16 for compatibility." in server.output
    assert "dtype=torch.float16, " in server.output
