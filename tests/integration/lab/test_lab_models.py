"""The lab's stand-in model store and tiktoken files, checked without root or a lab:
hub layout, manifests, the `specfleet_emulated` block, and that the vLLM emulator's own
resolver accepts every stand-in (and refuses gated ones only when asked)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from labtools import REPO
from specfleet_lab import models

EMULATOR_DIR = REPO / "lab" / "emulator"
if str(EMULATOR_DIR) not in sys.path:
    sys.path.insert(0, str(EMULATOR_DIR))

from vllm_emulator import hub  # noqa: E402

CATALOG = REPO / "specfleet" / "data" / "catalog.yml"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hf-store")
    models.write_hf_store(root, CATALOG)
    return root


def catalog_repos() -> list[str]:
    """Every catalog repo the emulator stands in for (the lab's real tiny models are not)."""
    data = yaml.safe_load(CATALOG.read_text())
    repos = [m["repo"] for m in data["models"]] + [h["repo"] for h in data["heads"]]
    return [repo for repo in repos if not repo.startswith(models.REAL_MODEL_ORG)]


def test_real_tiny_models_get_no_stand_in(store: Path) -> None:
    assert not list((store / "hub").glob("models--specfleet--*"))


def test_every_catalog_repo_has_a_hub_style_stand_in(store: Path) -> None:
    for repo in catalog_repos():
        repo_dir = store / "hub" / ("models--" + repo.replace("/", "--"))
        revision = (repo_dir / "refs" / "main").read_text()
        snapshot = repo_dir / "snapshots" / revision
        for name in ("config.json", "generation_config.json", "model.safetensors"):
            link = snapshot / name
            assert link.is_symlink(), f"{repo}/{name}"
            target = os.readlink(link)
            assert target.startswith("../../blobs/") and link.resolve().is_file()
        weights = (snapshot / "model.safetensors").read_bytes()
        assert os.readlink(snapshot / "model.safetensors").endswith(hashlib.sha256(weights).hexdigest())
        assert not (snapshot / models.GATED_MARKER).exists()  # default: nothing gated
        manifest = json.loads((store / "manifests" / f"{repo_dir.name}.json").read_text())
        assert manifest["name"] == repo_dir.name and manifest["symlinks"]


def test_emulated_block_follows_the_catalog(store: Path) -> None:
    env = {"HF_HOME": str(store), "HF_HUB_OFFLINE": "1"}
    fp4 = hub.load_model("nvidia/Llama-3.1-8B-Instruct-FP4", env)
    assert (fp4.weights_gib, fp4.precision, fp4.family) == (6.07, "fp4", "llama3.1-8b")
    assert fp4.quant_method == "modelopt" and not fp4.needs_tiktoken
    head = hub.load_model("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", env)
    assert head.family == "eagle3-llama3.1-8b" and head.weights_gib == 0.79
    assert head.architectures == ["LlamaForCausalLMEagle3"] and head.num_layers == 1
    assert head.config["draft_vocab_size"] == 32000
    oss = hub.load_model("openai/gpt-oss-120b", env)
    assert oss.needs_tiktoken and oss.precision == "mxfp4" and oss.family == "gpt-oss-120b"
    assert 2 < oss.active_weights_gib < 4  # ~5.1 of 117 B parameters active per token
    assert hub.load_model("nvidia/gpt-oss-120b-Eagle3-v3", env).family == "eagle3-gpt-oss-120b"
    small = hub.load_model("Qwen/Qwen3-0.6B", env)
    assert small.family == "qwen3-0.6b" and small.vocab_size == 151936
    draft = hub.load_model("meta-llama/Llama-3.2-1B-Instruct", env)
    assert draft.vocab_size == fp4.vocab_size  # usable as the 8B models' draft_model


def test_gated_only_when_asked(tmp_path: Path) -> None:
    models.write_hf_store(tmp_path, CATALOG, gated=True)
    env = {"HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    with pytest.raises(hub.StartupFailure):
        hub.load_model("meta-llama/Llama-3.1-8B-Instruct", env)  # catalog: gated
    hub.load_model("nvidia/Llama-3.1-8B-Instruct-FP8", env)  # catalog: not gated
    models.write_hf_store(tmp_path, CATALOG, gated=False)  # and back, in place
    hub.load_model("meta-llama/Llama-3.1-8B-Instruct", env)


def test_store_is_idempotent(tmp_path: Path) -> None:
    first = models.write_hf_store(tmp_path, CATALOG)
    second = models.write_hf_store(tmp_path, CATALOG)
    assert first == second


def test_tiktoken_stand_ins(tmp_path: Path) -> None:
    encodings = models.write_tiktoken(tmp_path)
    assert [e["name"] for e in encodings] == ["o200k_base", "cl100k_base"]
    for entry in encodings:
        content = (tmp_path / f"{entry['name']}.tiktoken").read_bytes()
        assert hashlib.sha256(content).hexdigest() == entry["sha256"]
        ranks = [int(line.split()[1]) for line in content.decode().splitlines()]
        assert ranks == list(range(len(ranks)))  # tiktoken's `base64 rank` format
    # Generated, not OpenAI's files (whose sha256 the role's defaults carry).
    assert encodings[0]["sha256"] != "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
    env = {"TIKTOKEN_ENCODINGS_BASE": str(tmp_path)}
    assert hub.tiktoken_files_present(env)
