"""Device classes are data (specfleet/data/device_classes.yml): one entry gives a class its GPU,
its memory range, whether it runs L4T and its default of each per-class policy variable."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import pytest
import yaml

from specfleet import capability, catalog, policy, render, serving
from specfleet.plan import plan_unit

# A class no code names: a Jetson AGX Orin Industrial module (64 GB, Ampere sm_87), given the
# values an AGX Orin has but a shorter context, as a fleet would add it.
INDUSTRIAL = {
    "l4t": True, "compute_capability": 87, "gpu": "Ampere, sm_87", "memory_gib": [56, 64],
    "policy": {"specfleet_spec_tokens": 4, "specfleet_spec_tokens_sweep": [], "specfleet_gpu_memory_utilization": 0.8,
               "specfleet_max_model_len": 6144},
}
LOADERS = (catalog.load_catalog, catalog.load_device_classes, capability.load_table)


@pytest.fixture
def shipped_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The product's data files copied aside, for a test to edit: the loaders read the copy."""
    data = tmp_path / "data"
    shutil.copytree(resources.files("specfleet.data"), data)
    monkeypatch.setattr(catalog.resources, "files", lambda package: data)
    for loader in LOADERS:
        loader.cache_clear()
    yield data
    for loader in LOADERS:
        loader.cache_clear()


def edit(path: Path, change) -> None:
    content = yaml.safe_load(path.read_text())
    change(content)
    path.write_text(yaml.safe_dump(content, sort_keys=False))


def test_each_per_class_default_comes_from_the_class_entry():
    defaults = policy.defaults()
    assert defaults["specfleet_spec_tokens"] == {"thor": 5, "agx_orin": 3, "orin_nx": 3, "orin_nano": 3,
                                                 "dgx_spark": 5}
    assert set(defaults["specfleet_spec_methods_denied"]) == {"orin_nx", "orin_nano", "dgx_spark"}
    assert defaults["specfleet_spec_tokens_by_method"] == {"dgx_spark": {"draft_model": 4}}
    assert defaults["specfleet_gpu_memory_utilization"] == {"thor": 0.85, "agx_orin": 0.85, "orin_nx": 0.80,
                                                            "orin_nano": 0.70, "dgx_spark": 0.90}
    # Each call's maps are the caller's own: changing one changes no later default.
    defaults["specfleet_spec_tokens_sweep"]["thor"].append(9)
    defaults["specfleet_spec_methods_denied"]["orin_nx"].clear()
    again = policy.defaults()
    assert again["specfleet_spec_tokens_sweep"]["thor"] == []
    assert "eagle3" in again["specfleet_spec_methods_denied"]["orin_nx"]
    assert capability.load_table().capability("thor") == 110
    # An override still merges class by class.
    merged = policy.merge({"specfleet_spec_tokens": {"thor": 4}})
    assert merged["specfleet_spec_tokens"] == {**defaults["specfleet_spec_tokens"], "thor": 4}


def test_a_new_device_class_added_from_data_alone_is_planned_and_rendered(shipped_data: Path):
    """The class's entry, and an image that lists it: no code names the class, yet the policy
    takes it, the plan serves it with its own defaults, and the serving renders."""
    edit(shipped_data / "device_classes.yml", lambda d: d["device_classes"].update(agx_orin_industrial=INDUSTRIAL))
    edit(shipped_data / "images.yml",
         lambda d: [image["classes"].append("agx_orin_industrial") for image in d["images"]
                    if "agx_orin" in image["classes"]])
    facts = {"device_class": "agx_orin_industrial", "l4t": "36.4.3", "cuda": "12.6", "memory_mb": 62841,
             "model": "NVIDIA Jetson AGX Orin Industrial"}
    assert policy.expected_facts_problems(facts) == []
    shipped = catalog.load_catalog()
    model = "meta-llama/Llama-3.1-8B-Instruct"
    resolved = policy.resolve({"specfleet_model": model}, shipped)
    assert resolved["specfleet_spec_tokens"]["agx_orin_industrial"] == 4
    plan = plan_unit("industrial-01", facts, shipped.model(model), resolved, shipped)
    assert not plan["refused"], plan["reasons"]
    assert plan["compute_capability"] == "8.7" and plan["image"].startswith("ghcr.io/nvidia-ai-iot/vllm:")
    words = serving.argv(plan["serving"])
    flags = dict(serving.engine_flags(plan["serving"]))
    assert words[:3] == ["vllm", "serve", model]
    assert flags["--max-model-len"] == "6144" and flags["--gpu-memory-utilization"] == "0.75"
    assert flags["--speculative-config"]["num_speculative_tokens"] == 4
    assert dict(serving.engine_flags(plan["baseline_serving"]))["--gpu-memory-utilization"] == "0.80"
    rows = render.plan_summary_lines([plan])
    assert any("industrial-01" in row and "agx_orin_industrial" in row for row in rows), rows
    # A declared memory outside the class's range cannot be true.
    assert policy.expected_facts_problems({**facts, "memory_mb": 8000})


def test_a_class_unknown_to_the_data_is_refused_by_name(shipped_data: Path):
    facts = {"device_class": "agx_orin_industrial", "l4t": "36.4.3", "memory_mb": 62841}
    assert any("unknown device class 'agx_orin_industrial'" in problem
               for problem in policy.expected_facts_problems(facts))


def test_every_class_a_unit_can_be_recognised_as_is_a_device_class():
    """The unit side's identity rows (jetson_identity) name classes; each is one the controller
    plans for, so no recognised unit meets "unknown device class"."""
    from ansible_collections.specfleet.fleet.plugins.module_utils import jetson_identity as identity

    recognised = {found for found, _ in identity.MODULES.values()} | set(identity.CLASS_BY_MODULE_FAMILY.values())
    recognised |= {found for _, found in identity.CLASS_BY_MODEL_SUBSTRING} | set(identity.MEMORY_BUCKETS_GIB)
    recognised.add(identity.DGX_SPARK)
    assert recognised <= set(catalog.device_class_names()), recognised - set(catalog.device_class_names())
    assert set(catalog.device_class_names()) <= recognised  # and no class is one no unit is recognised as
