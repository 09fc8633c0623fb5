"""Serving plan: unit facts + catalog + policy -> what the unit should serve, and why.

Pure functions. A plan carries both the known-good baseline serving (no speculation) and
the speculative candidate; every downgrade and refusal adds a reason string that the
report shows to the user.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

from specfleet import batch_table, capability, plan_trtllm, serving, sweep
from specfleet.catalog import Catalog, Image, Model, device_class_names, load_device_classes, version_key

METHOD_LABELS = {"eagle3": "EAGLE-3", "mtp": "MTP", "draft_model": "draft model", "ngram": "n-gram"}
GIB_PER_MIB = 1 / 1024


def _cuda_major(version: str | None) -> int | None:
    return int(version.split(".")[0]) if version else None


def image_fits(image: Image, device_class: str, l4t: str | None, unit_cuda: str | None) -> bool:
    if device_class not in image.classes:
        return False
    if image.l4t_min is None:
        pass  # an image for a class without L4T (DGX Spark): class and CUDA decide
    elif l4t is None:
        return False
    elif version_key(l4t) < version_key(image.l4t_min):
        return False
    if image.l4t_max and version_key(l4t) > version_key(image.l4t_max):
        return False
    if image.cuda is None:
        return True
    # A CUDA 13 image needs a CUDA 13 driver: never on JetPack 6 (driver 540.x, CUDA 12).
    unit_major = _cuda_major(unit_cuda)
    return unit_major is not None and _cuda_major(image.cuda) <= unit_major


# From about this vLLM a request that asks for logprobs is decoded with speculation; before it,
# without (vllm-project/vllm#34497): the output check asks for logprobs.
LOGPROBS_DRAFTED_SINCE = (0, 14)


TRTLLM_OUTPUTS_NOTE = (
    "outputs not checked token by token: TensorRT-LLM's speculative decoding serves no logprobs (its samplers "
    "assert on them and can leave the server hung, NVIDIA/TensorRT-LLM#12546; refused from #18401), so the rollout "
    "sends no output check there")


def logprob_drafting_note(vllm_version: str | None) -> str | None:
    """What the plan says about the output check on an image whose vLLM may serve a logprob
    request without speculative decoding; None where it drafts for one."""
    if vllm_version is None:
        return ("outputs may not be checked with speculation on: this image's vLLM version is not known, and before "
                "about 0.14 vLLM serves a request asking for logprobs without speculation (vllm#34497); the "
                "check reads the drafting counters and says so")
    if version_key(vllm_version)[:2] < LOGPROBS_DRAFTED_SINCE:
        return (f"outputs not checked with speculation on: vLLM {vllm_version} serves a request asking for logprobs "
                "without speculation (vllm#34497), so the output check compares the baseline with itself")
    return None


def select_image(catalog: Catalog, device_class: str, l4t: str | None, unit_cuda: str | None) -> Image | None:
    return next(
        (
            image
            for image in catalog.images
            if not image.pin_only and image_fits(image, device_class, l4t, unit_cuda)
        ),
        None,
    )


def mirrored(ref: str, mirror: str | None) -> str:
    """Rewrite an image reference to a LAN registry: drop its registry host, prefix the mirror.

    Docker treats the first path component as a registry host when it contains '.' or ':'
    or is 'localhost'; otherwise the image lives on docker.io.
    """
    if not mirror:
        return ref
    first, _, rest = ref.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        ref = rest
    return f"{mirror}/{ref}"


def repo_digest(ref: str, repo_digests: list[str]) -> str:
    """The digest ("sha256:...") Docker recorded for ``ref``'s repository among an image's
    RepoDigests ("registry/repo@sha256:..."); "" when it has none (a loaded tarball)."""
    repository = ref.rsplit(":", 1)[0] if ":" in ref.rsplit("/", 1)[-1] else ref
    for entry in repo_digests or []:
        name, _, digest = entry.partition("@")
        if name == repository and digest:
            return digest
    return ""


def speculative_config(method: str, artifact: str | None, tokens: int, policy: Mapping) -> dict:
    config: dict[str, Any] = {"method": method}
    if artifact:
        config["model"] = artifact
    config["num_speculative_tokens"] = tokens
    if method == "ngram":
        config["prompt_lookup_min"] = policy["specfleet_ngram_prompt_lookup_min"]
        config["prompt_lookup_max"] = policy["specfleet_ngram_prompt_lookup_max"]
    if artifact:
        # The drafter runs unsharded beside the target (seed 000 sets it explicitly).
        config["draft_tensor_parallel_size"] = 1
    return config


def vllm_serving(
    kind: str,
    image_ref: str,
    model: Model,
    policy: Mapping,
    device_class: str,
    utilisation: float,
    spec_config: dict | None,
) -> dict[str, Any]:
    """A `vllm serve` serving; the port and every flag come from the policy, the user's
    extra flags after the plan's."""
    return serving.make(
        kind,
        engine="vllm",
        image=image_ref,
        model=model.repo,
        port=policy["specfleet_port"],
        flags=[
            ["--gpu-memory-utilization", f"{utilisation:.2f}"],
            ["--max-model-len", str(policy["specfleet_max_model_len"][device_class])],
            ["--max-num-seqs", str(policy["specfleet_max_num_seqs"])],
            ["--seed", str(policy["specfleet_seed"])],
        ],
        extra_flags=serving.normalise_flags(policy["specfleet_serve_extra_args"]),
        speculative_config=spec_config,
    )


def _memory_check(
    what: str, need_gib: float, utilisation: float, unit_gib: float, policy: Mapping
) -> str | None:
    """Why ``need_gib`` cannot be served at ``utilisation`` on ``unit_gib``, or None."""
    budget = utilisation * unit_gib
    headroom = policy["specfleet_memory_headroom_gib"]
    if need_gib > budget:
        return (
            f"{what} needs {need_gib:.2f} GiB but vLLM's budget is {budget:.2f} GiB "
            f"({utilisation:.2f} x {unit_gib:.2f} GiB)"
        )
    if need_gib + headroom > unit_gib:
        return (
            f"{what} needs {need_gib:.2f} GiB + {headroom:.2f} GiB headroom, "
            f"the unit has {unit_gib:.2f} GiB"
        )
    return None


def _speculator(
    method: str, model: Model, catalog: Catalog, device_class: str
) -> tuple[str | None, float, str | None]:
    """(artifact repo, its weight GiB, reason it is unavailable) for a method and target; a
    draft model must be one the unit's GPU runs (specfleet.capability)."""
    if method == "ngram":
        return None, 0.0, None
    if method == "mtp":
        if not model.mtp:
            return None, 0.0, f"{model.repo} has no MTP layers"
        return None, 0.0, None
    if method == "eagle3":
        if not model.eagle3:
            return None, 0.0, f"no EAGLE-3 head in the catalog for {model.repo}"
        size = catalog.artifact_gib(model.eagle3)
        return model.eagle3, size or 0.0, None if size is not None else f"no size for {model.eagle3}"
    # draft_model: the first catalog draft of the same tokenizer family.
    table = capability.load_table()
    unrunnable = []
    for repo in model.draft_models:
        draft = catalog.model(repo)
        if draft and draft.family == model.family and draft.vocab_size == model.vocab_size:
            found = capability.verdict(table, device_class, draft)
            if found.runs:
                return draft.repo, draft.weights_gib, None
            unrunnable.append(found.why)
    if unrunnable:
        return None, 0.0, "; ".join(unrunnable)
    return None, 0.0, f"no draft model with {model.repo}'s tokenizer in the catalog"


def _candidate_methods(
    plan: dict, model: Model, policy: Mapping, catalog: Catalog, image: Image
) -> Iterator[tuple[str, str, str | None, float]]:
    """(method, label, artifact repo, its GiB) in the policy's order of preference, for the
    methods the class allows, the image runs and the catalog has an artifact for; the reason
    each other one is skipped goes into the plan. Memory is the caller's (engines differ)."""
    device_class = plan["device_class"]
    denied = policy["specfleet_spec_methods_denied"].get(device_class, {})
    for method in policy["specfleet_spec_methods"]:
        label = METHOD_LABELS[method]
        artifact, artifact_gib, unavailable = _speculator(method, model, catalog, device_class)
        if method == "mtp" and unavailable:
            continue  # MTP is a property of the model; lacking it is no downgrade
        if method in denied:
            plan["reasons"].append(f"{label} not allowed on {device_class}: {denied[method]}")
            continue
        if method not in image.methods:
            plan["reasons"].append(f"{label} not supported by {image.ref}")
            continue
        if unavailable:
            plan["reasons"].append(f"{label} skipped: {unavailable}")
            continue
        yield method, label, artifact, artifact_gib


def _refused(base: dict, reason: str) -> dict:
    base["refused"] = True
    base["reasons"].append(reason)
    return base


def plan_unit(host: str, facts: Mapping, model: Model, policy: Mapping, catalog: Catalog) -> dict:
    """The unit's plan: what it serves and measures, and what the event adds to its store."""
    catalog = catalog.with_images(policy["specfleet_images"])
    plan = _serving_plan(host, facts, model, policy, catalog)
    # The draft lengths this unit's key measures on its canary (None: the planned k only).
    plan["sweep"] = sweep.for_plan(plan, policy)
    # The per-batch-size table a c=8 regression may be measured with (None: none to try).
    plan["batch_table"] = batch_table.for_plan(plan, policy)
    if plan["device_class"] in device_class_names():
        event_models(plan, facts, policy, catalog)
    else:
        plan["event"] = {"repos": [], "skipped": [], "servings": [], "needs_tiktoken": False}
    return plan


def _serving_plan(host: str, facts: Mapping, model: Model, policy: Mapping, catalog: Catalog) -> dict:
    device_class = facts.get("device_class", "unknown")
    plan: dict[str, Any] = {
        "host": host,
        "device_class": device_class,
        "l4t": facts.get("l4t"),
        "model": model.repo,
        "model_name": model.name,
        # What the policy asked for; differs from `model` when the unit's GPU cannot run it
        # and the plan picked another precision (specfleet.capability).
        "requested_model": model.repo,
        "weights_format": model.weights_format,
        "compute_capability": None,
        "image": None,
        "image_digest": None,
        "image_size_gib": None,
        "vllm_version": None,
        "speculative": None,
        "gpu_memory_utilization": None,
        "baseline_gpu_memory_utilization": None,
        # What the unit serves (specfleet.serving): the candidate, and the baseline it is
        # measured against. A plan with no method that fits has the baseline's flags in both.
        "serving": None,
        "baseline_serving": None,
        "needs_tiktoken": model.needs_tiktoken,
        "gated": model.gated,
        "memory": None,
        # The speculative serving's lighter variant, started once in its place when it runs out
        # of memory at start (specfleet_oom_retry_memory_drop); None: no retry.
        "oom_retry": None,
        # Where the unit's memory holds both, the candidate is measured beside the baseline:
        # {"port", "baseline", "speculative"} (the trial port and each side's
        # --gpu-memory-utilization share); None: restart per block.
        "side_by_side": None,
        "refused": False,
        "reasons": [],
        "notes": [],
    }
    if device_class not in device_class_names():
        return _refused(plan, f"not a recognised Jetson (device tree model {facts.get('model')!r})")
    # The image decides the engine (images.yml names each image's backend): the checkpoint's
    # memory check and the rest of the plan follow that engine's rules.
    image, missing = _image_for_unit(device_class, facts, policy, catalog)
    backend = image.backend if image else class_backend(catalog, device_class)
    model = _checkpoint_for_unit(plan, facts, model, policy, catalog, backend)
    if model is None:
        return plan
    if image is None:
        return _refused(plan, missing)
    if image.backend == "trtllm":
        return _plan_trtllm(plan, facts, model, policy, catalog, image)
    plan["image"] = mirrored(image.ref, policy["specfleet_image_mirror"])
    plan["image_digest"] = image.digest
    plan["image_size_gib"] = image.size_gib
    plan["vllm_version"] = image.vllm_version
    if image.digest is None:
        plan["notes"].append(f"{image.ref} is a mutable tag with no pinned digest")
    drafting = logprob_drafting_note(image.vllm_version)
    if drafting:
        plan["notes"].append(drafting)

    unit_gib = facts["memory_mb"] * GIB_PER_MIB
    kv_gib = policy["specfleet_min_kv_cache_gib"]
    baseline_util = policy["specfleet_gpu_memory_utilization"][device_class]
    baseline_need = model.weights_gib + kv_gib
    plan["memory"] = {
        "unit_gib": round(unit_gib, 2),
        "target_gib": model.weights_gib,
        "min_kv_gib": kv_gib,
        "headroom_gib": policy["specfleet_memory_headroom_gib"],
        "speculator_gib": 0.0,
    }
    problem = _memory_check(f"{model.repo} (+{kv_gib:.2f} GiB KV)", baseline_need, baseline_util, unit_gib, policy)
    if problem:
        return _refused(plan, f"does not fit: {problem}")
    plan["baseline_gpu_memory_utilization"] = baseline_util
    plan["baseline_serving"] = vllm_serving(
        "baseline", plan["image"], model, policy, device_class, baseline_util, None)

    spec_util = round(baseline_util - policy["specfleet_spec_memory_drop"], 2)
    for method, label, artifact, artifact_gib in _candidate_methods(plan, model, policy, catalog, image):
        what = f"{model.repo} + {artifact or label} (+{kv_gib:.2f} GiB KV)"
        problem = _memory_check(what, baseline_need + artifact_gib, spec_util, unit_gib, policy)
        if problem:
            plan["reasons"].append(f"{label} does not fit on {device_class}: {problem}")
            continue
        tokens = _spec_tokens(policy, device_class, method)
        plan["speculative"] = speculative_config(method, artifact, tokens, policy)
        plan["memory"]["speculator_gib"] = artifact_gib
        plan["gpu_memory_utilization"] = spec_util
        plan["serving"] = vllm_serving(
            "speculative", plan["image"], model, policy, device_class, spec_util, plan["speculative"])
        plan["oom_retry"] = _oom_retry(plan, model, policy, catalog, method, artifact, tokens, unit_gib)
        plan["side_by_side"] = _side_by_side(plan, model, policy, f"{model.repo} + {artifact or label}", artifact_gib,
                                             unit_gib)
        return plan

    plan["reasons"].append("no speculative method fits: serving the baseline only")
    plan["gpu_memory_utilization"] = baseline_util
    plan["serving"] = {**plan["baseline_serving"], "kind": "speculative"}
    return plan


def _side_by_side(plan: dict, model: Model, policy: Mapping, speculative_what: str, speculator_gib: float,
                  unit_gib: float) -> dict[str, Any] | None:
    """Each side's share of the speculative serving's --gpu-memory-utilization, in proportion to
    what it needs (its weights and the minimum KV cache; the candidate's speculator too), when
    each share holds its side and the memory outside the shares holds each server's headroom:
    the two serve at once (specfleet_trial_port) and the blocks switch the traffic, not the
    server. Together they ask vLLM for no more than the candidate alone would. None (a note says
    why) when a share falls short or specfleet_trial_port is null."""
    port = policy["specfleet_trial_port"]
    if port is None:
        return None
    kv_gib = policy["specfleet_min_kv_cache_gib"]
    budget = plan["gpu_memory_utilization"]
    needs = {"baseline": model.weights_gib + kv_gib, "speculative": model.weights_gib + speculator_gib + kv_gib}
    baseline_share = math.floor(100 * budget * needs["baseline"] / sum(needs.values())) / 100
    shares = {"baseline": baseline_share, "speculative": round(budget - baseline_share, 2)}
    whats = {"baseline": f"{model.repo} (+{kv_gib:.2f} GiB KV)",
             "speculative": f"{speculative_what} (+{kv_gib:.2f} GiB KV)"}
    for side, need in needs.items():
        problem = _memory_check(whats[side], need, shares[side], unit_gib, policy)
        if problem:
            plan["notes"].append(f"measured with a restart per block: beside the other serving, the {side} "
                                 f"serving's share {shares[side]:.2f} falls short ({problem})")
            return None
    # Each server also holds memory outside its share (its CUDA context, its processes' host
    # memory on unified memory): the headroom, once per server.
    outside = (1 - budget) * unit_gib
    headroom = policy["specfleet_memory_headroom_gib"]
    if outside < 2 * headroom:
        plan["notes"].append(f"measured with a restart per block: two servings need {2 * headroom:.2f} GiB outside "
                             f"their shares, the unit leaves {outside:.2f} GiB ({1 - budget:.2f} x {unit_gib:.2f} GiB)")
        return None
    return {"port": port, **shares}


def _oom_retry(plan: dict, model: Model, policy: Mapping, catalog: Catalog, method: str, artifact: str | None,
               tokens: int, unit_gib: float) -> dict[str, Any] | None:
    """What to start once more when the speculative serving runs out of memory at start
    (NVIDIA's jetson-speculative-decoding skill: "If startup OOMs, lower
    --gpu-memory-utilization, use a smaller draft, or disable speculation"): the utilisation
    lowered by specfleet_oom_retry_memory_drop and, with a draft model, the smallest runnable
    draft of the same tokenizer that is smaller than the planned one. None when the drop is 0 or
    the lighter serving no longer holds the target, its speculator and the minimum KV cache
    (the unit then reverts, as it would without the rule)."""
    drop = policy["specfleet_oom_retry_memory_drop"]
    if not drop:
        return None
    device_class = plan["device_class"]
    utilisation = round(plan["gpu_memory_utilization"] - drop, 2)
    draft, draft_gib = artifact, plan["memory"]["speculator_gib"]
    if method == "draft_model":
        table = capability.load_table()
        smaller = [candidate for repo in model.draft_models if (candidate := catalog.model(repo)) is not None
                   and candidate.family == model.family and candidate.vocab_size == model.vocab_size
                   and candidate.weights_gib < draft_gib
                   and capability.verdict(table, device_class, candidate).runs]
        if smaller:
            lightest = min(smaller, key=lambda candidate: candidate.weights_gib)
            draft, draft_gib = lightest.repo, lightest.weights_gib
    what = f"{model.repo} + {draft or METHOD_LABELS[method]} (+{policy['specfleet_min_kv_cache_gib']:.2f} GiB KV)"
    need = model.weights_gib + policy["specfleet_min_kv_cache_gib"] + draft_gib
    if utilisation <= 0 or _memory_check(what, need, utilisation, unit_gib, policy):
        plan["notes"].append(
            f"no retry on out of memory at start: --gpu-memory-utilization {utilisation:.2f} would not hold {what}")
        return None
    config = speculative_config(method, draft, tokens, policy)
    change = f"--gpu-memory-utilization {utilisation:.2f} (was {plan['gpu_memory_utilization']:.2f})"
    if draft != artifact:
        change += f" and the smaller draft {draft} (was {artifact})"
    return {"serving": vllm_serving("speculative", plan["image"], model, policy, device_class, utilisation, config),
            "change": change}


ENGINE_NAMES = {"vllm": "vLLM", "trtllm": "TensorRT-LLM"}


def _image_for_unit(device_class: str, facts: Mapping, policy: Mapping, catalog: Catalog) -> tuple[Image | None, str]:
    """The image the unit runs: the pinned one (specfleet_image) if it fits the unit, else the
    first in the catalog that does; with None, why there is none."""
    l4t, cuda = facts.get("l4t"), facts.get("cuda")
    pinned = policy["specfleet_image"]
    # The policy check made sure a pinned name exists; the pin still has to fit the unit.
    image = catalog.image(pinned) if pinned else select_image(catalog, device_class, l4t, cuda)
    if image is not None and image_fits(image, device_class, l4t, cuda):
        return image, ""
    engine = ENGINE_NAMES[class_backend(catalog, device_class)]
    if not load_device_classes()[device_class].l4t:  # DGX OS, no L4T (DGX Spark): class and CUDA decide
        why = "the NVIDIA driver version was not read, so its CUDA is unknown" if cuda is None else f"CUDA {cuda}"
        what = f"pinned image {pinned!r} (specfleet_image)" if pinned else f"no {engine} image"
        return None, f"{what} for {device_class} ({why})"
    if pinned:
        return None, (f"pinned image {pinned!r} (specfleet_image) does not run on {device_class} "
                      f"with L4T {l4t} (CUDA {cuda})")
    return None, f"no {engine} image for {device_class} on L4T {l4t} (CUDA {cuda})"


def class_backend(catalog: Catalog, device_class: str) -> str:
    """The engine of the catalog's images for ``device_class`` (the first listed), vLLM when
    none lists it: how a unit with no fitting image is sized and named."""
    return next((image.backend for image in catalog.images if device_class in image.classes), "vllm")


def _checkpoint_for_unit(plan: dict, facts: Mapping, model: Model, policy: Mapping, catalog: Catalog,
                         backend: str) -> Model | None:
    """The checkpoint of ``model`` this unit's GPU runs (specfleet.capability), recorded in the
    plan; None when there is none, the plan then refused with the reason. Its memory is checked
    as ``backend``, the engine of the unit's image, sizes it."""
    device_class = plan["device_class"]
    table = capability.load_table()
    plan["compute_capability"] = capability.dotted(table.capability(device_class) or 0)
    if not policy["specfleet_capability_check"]:
        plan["notes"].append(
            f"capability check off (specfleet_capability_check): {model.repo} is started as asked, "
            "whatever its GPU can run"
        )
        return model
    unit_gib = facts["memory_mb"] * GIB_PER_MIB
    kv_gib = policy["specfleet_min_kv_cache_gib"]
    utilisation = policy["specfleet_gpu_memory_utilization"][device_class]

    def fits(candidate: Model) -> bool:
        if backend == "trtllm":
            return plan_trtllm.memory_problem(
                candidate.repo, candidate.weights_gib, utilisation, unit_gib, kv_gib,
                policy["specfleet_memory_headroom_gib"]) is None
        return _memory_check(candidate.repo, candidate.weights_gib + kv_gib, utilisation, unit_gib, policy) is None

    choice = capability.choose(table, catalog, device_class, model, fits)
    plan["reasons"].extend(choice.reasons)
    plan["notes"].extend(choice.notes)
    if choice.model is None:
        plan["refused"] = True
        return None
    if choice.model is not model:
        plan.update(
            model=choice.model.repo, model_name=choice.model.name, weights_format=choice.model.weights_format,
            needs_tiktoken=choice.model.needs_tiktoken, gated=choice.model.gated,
        )
    return choice.model


def _spec_tokens(policy: Mapping, device_class: str, method: str) -> int:
    by_method = policy["specfleet_spec_tokens_by_method"].get(device_class) or {}
    return by_method.get(method, policy["specfleet_spec_tokens"][device_class])


def _plan_trtllm(plan: dict, facts: Mapping, model: Model, policy: Mapping, catalog: Catalog, image: Image) -> dict:
    """A TensorRT-LLM plan (`trtllm-serve`, the image's backend; DGX Spark's), speculation in an options YAML.

    Same decisions as a Jetson plan (method order, denials, artifacts, memory, reasons);
    what differs is how they are told to the engine and how its memory is sized: the KV
    cache takes a fraction of what is free after the weights, so there is no utilisation
    drop when speculating (seed 004 uses 0.9 for every variant).
    """
    device_class = plan["device_class"]
    plan.update(
        backend=image.backend,
        trtllm_version=image.trtllm_version,
        image=mirrored(image.ref, policy["specfleet_image_mirror"]),
        image_digest=image.digest,
        image_size_gib=image.size_gib,
        kv_cache_free_gpu_memory_fraction=None,
        speculator=None,
    )
    if image.digest is None:
        plan["notes"].append(f"{image.ref} is a mutable tag with no pinned digest")
    plan["notes"].append(TRTLLM_OUTPUTS_NOTE)

    unit_gib = facts["memory_mb"] * GIB_PER_MIB
    kv_gib = policy["specfleet_min_kv_cache_gib"]
    headroom = policy["specfleet_memory_headroom_gib"]
    fraction = policy["specfleet_gpu_memory_utilization"][device_class]
    plan["kv_cache_free_gpu_memory_fraction"] = fraction
    plan["memory"] = {
        "unit_gib": round(unit_gib, 2),
        "target_gib": model.weights_gib,
        "min_kv_gib": kv_gib,
        "headroom_gib": headroom,
        "speculator_gib": 0.0,
        "kv_cache_gib": plan_trtllm.kv_cache_gib(model.weights_gib, fraction, unit_gib),
    }
    problem = plan_trtllm.memory_problem(model.repo, model.weights_gib, fraction, unit_gib, kv_gib, headroom)
    if problem:
        return _refused(plan, f"does not fit: {problem}")
    if model.needs_tiktoken:
        plan["notes"].append(
            f"{model.repo} loads o200k_base/cl100k_base: set TIKTOKEN_ENCODINGS_BASE to a directory holding them "
            "(as NVIDIA's DGX Spark speculative decoding playbook does)"
        )

    for method, label, artifact, artifact_gib in _candidate_methods(plan, model, policy, catalog, image):
        weights = model.weights_gib + artifact_gib
        problem = plan_trtllm.memory_problem(
            f"{model.repo} + {artifact or label}", weights, fraction, unit_gib, kv_gib, headroom
        )
        if problem:
            plan["reasons"].append(f"{label} does not fit on {device_class}: {problem}")
            continue
        tokens = _spec_tokens(policy, device_class, method)
        max_batch, max_concurrency, why = plan_trtllm.batching(policy, image.trtllm_version, method)
        plan["notes"].append(why)
        spec = plan_trtllm.speculative_config(method, artifact, tokens, policy, image.trtllm_eagle3_decoding_type,
                                              max_concurrency)
        options = plan_trtllm.extra_llm_api_options(method, spec, fraction, max_batch)
        plan["speculative"] = spec
        plan["memory"]["speculator_gib"] = artifact_gib
        plan["memory"]["kv_cache_gib"] = plan_trtllm.kv_cache_gib(weights, fraction, unit_gib)
        if artifact:
            plan["speculator"] = {"repo": artifact, "dir": plan_trtllm.speculator_dir(artifact)}
        plan["serving"] = plan_trtllm.serving("speculative", plan["image"], model.repo, policy, device_class, options,
                                              max_batch)
        plan["baseline_serving"] = plan_trtllm.serving(
            "baseline", plan["image"], model.repo, policy, device_class, plan_trtllm.baseline_options(options),
            max_batch)
        return plan

    plan["reasons"].append("no speculative method fits: serving the baseline only")
    max_batch, _, why = plan_trtllm.batching(policy, image.trtllm_version, None)
    plan["notes"].append(why)
    baseline = plan_trtllm.extra_llm_api_options(None, None, fraction, max_batch)
    plan["baseline_serving"] = plan_trtllm.serving(
        "baseline", plan["image"], model.repo, policy, device_class, baseline, max_batch)
    plan["serving"] = {**plan["baseline_serving"], "kind": "speculative"}
    return plan


def speculation(plan: Mapping) -> dict[str, Any]:
    """The plan's speculative method and draft tokens, whichever engine serves it (None and
    None for a baseline-only plan)."""
    return serving.speculation(plan.get("serving"))


def needed_repos(plan: Mapping) -> list[str]:
    """Model repos a unit's plan needs in its HF cache: the target and its speculator
    (vLLM names it in --speculative-config, TensorRT-LLM in speculative_model_dir)."""
    if not plan.get("model") or plan.get("refused"):
        return []
    vllm_speculator = serving.draft_repo(plan["serving"]) if plan.get("serving") else None
    return [plan["model"], *([vllm_speculator] if vllm_speculator else []), *checkpoint_repos(plan)]


def event_models(plan: dict, facts: Mapping, policy: Mapping, catalog: Catalog) -> None:
    """What the event manifest (specfleet_event_models) adds to the unit: each model its GPU runs
    and its memory holds, with its EAGLE-3 head and runnable draft models (``repos``), the
    servings it would run them with (``servings``: the unit's plan of that very checkpoint,
    baseline and speculative, which prewarm.yml compiles ahead), whether any needs tiktoken
    files, and the reason for each model it leaves out (``skipped``)."""
    table = capability.load_table()
    repos: list[str] = []
    skipped: list[str] = []
    servings: list[dict] = []
    needs_tiktoken = False
    for name in policy["specfleet_event_models"]:
        model = catalog.model(name)
        if model is None:  # policy.validate refuses this first
            continue
        found = capability.verdict(table, plan["device_class"], model)
        if not found.runs:
            skipped.append(found.why)
            continue
        # The manifest names a checkpoint: plan that one (no swap to another precision), on
        # the unit's own image; a checkpoint that does not fit is left out, not replaced.
        own = _serving_plan(plan["host"], facts, model, {**policy, "specfleet_capability_check": False}, catalog)
        if own["refused"]:
            skipped.append(f"{model.repo}: {own['reasons'][-1]}")
            continue
        drafts = [draft.repo for repo in model.draft_models if (draft := catalog.model(repo)) is not None
                  and capability.verdict(table, plan["device_class"], draft).runs]
        repos.extend([model.repo, *([model.eagle3] if model.eagle3 else []), *drafts])
        servings.extend(serving for serving in (own["baseline_serving"], own["serving"])
                        if serving not in servings)
        needs_tiktoken = needs_tiktoken or model.needs_tiktoken
    plan["event"] = {"repos": list(dict.fromkeys(repos)), "skipped": skipped, "servings": servings,
                     "needs_tiktoken": needs_tiktoken}


def stage_repos(plan: Mapping) -> list[str]:
    """Every repo prepare puts in the unit's store: what the plan serves, then the event's."""
    return list(dict.fromkeys([*needed_repos(plan), *((plan.get("event") or {}).get("repos") or [])]))


def checkpoint_repos(plan: Mapping) -> list[str]:
    """Repos the engine reads as a checkpoint directory rather than by repo id."""
    speculator = plan.get("speculator") or {}
    return [speculator["repo"]] if speculator.get("repo") and not plan.get("refused") else []


def plan_fleet(
    units: Mapping[str, Mapping], policies: Mapping[str, Mapping], catalog: Catalog
) -> list[dict]:
    """One plan per host; ``policies`` holds each host's resolved policy."""
    plans = []
    for host, facts in units.items():
        policy = policies[host]
        model = catalog.model(policy["specfleet_model"])
        if model is None:  # resolve() rejects this; kept so a plan never raises
            raise ValueError(f"{host}: unknown model {policy['specfleet_model']!r}")
        plans.append(plan_unit(host, facts, model, policy, catalog))
    return plans


def expectation_mismatches(facts: Mapping, expected: Mapping | None) -> list[str]:
    """What differs between a unit and the inventory's declared expectation of it.

    A relabelled or reflashed unit would otherwise get another class's plan silently.
    """
    if not expected:
        return []
    return [
        f"{key} is {facts.get(key)!r}, the inventory expects {expected[key]!r}"
        for key in ("device_class", "l4t")
        if key in expected and facts.get(key) != expected[key]
    ]
