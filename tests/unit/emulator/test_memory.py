"""Memory budget on UMA: vLLM's startup check, weight OOM, KV-cache sizing."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from conftest import EAGLE3, TARGET, TARGET_FP4, TARGET_FP8, THOR_GPU, stand_in_configs
from vllm_emulator.gpu import parse_gpu_spec
from vllm_emulator.hub import parse_model_info
from vllm_emulator.memory import free_memory_gib, kv_bytes_per_token, plan_memory
from vllm_emulator.specconfig import validate_speculative_config

CONFIGS = stand_in_configs()
FREE_MEMORY = re.compile(
    r"^ValueError: Free memory on device cuda:0 \((\d+\.\d\d)/(\d+\.\d\d) GiB\) on startup is "
    r"less than desired GPU memory utilization \((0\.\d+), (\d+\.\d\d) GiB\)\. Decrease GPU "
    r"memory utilization or reduce GPU memory used by other processes\.$"
)


def model(name: str) -> Any:
    return parse_model_info(name, Path("/m"), CONFIGS[name])


def plan(
    gpu: dict[str, Any] | None = None,
    name: str = TARGET,
    util: float = 0.9,
    max_model_len: int = 8192,
    speculative: Any = None,
) -> Any:
    return plan_memory(
        parse_gpu_spec(gpu or THOR_GPU), model(name), speculative, util, max_model_len, 256, 8192, "auto", False
    )


def test_thor_plan_fits() -> None:
    result = plan()
    assert result.failure is None
    assert result.kv_bytes_per_token == 131072  # 2 x 32 layers x 8 kv heads x 128 x 2 bytes
    assert result.kv_tokens % 16 == 0 and result.kv_tokens > 90 * 8192
    assert round(result.requested_gib, 2) == 110.54  # 0.9 x 122.82 GiB


def test_free_memory_check_matches_vllm_text() -> None:
    busy = {**THOR_GPU, "memory_used_by_others_mib": 40 * 1024}
    result = plan(busy)
    assert result.failure_kind == "free_memory"
    match = FREE_MEMORY.match(result.failure)
    assert match, result.failure
    free, total, util, requested = match.groups()
    assert float(total) == 122.82 and util == "0.9" and float(requested) == 110.54
    assert float(free) == round(free_memory_gib(parse_gpu_spec(busy)), 2)


def test_weights_that_cannot_load_are_a_cuda_oom() -> None:
    nano = {
        "device_class": "orin_nano",
        "gpu_name": "Orin (nvgpu)",
        "memory_total_mib": 7620,
        "memory_bandwidth_gbps": 102,
        "compute_capability": "8.7",
    }
    result = plan(nano, util=0.8)
    assert result.failure_kind == "weights_oom"
    assert result.failure.startswith("torch.OutOfMemoryError: CUDA out of memory.")


def test_no_room_for_kv_cache() -> None:
    orin_16 = {
        "device_class": "orin_nx",
        "gpu_name": "Orin (nvgpu)",
        "memory_total_mib": 15656,
        "memory_bandwidth_gbps": 102.4,
        "compute_capability": "8.7",
    }
    result = plan(orin_16, name=TARGET_FP8, util=0.6)  # 8.49 GiB weights, 9.17 GiB budget
    assert result.failure_kind == "no_kv"
    assert result.failure == (
        "ValueError: No available memory for the cache blocks. Try "
        "increasing `gpu_memory_utilization` when initializing the "
        "engine."
    )


def test_kv_cache_smaller_than_max_model_len() -> None:
    orin_16 = {
        "device_class": "orin_nx",
        "gpu_name": "Orin (nvgpu)",
        "memory_total_mib": 15656,
        "memory_bandwidth_gbps": 102.4,
        "compute_capability": "8.7",
    }
    result = plan(orin_16, name=TARGET_FP4, util=0.85, max_model_len=131072)
    assert result.failure_kind == "kv_too_small"
    assert "To serve at least one request with the model's max seq len (131072)" in result.failure
    assert "which is larger than the available KV cache memory" in result.failure


def test_draft_weights_and_draft_kv_come_out_of_the_same_budget() -> None:
    target = model(TARGET_FP4)
    spec = validate_speculative_config(
        {"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": 5}, target, 1, lambda name: model(name)
    )
    plain = plan(name=TARGET_FP4)
    speculating = plan(name=TARGET_FP4, speculative=spec)
    assert round(speculating.weights_gib, 2) == 6.86  # seed 003: 6.07 -> 6.86 GiB
    assert speculating.kv_bytes_per_token == plain.kv_bytes_per_token + kv_bytes_per_token(model(EAGLE3), "auto")
    assert speculating.kv_tokens < plain.kv_tokens


def test_startup_fails_with_the_free_memory_text(launch: Any, lab_env: dict[str, str], tmp_path: Path) -> None:
    gpu = tmp_path / "busy-gpu.json"
    gpu.write_text(json.dumps({**THOR_GPU, "memory_used_by_others_mib": 60000}))
    process = launch(
        TARGET,
        ["--gpu-memory-utilization", "0.7"],
        env={**lab_env, "SPECFLEET_EMULATOR_GPU_FILE": str(gpu)},
        ready=False,
    )
    assert process.wait_exit() == 1
    errors = "\n".join(process.stderr)
    assert re.search(
        r"ValueError: Free memory on device cuda:0 \(\d+\.\d\d/122\.82 GiB\) on "
        r"startup is less than desired GPU memory utilization \(0\.7, 85\.98 "
        r"GiB\)",
        errors,
    ), errors
    assert "EngineCore failed to start." in process.output
    assert errors.rstrip().endswith(
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"
    )


def test_startup_fails_when_weights_leave_no_kv(launch: Any, lab_env: dict[str, str], tmp_path: Path) -> None:
    gpu = tmp_path / "nx.json"
    gpu.write_text(
        json.dumps(
            {
                "device_class": "orin_nx",
                "gpu_name": "Orin (nvgpu)",
                "memory_total_mib": 15656,
                "memory_bandwidth_gbps": 102.4,
                "compute_capability": "8.7",
            }
        )
    )
    process = launch(
        TARGET_FP4,  # not the FP8 checkpoint: an Orin (8.7) refuses ModelOpt FP8 before any memory check
        ["--max-model-len", "4096", "--gpu-memory-utilization", "0.45"],
        env={**lab_env, "SPECFLEET_EMULATOR_GPU_FILE": str(gpu)},
        ready=False,
    )
    assert process.wait_exit() == 1
    assert "Available KV cache memory: -" in process.output
    assert "ValueError: No available memory for the cache blocks." in "\n".join(process.stderr)
