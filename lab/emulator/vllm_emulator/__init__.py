"""specfleet vLLM emulator: a labelled stand-in for CUDA vLLM, used by the specfleet lab.

The lab has no GPU, so the serving container of each emulated Jetson unit runs this
package instead of `vllm serve` (and an emulated DGX Spark runs its `trtllm-serve`
flavour instead of TensorRT-LLM, see trtllm_cli.py). It honours the `vllm serve` flags the toolkit emits,
serves the OpenAI API and `/metrics` with vLLM's names, logs vLLM's startup and
SpecDecoding lines, fails the way vLLM fails, and paces tokens from a performance model
calibrated to the seeds' published figures. It never pretends to be real: the first log
line, the `server` header and `/specfleet/emulator` say what it is.
"""

from __future__ import annotations

import os
import re

EMULATOR_NAME = "specfleet-vllm-emulator"
EMULATOR_VERSION = "1.0.0"

# The vLLM release whose behaviour (flags, messages, metric names) is emulated. The lab
# may override it to emulate a different image tag; the API keeps vLLM's shape.
DEFAULT_EMULATED_VLLM_VERSION = "0.20.2"
# The TensorRT-LLM release of the DGX Spark image (nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6).
DEFAULT_EMULATED_TRTLLM_VERSION = "1.2.0rc6"


def emulated_vllm_version() -> str:
    """Version reported by `/version` (vLLM-shaped, no label: the label lives elsewhere)."""
    return os.environ.get("SPECFLEET_EMULATOR_VLLM_VERSION", DEFAULT_EMULATED_VLLM_VERSION)


def version_tuple(version: str) -> tuple[int, int, int]:
    """`0.24.0`, `0.26.1rc1.dev251`, `0.20` -> (major, minor, patch); unparsable: (0, 0, 0)."""
    match = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", version)
    if not match:
        return (0, 0, 0)
    return (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))


def labelled_version() -> str:
    """Version string used in logs, carrying the emulator label (e.g. `0.20.2-emulated`)."""
    return f"{emulated_vllm_version()}-emulated"


def emulated_trtllm_version() -> str:
    """Version `trtllm-serve`'s `/version` reports (TensorRT-LLM-shaped, no label)."""
    return os.environ.get("SPECFLEET_EMULATOR_TRTLLM_VERSION", DEFAULT_EMULATED_TRTLLM_VERSION)


def server_header() -> str:
    """Value of the HTTP `server` header: the explicit emulator label."""
    return f"{EMULATOR_NAME}/{EMULATOR_VERSION} (vllm {emulated_vllm_version()} emulated)"


def trtllm_server_header() -> str:
    """The `server` header of the `trtllm-serve` flavour: the same label, the other engine."""
    return f"{EMULATOR_NAME}/{EMULATOR_VERSION} (tensorrt-llm {emulated_trtllm_version()} emulated)"
