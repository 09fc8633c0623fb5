# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Lookup plugin: the unit layout (where specfleet keeps things on a unit, what it names them)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: unit_layout
author: specfleet contributors (@specfleet)
short_description: Where specfleet keeps things on a unit, and what it names them
description:
  - Returns entries of the unit layout, the one definition the modules, the controller package
    and the roles share (the collection's C(plugins/module_utils/unit_layout.py)); the roles
    default their paths, container name and ulimits to it.
  - Runs on the controller; needs nothing beyond ansible-core.
options:
  _terms:
    description: >-
      Names of layout entries (state_dir, release_file, serving_files_dir, hf_cache_dir,
      compile_cache_dir, prewarm_cache_dir, images_dir, tiktoken_dir, openwebui_dir,
      serving_container, trial_container, config_hash_label, serving_ulimits).
    required: true
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Where the release record is
  ansible.builtin.debug:
    msg: "{{ lookup('specfleet.fleet.unit_layout', 'release_file') }}"

- name: The serving container's ulimits (a dict)
  ansible.builtin.debug:
    msg: "{{ query('specfleet.fleet.unit_layout', 'serving_ulimits') | first }}"
"""

RETURN = r"""
_raw:
  description: The value of each named entry, in the order named (a string, or a dict for serving_ulimits).
  type: list
  elements: raw
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.specfleet.fleet.plugins.module_utils.unit_layout import LAYOUT


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        unknown = [term for term in terms if term not in LAYOUT]
        if unknown:
            raise AnsibleLookupError(
                f"unit_layout has no {', '.join(map(repr, unknown))}; it has {', '.join(sorted(LAYOUT))}")
        return [LAYOUT[term] for term in terms]
