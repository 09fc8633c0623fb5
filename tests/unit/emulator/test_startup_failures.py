"""Startup failures the toolkit must classify: no GPU, missing/gated model, tiktoken."""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path
from typing import Any

from conftest import GATED, GPT_OSS, TARGET, port_listening, stand_in_configs, write_stand_in


def test_no_gpu_file_fails_like_vllm_without_nvml(launch: Any, lab_env: dict[str, str], tmp_path: Path) -> None:
    env = {**lab_env, "SPECFLEET_EMULATOR_GPU_FILE": str(tmp_path / "absent.json")}
    process = launch(TARGET, env=env, ready=False)
    assert process.wait_exit() == 1
    assert "NVML Shared Library Not Found" in process.output
    assert "No platform detected, vLLM is running on UnspecifiedPlatform" in process.output
    last = process.stderr[-1]
    assert "RuntimeError: Failed to infer device type" in last


def test_missing_model_offline(launch: Any, lab_env: dict[str, str]) -> None:
    process = launch("meta-llama/Llama-9-400B", ready=False)
    assert process.wait_exit() == 1
    assert process.stderr[-1].endswith(
        "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached "
        "snapshot folder for the specified revision on the local disk and outgoing traffic has "
        "been disabled. To enable repo look-ups and downloads online, pass "
        "'local_files_only=False' as input."
    )


def test_missing_model_online_without_a_route(launch: Any, lab_env: dict[str, str]) -> None:
    env = {key: value for key, value in lab_env.items() if key != "HF_HUB_OFFLINE"}
    process = launch("meta-llama/Llama-9-400B", env=env, ready=False)
    assert process.wait_exit() == 1
    assert "Please check your internet connection" in process.stderr[-1]


def test_gated_model(launch: Any) -> None:
    process = launch(GATED, ready=False)
    assert process.wait_exit() == 1
    errors = "\n".join(process.stderr)
    assert "huggingface_hub.errors.GatedRepoError: 401 Client Error." in errors
    assert (f"Cannot access gated repo for url https://huggingface.co/{GATED}/resolve/main/config.json.") in errors
    assert "OSError: You are trying to access a gated repo." in errors


def test_missing_draft_model(launch: Any) -> None:
    process = launch(
        TARGET,
        ["--speculative-config", '{"method": "eagle3", "model": "nobody/EAGLE3-missing", "num_speculative_tokens": 3}'],
        ready=False,
    )
    assert process.wait_exit() == 1
    assert "LocalEntryNotFoundError" in process.stderr[-1]


def test_gpt_oss_without_tiktoken_files(launch: Any, lab_env: dict[str, str], lab_root: Path) -> None:
    process = launch(GPT_OSS, ["--max-model-len", "8192"], ready=False)
    assert process.wait_exit() == 1
    assert process.stderr[-1] == (
        f"(APIServer pid={process.proc.pid}) openai_harmony."
        "HarmonyError: error downloading or loading vocab file: "
        "failed to download or load vocab file"
    )
    assert not port_listening(process.port)


def test_gpt_oss_with_tiktoken_files(launch: Any, lab_env: dict[str, str], lab_root: Path) -> None:
    env = {**lab_env, "TIKTOKEN_ENCODINGS_BASE": str(lab_root / "encodings")}
    process = launch(GPT_OSS, ["--max-model-len", "8192", "--enforce-eager"], env=env)
    assert port_listening(process.port)


def test_local_model_directory(launch: Any, tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    snapshot = write_stand_in(hub, "local/model", stand_in_configs()[TARGET])
    target = tmp_path / "mnt-models"
    shutil.copytree(snapshot, target)
    process = launch(str(target), ["--max-model-len", "4096", "--enforce-eager"])
    status, _, body = process.get("/v1/models")
    assert status == 200 and str(target).encode() in body


def test_port_refuses_connections_until_ready(launch: Any, lab_env: dict[str, str]) -> None:
    slow = {**lab_env, "SPECFLEET_EMULATOR_TIME_SCALE": "0.05"}  # ~0.6 s to ready
    process = launch(TARGET, ["--max-model-len", "4096", "--enforce-eager"], env=slow, ready=False)
    time.sleep(0.25)
    assert process.proc.poll() is None
    with socket.socket() as sock:
        sock.settimeout(0.5)
        assert sock.connect_ex(("127.0.0.1", process.port)) != 0
    process.wait_ready()
    assert port_listening(process.port)
    status, _, body = process.get("/health")
    assert status == 200 and body == b""


def test_startup_log_lines(launch: Any) -> None:
    process = launch(
        TARGET, ["--max-model-len", "4096", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}']
    )
    out = process.stdout
    assert out[0].startswith("specfleet vLLM EMULATOR")
    text = "\n".join(out)
    assert "vLLM API server version 0.20.2-emulated" in text
    assert ("speculative_config=SpeculativeConfig(method='ngram', model=None, num_spec_tokens=4)") in text
    assert ("Async scheduling not supported with ngram-based speculative decoding and will be disabled.") in text
    assert "GPU KV cache size: " in text and "Maximum concurrency for 4,096 tokens" in text
    assert "/torch_compile_cache/" in text and "/rank_0_0 for vLLM's torch.compile" in text
    for needle in (
        "Route: /health, Methods: GET",
        "INFO:     Started server process",
        "INFO:     Waiting for application startup.",
        "INFO:     Application startup complete.",
    ):
        assert needle in text
    assert text.index("Waiting for application startup.") < text.index("Application startup complete.")
