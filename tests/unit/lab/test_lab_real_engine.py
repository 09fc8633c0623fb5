"""`specfleet lab real-engine` pins: what it writes must plan the real engine, and nothing else."""

from __future__ import annotations

import pytest
from specfleet_lab import real_engine
from specfleet_lab.config import LabConfig
from specfleet_lab.sh import LabError

from specfleet import policy as policy_module
from specfleet import serving
from specfleet.catalog import load_catalog
from specfleet.plan import plan_unit

CATALOG = load_catalog()


@pytest.mark.parametrize(("fixture", "method"), [("orin-nx-16gb-r36", "draft_model"), ("orin-nano-8gb-r36", "ngram"),
                                                 ("thor-r38", "draft_model")])
def test_pins_plan_the_real_engine(unit_facts, fixture, method):
    facts = unit_facts(fixture)
    pins = real_engine.pin_vars(facts["device_class"], method)
    policy = policy_module.resolve(pins, CATALOG)
    plan = plan_unit("unit", facts, CATALOG.model(pins["specfleet_model"]), policy, CATALOG)
    assert not plan["refused"], plan["reasons"]
    assert plan["image"] == real_engine.image_ref()
    assert plan["speculative"]["method"] == method
    for spec in (plan["serving"], plan["baseline_serving"]):
        assert ["--enforce-eager", None] in spec["extra_flags"]
        assert "--enforce-eager" in serving.argv(spec)


def test_unknown_method_is_refused():
    with pytest.raises(LabError, match="not 'eagle3'"):
        real_engine.pin_vars("orin_nx", "eagle3")


def test_unpin_leaves_foreign_host_vars_alone(tmp_path):
    cfg = LabConfig(repo=tmp_path)
    real_engine.pin(cfg, "orinnx-01", "orin_nx", "ngram")
    foreign = real_engine.host_vars_path(cfg, "thor-01")
    foreign.write_text("---\nmy_var: 1\n")
    assert real_engine.pinned_units(cfg) == ["orinnx-01"]
    assert real_engine.unpin(cfg, "orinnx-01") and not real_engine.unpin(cfg, "thor-01")
    assert foreign.exists() and real_engine.pinned_units(cfg) == []
