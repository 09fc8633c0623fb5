# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Compute a unit's serving plan on the controller from its gathered facts and policy."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: specfleet_plan
short_description: Decide what a unit should serve (image, speculative method, vLLM args)
description:
  - Runs on the controller only. Takes the unit's C(specfleet_unit) facts (from
    M(jetson_facts)) and its resolved C(specfleet_policy) (from M(specfleet_preflight))
    and sets the fact C(specfleet_plan).
  - When the inventory declares C(specfleet_expected_facts), a unit whose device class
    or L4T release differs fails here, before anything is changed on it.
options:
  facts:
    description: The unit's facts; defaults to C(ansible_facts.specfleet_unit).
    type: dict
  policy:
    description: The resolved policy; defaults to the fact C(specfleet_policy).
    type: dict
attributes:
  check_mode: {support: full}
  diff_mode: {support: none}
  idempotent: {support: full}
"""

from ansible.plugins.action import ActionBase

from specfleet.catalog import load_catalog
from specfleet.inventory import EXPECTED_FACTS_VAR
from specfleet.plan import expectation_mismatches, plan_unit


class ActionModule(ActionBase):
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        host = task_vars.get("inventory_hostname", "?")
        facts = self._task.args.get("facts") or task_vars.get("ansible_facts", {}).get("specfleet_unit")
        policy = self._task.args.get("policy") or task_vars.get("specfleet_policy")
        if not facts or not policy:
            result["failed"] = True
            result["msg"] = f"{host}: run jetson_facts and specfleet_preflight before specfleet_plan"
            return result
        facts = self._templar.template(facts)
        policy = self._templar.template(policy)
        expected = task_vars.get(EXPECTED_FACTS_VAR)
        mismatches = expectation_mismatches(facts, self._templar.template(expected) if expected else None)
        if mismatches:
            result["failed"] = True
            result["msg"] = f"{host}: the unit is not what the inventory expects: " + "; ".join(mismatches)
            return result
        catalog = load_catalog()
        plan = plan_unit(host, facts, catalog.model(policy["specfleet_model"]), policy, catalog)
        result["changed"] = False
        result["ansible_facts"] = {"specfleet_plan": plan}
        return result
