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

from pathlib import Path

from ansible import constants as C
from ansible.errors import AnsibleUndefinedVariable
from ansible.plugins.action import ActionBase

from specfleet import policy as policy_module
from specfleet import role_args
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
        if policy_module.EXPECTED_FACTS_VAR in task_vars:
            expected = self._templar.template(task_vars[policy_module.EXPECTED_FACTS_VAR])
            expected_problems = policy_module.expected_facts_problems(expected)
            problems += expected_problems or policy_module.class_conflicts(merged, expected.get("device_class"))
        problems += self._role_variable_problems(task_vars)
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

    def _role_variable_problems(self, task_vars: dict) -> list[str]:
        # Ansible looks for roles beside the playbook first, then in roles_path.
        roles_dirs = [Path(task_vars.get("playbook_dir", ".")) / "roles", *C.DEFAULT_ROLES_PATH]
        specs = role_args.load_specs(roles_dirs)
        values = {}
        for name in sorted(role_args.variable_names(specs) & set(task_vars)):
            try:
                values[name] = self._templar.template(task_vars[name])
            except AnsibleUndefinedVariable:
                continue  # a template over facts or the plan: the role checks it at entry
        return role_args.problems(values, specs)
