"""torch.compile cache: stable hash, atomic write, warm start much faster than cold."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from conftest import TARGET
from vllm_emulator.compile_cache import MANIFEST, compile_hash, is_cached, write_cache


def test_hash_is_stable_and_sensitive() -> None:
    factors = {"gpu_name": "NVIDIA Thor", "model": TARGET, "max_model_len": 8192}
    digest = compile_hash(factors)
    assert re.fullmatch(r"[0-9a-f]{10}", digest)
    assert compile_hash(dict(reversed(list(factors.items())))) == digest
    assert compile_hash({**factors, "max_model_len": 4096}) != digest
    assert compile_hash({**factors, "gpu_name": "Orin (nvgpu)"}) != digest


def test_write_is_atomic_and_complete(tmp_path: Path) -> None:
    rank = write_cache(tmp_path, "0123456789", {"a": 1}, drafter=True)
    assert rank == tmp_path / "torch_compile_cache" / "0123456789" / "rank_0_0"
    assert (rank / MANIFEST).is_file() and (rank / "eagle_head").is_dir()
    assert is_cached(tmp_path, "0123456789")
    leftovers = [p.name for p in (tmp_path / "torch_compile_cache").iterdir()]
    assert leftovers == ["0123456789"]
    # A directory without a manifest (an interrupted copy) does not count as a hit.
    (tmp_path / "torch_compile_cache" / "badbadbad0" / "rank_0_0").mkdir(parents=True)
    assert not is_cached(tmp_path, "badbadbad0")


def test_warm_cache_shortens_startup(launch: Any, lab_env: dict[str, str]) -> None:
    env = {**lab_env, "SPECFLEET_EMULATOR_TIME_SCALE": "0.02"}
    args = ["--max-model-len", "4096"]
    cold = launch(TARGET, args, env=env)
    cold.wait_ready()
    cold.stop()
    assert "Compiling a graph for dynamic shape takes" in cold.output
    hashes = re.findall(r"torch_compile_cache/([0-9a-f]{10})/rank_0_0", cold.output)
    assert hashes
    cache_dir = Path(lab_env["VLLM_CACHE_ROOT"]) / "torch_compile_cache" / hashes[0]
    assert (cache_dir / "rank_0_0" / MANIFEST).is_file()

    warm = launch(TARGET, args, env=env)
    warm.wait_ready()
    assert "Directly load the compiled graph(s) for dynamic shape from the cache" in warm.output
    assert re.findall(r"torch_compile_cache/([0-9a-f]{10})/rank_0_0", warm.output) == hashes
    # seed 003: ~45 s cold vs ~5 s warm. Compared in the emulated seconds vLLM's own log
    # line reports, not wall time, so a loaded machine cannot flip the result.
    cold_compile, warm_compile = (
        float(re.search(r"torch.compile takes ([\d.]+) s in total", run.output).group(1)) for run in (cold, warm)
    )
    assert cold_compile > 5 * warm_compile, (cold_compile, warm_compile)

    other = launch(TARGET, ["--max-model-len", "2048"])
    assert "Compiling a graph for dynamic shape takes" in other.output
    eager = launch(TARGET, args + ["--enforce-eager"])
    assert "torch.compile" not in eager.output
