"""Planning and gate policy: the documented `specfleet_*` variables, merged and validated.

Defaults live in specfleet/data/policy.yml (with a comment per variable). A user
overrides them per host through inventory variables or, for the CLI, a policy file.
Validation collects every problem at once so one run shows the user all of them.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

import yaml
from ansible_collections.specfleet.fleet.plugins.module_utils.jetson_identity import FACT_KEYS
from ansible_collections.specfleet.fleet.plugins.module_utils.spec_bench_prompts import WORKLOADS as BENCH_WORKLOADS

from specfleet import serving
from specfleet.catalog import PER_CLASS, SPEC_METHODS, Catalog, device_class_names, image_problems, load_device_classes
from specfleet.variables import closest, is_integer, is_number, shown

# `vllm serve` flags the plan writes itself; specfleet_serve_extra_args may not repeat them
# (vLLM takes the last occurrence, so a repeat would silently override the plan).
PLAN_OWNED_FLAGS = (
    "--host", "--port", "--gpu-memory-utilization", "--max-model-len", "--max-num-seqs", "--seed",
    "--speculative-config", "--model",
)
# `vllm serve` flags that carry a secret: on the command line it would show in `docker
# inspect`, the release record and `specfleet plan`; each has a variable that keeps it out.
SECRET_FLAGS = {"--api-key": "specfleet_api_key", "--hf-token": "specfleet_hf_token"}
MIN_SPEC_TOKENS, MAX_SPEC_TOKENS = 1, 16


class PolicyError(ValueError):
    """One or more policy variables are invalid; ``problems`` lists each one."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


@cache
def _defaults_text() -> str:
    return resources.files("specfleet.data").joinpath("policy.yml").read_text()


def defaults() -> dict[str, Any]:
    """policy.yml's values, each per-class variable (catalog.PER_CLASS: a map keyed by device
    class; an override merges into it class by class) made from the device classes' own."""
    policy = yaml.safe_load(_defaults_text())
    classes = load_device_classes()
    for name in PER_CLASS:
        # Copies: the classes are loaded once, and a caller may change the map it is given.
        policy[name] = {device_class: copy.deepcopy(found.policy[name]) for device_class, found in classes.items()
                        if name in found.policy}
    return policy


def variable_names() -> list[str]:
    return list(defaults())


def merge(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """Defaults with ``overrides`` applied; keys that are not policy variables are ignored
    (inventories carry many other variables)."""
    policy = defaults()
    for name, value in (overrides or {}).items():
        if name not in policy:
            continue
        if name in PER_CLASS and isinstance(value, Mapping) and isinstance(policy[name], dict):
            policy[name] = {**policy[name], **value}
        else:
            policy[name] = value
    return policy


def _check_fraction(problems: list[str], name: str, value: Any, *, low_open: bool) -> None:
    if not is_number(value):
        problems.append(f"{name}: must be a number, got {shown(value)}")
    elif not ((0 < value if low_open else 0 <= value) and value <= 1):
        bounds = "0 < x <= 1" if low_open else "0 <= x <= 1"
        problems.append(f"{name}: must be within {bounds}, got {value}")


def _check_class_map(problems: list[str], name: str, value: Any) -> dict:
    if not isinstance(value, Mapping):
        problems.append(f"{name}: must be a map of device class -> value, got {shown(value)}")
        return {}
    for device_class in value:
        if device_class not in device_class_names():
            problems.append(
                f"{name}: unknown device class {shown(device_class)} "
                f"(known: {', '.join(device_class_names())})"
            )
    return dict(value)


def _check_images(problems: list[str], entries: Any) -> bool:
    """The fleet's own image entries (specfleet_images); True when they can be used."""
    if not isinstance(entries, list):
        problems.append(f"specfleet_images: must be a list of image entries (as in images.yml), got {shown(entries)}")
        return False
    found = [problem for index, entry in enumerate(entries)
             for problem in image_problems(entry, f"specfleet_images[{index}]")]
    names = [entry.get("name") for entry in entries if isinstance(entry, Mapping)]
    twice = sorted({str(name) for name in names if names.count(name) > 1})
    if twice:
        found.append(f"specfleet_images: names an image twice: {', '.join(twice)}")
    problems.extend(found)
    return not found


def _check_image_pin(problems: list[str], pinned: Any, catalog: Catalog) -> None:
    if pinned is None:
        return
    names = [image.name for image in catalog.images]
    if not isinstance(pinned, str) or pinned not in names:
        problems.append(
            f"specfleet_image: must be an image name from images.yml or specfleet_images ({', '.join(names)}), "
            f"got {shown(pinned)}")


def _check_extra_args(problems: list[str], extra: Any) -> None:
    # Word by word, not as pairs: a list too malformed to pair may still carry a secret.
    secret = sorted({serving.flag_name(word) for word in extra} & set(SECRET_FLAGS)) if isinstance(extra, list) else []
    for flag in secret:
        problems.append(
            f"specfleet_serve_extra_args: {flag} carries a secret, which would show on the container's command "
            f"line, in the release record and in `specfleet plan`; set {SECRET_FLAGS[flag]} (Ansible Vault or the "
            "environment) instead")
    # With a secret among them no value is quoted back, whatever else is wrong.
    if not isinstance(extra, list) or not all(isinstance(arg, str) and arg for arg in extra):
        got = "a list with a secret" if secret else shown(extra)
        problems.append(f"specfleet_serve_extra_args: must be a list of non-empty strings, got {got}")
        return
    try:
        pairs = serving.normalise_flags(extra)
    except serving.ServingError as exc:
        problems.append(f"specfleet_serve_extra_args: {'not flags and values' if secret else exc}")
        return
    flags = {flag for flag, _ in pairs}
    owned = sorted(flags & set(PLAN_OWNED_FLAGS))
    if owned:
        problems.append(
            f"specfleet_serve_extra_args: {', '.join(owned)} is set by the plan; use its specfleet_* variable instead"
        )


def validate(policy: Mapping[str, Any], catalog: Catalog) -> list[str]:
    """Every problem with a merged policy, each naming the variable."""
    problems: list[str] = []

    model = policy["specfleet_model"]
    if not isinstance(model, str) or not model.strip():
        problems.append(f"specfleet_model: must be a model name or repo id, got {shown(model)}")
    elif catalog.model(model) is None:
        problems.append(
            f"specfleet_model: unknown model {shown(model)} "
            f"(catalog: {', '.join(catalog.names())}, or their repo ids)"
        )

    event = policy["specfleet_event_models"]
    if not isinstance(event, list) or not all(isinstance(name, str) for name in event):
        problems.append(f"specfleet_event_models: must be a list of model names or repo ids, got {shown(event)}")
    else:
        unknown = [name for name in event if catalog.model(name) is None]
        if unknown:
            problems.append(
                f"specfleet_event_models: unknown model(s) {', '.join(map(repr, unknown))} "
                f"(catalog: {', '.join(catalog.names())}, or their repo ids)"
            )

    methods = policy["specfleet_spec_methods"]
    if not isinstance(methods, list) or not methods:
        problems.append(f"specfleet_spec_methods: must be a non-empty list, got {shown(methods)}")
    else:
        for method in methods:
            if method not in SPEC_METHODS:
                problems.append(
                    f"specfleet_spec_methods: unknown method {shown(method)} "
                    f"(known: {', '.join(SPEC_METHODS)})"
                )
        if len(set(map(str, methods))) != len(methods):
            problems.append(f"specfleet_spec_methods: lists a method twice: {shown(methods)}")

    denied = _check_class_map(
        problems, "specfleet_spec_methods_denied", policy["specfleet_spec_methods_denied"]
    )
    for device_class, entries in denied.items():
        if not isinstance(entries, Mapping):
            problems.append(
                f"specfleet_spec_methods_denied.{device_class}: must map method -> reason"
            )
            continue
        for method in entries:
            if method not in SPEC_METHODS:
                problems.append(
                    f"specfleet_spec_methods_denied.{device_class}: unknown method {shown(method)}"
                )

    sweeps = _check_class_map(problems, "specfleet_spec_tokens_sweep", policy["specfleet_spec_tokens_sweep"])
    for device_class, counts in sweeps.items():
        name = f"specfleet_spec_tokens_sweep.{device_class}"
        if not isinstance(counts, list) or not all(is_integer(count) for count in counts):
            problems.append(f"{name}: must be a list of integers, got {shown(counts)}")
        elif any(not MIN_SPEC_TOKENS <= count <= MAX_SPEC_TOKENS for count in counts):
            problems.append(f"{name}: each must be {MIN_SPEC_TOKENS}..{MAX_SPEC_TOKENS}, got {shown(counts)}")
        elif len(set(counts)) != len(counts):
            problems.append(f"{name}: lists a draft length twice: {shown(counts)}")

    tokens = _check_class_map(problems, "specfleet_spec_tokens", policy["specfleet_spec_tokens"])
    for device_class, count in tokens.items():
        if not is_integer(count):
            problems.append(f"specfleet_spec_tokens.{device_class}: must be an integer, got {shown(count)}")
        elif not MIN_SPEC_TOKENS <= count <= MAX_SPEC_TOKENS:
            problems.append(
                f"specfleet_spec_tokens.{device_class}: must be {MIN_SPEC_TOKENS}..{MAX_SPEC_TOKENS}, "
                f"got {count}"
            )

    by_method = _check_class_map(
        problems, "specfleet_spec_tokens_by_method", policy["specfleet_spec_tokens_by_method"]
    )
    for device_class, entries in by_method.items():
        if not isinstance(entries, Mapping):
            problems.append(f"specfleet_spec_tokens_by_method.{device_class}: must map method -> token count")
            continue
        for method, count in entries.items():
            name = f"specfleet_spec_tokens_by_method.{device_class}.{method}"
            if method not in SPEC_METHODS:
                problems.append(f"{name}: unknown method {shown(method)} (known: {', '.join(SPEC_METHODS)})")
            elif not is_integer(count) or not MIN_SPEC_TOKENS <= count <= MAX_SPEC_TOKENS:
                problems.append(f"{name}: must be an integer {MIN_SPEC_TOKENS}..{MAX_SPEC_TOKENS}, got {shown(count)}")

    batch = policy["specfleet_trtllm_max_batch_size"]
    if batch is not None and (not is_integer(batch) or batch < 1):
        problems.append(f"specfleet_trtllm_max_batch_size: must be a positive integer or null, got {shown(batch)}")

    lookup_min = policy["specfleet_ngram_prompt_lookup_min"]
    lookup_max = policy["specfleet_ngram_prompt_lookup_max"]
    for name, value in (
        ("specfleet_ngram_prompt_lookup_min", lookup_min),
        ("specfleet_ngram_prompt_lookup_max", lookup_max),
    ):
        if not is_integer(value) or value < 1:
            problems.append(f"{name}: must be a positive integer, got {shown(value)}")
    if isinstance(lookup_min, int) and isinstance(lookup_max, int) and lookup_min > lookup_max:
        problems.append(
            "specfleet_ngram_prompt_lookup_min: must not exceed specfleet_ngram_prompt_lookup_max "
            f"({lookup_min} > {lookup_max}); vLLM rejects it"
        )

    utilisation = _check_class_map(
        problems, "specfleet_gpu_memory_utilization", policy["specfleet_gpu_memory_utilization"]
    )
    for device_class, value in utilisation.items():
        _check_fraction(
            problems, f"specfleet_gpu_memory_utilization.{device_class}", value, low_open=True
        )
    drop = policy["specfleet_spec_memory_drop"]
    _check_fraction(problems, "specfleet_spec_memory_drop", drop, low_open=False)
    retry_drop = policy["specfleet_oom_retry_memory_drop"]
    if not is_number(retry_drop) or not 0 <= retry_drop < 1:
        problems.append(
            f"specfleet_oom_retry_memory_drop: must be a share 0 <= x < 1 (0 = no retry), got {shown(retry_drop)}")
    if is_number(drop):
        for device_class, value in utilisation.items():
            if is_number(value) and value - drop <= 0:
                problems.append(
                    f"specfleet_spec_memory_drop: {drop} leaves no memory on {device_class} "
                    f"(specfleet_gpu_memory_utilization.{device_class} is {value})"
                )

    for name in ("specfleet_min_kv_cache_gib", "specfleet_memory_headroom_gib"):
        value = policy[name]
        if not is_number(value) or value < 0:
            problems.append(f"{name}: must be a number >= 0, got {shown(value)}")

    for device_class, value in _check_class_map(
        problems, "specfleet_max_model_len", policy["specfleet_max_model_len"]
    ).items():
        if not is_integer(value) or value < 128:
            problems.append(f"specfleet_max_model_len.{device_class}: must be an integer >= 128, got {shown(value)}")

    seqs = policy["specfleet_max_num_seqs"]
    if not is_integer(seqs) or seqs < 8:
        problems.append(
            f"specfleet_max_num_seqs: must be an integer >= 8 (the benchmark runs concurrency 8), got {shown(seqs)}"
        )

    for name in ("specfleet_capability_check", "specfleet_spec_batch_table"):
        if not isinstance(policy[name], bool):
            problems.append(f"{name}: must be true or false, got {shown(policy[name])}")

    port = policy["specfleet_port"]
    if not is_integer(port) or not 1 <= port <= 65535:
        problems.append(f"specfleet_port: must be a TCP port 1..65535, got {shown(port)}")
    trial_port = policy["specfleet_trial_port"]
    if trial_port is not None and (not is_integer(trial_port) or not 1 <= trial_port <= 65535
                                   or trial_port == port):
        problems.append(f"specfleet_trial_port: must be a TCP port 1..65535 other than specfleet_port, or null "
                        f"(restart per block), got {shown(trial_port)}")
    seed = policy["specfleet_seed"]
    if not is_integer(seed):
        problems.append(f"specfleet_seed: must be an integer, got {shown(seed)}")

    mirror = policy["specfleet_image_mirror"]
    if mirror is not None and (
        not isinstance(mirror, str) or not mirror or "/" in mirror or "://" in mirror
    ):
        problems.append(
            f"specfleet_image_mirror: must be a registry host[:port] without scheme or path, got {shown(mirror)}"
        )

    if _check_images(problems, policy["specfleet_images"]):
        _check_image_pin(problems, policy["specfleet_image"], catalog.with_images(policy["specfleet_images"]))
    _check_extra_args(problems, policy["specfleet_serve_extra_args"])

    gain = policy["specfleet_gate_min_throughput_gain"]
    if not is_number(gain) or not 0 <= gain <= 10:
        problems.append(f"specfleet_gate_min_throughput_gain: must be a share 0..10 (0.30 = +30%), got {shown(gain)}")
    tpot_drop = policy["specfleet_gate_min_tpot_drop"]
    if not is_number(tpot_drop) or not 0 <= tpot_drop < 1:
        problems.append(
            f"specfleet_gate_min_tpot_drop: must be a share 0 <= x < 1 (0.20 = -20%), got {shown(tpot_drop)}")
    floor = policy["specfleet_gate_disable_below"]
    if not is_number(floor) or not 0 <= floor <= 10:
        problems.append(f"specfleet_gate_disable_below: must be a share 0..10, got {shown(floor)}")
    elif is_number(gain) and floor > gain:
        problems.append(
            f"specfleet_gate_disable_below: {floor} is above specfleet_gate_min_throughput_gain {gain}; "
            "the gate could never keep speculation"
        )
    margin = policy["specfleet_gate_margin"]
    if not is_number(margin) or not 0 <= margin < 1:
        problems.append(f"specfleet_gate_margin: must be a share 0 <= x < 1 (0.03 = 3%), got {shown(margin)}")
    confidence = policy["specfleet_gate_confidence"]
    if not is_number(confidence) or not 0.5 < confidence < 1:
        problems.append(f"specfleet_gate_confidence: must be a probability 0.5 < x < 1 (0.90), got {shown(confidence)}")
    blocks = policy["specfleet_gate_max_blocks"]
    if not is_integer(blocks) or blocks < 3 or blocks % 2 == 0:
        problems.append(
            f"specfleet_gate_max_blocks: must be an odd integer >= 3 (baseline, speculative, baseline, ...), "
            f"got {shown(blocks)}")
    max_drift = policy["specfleet_gate_max_drift"]
    if not is_number(max_drift) or not 0 <= max_drift < 1:
        problems.append(f"specfleet_gate_max_drift: must be a share 0 <= x < 1, got {shown(max_drift)}")
    block_noise = policy["specfleet_gate_block_noise"]
    if not is_number(block_noise) or not 0 <= block_noise < 1:
        problems.append(f"specfleet_gate_block_noise: must be a share 0 <= x < 1, got {shown(block_noise)}")
    tie = policy["specfleet_gate_tie_logprob_gap"]
    if not is_number(tie) or tie < 0:
        problems.append(f"specfleet_gate_tie_logprob_gap: must be a number of nats >= 0, got {shown(tie)}")
    gate_workloads = policy["specfleet_gate_workloads"]
    if not isinstance(gate_workloads, list) or not gate_workloads:
        problems.append(f"specfleet_gate_workloads: must be a non-empty list of workloads, got {shown(gate_workloads)}")
    else:
        for workload in gate_workloads:
            if workload not in BENCH_WORKLOADS:
                problems.append(
                    f"specfleet_gate_workloads: unknown workload {shown(workload)} "
                    f"(known: {', '.join(BENCH_WORKLOADS)})"
                )
    return problems


def resolve(overrides: Mapping[str, Any] | None, catalog: Catalog) -> dict[str, Any]:
    """Merged and validated policy; raises PolicyError listing every problem."""
    policy = merge(overrides)
    problems = validate(policy, catalog)
    if problems:
        raise PolicyError(problems)
    return policy


# A host's declared hardware (same shape as `specfleet facts` prints). Not a policy variable
# (it has no default), but planning reads it, so it is checked with the policy.
EXPECTED_FACTS_VAR = "specfleet_expected_facts"
# "36.4.3": what /etc/nv_tegra_release and jetson_facts give; a bare "38.2" is a YAML float.
_L4T_PATTERN = re.compile(r"^\d+\.\d+\.\d+$")
_CUDA_PATTERN = re.compile(r"^\d+\.\d+$")


def expected_facts_problems(expected: Any, name: str = EXPECTED_FACTS_VAR) -> list[str]:
    """What is wrong with a declared ``specfleet_expected_facts`` (or a facts file, ``name``
    then naming it): the plan needs its class, L4T and memory, and the facts play compares
    class and L4T with the unit's own."""
    if not isinstance(expected, Mapping):
        return [f"{name}: must be a map of facts (device_class, l4t, memory_mb, ...), got {shown(expected)}"]
    device_class = expected.get("device_class")
    known = load_device_classes().get(device_class) if isinstance(device_class, str) else None
    # A DGX Spark runs DGX OS: it has no L4T release, so none is required (null if given).
    without_l4t = known is not None and not known.l4t
    needed = ("device_class", "memory_mb") if without_l4t else ("device_class", "l4t", "memory_mb")
    problems = [f"{name}.{key}: missing; the plan needs it" for key in needed if key not in expected]
    if "device_class" in expected and known is None:
        problems.append(f"{name}.device_class: unknown device class {shown(device_class)} "
                        f"(known: {', '.join(device_class_names())})")
    l4t = expected.get("l4t")
    if without_l4t:
        if l4t is not None:
            problems.append(f"{name}.l4t: {device_class} runs no L4T; leave it out or null, got {shown(l4t)}")
    elif "l4t" in expected and not (isinstance(l4t, str) and _L4T_PATTERN.match(l4t)):
        problems.append(f"{name}.l4t: must be an L4T release like '36.4.3' (quoted in YAML), got {shown(l4t)}")
    memory = expected.get("memory_mb")
    if "memory_mb" in expected and (not is_integer(memory) or memory <= 0):
        problems.append(f"{name}.memory_mb: must be a positive integer (MiB), got {shown(memory)}")
    elif is_integer(memory) and known is not None:
        low, high = known.memory_gib
        if not low * 1024 <= memory <= high * 1024:
            problems.append(f"{name}.memory_mb: {memory} MiB cannot be a {device_class}'s memory "
                            f"({low}..{high} GiB, {low * 1024}..{high * 1024} MiB)")
    if name == EXPECTED_FACTS_VAR:  # a facts file is what a unit reported; a declaration is typed
        problems += [f"{name}.{key}: not a fact of a unit{closest(str(key), FACT_KEYS)}"
                     for key in expected if key not in FACT_KEYS]
    cuda = expected.get("cuda")
    if cuda is not None and not (isinstance(cuda, str) and _CUDA_PATTERN.match(cuda)):
        problems.append(f"{name}.cuda: must be a CUDA version like '12.6' (quoted in YAML), got {shown(cuda)}")
    return problems


def class_conflicts(policy: Mapping[str, Any], device_class: str | None) -> list[str]:
    """Contradictions that only show once the unit's class is known (declared or read).

    Each variable may be fine alone; together they leave a class nothing to do. Only
    checked for a known class: a fleet-wide method list is right for Thor even when an
    Orin Nano would deny all of it, so without the class there is no contradiction.
    """
    methods = policy.get("specfleet_spec_methods")
    denied_by_class = policy.get("specfleet_spec_methods_denied")
    denied = denied_by_class.get(device_class) if isinstance(denied_by_class, Mapping) else None
    if device_class not in device_class_names() or not isinstance(methods, list) or not isinstance(denied, Mapping):
        return []
    if methods and all(method in denied for method in methods):
        return [
            f"specfleet_spec_methods: every method listed ({', '.join(map(str, methods))}) is denied on "
            f"{device_class} by specfleet_spec_methods_denied.{device_class}; the unit could never speculate"
        ]
    return []
