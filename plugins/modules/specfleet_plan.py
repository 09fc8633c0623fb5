# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Documentation of the specfleet_plan action plugin (plugins/action/specfleet_plan.py).

ansible-doc reads a plugin's documentation from the module of its name; the action
plugin does the work, on the controller.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: specfleet_plan
short_description: Decide what a unit should serve (image, speculative method, vLLM args)
description:
  - Runs on the controller only. Takes the unit's C(specfleet_unit) facts (from
    M(specfleet.fleet.jetson_facts)) and its resolved C(specfleet_policy) (from
    M(specfleet.fleet.specfleet_preflight)) and sets the fact C(specfleet_plan).
  - When the inventory declares C(specfleet_expected_facts), a unit whose device class
    or L4T release differs fails here, before anything is changed on it.
  - A unit the policy cannot serve gets a plan with C(refused) true and the reasons; that
    is not a failed task.
version_added: "0.1.0"
author: specfleet contributors (@specfleet)
options:
  facts:
    description: The unit's facts; defaults to C(ansible_facts.specfleet_unit).
    type: dict
  policy:
    description: The resolved policy; defaults to the fact C(specfleet_policy).
    type: dict
extends_documentation_fragment:
  - specfleet.fleet.attributes
  - specfleet.fleet.attributes.action
  - specfleet.fleet.attributes.facts
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  idempotent:
    support: full
    details: Computes the plan only; C(changed) is always false.
"""

EXAMPLES = r"""
- name: Identify the unit
  specfleet.fleet.jetson_facts:

- name: Plan the unit's serving
  specfleet.fleet.specfleet_plan:

- name: Show the plan
  ansible.builtin.debug:
    msg: "{{ [specfleet_plan] | specfleet.fleet.plan_summary }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts for the host.
  returned: success
  type: dict
  contains:
    specfleet_plan:
      description:
        - The unit's serving plan, among others C(host), C(device_class), C(model), C(image),
          C(speculative) (null for a baseline-only plan), C(refused) and C(reasons) (why
          this plan, or why none).
      returned: success
      type: dict
"""
