# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Validate a host's specfleet_* policy variables on the controller, never touching the unit.

Its documentation (options, return values) is the doc-only module plugins/modules/specfleet_preflight.py,
where ansible-doc reads it.
"""

from __future__ import annotations

from pathlib import Path

from ansible.errors import AnsibleUndefinedVariable
from ansible_collections.specfleet.fleet.plugins.plugin_utils.controller_package import ControllerAction

try:
    from specfleet import policy as policy_module
    from specfleet import role_args, variables
    from specfleet.catalog import load_catalog
except ImportError as exc:
    SPECFLEET_IMPORT_ERROR: ImportError | None = exc
else:
    SPECFLEET_IMPORT_ERROR = None


# The collection this plugin belongs to: plugins/action/<this file> -> the root.
COLLECTION_ROOT = Path(__file__).resolve().parents[2]

class ActionModule(ControllerAction):
    specfleet_import_error = SPECFLEET_IMPORT_ERROR

    def act(self, result, task_vars):
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
        problems += self._name_problems(host, task_vars)
        problems += self._same_unit_problems(host, task_vars)
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

    def _name_problems(self, host: str, task_vars: dict) -> list[str]:
        """The host's name, misspelt specfleet_* names, and the public variables' types."""
        problems = [problem for problem in [variables.host_name_problem(host)] if problem]
        known = variables.known_names(policy_module.variable_names(), COLLECTION_ROOT / "roles")
        problems += variables.unknown_problems(task_vars, known)
        return problems + variables.public_problems(self._templated(set(variables.public()), task_vars))

    def _same_unit_problems(self, host: str, task_vars: dict) -> list[str]:
        """The play's other hosts that reach this host's unit (a unit listed twice)."""
        hostvars = task_vars.get("hostvars") or {}
        wanted = (*variables.HOST_VARIABLES, *variables.HOST_PORT_VARIABLES, "ansible_connection")
        destinations = {}
        for name in task_vars.get("ansible_play_hosts_all") or [host]:
            source = task_vars if name == host else hostvars.get(name) or {}
            try:
                settings = {var: self._templar.template(source[var]) for var in wanted if var in source}
            except AnsibleUndefinedVariable:
                settings = None  # over facts not gathered yet: Ansible's to resolve when it connects
            destinations[name] = variables.destination_of(name, settings) if settings is not None else None
        return variables.same_unit_problems(destinations, involving=host)

    def _role_variable_problems(self, task_vars: dict) -> list[str]:
        # The roles are this collection's own (playbooks name them by FQCN), beside its plugins.
        specs = role_args.load_specs([COLLECTION_ROOT / "roles"])
        return role_args.problems(self._templated(role_args.variable_names(specs), task_vars), specs)

    def _templated(self, names: set[str], task_vars: dict) -> dict:
        """The host's values of ``names``, templated; a template over facts or the plan is left
        out (checked where it is used: the role at entry, the task that reads it)."""
        values = {}
        for name in sorted(names & set(task_vars)):
            try:
                values[name] = self._templar.template(task_vars[name])
            except AnsibleUndefinedVariable:
                continue
        return values
