"""Model resolution against a Hugging Face hub cache, with huggingface_hub's failures.

The lab pre-stages stand-in model directories in the usual cache layout
(`<cache>/models--org--name/refs/main` naming a revision, files under
`snapshots/<rev>/`). Each stand-in carries a real-ish `config.json` plus a
`specfleet_emulated` block the emulator sizes the model from:
`{"weights_gib": 14.99, "precision": "bf16", "family": "llama3.1-8b", "needs_tiktoken": false}`
(optional `active_weights_gib` for mixture-of-experts models: the bytes one decode
step actually reads).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import FRONTEND_FRAMES, VLLM_SITE, StartupFailure

GATED_MARKER = ".specfleet-gated"
PRECISIONS = ("fp16", "bf16", "fp8", "fp4", "mxfp4")

OFFLINE_MISSING = (
    "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached "
    "snapshot folder for the specified revision on the local disk and outgoing traffic has "
    "been disabled. To enable repo look-ups and downloads online, pass "
    "'local_files_only=False' as input."
)
# Online but unreachable (the lab has no route out): what snapshot_download raises then.
ONLINE_UNREACHABLE = (
    "huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to "
    "locate the files on the Hub and we cannot find the appropriate snapshot folder for the "
    "specified revision on the local disk. Please check your internet connection and try "
    "again."
)

HUB_FRAMES = FRONTEND_FRAMES + [
    (f"{VLLM_SITE}/vllm/transformers_utils/config.py", 511, "get_config", "model = get_model_path(model, revision)"),
    (
        "/usr/local/lib/python3.12/dist-packages/huggingface_hub/_snapshot_download.py",
        235,
        "snapshot_download",
        "raise LocalEntryNotFoundError(",
    ),
]


@dataclass(frozen=True)
class ModelInfo:
    """What the emulator needs to know about a (stand-in) model directory."""

    name: str
    path: Path
    config: dict[str, Any]
    weights_gib: float
    active_weights_gib: float
    precision: str
    family: str
    needs_tiktoken: bool

    @property
    def architectures(self) -> list[str]:
        return list(self.config.get("architectures") or [])

    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type", ""))

    @property
    def num_layers(self) -> int:
        return int(self.config.get("num_hidden_layers", 32))

    @property
    def hidden_size(self) -> int:
        return int(self.config.get("hidden_size", 4096))

    @property
    def num_attention_heads(self) -> int:
        return int(self.config.get("num_attention_heads", 32))

    @property
    def num_kv_heads(self) -> int:
        return int(self.config.get("num_key_value_heads", self.num_attention_heads))

    @property
    def head_dim(self) -> int:
        return int(self.config.get("head_dim") or self.hidden_size // self.num_attention_heads)

    @property
    def vocab_size(self) -> int:
        return int(self.config.get("vocab_size", 128256))

    @property
    def max_position_embeddings(self) -> int:
        return int(self.config.get("max_position_embeddings", 8192))

    @property
    def n_predict(self) -> int | None:
        value = self.config.get("n_predict")
        return int(value) if value is not None else None

    @property
    def quant_method(self) -> str | None:
        quant = self.config.get("quantization_config")
        if isinstance(quant, dict) and quant.get("quant_method"):
            return str(quant["quant_method"])
        return None

    @property
    def torch_dtype(self) -> str:
        return str(self.config.get("torch_dtype", "bfloat16"))

    def generation_defaults(self) -> dict[str, Any]:
        """Sampling defaults from generation_config.json, as vLLM applies them."""
        path = self.path / "generation_config.json"
        if not path.is_file():
            return {}
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            return {}
        keys = ("temperature", "top_p", "top_k", "repetition_penalty", "min_p")
        return {key: data[key] for key in keys if key in data}


def hub_cache_dir(env: Mapping[str, str]) -> Path:
    """huggingface_hub's cache precedence: HF_HUB_CACHE, then HF_HOME/hub, then ~/.cache."""
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"])
    if env.get("HUGGINGFACE_HUB_CACHE"):
        return Path(env["HUGGINGFACE_HUB_CACHE"])
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]) / "hub"
    home = env.get("HOME") or os.path.expanduser("~")
    return Path(home) / ".cache" / "huggingface" / "hub"


def is_offline(env: Mapping[str, str]) -> bool:
    return env.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def repo_cache_dir(cache: Path, repo_id: str) -> Path:
    return cache / ("models--" + repo_id.replace("/", "--"))


def _missing(repo_id: str, env: Mapping[str, str]) -> StartupFailure:
    return StartupFailure(
        exception_text=OFFLINE_MISSING if is_offline(env) else ONLINE_UNREACHABLE,
        frames=HUB_FRAMES,
    )


def gated_failure(repo_id: str) -> StartupFailure:
    url = f"https://huggingface.co/{repo_id}/resolve/main/config.json"
    request = "(Request ID: Root=1-6740a1b2-5c0e7d3f2a9b4c1d0e8f7a6b;specfleet-emulated)"
    gated = (
        f"401 Client Error. {request}\n\nCannot access gated repo for url {url}.\n"
        f"Access to model {repo_id} is restricted. You must have access to it and be "
        "authenticated to access it. Please log in."
    )
    return StartupFailure(
        cause_text=f"huggingface_hub.errors.GatedRepoError: {gated}",
        exception_text=(
            "OSError: You are trying to access a gated repo.\nMake sure to have access to "
            f"it at https://huggingface.co/{repo_id}.\n{gated}"
        ),
        frames=HUB_FRAMES[:-1]
        + [
            (
                "/usr/local/lib/python3.12/dist-packages/transformers/utils/hub.py",
                533,
                "cached_files",
                "raise OSError(",
            ),
        ],
    )


def _not_a_repo(name: str) -> StartupFailure:
    return StartupFailure(
        exception_text=(
            f"ValueError: Invalid repository ID or local directory specified: '{name}'.\n"
            "Please verify the following requirements:\n"
            "1. Provide a valid Hugging Face repository ID.\n"
            "2. Specify a local directory that contains a recognized configuration file.\n"
            "   - For Hugging Face models: ensure the presence of a 'config.json'.\n"
            "   - For Mistral models: ensure the presence of a 'params.json'."
        ),
        frames=HUB_FRAMES[:-1],
    )


REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")


def resolve_model_dir(name: str, env: Mapping[str, str]) -> Path:
    """Directory holding the model's files, or a huggingface_hub-shaped failure."""
    local = Path(name)
    if name.startswith(("/", "./", "../")) or local.is_dir():
        if (local / "config.json").is_file():
            return local
        raise _not_a_repo(name)
    if not REPO_ID.match(name):
        raise _not_a_repo(name)
    repo_dir = repo_cache_dir(hub_cache_dir(env), name)
    if (repo_dir / GATED_MARKER).exists():
        raise gated_failure(name)
    ref_file = repo_dir / "refs" / "main"
    if not ref_file.is_file():
        raise _missing(name, env)
    revision = ref_file.read_text().strip()
    snapshot = repo_dir / "snapshots" / revision
    if (snapshot / GATED_MARKER).exists():
        raise gated_failure(name)
    if not (snapshot / "config.json").is_file():
        raise _missing(name, env)
    return snapshot


def parse_model_info(name: str, path: Path, config: dict[str, Any]) -> ModelInfo:
    """Read the `specfleet_emulated` block; raises ValueError when it is unusable."""
    block = config.get("specfleet_emulated")
    if not isinstance(block, dict):
        raise ValueError("config.json has no 'specfleet_emulated' block")
    weights = float(block.get("weights_gib", 0))
    if weights <= 0:
        raise ValueError("specfleet_emulated.weights_gib must be > 0")
    precision = str(block.get("precision", "bf16")).lower()
    if precision not in PRECISIONS:
        raise ValueError(f"specfleet_emulated.precision must be one of {PRECISIONS}")
    active = float(block.get("active_weights_gib", weights))
    return ModelInfo(
        name=name,
        path=path,
        config=config,
        weights_gib=weights,
        active_weights_gib=min(active, weights),
        precision=precision,
        family=str(block.get("family", "")),
        needs_tiktoken=bool(block.get("needs_tiktoken", False)),
    )


def load_model(name: str, env: Mapping[str, str]) -> ModelInfo:
    path = resolve_model_dir(name, env)
    try:
        config = json.loads((path / "config.json").read_text())
        return parse_model_info(name, path, config)
    except (OSError, ValueError) as exc:
        raise StartupFailure(
            exception_text=f"RuntimeError: specfleet emulator: cannot use stand-in model {name} at {path}: {exc}",
            frames=HUB_FRAMES[:-1],
        ) from exc


TIKTOKEN_FILES = ("o200k_base.tiktoken", "cl100k_base.tiktoken")

HARMONY_FAILURE = (
    "openai_harmony.HarmonyError: error downloading or loading vocab file: failed to download or load vocab file"
)


def tiktoken_files_present(env: Mapping[str, str]) -> bool:
    base = env.get("TIKTOKEN_ENCODINGS_BASE")
    if not base:
        return False  # openai_harmony would try to download them; the lab has no route out
    return all((Path(base) / name).is_file() for name in TIKTOKEN_FILES)


def harmony_failure() -> StartupFailure:
    return StartupFailure(
        exception_text=HARMONY_FAILURE,
        frames=FRONTEND_FRAMES[:4]
        + [
            (
                f"{VLLM_SITE}/vllm/entrypoints/openai/serving_chat.py",
                128,
                "__init__",
                "self.harmony_encoding = get_encoding()",
            ),
            (
                f"{VLLM_SITE}/vllm/entrypoints/harmony_utils.py",
                61,
                "get_encoding",
                "_harmony_encoding = load_harmony_encoding(",
            ),
        ],
    )
