"""The unit-side startup-log classifier (vllm_container) against the emulator's real output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.specfleet.fleet.plugins.module_utils.vllm_logs import classify, resolved_spec_config
from conftest import EAGLE3, GATED, GPT_OSS, TARGET, THOR_GPU


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
                                     "memory_total_mib": 7441}))
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
