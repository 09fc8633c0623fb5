"""Which models prepare fans out unit to unit, and which units a fan-out served."""

from __future__ import annotations

import json

import pytest

from specfleet.cache import fanned_out, fanout_jobs


def test_a_model_that_enough_units_lack_is_fanned_out_to_exactly_those_units():
    lacking = [("u1", ["org/big", "org/draft"]), ("u2", ["org/big"]), ("u3", []), ("u4", ["org/big"])]
    assert fanout_jobs(lacking, 3) == [
        {"repo": "org/big", "name": "models--org--big", "units": ["u1", "u2", "u4"]},
    ]
    # org/draft: one unit lacks it, so the controller copies it there.
    assert [job["repo"] for job in fanout_jobs(lacking, 1)] == ["org/big", "org/draft"]
    assert fanout_jobs(lacking, 4) == []


def test_nothing_lacking_means_no_fan_out():
    assert fanout_jobs([("u1", []), ("u2", [])], 1) == []


def test_a_minimum_below_one_is_refused_with_the_variable():
    with pytest.raises(ValueError, match="specfleet_hf_cache_fanout_min_units"):
        fanout_jobs([("u1", ["org/big"])], 0)


def distribute_result(repo: str, units: dict[str, str]) -> dict:
    """A registered loop result of the role's `specfleet distribute --format json` task."""
    return {"item": {"repo": repo}, "rc": 0 if all(s == "live" for s in units.values()) else 1,
            "stdout": json.dumps({"units": units, "copies": len(units)})}


def test_fanned_out_names_the_models_live_on_the_host_and_leaves_the_rest_to_the_controller():
    results = [
        distribute_result("org/big", {"u1": "live", "u2": "failed: connection refused"}),
        distribute_result("org/draft", {"u2": "live"}),
        {"item": {"repo": "org/skipped"}, "skipped": True},
    ]
    assert fanned_out(results, "u1") == ["org/big"]
    assert fanned_out(results, "u2") == ["org/draft"]
    assert fanned_out(results, "u9") == []
    assert fanned_out([], "u1") == []
