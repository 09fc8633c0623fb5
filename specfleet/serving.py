"""The serving spec: what a unit runs, made once by the plan, rendered to argv here only.

A serving is a plain dict (it travels through Ansible variables and the unit's release
record as JSON):

- ``kind``: ``baseline`` or ``speculative``;
- ``engine``: ``vllm`` (``vllm serve``) or ``trtllm`` (``trtllm-serve``, DGX Spark);
- ``image``, ``model`` (the Hugging Face repo the engine loads), ``port``;
- ``flags``: the plan's engine flags as ``[flag, value]`` pairs (``value`` None for a
  switch, a dict for a JSON-valued flag), ``extra_flags``: the user's
  (``specfleet_serve_extra_args``), normalised the same way, rendered after the plan's;
- ``speculative_config``: vLLM's ``--speculative-config`` (None when not speculating);
- ``engine_options``: TensorRT-LLM's extra LLM API options (its YAML file), None for vLLM;
- once placed on a unit (:func:`for_unit`): ``env``, ``mounts``, ``secret_env_names`` (names
  only, never values) and ``spec_id``.

Readers take fields (:func:`speculation`, :func:`engine_flags`, :func:`draft_repo`); :func:`argv` and
:func:`files` are the one rendering of a serving into what the container runs. Nothing
parses a command line back, except :func:`from_argv`, which reads release records written
before servings were structured (record version 1).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

KINDS = ("baseline", "speculative")
ENGINES = {"vllm": ["vllm", "serve"], "trtllm": ["trtllm-serve"]}
HOST = "0.0.0.0"

# vLLM flags whose value is JSON; kept as dicts so readers compare content, not spelling.
JSON_FLAGS = frozenset({"--speculative-config", "--compilation-config", "--hf-overrides", "--kv-transfer-config",
                        "--additional-config"})
# vLLM's short spellings of long flags (`vllm serve --help`).
ALIASES = {"-sc": "--speculative-config", "-O": "--compilation-config", "-tp": "--tensor-parallel-size",
           "-pp": "--pipeline-parallel-size", "-q": "--quantization"}

# trtllm-serve reads its extra LLM API options from a YAML file the container gets mounted.
# Two paths, so the baseline and the speculative serving each name their own and a rollback
# to the baseline never depends on which variant was written last.
TRTLLM_OPTIONS_FLAG = "--extra_llm_api_options"
TRTLLM_OPTIONS_DIR = "/etc/specfleet/trtllm"
TRTLLM_OPTIONS_PATHS = {kind: f"{TRTLLM_OPTIONS_DIR}/{kind}.yml" for kind in KINDS}

# TensorRT-LLM's speculative_config.decoding_type -> specfleet method ("Eagle" is EAGLE-3's
# older spelling, still an alias).
TRTLLM_METHODS = {"Eagle3": "eagle3", "Eagle": "eagle3", "DraftTarget": "draft_model", "NGram": "ngram",
                  "MTP": "mtp"}

Pair = list  # [flag, value]: value is a str, a dict (JSON flags) or None (a switch)


class ServingError(ValueError):
    """A serving (or a command line given for one) that cannot be read."""


# ---- making one ----------------------------------------------------------------------------
def make(
    kind: str,
    *,
    engine: str,
    image: str,
    model: str,
    port: int,
    flags: Iterable[Sequence[Any]],
    extra_flags: Iterable[Sequence[Any]] = (),
    speculative_config: Mapping[str, Any] | None = None,
    engine_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The plan's part of a serving: everything but what the unit's layout adds."""
    if kind not in KINDS:
        raise ServingError(f"serving kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if engine not in ENGINES:
        raise ServingError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    return {
        "kind": kind,
        "engine": engine,
        "image": image,
        "model": model,
        "port": int(port),
        "flags": [[flag, value] for flag, value in flags],
        "extra_flags": [[flag, value] for flag, value in extra_flags],
        "speculative_config": dict(speculative_config) if speculative_config else None,
        "engine_options": dict(engine_options) if engine_options is not None else None,
    }


def for_unit(
    serving: Mapping[str, Any], env: Mapping[str, str], mounts: Sequence[str], secret_env_names: Iterable[str]
) -> dict[str, Any]:
    """``serving`` as a unit runs it: its container environment, mounts and the names of the
    secrets it is given (values come from Vault or the environment at launch), with its id."""
    spec = {key: value for key, value in serving.items() if key not in ("env", "mounts", "secret_env_names",
                                                                        "spec_id")}
    spec["env"] = dict(sorted(env.items()))
    spec["mounts"] = list(mounts)
    spec["secret_env_names"] = sorted(set(secret_env_names))
    spec["spec_id"] = spec_id(spec)
    return spec


def normalise_flags(words: Sequence[str], engine: str = "vllm") -> list[Pair]:
    """``[flag, value]`` pairs of flags given as command-line words (``--flag value``,
    ``--flag=value``, a switch), spelled as vLLM reads them: its short aliases spelled out,
    ``_`` in a long flag's name read as ``-`` (vLLM's parser accepts ``--max_num_seqs``), JSON
    values read. The one reader of flag lists the user writes (``specfleet_serve_extra_args``),
    so a guard on a flag cannot be passed by another spelling of it. trtllm-serve's flags
    (``engine="trtllm"``) keep their underscores: that is how it names them."""
    words = list(words)
    pairs: list[Pair] = []
    index = 0
    while index < len(words):
        word = words[index]
        if not isinstance(word, str) or not _is_flag(word):
            raise ServingError(f"expected a flag, got {word!r}")
        if word.startswith("--") and "=" in word:
            flag, value = word.split("=", 1)
            index += 1
        elif index + 1 < len(words) and not _is_flag(words[index + 1]):
            flag, value = word, words[index + 1]
            index += 2
        else:
            flag, value = word, None
            index += 1
        flag = flag_name(flag, engine)
        if flag in JSON_FLAGS and value is not None:
            try:
                value = json.loads(value)
            except ValueError as exc:
                raise ServingError(f"{flag} takes JSON, got {value!r}") from exc
        pairs.append([flag, value])
    return pairs


def flag_name(word: Any, engine: str = "vllm") -> str | None:
    """The one spelling of the flag ``word`` names (``--max_num_seqs=4`` -> ``--max-num-seqs``,
    ``-sc`` -> ``--speculative-config``), or None for a word that is not a flag (a value)."""
    if not isinstance(word, str) or not _is_flag(word):
        return None
    flag = ALIASES.get(word, word.split("=", 1)[0] if word.startswith("--") else word)
    if engine == "vllm" and flag.startswith("--"):
        flag = "--" + flag[2:].replace("_", "-")
    return flag


def _is_flag(word: str) -> bool:
    """A flag, not a negative number or a JSON value."""
    return word.startswith("-") and len(word) > 1 and not word[1].isdigit() and word[1] != "."


# ---- reading one ---------------------------------------------------------------------------
def engine_flags(spec: Mapping[str, Any]) -> list[Pair]:
    """Every flag the engine gets, in order: address, the plan's flags, speculation (vLLM's
    ``--speculative-config`` as a dict, TensorRT-LLM's options file), the user's flags."""
    pairs: list[Pair] = [["--host", HOST], ["--port", str(spec["port"])]]
    pairs += [list(pair) for pair in spec.get("flags") or []]
    if spec["engine"] == "vllm" and spec.get("speculative_config"):
        pairs.append(["--speculative-config", dict(spec["speculative_config"])])
    if spec["engine"] == "trtllm":
        pairs.append([TRTLLM_OPTIONS_FLAG, TRTLLM_OPTIONS_PATHS[spec["kind"]]])
    pairs += [list(pair) for pair in spec.get("extra_flags") or []]
    return pairs


def required_mib(spec: Mapping[str, Any], memory_mb: int | None) -> int:
    """Memory a vLLM serving asks for at start on a unit of ``memory_mb``: its
    --gpu-memory-utilization share of the whole (vLLM refuses to start when less is free,
    "Free memory on device ... is less than desired GPU memory utilization"). 0 when it cannot
    be known: no memory figure, or an engine that sizes itself from what is free (TensorRT-LLM)."""
    if not memory_mb or spec.get("engine") != "vllm":
        return 0
    share = dict(engine_flags(spec)).get("--gpu-memory-utilization")
    try:
        return math.ceil(float(share) * int(memory_mb)) if share is not None else 0
    except ValueError:
        return 0


def speculation(spec: Mapping[str, Any] | None) -> dict[str, Any]:
    """The serving's speculative method and draft tokens, whichever engine serves it (None and
    None when it does not speculate)."""
    if not spec:
        return {"method": None, "num_speculative_tokens": None}
    if spec.get("engine") == "trtllm":
        config = (spec.get("engine_options") or {}).get("speculative_config") or {}
        decoding_type = config.get("decoding_type")
        return {"method": TRTLLM_METHODS.get(decoding_type, decoding_type), "num_speculative_tokens":
                config.get("max_draft_len")}
    config = spec.get("speculative_config") or {}
    return {"method": config.get("method"), "num_speculative_tokens": config.get("num_speculative_tokens")}


def with_speculative(spec: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
    """A vLLM speculative serving with ``fields`` set in its speculative config (a draft length,
    a per-batch-size table); a serving placed on a unit (for_unit) gets the id of what it now runs."""
    variant = copy.deepcopy(dict(spec))
    variant["speculative_config"] = {**variant["speculative_config"], **fields}
    if "spec_id" in variant:
        variant["spec_id"] = spec_id(variant)
    return variant


def with_share(spec: Mapping[str, Any], utilisation: float, port: int) -> dict[str, Any]:
    """A vLLM serving on ``port`` with the ``utilisation`` share of the unit's memory (its
    --gpu-memory-utilization), to serve beside another one (the plan's ``side_by_side``); a
    serving placed on a unit (for_unit) gets the id of what it now runs."""
    if spec.get("engine") != "vllm":
        raise ServingError(f"only a vLLM serving shares the unit's memory, not {spec.get('engine')!r}")
    variant = copy.deepcopy(dict(spec))
    variant["port"] = int(port)
    variant["flags"] = [[flag, f"{utilisation:.2f}" if flag == "--gpu-memory-utilization" else value]
                        for flag, value in variant["flags"]]
    if "spec_id" in variant:
        variant["spec_id"] = spec_id(variant)
    return variant


def draft_repo(spec: Mapping[str, Any]) -> str | None:
    """The repo vLLM loads as the speculator by its Hugging Face id (EAGLE-3 head, draft)."""
    return (spec.get("speculative_config") or {}).get("model") if spec.get("engine") == "vllm" else None


# ---- rendering -----------------------------------------------------------------------------
def argv(spec: Mapping[str, Any]) -> list[str]:
    """The container's command line."""
    words = [*ENGINES[spec["engine"]], spec["model"]]
    for flag, value in engine_flags(spec):
        words.append(flag)
        if value is not None:
            words.append(flag_text(value))
    return words


def flag_text(value: Any) -> str:
    """A flag's value as the engine reads it. JSON keys are sorted: equal servings render
    equally however their dicts were ordered on the way (the release record stores them
    with sorted keys), so a re-run compares equal and restarts nothing."""
    if isinstance(value, Mapping):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


def files(spec: Mapping[str, Any]) -> dict[str, str]:
    """Files the engine reads inside the container, path -> text (trtllm-serve's options)."""
    if spec.get("engine") != "trtllm":
        return {}
    return {TRTLLM_OPTIONS_PATHS[spec["kind"]]: options_yaml(spec.get("engine_options") or {})}


def options_yaml(options: Mapping[str, Any]) -> str:
    """TensorRT-LLM's options file, keys sorted (as for flag_text: equal options, equal file)."""
    # Through JSON first: a serving that travelled through Ansible holds its own mapping and
    # string types, which the YAML dumper does not know.
    plain = json.loads(json.dumps(options))
    return yaml.safe_dump(plain, sort_keys=True, default_flow_style=False)


def spec_id(spec: Mapping[str, Any]) -> str:
    """Identity of a serving: what the unit runs (its rendered command line, files,
    environment, mounts and secret names), not how it was recorded. A serving without files
    keeps the id it had in a version-1 record."""
    identity: dict[str, Any] = {
        "kind": spec["kind"],
        "image": spec["image"],
        "args": argv(spec),
        "env": dict(spec.get("env") or {}),
        "mounts": list(spec.get("mounts") or []),
        "secret_env_names": sorted(spec.get("secret_env_names") or []),
    }
    rendered = files(spec)
    if rendered:
        identity["files"] = rendered
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


# ---- version-1 records ---------------------------------------------------------------------
def from_argv(kind: str, image: str, words: Sequence[str], files_: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The serving a version-1 release record stored as a command line (``args``) and files.

    Flags before vLLM's ``--speculative-config`` are the plan's, flags after it the user's, so
    the serving renders back to the very command line it was recorded with."""
    words = list(words)
    engine = next((name for name, command in ENGINES.items() if words[: len(command)] == command), None)
    if engine is None or len(words) <= len(ENGINES[engine]):
        raise ServingError(f"not a vllm serve or trtllm-serve command line: {' '.join(map(str, words[:3]))}")
    command = ENGINES[engine]
    model = words[len(command)]
    pairs = normalise_flags(words[len(command) + 1:], engine)
    port = 8000
    flags: list[Pair] = []
    extra: list[Pair] = []
    speculative_config = None
    engine_options = None
    target = flags
    for flag, value in pairs:
        if flag == "--host":
            continue
        if flag == "--port":
            port = int(value)
        elif engine == "vllm" and flag == "--speculative-config":
            speculative_config = value
            target = extra
        elif engine == "trtllm" and flag == TRTLLM_OPTIONS_FLAG:
            text = (files_ or {}).get(value)
            engine_options = yaml.safe_load(text) if text else {}
            target = extra
        else:
            target.append([flag, value])
    return make(kind, engine=engine, image=image, model=model, port=port, flags=flags, extra_flags=extra,
                speculative_config=speculative_config, engine_options=engine_options)
