"""Fixtures for the vLLM emulator tests: stand-in HF cache, GPU file, server processes."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

EMULATOR_DIR = Path(__file__).resolve().parents[3] / "lab" / "emulator"
if str(EMULATOR_DIR) not in sys.path:
    sys.path.insert(0, str(EMULATOR_DIR))

FAST_SCALE = "0.01"
LLAMA_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}
TARGET = "meta-llama/Llama-3.1-8B-Instruct"
TARGET_FP8 = "nvidia/Llama-3.1-8B-Instruct-FP8"
TARGET_FP4 = "nvidia/Llama-3.1-8B-Instruct-FP4"
EAGLE3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
DRAFT_1B = "meta-llama/Llama-3.2-1B-Instruct"
GPT_OSS = "openai/gpt-oss-20b"
GATED = "meta-llama/Llama-3.3-70B-Instruct"
THOR_GPU = {"device_class": "thor", "gpu_name": "NVIDIA Thor", "memory_total_mib": 125772, "memory_bandwidth_gbps": 273,
            "compute_capability": "11.0"}
EAGLE3_K5 = json.dumps({"method": "eagle3", "model": EAGLE3, "num_speculative_tokens": 5})


def stand_in_configs() -> dict[str, dict[str, Any]]:
    return {
        TARGET: {
            **LLAMA_CONFIG,
            "specfleet_emulated": {"weights_gib": 14.99, "precision": "bf16", "family": "llama3.1-8b"},
        },
        TARGET_FP8: {
            **LLAMA_CONFIG,
            # As lab/specfleet_lab/models.py writes the ModelOpt stand-ins.
            "quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8"},
            "specfleet_emulated": {"weights_gib": 8.49, "precision": "fp8", "family": "llama3.1-8b"},
        },
        TARGET_FP4: {
            **LLAMA_CONFIG,
            "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"},
            "specfleet_emulated": {"weights_gib": 6.07, "precision": "fp4", "family": "llama3.1-8b"},
        },
        EAGLE3: {
            **LLAMA_CONFIG,
            "architectures": ["LlamaForCausalLMEagle3"],
            "num_hidden_layers": 1,
            "draft_vocab_size": 32000,
            "specfleet_emulated": {"weights_gib": 0.79, "precision": "bf16", "family": "eagle3-llama3.1-8b"},
        },
        DRAFT_1B: {
            **LLAMA_CONFIG,
            "hidden_size": 2048,
            "num_hidden_layers": 16,
            "intermediate_size": 8192,
            "specfleet_emulated": {"weights_gib": 2.3, "precision": "bf16", "family": "llama3.2-1b"},
        },
        GPT_OSS: {
            "architectures": ["GptOssForCausalLM"],
            "model_type": "gpt_oss",
            "hidden_size": 2880,
            "num_hidden_layers": 24,
            "num_attention_heads": 64,
            "num_key_value_heads": 8,
            "head_dim": 64,
            "vocab_size": 201088,
            "max_position_embeddings": 131072,
            "specfleet_emulated": {
                "weights_gib": 12.8,
                "active_weights_gib": 2.4,
                "precision": "mxfp4",
                "family": "gpt-oss-20b",
                "needs_tiktoken": True,
            },
        },
        GATED: {**LLAMA_CONFIG, "specfleet_emulated": {"weights_gib": 131.0, "precision": "bf16"}},
    }


def write_stand_in(hub: Path, repo: str, config: dict[str, Any], gated: bool = False) -> Path:
    repo_dir = hub / ("models--" + repo.replace("/", "--"))
    (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
    (repo_dir / "refs" / "main").write_text("0e9e39f249a16976918f6564b8830bc894c89659")
    snapshot = repo_dir / "snapshots" / "0e9e39f249a16976918f6564b8830bc894c89659"
    snapshot.mkdir(parents=True, exist_ok=True)
    (snapshot / "config.json").write_text(json.dumps(config))
    if gated:
        (snapshot / ".specfleet-gated").write_text("")
    return snapshot


@pytest.fixture(scope="session")
def lab_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A session-wide lab: HF cache with stand-in models, a Thor GPU file."""
    root = tmp_path_factory.mktemp("emulab")
    hub = root / "hf" / "hub"
    for repo, config in stand_in_configs().items():
        write_stand_in(hub, repo, config, gated=(repo == GATED))
    (root / "gpu.json").write_text(json.dumps(THOR_GPU))
    encodings = root / "encodings"
    encodings.mkdir()
    for name in ("o200k_base.tiktoken", "cl100k_base.tiktoken"):
        (encodings / name).write_text("placeholder\n")
    return root


def build_env(lab_root: Path, work_dir: Path) -> dict[str, str]:
    """Environment for emulator processes (own compile cache and faults file)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("SPECFLEET_", "VLLM_", "HF_", "TIKTOKEN"))
    }
    env.update(
        {
            "HF_HOME": str(lab_root / "hf"),
            "HF_HUB_OFFLINE": "1",
            "SPECFLEET_EMULATOR_GPU_FILE": str(lab_root / "gpu.json"),
            "SPECFLEET_EMULATOR_FAULTS_FILE": str(work_dir / "faults.json"),
            # Absent unless a test writes it (full speed); never the host's /run/specfleet-lab.
            "SPECFLEET_EMULATOR_POWER_FILE": str(work_dir / "power" / "power.json"),
            # Absent unless a test makes it (no emulated page cache, as before it existed).
            "SPECFLEET_EMULATOR_PAGE_CACHE_DIR": str(work_dir / "page-cache"),
            "SPECFLEET_EMULATOR_TIME_SCALE": FAST_SCALE,
            "SPECFLEET_EMULATOR_NOISE": "0",
            "VLLM_CACHE_ROOT": str(work_dir / "vllm-cache"),
            "VLLM_LOG_STATS_INTERVAL": "10",
            "PYTHONPATH": str(EMULATOR_DIR),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


@pytest.fixture()
def lab_env(lab_root: Path, tmp_path: Path) -> dict[str, str]:
    return build_env(lab_root, tmp_path)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class EmulatorProcess:
    """`python3 -m vllm_emulator serve ...` on 127.0.0.1 and an ephemeral port."""

    def __init__(self, model: str, extra: list[str], env: dict[str, str]) -> None:
        self.port = free_port()
        self.started = time.monotonic()
        self._spawn(["serve", model, "--host", "127.0.0.1", "--port", str(self.port), *extra], env)

    def _spawn(self, argv: list[str], env: dict[str, str], module: str = "vllm_emulator") -> None:
        """Run `python3 -m MODULE ARGV` from the emulator's folder, its output pumped into lists."""
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *argv],
            cwd=str(EMULATOR_DIR),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._ready = threading.Event()
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.stdout, True), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr, False), daemon=True).start()

    def _pump(self, stream: Any, sink: list[str], watch: bool) -> None:
        for line in stream:
            sink.append(line.rstrip("\n"))
            if watch and "Application startup complete." in line:
                self._ready.set()

    def wait_ready(self, timeout: float = 20.0) -> float:
        """Seconds from launch to 'Application startup complete.' (fails if it exits)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._ready.wait(0.05):
                return time.monotonic() - self.started
            if self.proc.poll() is not None:
                time.sleep(0.1)
                raise AssertionError(f"emulator exited {self.proc.returncode}:\n" + self.output)
        raise AssertionError("emulator not ready in time:\n" + self.output)

    def wait_exit(self, timeout: float = 20.0) -> int:
        code = self.proc.wait(timeout=timeout)
        time.sleep(0.1)  # let the pump threads drain the pipes
        return code

    @property
    def output(self) -> str:
        return "\n".join(self.stdout) + "\n--- stderr ---\n" + "\n".join(self.stderr)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # our own child, by its pid
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)

    # --- HTTP helpers --------------------------------------------------------------------

    def connection(self, timeout: float = 10.0) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        conn = self.connection()
        try:
            conn.request("GET", path, headers=headers or {})
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            conn.close()

    def post(self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, Any]:
        conn = self.connection()
        try:
            conn.request(
                "POST", path, body=json.dumps(body), headers={"content-type": "application/json", **(headers or {})}
            )
            response = conn.getresponse()
            raw = response.read()
            try:
                return response.status, json.loads(raw)
            except ValueError:
                return response.status, raw
        finally:
            conn.close()

    def stream(self, path: str, body: dict[str, Any], timeout: float = 20.0) -> list[tuple[float, Any]]:
        """POST with stream=true; returns (arrival time, parsed event) per SSE event."""
        conn = self.connection(timeout)
        try:
            conn.request(
                "POST", path, body=json.dumps({**body, "stream": True}), headers={"content-type": "application/json"}
            )
            response = conn.getresponse()
            assert response.status == 200, response.read()
            return read_sse(response)
        finally:
            conn.close()

    def metrics(self) -> str:
        status, _, body = self.get("/metrics")
        assert status == 200
        return body.decode()


def read_sse(response: http.client.HTTPResponse) -> list[tuple[float, Any]]:
    events: list[tuple[float, Any]] = []
    buffer = b""
    while True:
        line = response.readline()
        if not line:
            break
        buffer += line
        if line in (b"\n", b"\r\n"):
            text = buffer.decode().strip()
            buffer = b""
            if not text.startswith("data: "):
                continue
            data = text[len("data: ") :]
            events.append((time.monotonic(), data if data == "[DONE]" else json.loads(data)))
            if data == "[DONE]":
                break
    return events


class Launcher:
    """Starts emulator processes and stops every one of them (by pid) at teardown."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.started: list[EmulatorProcess] = []

    def __call__(
        self, model: str = TARGET, extra: list[str] | None = None, env: dict[str, str] | None = None, ready: bool = True
    ) -> EmulatorProcess:
        process = EmulatorProcess(model, extra or [], env or self.env)
        self.started.append(process)
        if ready:
            process.wait_ready()
        return process

    def stop_all(self) -> None:
        for process in self.started:
            process.stop()


@pytest.fixture()
def launch(lab_env: dict[str, str]) -> Iterator[Launcher]:
    launcher = Launcher(lab_env)
    yield launcher
    launcher.stop_all()


@pytest.fixture(scope="module")
def module_launch(lab_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launcher]:
    """Like `launch`, for servers shared by the tests of one module."""
    launcher = Launcher(build_env(lab_root, tmp_path_factory.mktemp("module")))
    yield launcher
    launcher.stop_all()


def parse_metrics(text: str) -> dict[str, float]:
    """Sample name with labels -> value (ignores HELP/TYPE lines)."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        samples[key] = float(value)
    return samples
