# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Validate a host's specfleet_* policy variables on the controller, never touching the unit."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: specfleet_preflight
short_description: Validate the specfleet_* variables of a host before any unit is touched
description:
  - Runs on the controller only (no connection to the unit). Merges the host's
    C(specfleet_*) inventory variables over the shipped defaults and checks each one.
  - Fails with one line per problem, naming the variable and the host.
  - Returns the resolved policy as the fact C(specfleet_policy).
options: {}
attributes:
  check_mode: {support: full}
  diff_mode: {support: none}
  idempotent: {support: full}
"""

from ansible.plugins.action import ActionBase

from specfleet import policy as policy_module
from specfleet.catalog import load_catalog


class ActionModule(ActionBase):
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        host = task_vars.get("inventory_hostname", "?")
        overrides = {
            name: self._templar.template(task_vars[name])
            for name in policy_module.variable_names()
            if name in task_vars
        }
        merged = policy_module.merge(overrides)
        problems = policy_module.validate(merged, load_catalog())
        if problems:
            result["failed"] = True
            result["problems"] = problems
            result["msg"] = f"{host}: invalid specfleet variables:\n" + "\n".join(
                f"  - {host}: {problem}" for problem in problems
            )
            return result
        result["changed"] = False
        result["ansible_facts"] = {"specfleet_policy": merged}
        return result
