"""The emulated GPU, described by a JSON file the lab's nvidia runtime shim mounts.

On a real unit `--runtime nvidia` injects the Tegra driver into the container; in the
lab the shim bind-mounts this file instead. Without it the emulator fails the way vLLM
fails in a container that has no GPU driver (no NVML, no platform detected).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import FRONTEND_FRAMES, VLLM_SITE, StartupFailure

DEFAULT_GPU_FILE = "/run/specfleet-lab/gpu.json"
DEVICE_CLASSES = ("thor", "agx_orin", "orin_nx", "orin_nano", "dgx_spark")

NO_DEVICE_MESSAGE = (
    "RuntimeError: Failed to infer device type, please set the environment variable "
    "`VLLM_LOGGING_LEVEL=DEBUG` to turn on verbose logging to help debug the issue."
)


@dataclass(frozen=True)
class GpuSpec:
    device_class: str
    gpu_name: str
    memory_total_mib: int
    memory_used_by_others_mib: int
    memory_bandwidth_gbps: float
    # CUDA compute capability (major, minor), as nvidia-smi's compute_cap "8.7" gives it.
    compute_capability: tuple[int, int]

    @property
    def capability(self) -> int:
        """As vLLM compares it (DeviceCapability.to_int): major * 10 + minor, 8.7 -> 87."""
        major, minor = self.compute_capability
        return major * 10 + minor

    @property
    def capability_version(self) -> str:
        """As vLLM prints it (DeviceCapability.as_version_str): "8.7"."""
        major, minor = self.compute_capability
        return f"{major}.{minor}"

    @property
    def total_gib(self) -> float:
        return self.memory_total_mib / 1024.0

    @property
    def used_by_others_gib(self) -> float:
        return self.memory_used_by_others_mib / 1024.0

    def also_used(self, mib: int) -> GpuSpec:
        """This GPU with ``mib`` more held outside this server (another server, a drafter's leak)."""
        return dataclasses.replace(self, memory_used_by_others_mib=self.memory_used_by_others_mib + mib)


def gpu_file_path(env: Mapping[str, str]) -> Path:
    return Path(env.get("SPECFLEET_EMULATOR_GPU_FILE", DEFAULT_GPU_FILE))


def no_device_failure() -> StartupFailure:
    """vLLM in a container started without the nvidia runtime: no NVML, no platform."""
    return StartupFailure(
        exception_text=NO_DEVICE_MESSAGE,
        frames=FRONTEND_FRAMES + [(f"{VLLM_SITE}/vllm/config/device.py", 58, "__post_init__", "raise RuntimeError(")],
    )


_CAPABILITY = re.compile(r"^(\d+)\.(\d)$")


def parse_compute_capability(value: object) -> tuple[int, int]:
    """The string "8.7" -> (8, 7).

    A string, as nvidia-smi's compute_cap reports it, not a JSON number: a float cannot keep
    what the unit says (a "11.0" written as 11 would read back without its minor). The minor is
    one digit, as vLLM asserts (0 <= minor < 10).
    """
    match = _CAPABILITY.match(value) if isinstance(value, str) else None
    if not match:
        raise ValueError(f"compute_capability must be a string like \"8.7\" (major.minor), got {value!r}")
    return int(match.group(1)), int(match.group(2))


def parse_gpu_spec(data: object) -> GpuSpec:
    """Validate the GPU description; raises ValueError naming the bad field."""
    if not isinstance(data, dict):
        raise ValueError("GPU description must be a JSON object")
    device_class = data.get("device_class")
    if device_class not in DEVICE_CLASSES:
        raise ValueError(f"device_class must be one of {', '.join(DEVICE_CLASSES)}, got {device_class!r}")
    for key in ("gpu_name", "memory_total_mib", "memory_bandwidth_gbps", "compute_capability"):
        if key not in data:
            raise ValueError(f"missing field {key!r}")
    total = int(data["memory_total_mib"])
    used = int(data.get("memory_used_by_others_mib", 0) or 0)
    bandwidth = float(data["memory_bandwidth_gbps"])
    if total <= 0 or bandwidth <= 0 or used < 0:
        raise ValueError(
            "memory_total_mib and memory_bandwidth_gbps must be positive, memory_used_by_others_mib non-negative"
        )
    return GpuSpec(
        device_class=str(device_class),
        gpu_name=str(data["gpu_name"]),
        memory_total_mib=total,
        memory_used_by_others_mib=used,
        memory_bandwidth_gbps=bandwidth,
        compute_capability=parse_compute_capability(data["compute_capability"]),
    )


def load_gpu_spec(env: Mapping[str, str]) -> GpuSpec:
    """Read the GPU file or fail like vLLM without a GPU driver."""
    path = gpu_file_path(env)
    if not path.is_file():
        raise no_device_failure()
    try:
        return parse_gpu_spec(json.loads(path.read_text()))
    except (ValueError, json.JSONDecodeError) as exc:
        # A malformed file is a lab bug, not a vLLM failure: say so plainly.
        raise StartupFailure(
            exception_text=f"RuntimeError: specfleet emulator: invalid GPU description {path}: {exc}",
        ) from exc
