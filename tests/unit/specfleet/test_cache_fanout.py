"""Which models and image tarballs prepare fans out unit to unit, and which units a fan-out served."""

from __future__ import annotations

import json

import pytest

from specfleet.cache import fanout_jobs, image_fanout_jobs
from specfleet.fanout import served


def test_a_model_that_enough_units_lack_is_fanned_out_to_exactly_those_units():
    lacking = [("u1", ["org/big", "org/draft"]), ("u2", ["org/big"]), ("u3", []), ("u4", ["org/big"])]
    # The job the fan-out role's distribute tasks take: the controller store into the HF cache.
    assert fanout_jobs(lacking, 3, "/ctl/hf-store", "/unit/hf") == [
        {"repo": "org/big", "label": "org/big", "store": "/ctl/hf-store", "name": "models--org--big",
         "subdir": "hub", "root": "/unit/hf", "units": ["u1", "u2", "u4"]},
    ]
    # org/draft: one unit lacks it, so the controller copies it there.
    assert [job["repo"] for job in fanout_jobs(lacking, 1, "/s", "/r")] == ["org/big", "org/draft"]
    assert fanout_jobs(lacking, 4, "/s", "/r") == []


def test_nothing_lacking_or_a_minimum_of_zero_means_no_fan_out():
    assert fanout_jobs([("u1", []), ("u2", [])], 1, "/s", "/r") == []
    assert fanout_jobs([("u1", ["org/big"]), ("u2", ["org/big"])], 0, "/s", "/r") == []


def test_a_negative_minimum_is_refused_with_the_variable():
    with pytest.raises(ValueError, match="specfleet_hf_cache_fanout_min_units"):
        fanout_jobs([("u1", ["org/big"])], -1, "/s", "/r")


def test_an_image_tarball_that_enough_units_lack_is_fanned_out_as_its_store_entry():
    lacking = [("u1", ["vllm_26.10.tar"]), ("u2", ["vllm_26.10.tar"]), ("u3", ["other_1.tar"]), ("u4", [])]
    assert image_fanout_jobs(lacking, 2, "/ctl/image-store", "/unit/images") == [
        {"tarball": "vllm_26.10.tar", "label": "vllm_26.10.tar", "store": "/ctl/image-store", "name": "vllm_26.10",
         "subdir": "images", "root": "/unit/images", "units": ["u1", "u2"]},
    ]
    assert image_fanout_jobs(lacking, 0, "/s", "/r") == []
    with pytest.raises(ValueError, match="specfleet_image_fanout_min_units"):
        image_fanout_jobs(lacking, -3, "/s", "/r")


def distribute_result(job: dict, units: dict[str, str]) -> dict:
    """A registered loop result of the fan-out role's `specfleet distribute --format json` task."""
    return {"item": job, "rc": 0 if all(s == "live" for s in units.values()) else 1,
            "stdout": json.dumps({"units": units, "copies": len(units)})}


def test_served_names_what_is_live_on_the_host_and_leaves_the_rest_to_the_controller():
    big, draft = (job for job in fanout_jobs([("u1", ["org/big"]), ("u2", ["org/big", "org/draft"])], 1, "/s", "/r"))
    results = [
        distribute_result(big, {"u1": "live", "u2": "failed: connection refused"}),
        distribute_result(draft, {"u2": "live"}),
        {"item": {"repo": "org/skipped", "name": "models--org--skipped"}, "skipped": True},  # check mode
    ]
    assert served(results, "u1", "repo") == ["org/big"]
    assert served(results, "u2", "repo") == ["org/draft"]
    assert served(results, "u2") == ["models--org--draft"]
    assert served(results, "u9") == []
    assert served([], "u1") == []
