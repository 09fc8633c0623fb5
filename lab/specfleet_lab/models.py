"""Stand-in models and tiktoken files for the lab (EMULATED: no real weights anywhere).

`write_hf_store()` lays out a controller-side store in Hugging Face hub-cache layout,
    lab/build/hf-store/hub/models--org--name/{blobs/<hash>, snapshots/<rev>/<file> ->
    ../../blobs/<hash>, refs/main}
for every model and speculator head of specfleet/data/catalog.yml, then writes the
manifests (`specfleet cache manifest`, i.e. specfleet.cache.write_manifests) the
specfleet_hf_cache role ships with each repo. Each snapshot holds:

- config.json: real-ish architecture fields (the emulator's performance and KV-cache
  models read hidden_size, layers, heads, intermediate_size, vocab) plus the
  `specfleet_emulated` block the vLLM emulator sizes the model from (weights_gib,
  precision, family, needs_tiktoken from the catalog; active_weights_gib/params_b for
  the mixture-of-experts gpt-oss models);
- generation_config.json (vLLM applies its sampling defaults);
- model.safetensors: a small, valid safetensors file of generated filler bytes.

Blobs are named like the hub names them: the git blob sha1 for small files, the sha256
for the (LFS) weights file. Gated repos (catalog `gated: true`) get the emulator's
`.specfleet-gated` marker only when asked (`gated=True`); by default the organiser is
assumed to have pre-downloaded them with a token, as the real store would hold them.

`write_tiktoken()` writes stand-in o200k_base/cl100k_base files in tiktoken's format
(`base64(token) rank` lines) with generated content -- NOT OpenAI's files -- and returns
their sha256 for the inventory's `specfleet_tiktoken_encodings`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import struct
from pathlib import Path
from typing import Any

import yaml

from specfleet import cache as cache_module

GATED_MARKER = ".specfleet-gated"  # lab/emulator/vllm_emulator/hub.py
WEIGHTS_FILE = "model.safetensors"
DEFAULT_FILLER_BYTES = 64 * 1024
TIKTOKEN_ENCODINGS = ("o200k_base", "cl100k_base")
STAND_IN_NOTE = "specfleet lab stand-in: EMULATED model, no real weights (see lab/specfleet_lab/models.py)"

_LLAMA_8B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
_GPT_OSS: dict[str, Any] = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "hidden_size": 2880,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "intermediate_size": 2880,
    "vocab_size": 201088,
    "max_position_embeddings": 131072,
    "bos_token_id": 199998,
    "eos_token_id": 200002,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
_QWEN3: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "torch_dtype": "bfloat16",
}

# (catalog family, size) -> architecture fields (from the public config.json of each
# model) and, for mixture-of-experts models, what one decode step really reads:
# `active_params_b` of `params_b` parameters (the emulator's `active_weights_gib`).
ARCHITECTURES: dict[tuple[str, str], dict[str, Any]] = {
    ("llama3", "8b"): dict(_LLAMA_8B),
    ("llama3", "1b"): {
        **_LLAMA_8B,
        "hidden_size": 2048,
        "num_hidden_layers": 16,
        "head_dim": 64,
        "intermediate_size": 8192,
        "tie_word_embeddings": True,
    },
    # Llama-3.3-70B-Instruct's config.json (the DGX Spark draft-target pair's target).
    ("llama3", "70b"): {
        **_LLAMA_8B,
        "hidden_size": 8192,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "intermediate_size": 28672,
    },
    ("gpt-oss", "20b"): {
        **_GPT_OSS,
        "num_hidden_layers": 24,
        "num_local_experts": 32,
        "num_experts_per_tok": 4,
        "_moe": {"params_b": 20.9, "active_params_b": 3.6},
    },
    ("gpt-oss", "120b"): {
        **_GPT_OSS,
        "num_hidden_layers": 36,
        "num_local_experts": 128,
        "num_experts_per_tok": 4,
        "_moe": {"params_b": 116.8, "active_params_b": 5.1},
    },
    ("qwen3", "8b"): {**_QWEN3, "hidden_size": 4096, "num_hidden_layers": 36, "intermediate_size": 12288},
    ("qwen3", "0.6b"): {
        **_QWEN3,
        "hidden_size": 1024,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "intermediate_size": 3072,
        "tie_word_embeddings": True,
    },
}
# EAGLE-3 heads keep a reduced draft vocabulary where the published head does.
EAGLE3_DRAFT_VOCAB = {"llama3": 32000}

GENERATION_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama3": {"do_sample": True, "temperature": 0.6, "top_p": 0.9},
    "qwen3": {"do_sample": True, "temperature": 0.6, "top_p": 0.95, "top_k": 20},
    "gpt-oss": {},
}
QUANTIZATION = {
    "fp8": {"quant_method": "modelopt", "quant_algo": "FP8"},
    "fp4": {"quant_method": "modelopt", "quant_algo": "NVFP4"},
    "mxfp4": {"quant_method": "mxfp4"},
}

_SIZE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)b(?![a-z])")
_LLAMA_VERSION = re.compile(r"llama-?(\d+(?:\.\d+)?)")


# ---- naming ----------------------------------------------------------------------------
def size_of(repo: str) -> str:
    """`meta-llama/Llama-3.1-8B-Instruct` -> `8b`; `Qwen/Qwen3-0.6B` -> `0.6b`."""
    match = _SIZE.search(repo.split("/")[-1].lower().replace("_", "-"))
    if not match:
        raise ValueError(f"cannot tell the size of {repo} from its name")
    return match.group(1) + "b"


def family_name(repo: str, family: str) -> str:
    """The emulator's `family`: catalog family plus size, with Llama's point release
    (`llama3.1-8b`, `llama3.2-1b`, `gpt-oss-20b`, `qwen3-0.6b`) as in its tests."""
    base = repo.split("/")[-1].lower()
    if family == "llama3":
        version = _LLAMA_VERSION.search(base)
        if version:
            family = "llama" + version.group(1)
    return f"{family}-{size_of(repo)}"


def load_catalog(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


# ---- configs ---------------------------------------------------------------------------
def _architecture(family: str, size: str) -> dict[str, Any]:
    try:
        return json.loads(json.dumps(ARCHITECTURES[(family, size)]))
    except KeyError:
        raise ValueError(
            f"no stand-in architecture for {family} {size}: add it to ARCHITECTURES in lab/specfleet_lab/models.py"
        ) from None


def model_config(entry: dict[str, Any]) -> dict[str, Any]:
    """config.json of a catalog model (an entry of `models:`)."""
    repo, family, precision = entry["repo"], entry["family"], entry["precision"]
    config = _architecture(family, size_of(repo))
    moe = config.pop("_moe", None)
    if int(entry.get("vocab_size") or config["vocab_size"]) != config["vocab_size"]:
        raise ValueError(f"{repo}: catalog vocab_size {entry['vocab_size']} != {config['vocab_size']}")
    if precision in QUANTIZATION:
        config["quantization_config"] = dict(QUANTIZATION[precision])
    block: dict[str, Any] = {
        "weights_gib": float(entry["weights_gib"]),
        "precision": precision,
        "family": family_name(repo, family),
        "needs_tiktoken": bool(entry.get("needs_tiktoken", False)),
    }
    if moe:
        block["params_b"] = moe["params_b"]
        block["active_weights_gib"] = round(block["weights_gib"] * moe["active_params_b"] / moe["params_b"], 2)
    config["specfleet_emulated"] = block
    config["_name_or_path"] = repo
    config["specfleet_note"] = STAND_IN_NOTE
    return config


def head_config(head: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    """config.json of an EAGLE-3 head (an entry of `heads:`), shaped on its target:
    one decoder layer, `LlamaForCausalLMEagle3` (what vLLM's EAGLE-3 loader expects) and
    `eagle3` in the repo name (what vLLM's method auto-detection looks for)."""
    method = head.get("method", "eagle3")
    if method != "eagle3":
        raise ValueError(f"{head['repo']}: only EAGLE-3 heads have a stand-in (got {method})")
    family = target["family"]
    arch = _architecture(family, size_of(target["repo"]))
    arch.pop("_moe", None)
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": arch["hidden_size"],
        "num_hidden_layers": 1,
        "num_attention_heads": arch["num_attention_heads"],
        "num_key_value_heads": arch["num_key_value_heads"],
        "head_dim": arch.get("head_dim", arch["hidden_size"] // arch["num_attention_heads"]),
        "intermediate_size": arch["intermediate_size"] if family != "gpt-oss" else 4 * arch["hidden_size"],
        "vocab_size": arch["vocab_size"],
        "draft_vocab_size": EAGLE3_DRAFT_VOCAB.get(family, arch["vocab_size"]),
        "max_position_embeddings": arch["max_position_embeddings"],
        "torch_dtype": "bfloat16",
        "specfleet_emulated": {
            "weights_gib": float(head["weights_gib"]),
            "precision": str(head.get("precision", "bf16")),
            "family": "eagle3-" + family_name(target["repo"], family),
            "needs_tiktoken": False,
        },
        "_name_or_path": head["repo"],
        "specfleet_note": STAND_IN_NOTE,
    }
    return config


def generation_config(config: dict[str, Any], family: str) -> dict[str, Any]:
    data: dict[str, Any] = {"_from_model_config": False, "transformers_version": "4.56.0"}
    for key in ("bos_token_id", "eos_token_id"):
        if key in config:
            data[key] = config[key]
    data.update(GENERATION_DEFAULTS.get(family, {}))
    return data


# Catalog repos of the lab's real tiny models: `specfleet lab real-engine` installs their
# real files from the vLLM-CPU image (lab/specfleet_lab/real_engine.py); no stand-in is made.
REAL_MODEL_ORG = "specfleet/"


def stand_ins(catalog: dict[str, Any]) -> list[dict[str, Any]]:
    """[{repo, config, generation_config, gated}] for every catalog model and head, except
    the lab's real tiny models."""
    result = []
    models = list(catalog.get("models") or [])
    for entry in models:
        if entry["repo"].startswith(REAL_MODEL_ORG):
            continue
        config = model_config(entry)
        result.append(
            {
                "repo": entry["repo"],
                "config": config,
                "generation_config": generation_config(config, entry["family"]),
                "gated": bool(entry.get("gated", False)),
            }
        )
    for head in catalog.get("heads") or []:
        targets = [m for m in models if m.get("eagle3") == head["repo"]]
        if not targets:
            raise ValueError(f"head {head['repo']} is no catalog model's eagle3 head")
        config = head_config(head, targets[0])
        result.append(
            {
                "repo": head["repo"],
                "config": config,
                "generation_config": generation_config({}, ""),
                "gated": bool(head.get("gated", False)),
            }
        )
    return result


# ---- files -----------------------------------------------------------------------------
def _json_bytes(data: dict[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


def filler_safetensors(repo: str, size: int) -> bytes:
    """A valid safetensors file: one U8 tensor of `size` generated bytes."""
    header = {
        "__metadata__": {"format": "pt", "specfleet_emulated": "stand-in filler, not weights"},
        "specfleet.filler": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]},
    }
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    return struct.pack("<Q", len(head)) + head + _stream(f"weights:{repo}", size)


def _stream(seed: str, size: int) -> bytes:
    """Deterministic pseudo-random bytes (sha256 in counter mode): same input, same file."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(f"{seed}:{counter}".encode()).digest()
        counter += 1
    return bytes(out[:size])


def git_blob_sha1(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def _write_if_changed(path: Path, content: bytes) -> bool:
    if path.is_file() and not path.is_symlink() and path.read_bytes() == content:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(content)
    tmp.replace(path)
    return True


def _symlink(path: Path, target: str) -> None:
    if path.is_symlink() and os.readlink(path) == target:
        return
    if path.is_symlink() or path.exists():
        path.unlink()
    path.symlink_to(target)


def write_repo(hub: Path, stand_in: dict[str, Any], gated: bool, filler_bytes: int) -> Path:
    """One repo in hub layout; returns its snapshot directory. Idempotent."""
    repo = stand_in["repo"]
    repo_dir = hub / cache_module.hf_repo_dir(repo)
    files = {
        "config.json": (_json_bytes(stand_in["config"]), False),
        "generation_config.json": (_json_bytes(stand_in["generation_config"]), False),
        WEIGHTS_FILE: (filler_safetensors(repo, filler_bytes), True),
    }
    blobs = {
        name: (hashlib.sha256(content).hexdigest() if lfs else git_blob_sha1(content), content)
        for name, (content, lfs) in files.items()
    }
    # The revision names the content, so a changed stand-in is a new snapshot.
    revision = hashlib.sha1(
        ("specfleet-lab:" + repo + ":" + ",".join(f"{n}={b}" for n, (b, _) in sorted(blobs.items()))).encode()
    ).hexdigest()
    snapshot = repo_dir / "snapshots" / revision
    snapshot.mkdir(parents=True, exist_ok=True)
    for name, (blob, content) in blobs.items():
        _write_if_changed(repo_dir / "blobs" / blob, content)
        _symlink(snapshot / name, f"../../blobs/{blob}")
    _write_if_changed(repo_dir / "refs" / "main", revision.encode())
    # Drop what an earlier stand-in left behind: other snapshots and unreferenced blobs.
    wanted_blobs = {blob for blob, _ in blobs.values()}
    for old in (repo_dir / "snapshots").iterdir():
        if old.name != revision:
            for item in old.iterdir():
                item.unlink()
            old.rmdir()
    for blob in (repo_dir / "blobs").iterdir():
        if blob.name not in wanted_blobs:
            blob.unlink()
    marker = snapshot / GATED_MARKER
    if gated:
        _write_if_changed(marker, b"specfleet lab: emulates a gated repo without an accepted licence\n")
    else:
        marker.unlink(missing_ok=True)
    return snapshot


def write_hf_store(
    store: Path,
    catalog_path: Path,
    gated: bool = False,
    filler_bytes: int = DEFAULT_FILLER_BYTES,
) -> list[dict[str, Any]]:
    """Stand-ins for every catalog model and head under store/hub, then the manifests.

    gated=True marks the catalog's gated repos with the emulator's gated marker (a unit
    then fails like vLLM without an accepted licence); by default nothing is gated.
    Returns one summary row per repo.
    """
    hub = store / "hub"
    hub.mkdir(parents=True, exist_ok=True)
    rows = []
    for stand_in in sorted(stand_ins(load_catalog(catalog_path)), key=lambda item: item["repo"]):
        is_gated = gated and stand_in["gated"]
        snapshot = write_repo(hub, stand_in, is_gated, filler_bytes)
        block = stand_in["config"]["specfleet_emulated"]
        rows.append(
            {
                "repo": stand_in["repo"],
                "revision": snapshot.name,
                "family": block["family"],
                "precision": block["precision"],
                "weights_gib": block["weights_gib"],
                "gated": is_gated,
            }
        )
    manifests = {m["name"]: m["id"] for m in cache_module.write_manifests(store, "hub")}
    for row in rows:
        row["manifest_id"] = manifests.get(cache_module.hf_repo_dir(row["repo"]))
    return rows


# ---- tiktoken --------------------------------------------------------------------------
def tiktoken_content(name: str, tokens: int = 4096) -> bytes:
    """A stand-in encoding in tiktoken's file format: the 256 single bytes, then
    generated multi-byte tokens; ranks 0..n-1. Not OpenAI's vocabulary."""
    lines = [base64.b64encode(bytes([value])).decode() + f" {value}" for value in range(256)]
    stream = _stream(f"tiktoken:{name}", tokens * 4)
    seen = {bytes([value]) for value in range(256)}
    rank = 256
    for index in range(0, len(stream), 4):
        token = stream[index : index + 2 + stream[index] % 3]
        if token in seen:
            continue
        seen.add(token)
        lines.append(base64.b64encode(token).decode() + f" {rank}")
        rank += 1
    return ("\n".join(lines) + "\n").encode()


def write_tiktoken(directory: Path) -> list[dict[str, str]]:
    """Write the stand-in encodings; return [{name, sha256}] for the inventory."""
    directory.mkdir(parents=True, exist_ok=True)
    result = []
    for name in TIKTOKEN_ENCODINGS:
        content = tiktoken_content(name)
        _write_if_changed(directory / f"{name}.tiktoken", content)
        result.append({"name": name, "sha256": hashlib.sha256(content).hexdigest()})
    return result
