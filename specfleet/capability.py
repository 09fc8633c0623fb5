"""What a unit's GPU can run: compute capability per device class (specfleet/data/device_classes.yml),
and per weight format the capability vLLM asks for (specfleet/data/capability.yml), as pure
lookups for the plan.

The plan asks two questions of a checkpoint on a device class: does vLLM start it at all
(``min_capability``, else it refuses with "The quantization method ... is not supported for
the current GPU"), and does it run on the format's own tensor-core kernels or on a fallback
(``native_capability``), which the plan reports. Among the precisions of one model (catalog
``base_model``) it then picks one the unit can run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache

from specfleet.catalog import Catalog, DataFileError, Model, entry_problems, load_device_classes, read_data


@dataclass(frozen=True)
class WeightFormat:
    name: str
    label: str
    min_capability: int
    native_capability: int | None
    kernels: str
    source: str


@dataclass(frozen=True)
class CapabilityTable:
    # device class -> (compute capability as major * 10 + minor, GPU description)
    classes: Mapping[str, tuple[int, str]]
    formats: Mapping[str, WeightFormat]

    def capability(self, device_class: str) -> int | None:
        entry = self.classes.get(device_class)
        return entry[0] if entry else None

    def gpu(self, device_class: str) -> str:
        entry = self.classes.get(device_class)
        return entry[1] if entry else "unknown GPU"


def dotted(capability: int) -> str:
    """87 -> "8.7", 110 -> "11.0" (how NVIDIA writes compute capabilities)."""
    return f"{capability // 10}.{capability % 10}"


@cache
def load_table() -> CapabilityTable:
    where = "specfleet/data/capability.yml"
    data = read_data("capability.yml", ("formats",))
    if not isinstance(data["formats"], Mapping):
        raise DataFileError(f"{where} formats: must be a map of name -> entry")
    problems = [problem for name, entry in data["formats"].items()
                for problem in entry_problems(WeightFormat, entry, f"{where} formats.{name}", ("name",),
                                              optional=("native_capability",))]
    if problems:
        raise DataFileError("\n".join(problems))
    classes = {name: (found.compute_capability, found.gpu) for name, found in load_device_classes().items()}
    formats = {
        name: WeightFormat(
            name=name,
            label=str(entry["label"]),
            min_capability=int(entry["min_capability"]),
            native_capability=entry.get("native_capability"),
            kernels=str(entry["kernels"]),
            source=str(entry["source"]),
        )
        for name, entry in data["formats"].items()
    }
    return CapabilityTable(classes=classes, formats=formats)


@dataclass(frozen=True)
class Verdict:
    """Whether ``device_class`` runs ``model``: ``runs``; on fallback kernels: ``fallback``;
    ``why`` says it in one sentence either way (empty when it runs natively)."""

    runs: bool
    fallback: bool
    why: str


def verdict(table: CapabilityTable, device_class: str, model: Model) -> Verdict:
    fmt = table.formats[model.weights_format]
    capability = table.capability(device_class)
    if capability is None:
        return Verdict(False, False, f"{device_class} has no compute capability in the capability table")
    unit = f"{device_class}'s GPU is {dotted(capability)} ({table.gpu(device_class)})"
    if capability < fmt.min_capability:
        return Verdict(
            False, False,
            f"{model.repo} is {fmt.label}, which vLLM runs from compute capability "
            f"{dotted(fmt.min_capability)}; {unit}",
        )
    if fmt.native_capability is not None and capability < fmt.native_capability:
        return Verdict(
            True, True,
            f"{model.repo} is {fmt.label}: {unit}, below the {dotted(fmt.native_capability)} of its own "
            f"tensor-core kernels, so vLLM runs it on fallback kernels ({fmt.kernels})",
        )
    return Verdict(True, False, "")


@dataclass(frozen=True)
class Choice:
    """The checkpoint a unit serves for a requested model; ``model`` is None when no
    precision of it runs there. ``reasons`` and ``notes`` go into the plan."""

    model: Model | None
    reasons: tuple[str, ...]
    notes: tuple[str, ...]


def choose(
    table: CapabilityTable,
    catalog: Catalog,
    device_class: str,
    requested: Model,
    fits: Callable[[Model], bool],
) -> Choice:
    """The requested checkpoint when the unit runs it; else another precision of the same
    model that it runs, on native kernels first, then the smallest, the first that ``fits``
    (the caller's memory check); else none, with the reason naming the compute capability.
    """
    asked = verdict(table, device_class, requested)
    if asked.runs:
        return Choice(requested, (), (asked.why,) if asked.fallback else ())
    runnable = [
        (model, found)
        for model in catalog.precisions_of(requested)
        if model.repo != requested.repo and (found := verdict(table, device_class, model)).runs
    ]
    runnable.sort(key=lambda pair: (pair[1].fallback, pair[0].weights_gib))
    for model, found in runnable:
        if fits(model):
            swap = (
                f"{asked.why}: serving {model.repo} ({table.formats[model.weights_format].label}) instead, "
                "another precision of the same model"
            )
            return Choice(model, (swap,), (found.why,) if found.fallback else ())
    others = (
        f"; the other precisions in the catalog ({', '.join(m.repo for m, _ in runnable)}) do not fit"
        if runnable else "; no other precision of it in the catalog runs there"
    )
    return Choice(None, (f"{asked.why}{others}",), ())
