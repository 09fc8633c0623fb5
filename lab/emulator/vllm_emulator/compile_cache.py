"""The torch.compile cache directory vLLM keeps under VLLM_CACHE_ROOT.

vLLM names each compiled artifact set by a hash of the factors that change the compiled
graph; the lab pre-warms it on one unit and fans it out, so the hash must be a stable
function of those factors and a half-written cache must never look complete. The
emulator writes into a temporary sibling directory and renames it into place.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MANIFEST = "specfleet-emulator-cache.json"


def cache_root(env: Mapping[str, str]) -> Path:
    if env.get("VLLM_CACHE_ROOT"):
        return Path(env["VLLM_CACHE_ROOT"])
    home = env.get("HOME") or os.path.expanduser("~")
    return Path(home) / ".cache" / "vllm"


def compile_hash(factors: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of the factors, first 10 hex digits (like vLLM)."""
    canonical = json.dumps(factors, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:10]


def rank_dir(root: Path, digest: str) -> Path:
    return root / "torch_compile_cache" / digest / "rank_0_0"


def is_cached(root: Path, digest: str) -> bool:
    return (rank_dir(root, digest) / MANIFEST).is_file()


def write_cache(root: Path, digest: str, factors: Mapping[str, Any], drafter: bool, filler_bytes: int = 0) -> Path:
    """Write a complete cache entry atomically; returns the rank directory."""
    parent = root / "torch_compile_cache"
    parent.mkdir(parents=True, exist_ok=True)
    final = parent / digest
    if is_cached(root, digest):
        return rank_dir(root, digest)
    staging = Path(tempfile.mkdtemp(prefix=f".{digest}.", dir=parent))
    try:
        rank = staging / "rank_0_0"
        graphs = ["backbone"] + (["eagle_head"] if drafter else [])
        for graph in graphs:
            (rank / graph).mkdir(parents=True)
            (rank / graph / "computation_graph.py").write_text(
                "# specfleet vLLM emulator: placeholder for an Inductor-compiled graph\n"
            )
            if filler_bytes:
                with open(rank / graph / "inductor_artifacts.bin", "wb") as blob:
                    blob.write(hashlib.sha256(digest.encode()).digest() * (filler_bytes // 32 + 1))
        (rank / "vllm_compile_cache.py").write_text(repr({"hash": digest}) + "\n")
        (rank / MANIFEST).write_text(
            json.dumps(
                {"emulator": True, "hash": digest, "factors": dict(factors)}, indent=2, sort_keys=True, default=str
            )
            + "\n"
        )
        if final.exists():
            # Another cache dir with the same name but no manifest is a leftover from an
            # interrupted copy; replace it rather than trusting it.
            shutil.rmtree(final, ignore_errors=True)
        os.rename(staging, final)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not is_cached(root, digest):
            raise
    return rank_dir(root, digest)
