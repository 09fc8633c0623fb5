"""Images from the inventory (policy `specfleet_images`): a fleet adds or re-pins an image
without editing the package, and a bad entry is refused naming its field before any unit
is touched."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from specfleet import policy as policy_module
from specfleet.catalog import image_problems, load_catalog
from tests.conftest import REPO, plan_for

CATALOG = load_catalog()
FP4 = "nvidia/Llama-3.1-8B-Instruct-FP4"
DIGEST = "sha256:" + "ab" * 32
LAN_THOR = {
    "name": "lan-vllm-thor",
    "ref": "registry.lan:5000/vllm/vllm-openai:v0.33.0",
    "digest": DIGEST,
    "vllm_version": "0.33.0",
    "cuda": "13.0",
    "classes": ["thor"],
    "l4t_min": "38.0.0",
    "methods": ["eagle3", "ngram"],
    "size_gib": 12,
    "source": "built on the event's LAN registry from upstream vLLM 0.33.0",
}


def test_a_fleet_image_is_matched_before_the_shipped_ones(unit_facts):
    plan = plan_for(unit_facts("thor-r38"), FP4, specfleet_images=[LAN_THOR])
    assert (plan["image"], plan["image_digest"], plan["vllm_version"], plan["image_size_gib"]) == (
        LAN_THOR["ref"], DIGEST, "0.33.0", 12)
    assert serving_image(plan) == LAN_THOR["ref"]
    assert not any("mutable tag" in note for note in plan["notes"]), plan["notes"]
    # Not for other classes: an Orin on JetPack 7.2 keeps the shipped upstream image.
    orin = plan_for(unit_facts("agx-orin-64gb-r39"), FP4, specfleet_images=[LAN_THOR])
    assert orin["image"] == CATALOG.image("upstream-vllm-0.26-cu130").ref


def test_an_entry_named_like_a_shipped_one_pins_it_in_place(unit_facts):
    shipped = CATALOG.image("upstream-vllm-0.26-cu130")
    pinned = {**{key: value for key, value in vars(shipped).items() if key != "pin_only"},
              "classes": list(shipped.classes), "methods": list(shipped.methods), "digest": DIGEST}
    plan = plan_for(unit_facts("thor-r38"), FP4, specfleet_images=[pinned])
    assert (plan["image"], plan["image_digest"]) == (shipped.ref, DIGEST)
    assert [image.name for image in CATALOG.with_images([pinned]).images] == [i.name for i in CATALOG.images]


def test_a_pin_only_fleet_image_serves_only_where_pinned(unit_facts):
    trial = {**LAN_THOR, "pin_only": True}
    assert plan_for(unit_facts("thor-r38"), FP4, specfleet_images=[trial])["image"] != trial["ref"]
    plan = plan_for(unit_facts("thor-r38"), FP4, specfleet_images=[trial], specfleet_image="lan-vllm-thor")
    assert plan["image"] == trial["ref"]


@pytest.mark.parametrize(("change", "expected"), [
    ({"ref": "vllm/vllm-openai"}, "specfleet_images[0].ref: must be registry/repository:tag"),
    ({"ref": "vllm/vllm-openai@sha256:" + "ab" * 32}, "specfleet_images[0].ref"),
    ({"ref": "Registry.lan/VLLM:v1"}, "specfleet_images[0].ref"),
    ({"digest": "abc"}, "specfleet_images[0].digest: must be null or sha256:<64 hex>"),
    ({"classes": ["thor", "xavier"]}, "specfleet_images[0].classes: must be a non-empty list of device classes"),
    ({"methods": ["medusa"]}, "specfleet_images[0].methods"),
    ({"cuda": 13.0}, "specfleet_images[0].cuda: must be null or a version string in quotes"),
    ({"size_gib": -1}, "specfleet_images[0].size_gib"),
    ({"source": ""}, "specfleet_images[0].source"),
    ({"tag": "latest"}, "specfleet_images[0]: unknown field(s) tag"),
])
def test_a_bad_entry_is_refused_naming_its_field(change, expected):
    problems = policy_module.validate(policy_module.merge({"specfleet_images": [{**LAN_THOR, **change}]}), CATALOG)
    assert any(problem.startswith(expected) for problem in problems), problems


def test_missing_fields_a_non_list_and_a_name_twice_are_refused():
    entry = {key: value for key, value in LAN_THOR.items() if key not in ("ref", "classes")}
    problems = policy_module.validate(policy_module.merge({"specfleet_images": [entry]}), CATALOG)
    assert {"specfleet_images[0]: missing ref", "specfleet_images[0]: missing classes"} <= set(problems), problems
    problems = policy_module.validate(policy_module.merge({"specfleet_images": LAN_THOR}), CATALOG)
    assert problems[0].startswith("specfleet_images: must be a list of image entries"), problems
    problems = policy_module.validate(policy_module.merge({"specfleet_images": [LAN_THOR, LAN_THOR]}), CATALOG)
    assert "specfleet_images: names an image twice: lan-vllm-thor" in problems


def test_a_pin_must_name_a_shipped_or_fleet_image():
    problems = policy_module.validate(policy_module.merge({"specfleet_image": "lan-vllm-thor"}), CATALOG)
    assert any(problem.startswith("specfleet_image: must be an image name") for problem in problems)
    problems = policy_module.validate(
        policy_module.merge({"specfleet_image": "lan-vllm-thor", "specfleet_images": [LAN_THOR]}), CATALOG)
    assert problems == []


def test_every_shipped_entry_passes_the_same_schema():
    data = yaml.safe_load((REPO / "specfleet" / "data" / "images.yml").read_text())
    for index, entry in enumerate(data["images"]):
        assert image_problems(entry, f"images[{index}]") == []


def test_cli_plans_with_a_fleet_image_and_refuses_a_bad_one(tmp_path, facts_file):
    good = tmp_path / "good.yml"
    good.write_text(yaml.safe_dump({"specfleet_images": [LAN_THOR]}))
    result = _cli("plan", "--format", "json", "--facts", facts_file("thor-r38"), "--policy", str(good))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)[0]["image"] == LAN_THOR["ref"]
    bad = tmp_path / "bad.yml"
    bad.write_text(yaml.safe_dump({"specfleet_images": [{**LAN_THOR, "ref": "vllm"}]}))
    result = _cli("plan", "--facts", facts_file("thor-r38"), "--policy", str(bad))
    assert result.returncode == 2 and "specfleet_images[0].ref" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def serving_image(plan: dict) -> str:
    return plan["serving"]["image"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specfleet.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
