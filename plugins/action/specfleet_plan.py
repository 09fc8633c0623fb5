# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Compute a unit's serving plan on the controller from its gathered facts and policy.

Its documentation (options, return values) is the doc-only module plugins/modules/specfleet_plan.py,
where ansible-doc reads it.
"""

from __future__ import annotations

from ansible_collections.specfleet.fleet.plugins.plugin_utils.controller_package import ControllerAction

try:
    from specfleet.catalog import load_catalog
    from specfleet.inventory import EXPECTED_FACTS_VAR
    from specfleet.plan import expectation_mismatches, plan_unit
except ImportError as exc:
    SPECFLEET_IMPORT_ERROR: ImportError | None = exc
else:
    SPECFLEET_IMPORT_ERROR = None


class ActionModule(ControllerAction):
    specfleet_import_error = SPECFLEET_IMPORT_ERROR

    def act(self, result, task_vars):
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
