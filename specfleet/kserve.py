"""KServe InferenceService manifests from a serving plan (issue 8; seed 002).

Pure functions: a plan (as ``specfleet.plan.plan_unit`` returns it) and :class:`Options`
become two manifest dicts, the speculative one and a rollback one that differs only by the
missing ``--speculative-config`` and the baseline's memory budget. Nothing is written or
applied here; :func:`render_pair` refuses (raises :class:`KServeError`) before a malformed
manifest can leave this module, and :func:`validate` says why, naming the field.

Where the artifacts land (seed 002, "Providing Model Artifacts"):
- one ``storageUri`` (n-gram needs only the target; a PVC or an OCI modelcar may also hold
  target + draft in subdirectories): everything is under ``/mnt/models``;
- ``storageUris`` (KServe >= 0.16): one entry per artifact, each at its own absolute
  ``mountPath``, all under one parent directory.
"""

from __future__ import annotations

import json
import math
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from specfleet import serving

API_VERSION = "serving.kserve.io/v1beta1"
KIND = "InferenceService"
# Where KServe puts a single storageUri's artifact (seed 002: "The model lands at /mnt/models").
DEFAULT_MOUNT = "/mnt/models"
ROLES = ("target", "draft")
# Seed 002 (Example 2): a draft artifact's weights sit outside --gpu-memory-utilization, so leave
# headroom, 0.8 instead of 0.9: 0.10 below the baseline. Jetson plans drop only 0.05 (policy).
SEED_DRAFT_HEADROOM = 0.10

# How each runtime takes the model path. The runtime owns the command, the port (8080) and the
# served name, so the plan's `vllm serve REPO --host --port` are not passed on.
RUNTIMES: dict[str, dict[str, Any]] = {
    # KServe v0.20 ClusterServingRuntime kserve-vllmserver: modelFormat vLLM, runs the vLLM OpenAI
    # server with --model=/mnt/models; args we add come after its own, so our --model wins
    # (kserve/kserve PR #4769, first in KServe v0.20.0).
    "vllm": {"model_format": "vLLM", "fixed": [], "model_flag": "--model"},
    # kserve-huggingfaceserver: modelFormat huggingface, --model_name/--model_dir, and with the vLLM
    # backend vLLM's engine flags in args (kserve/kserve python/huggingfaceserver/huggingfaceserver/
    # __main__.py, maybe_add_vllm_cli_parser; KServe docs
    # "Runtime Overview", kserve.github.io/website/docs/model-serving/generative-inference/overview).
    "huggingface": {"model_format": "huggingface", "fixed": ["--backend=vllm"], "model_flag": "--model_dir"},
}
# Flags the runtime sets itself; the plan's values are for a container on a Jetson.
_RUNTIME_OWNED = {"--host", "--port", "--model", "--served-model-name"}

# KServe IsvcNameFmt (pkg/apis/serving/v1beta1/inference_service_validation.go): a DNS-1123
# label that also starts with a letter; 63 characters is the DNS-1123 label limit.
_ISVC_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# Namespaces are DNS-1123 labels (Kubernetes).
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_MAX = 63
# StorageUri.mountPath: Pattern "^/.*", MaxLength 255 (kserve/kserve pkg/apis/serving/v1beta1/predictor.go).
_MOUNT_PATH_MAX = 255
# Knative duration for serving.knative.dev/progress-deadline (seed 002 caveat: size it to the
# ~5 minute cold start of a pod with a draft artifact).
_DURATION = re.compile(r"^[0-9]+(s|m|h)$")
PROGRESS_DEADLINE = "serving.knative.dev/progress-deadline"

# The fields this module writes, per object (names from the KServe v1beta1 CRD: InferenceService,
# PredictorSpec, ModelSpec = PredictorExtensionSpec + ModelFormat + runtime, StorageUri). Anything
# else is refused: a typo would otherwise be dropped silently by the API server's pruning.
_FIELDS: dict[str, set[str]] = {
    "": {"apiVersion", "kind", "metadata", "spec"},
    "metadata": {"name", "namespace", "labels", "annotations"},
    "spec": {"predictor"},
    "spec.predictor": {"model", "storageUris", "serviceAccountName", "minReplicas", "maxReplicas"},
    "spec.predictor.model": {"modelFormat", "runtime", "storageUri", "args", "env", "image", "resources"},
    "spec.predictor.model.modelFormat": {"name", "version"},
    "spec.predictor.model.resources": {"requests", "limits"},
}
_STORAGE_URI_FIELDS = {"uri", "mountPath"}


class KServeError(ValueError):
    """A manifest that must not be written; ``reasons`` name the field and why."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__("; ".join(reasons))
        self.reasons = reasons


@dataclass(frozen=True)
class StorageEntry:
    uri: str
    mount_path: str


@dataclass(frozen=True)
class Options:
    """What the plan does not know: where the artifacts come from and the cluster's names.

    Exactly one of ``storage_uri``, ``storage_uris`` (role -> entry, roles target/draft) or
    ``pvc`` gives the artifacts; giving more than one is refused, not resolved by precedence.
    """

    name: str
    namespace: str | None = None
    storage_uri: str | None = None
    storage_uris: Mapping[str, StorageEntry] = field(default_factory=dict)
    pvc: str | None = None
    # Subdirectories below /mnt/models when one storageUri (PVC or OCI modelcar) holds both.
    target_dir: str | None = None
    draft_dir: str | None = None
    runtime_format: str = "vllm"
    runtime: str | None = None
    image: str | None = None
    gpus: int = 1
    cpu: str | None = None
    memory: str | None = None
    service_account: str | None = None
    progress_deadline: str | None = None
    draft_headroom: float = SEED_DRAFT_HEADROOM


def default_name(host: str) -> str:
    """An InferenceService name from an inventory host name (dots and capitals are common there)."""
    name = re.sub(r"[^a-z0-9-]+", "-", host.lower()).strip("-")
    if not name or not name[0].isalpha():
        name = f"sd-{name}".rstrip("-")
    return name[:_LABEL_MAX].rstrip("-")


def default_mount_path(role: str) -> str:
    return f"{DEFAULT_MOUNT}/{role}"


def _basename(repo: str) -> str:
    return repo.rstrip("/").rsplit("/", 1)[-1]


def _draft_repo(plan: Mapping) -> str | None:
    """The artifact the speculative method loads besides the target (EAGLE-3 head, draft model)."""
    return serving.draft_repo(plan["serving"]) if plan.get("serving") else None


def _storage(plan: Mapping, options: Options) -> tuple[dict, dict, str, str | None, list[str]]:
    """(predictor fields, model fields, target path, draft path, notes) for the storage options.

    Raises KServeError for options that cannot deliver what the plan loads.
    """
    given = [flag for flag, value in (("storageUri", options.storage_uri), ("storageUris", options.storage_uris),
                                      ("pvc", options.pvc)) if value]
    draft = _draft_repo(plan)
    method = (plan.get("speculative") or {}).get("method")
    notes: list[str] = []
    if len(given) > 1:
        # Seed 002 Option A: "storageUri (singular) and storageUris (plural) are mutually exclusive";
        # a PVC is a storageUri (pvc://), so it excludes both.
        raise KServeError([f"storage: {' and '.join(given)} given; they are mutually exclusive (KServe): "
                           "give one storageUri, one PVC, or storageUris"])
    if not given:
        raise KServeError(["storage: no model storage given: a storageUri, a PVC, or storageUris (target[, draft])"])

    if options.storage_uris:
        if options.target_dir is not None or options.draft_dir is not None:
            raise KServeError(["storageUris: target/draft directories apply to one storageUri or a PVC; "
                               "a storageUris entry is placed by its mountPath"])
        unknown = sorted(set(options.storage_uris) - set(ROLES))
        if unknown:
            raise KServeError([f"storageUris: unknown role(s) {', '.join(unknown)} (roles: {', '.join(ROLES)})"])
        if "target" not in options.storage_uris:
            raise KServeError(["storageUris: no target entry: the target model must be mounted"])
        if draft and "draft" not in options.storage_uris:
            raise KServeError([f"storageUris: {method} loads {draft}: add a draft entry"])
        roles = ["target", "draft"] if draft else ["target"]
        if not draft and "draft" in options.storage_uris:
            notes.append(f"storageUris: the draft entry is left out: {method or 'the baseline'} loads no draft")
        entries = [{"uri": options.storage_uris[r].uri, "mountPath": options.storage_uris[r].mount_path}
                   for r in roles]
        paths = {r: options.storage_uris[r].mount_path for r in roles}
        return {"storageUris": entries}, {}, paths["target"], paths.get("draft"), notes

    # One storageUri mounted at /mnt/models (seed 002 Options B and C, and the n-gram pattern).
    uri = options.storage_uri or f"pvc://{options.pvc}/"
    # A PVC or a modelcar holding both artifacts lays them out in subdirectories; named like the
    # Hugging Face repos unless told (seed 002: the paths must match the directory names exactly).
    holds_both = bool(options.pvc or draft)
    target_dir = options.target_dir if options.target_dir is not None else (
        _basename(plan["model"]) if holds_both else "")
    target = posixpath.join(DEFAULT_MOUNT, target_dir) if target_dir else DEFAULT_MOUNT
    draft_path = None
    if draft:
        draft_dir = options.draft_dir if options.draft_dir is not None else _basename(draft)
        draft_path = posixpath.join(DEFAULT_MOUNT, draft_dir)
    return {}, {"storageUri": uri}, target, draft_path, notes


def _gpu_utilisation(plan: Mapping, speculative: bool, headroom: float) -> float:
    baseline = plan["baseline_gpu_memory_utilization"]
    if not speculative:
        return baseline
    util = plan["gpu_memory_utilization"]
    if _draft_repo(plan):
        util = min(util, round(baseline - headroom, 2))
    return util


def container_args(
    plan: Mapping, options: Options, target: str, draft: str | None, speculative: bool
) -> list[str]:
    """The runtime's args: the plan's vLLM flags as ``--flag=value`` strings, paths rewritten to
    the mounts. One string per flag, so removing the ``--speculative-config`` line is the whole
    rollback (seed 002, Rollback)."""
    runtime = RUNTIMES[options.runtime_format]
    spec = plan["serving"] if speculative else plan["baseline_serving"]
    args = list(runtime["fixed"])
    if options.runtime_format == "huggingface":
        args.append(f"--model_name={options.name}")
    args.append(f"{runtime['model_flag']}={target}")
    util = _gpu_utilisation(plan, speculative, options.draft_headroom)
    # The runtime's command and the mounted target replace `vllm serve REPO`.
    for flag, value in serving.engine_flags(spec):
        if flag in _RUNTIME_OWNED:
            continue
        if flag == "--gpu-memory-utilization":
            value = f"{util:.2f}"
        if flag == "--speculative-config":
            if not speculative:
                continue
            if "model" in value:
                # The draft's Hugging Face id becomes the path the storage puts it at.
                value = {**value, "model": draft}
        args.append(flag if value is None else f"{flag}={serving.flag_text(value)}")
    return args


def _resources(plan: Mapping, options: Options) -> dict:
    memory = plan.get("memory") or {}
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    if options.gpus:
        # Extended resources are set as limits; Kubernetes copies them to requests.
        limits["nvidia.com/gpu"] = str(options.gpus)
    if options.cpu:
        requests["cpu"] = limits["cpu"] = options.cpu
    if options.memory:
        requests["memory"] = limits["memory"] = options.memory
    elif memory:
        # Only a request: the scheduler then places the pod where target + draft + minimum KV +
        # headroom fit (the plan's refusal rule; Jetson memory is unified). A limit this tight
        # would OOM-kill the loader, so none is set unless asked for.
        need = (memory.get("target_gib", 0) + memory.get("speculator_gib", 0)
                + memory.get("min_kv_gib", 0) + memory.get("headroom_gib", 0))
        requests["memory"] = f"{math.ceil(need)}Gi"
    out: dict[str, dict[str, str]] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _manifest(plan: Mapping, options: Options, speculative: bool) -> tuple[dict, list[str]]:
    predictor_fields, model_fields, target, draft, notes = _storage(plan, options)
    runtime = RUNTIMES[options.runtime_format]
    model: dict[str, Any] = {"modelFormat": {"name": runtime["model_format"]}}
    if options.runtime:
        model["runtime"] = options.runtime
    model.update(model_fields)
    if options.image:
        model["image"] = options.image
    model["args"] = container_args(plan, options, target, draft, speculative)
    resources = _resources(plan, options)
    if resources:
        model["resources"] = resources
    predictor: dict[str, Any] = {}
    if options.service_account:
        # Credentials for private repositories go on the predictor's service account (seed 002).
        predictor["serviceAccountName"] = options.service_account
    predictor["model"] = model
    predictor.update(predictor_fields)
    metadata: dict[str, Any] = {"name": options.name}
    if options.namespace:
        metadata["namespace"] = options.namespace
    metadata["labels"] = {
        "app.kubernetes.io/managed-by": "specfleet",
        "app.kubernetes.io/component": "speculative" if speculative else "baseline",
    }
    if options.progress_deadline:
        metadata["annotations"] = {PROGRESS_DEADLINE: options.progress_deadline}
    manifest = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": {"predictor": predictor}}
    return manifest, notes


def _plan_problems(plan: Mapping, options: Options) -> list[str]:
    problems = []
    if plan.get("refused"):
        problems.append(f"plan: {plan.get('host')} is refused: {'; '.join(plan.get('reasons') or [])}")
    elif not plan.get("serving") or not plan.get("baseline_serving"):
        problems.append(f"plan: {plan.get('host')} has no serving")
    elif plan["serving"].get("engine") != "vllm":
        problems.append(f"plan: {plan.get('host')} serves with {plan['serving'].get('engine')}, KServe runs vLLM")
    if options.runtime_format not in RUNTIMES:
        problems.append(f"runtime format: {options.runtime_format!r} is not one of {', '.join(RUNTIMES)}")
    if options.gpus < 0:
        problems.append(f"resources: --gpus {options.gpus} is negative")
    if not 0 < options.draft_headroom < 1:
        problems.append(f"draft headroom: {options.draft_headroom} is not between 0 and 1")
    return problems


def render_pair(plan: Mapping, options: Options) -> tuple[dict, dict, list[str]]:
    """(speculative manifest, rollback manifest, notes), both validated; raises KServeError."""
    problems = _plan_problems(plan, options)
    if problems:
        raise KServeError(problems)
    speculative, notes = _manifest(plan, options, speculative=bool(plan.get("speculative")))
    rollback, _ = _manifest(plan, options, speculative=False)
    problems = validate(speculative)
    # The rollback shares the storage, so most of its problems repeat; say only the new ones.
    problems += [f"rollback: {p}" for p in validate(rollback) if p not in problems]
    if problems:
        raise KServeError(problems)
    if plan.get("gated") and not options.service_account and not options.pvc:
        notes.append(f"{plan['model']} is gated: the storage initializer needs credentials "
                     "(a secret on the predictor's service account, --service-account)")
    return speculative, rollback, notes


def to_yaml(manifest: Mapping) -> str:
    return yaml.safe_dump(dict(manifest), sort_keys=False, default_flow_style=False, width=1000)


# --- validation -------------------------------------------------------------------------------


def _unknown_fields(obj: Any, where: str) -> list[str]:
    if not isinstance(obj, Mapping):
        return [f"{where or 'manifest'}: must be a map"]
    extra = sorted(set(obj) - _FIELDS[where])
    return [f"{where + '.' if where else ''}{key}: not an InferenceService field this schema knows"
            for key in extra]


def _string_map(obj: Any, where: str) -> list[str]:
    if obj is None:
        return []
    if not isinstance(obj, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in obj.items()):
        return [f"{where}: must map strings to strings"]
    return []


def _name_problems(metadata: Mapping) -> list[str]:
    problems = []
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        problems.append("metadata.name: required")
    elif len(name) > _LABEL_MAX or not _ISVC_NAME.match(name):
        # KServe IsvcNameFmt + DNS-1123 label length.
        problems.append(f"metadata.name: {name!r} must be a DNS-1123 label starting with a letter "
                        f"(lower case letters, digits and '-', at most {_LABEL_MAX})")
    namespace = metadata.get("namespace")
    if namespace is not None and (not isinstance(namespace, str) or len(namespace) > _LABEL_MAX
                                  or not _DNS1123_LABEL.match(namespace)):
        problems.append(f"metadata.namespace: {namespace!r} must be a DNS-1123 label")
    problems += _string_map(metadata.get("labels"), "metadata.labels")
    annotations = metadata.get("annotations")
    problems += _string_map(annotations, "metadata.annotations")
    if isinstance(annotations, Mapping) and PROGRESS_DEADLINE in annotations:
        if not _DURATION.match(str(annotations[PROGRESS_DEADLINE])):
            problems.append(f"metadata.annotations.{PROGRESS_DEADLINE}: {annotations[PROGRESS_DEADLINE]!r} "
                            "is not a duration like 600s or 10m")
    return problems


def _mount_path_problems(path: Any, where: str) -> list[str]:
    # Rules from KServe's CRD (Pattern "^/.*", MaxLength 255) and validateStorageURISpec ("/" is
    # no path, no ".." for traversal); "absolute" is also seed 002's first constraint.
    if not isinstance(path, str) or not path:
        return [f"{where}: required"]
    if not path.startswith("/"):
        return [f"{where}: {path!r} is relative; mount paths must be absolute (KServe)"]
    if path.rstrip("/") == "":
        return [f"{where}: '/' cannot be a mount path"]
    if ".." in path.split("/"):
        return [f"{where}: {path!r} contains '..'"]
    if len(path) > _MOUNT_PATH_MAX:
        return [f"{where}: longer than {_MOUNT_PATH_MAX} characters"]
    return []


def common_parent(paths: list[str]) -> str:
    """The deepest directory that holds every path; for one path, its parent."""
    normal = [posixpath.normpath(p) for p in paths]
    if len(normal) == 1:
        return posixpath.dirname(normal[0])
    return posixpath.commonpath(normal)


def _under(path: str, directory: str) -> bool:
    path, directory = posixpath.normpath(path), posixpath.normpath(directory)
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _storage_uris_problems(entries: Any) -> tuple[list[str], list[str]]:
    """(problems, mount paths) of spec.predictor.storageUris."""
    where = "spec.predictor.storageUris"
    if not isinstance(entries, list) or not entries:
        return [f"{where}: must be a list with at least one entry (CRD MinItems=1)"], []
    problems: list[str] = []
    paths: list[str] = []
    for i, entry in enumerate(entries):
        item = f"{where}[{i}]"
        if not isinstance(entry, Mapping):
            problems.append(f"{item}: must be a map with uri and mountPath")
            continue
        problems += [f"{item}.{key}: not a StorageUri field" for key in sorted(set(entry) - _STORAGE_URI_FIELDS)]
        if not isinstance(entry.get("uri"), str) or not entry.get("uri"):
            problems.append(f"{item}.uri: required (CRD MinLength=1)")
        # KServe defaults mountPath to /mnt/models; two defaulted entries would collide, so require it.
        found = _mount_path_problems(entry.get("mountPath"), f"{item}.mountPath")
        problems += found
        if not found:
            paths.append(posixpath.normpath(entry["mountPath"]))
    if problems:
        return problems, paths
    if len(set(paths)) != len(paths):
        problems.append(f"{where}: mount paths {paths} repeat")
    parent = common_parent(paths)
    if parent == "/":
        # Seed 002: "All mountPath values must be absolute and share a common parent directory";
        # KServe validateMultipleStorageURIsSpec: "no common parent beyond root".
        problems.append(f"{where}: mount paths {paths} share no parent directory other than '/' (KServe)")
    for path in paths:
        if path == parent:
            others = [p for p in paths if p != path]
            problems.append(f"{where}: mount path {path} holds the other mount(s) {others}; "
                            "give each artifact its own directory under a common parent")
    return problems, paths


def _arg_value(args: list[str], flag: str) -> list[str]:
    values = []
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            values.append(arg[len(flag) + 1:])
        elif arg == flag and i + 1 < len(args):
            values.append(args[i + 1])
    return values


def _args_problems(args: Any, roots: list[str], parent: str | None) -> list[str]:
    where = "spec.predictor.model.args"
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        # Container args are []string (Kubernetes core v1 Container).
        return [f"{where}: must be a list of strings"]
    problems: list[str] = []
    flags = [a.split("=", 1)[0] for a in args if a.startswith("--")]
    repeated = sorted({f for f in flags if flags.count(f) > 1})
    if repeated:
        problems.append(f"{where}: {', '.join(repeated)} given more than once")
    model_paths = _arg_value(args, "--model") + _arg_value(args, "--model_dir")
    if not model_paths:
        problems.append(f"{where}: no --model/--model_dir: the runtime would not load the mounted target")
    for path in model_paths:
        if roots and not any(_under(path, root) for root in roots):
            problems.append(f"{where}: model path {path!r} is not under a mounted storage path {roots}")
    for raw in _arg_value(args, "--speculative-config"):
        try:
            config = json.loads(raw)
        except ValueError as exc:
            problems.append(f"{where}: --speculative-config is not JSON ({exc})")
            continue
        if not isinstance(config, dict) or not isinstance(config.get("method"), str):
            problems.append(f"{where}: --speculative-config must be a JSON object with a method")
            continue
        draft = config.get("model")
        if draft is None:
            continue
        # Seed 002: "model: ... the path to that artifact inside the container".
        if not isinstance(draft, str) or not draft.startswith("/"):
            problems.append(f"{where}: --speculative-config model {draft!r} is not an absolute path in the pod")
        elif parent is not None and not _under(draft, parent):
            problems.append(f"{where}: --speculative-config model {draft!r} is outside the common mount "
                            f"parent {parent} (draft and target share one parent)")
        elif roots and not any(_under(draft, root) for root in roots):
            problems.append(f"{where}: --speculative-config model {draft!r} is not under a mounted storage path")
    return problems


def _resources_problems(resources: Any) -> list[str]:
    where = "spec.predictor.model.resources"
    if resources is None:
        return []
    problems = _unknown_fields(resources, where)
    if problems:
        return problems
    for key in ("requests", "limits"):
        problems += _string_map(resources.get(key), f"{where}.{key}")
    return problems


def validate(manifest: Any) -> list[str]:
    """Every problem with the InferenceService fields this module uses, each naming the field."""
    problems = _unknown_fields(manifest, "")
    if problems and not isinstance(manifest, Mapping):
        return problems
    if manifest.get("apiVersion") != API_VERSION:
        problems.append(f"apiVersion: {manifest.get('apiVersion')!r}, expected {API_VERSION}")
    if manifest.get("kind") != KIND:
        problems.append(f"kind: {manifest.get('kind')!r}, expected {KIND}")
    metadata = manifest.get("metadata")
    problems += _unknown_fields(metadata, "metadata") or _name_problems(metadata)
    spec = manifest.get("spec")
    found = _unknown_fields(spec, "spec")
    if found:
        return problems + found
    predictor = spec.get("predictor")
    found = _unknown_fields(predictor, "spec.predictor")
    if found:
        return problems + found
    model = predictor.get("model")
    found = _unknown_fields(model, "spec.predictor.model")
    if found:
        return problems + found
    problems += _unknown_fields(model.get("modelFormat"), "spec.predictor.model.modelFormat")
    if not isinstance((model.get("modelFormat") or {}).get("name"), str):
        problems.append("spec.predictor.model.modelFormat.name: required")
    for key in ("runtime", "image"):
        if key in model and (not isinstance(model[key], str) or not model[key]):
            problems.append(f"spec.predictor.model.{key}: must be a non-empty string")
    if "serviceAccountName" in predictor and not _DNS1123_LABEL.match(str(predictor["serviceAccountName"])):
        problems.append("spec.predictor.serviceAccountName: must be a DNS-1123 name")

    roots: list[str] = []
    parent: str | None = None
    has_uri, has_uris = "storageUri" in model, "storageUris" in predictor
    if has_uri and has_uris:
        # Seed 002 and KServe: "Setting both StorageURI and StorageURIs is not supported."
        problems.append("spec.predictor.model.storageUri and spec.predictor.storageUris: both set; "
                        "they are mutually exclusive (KServe)")
    elif not has_uri and not has_uris:
        problems.append("spec.predictor.model.storageUri or spec.predictor.storageUris: one is required "
                        "to put the model in the pod")
    elif has_uri:
        uri = model["storageUri"]
        if not isinstance(uri, str) or "://" not in uri:
            problems.append(f"spec.predictor.model.storageUri: {uri!r} is not a URI (scheme://...)")
        roots, parent = [DEFAULT_MOUNT], DEFAULT_MOUNT
    else:
        found, roots = _storage_uris_problems(predictor["storageUris"])
        problems += found
        if found:
            roots = []
        else:
            parent = common_parent(roots)
    problems += _args_problems(model.get("args"), roots, parent)
    problems += _resources_problems(model.get("resources"))
    return problems
