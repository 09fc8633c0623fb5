# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Documentation of the specfleet_preflight action plugin (plugins/action/specfleet_preflight.py).

ansible-doc reads a plugin's documentation from the module of its name; the action
plugin does the work, on the controller.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: specfleet_preflight
short_description: Validate the specfleet_* variables of a host before any unit is touched
description:
  - Runs on the controller only (no connection to the unit). Merges the host's
    C(specfleet_*) inventory variables over the shipped defaults and checks each one,
    with the C(specfleet_expected_facts) the inventory declares and the variables of the
    collection's roles (their argument specs).
  - Fails with one line per problem, naming the variable and the host.
  - Returns the resolved policy as the fact C(specfleet_policy).
version_added: "0.1.0"
author: specfleet contributors (@specfleet)
options: {}
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
    details: Reads the host's variables only; C(changed) is always false.
"""

EXAMPLES = r"""
- name: Validate specfleet policy variables
  specfleet.fleet.specfleet_preflight:

- name: Show the model the unit will serve
  ansible.builtin.debug:
    var: specfleet_policy.specfleet_model
"""

RETURN = r"""
ansible_facts:
  description: Facts for the host.
  returned: success
  type: dict
  contains:
    specfleet_policy:
      description: Every C(specfleet_*) policy variable, the host's value or the shipped default.
      returned: success
      type: dict
problems:
  description: One line per invalid variable.
  returned: failure
  type: list
  elements: str
"""
