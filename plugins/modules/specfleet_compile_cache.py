# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Documentation of the specfleet_compile_cache action plugin (plugins/action/specfleet_compile_cache.py).

ansible-doc reads a plugin's documentation from the module of its name; the action
plugin does the work, on the controller.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: specfleet_compile_cache
short_description: Inspect or fill the controller's compile-cache store of one key
description:
  - Runs on the controller only (the store is controller-side). The store of a key is
    C(<store>/compile-cache/<key>/), laid out as a store for C(specfleet distribute)
    (subdir C(torch_compile_cache), one entry per vLLM hash directory, manifests).
  - O(state=inspect) reports whether the store is complete (key.json and every entry live
    and matching its manifest). Read-only.
  - O(state=collect) switches a golden unit's fetched cache root into the store (marker,
    manifest and an atomic switch per entry, key.json last). Never leaves a store that
    inspects as present unless it is complete.
version_added: "0.1.0"
author: specfleet contributors (@specfleet)
options:
  store:
    description: Controller store directory.
    type: path
    required: true
  key:
    description:
      - Compile-cache key (an item's C(key) of P(specfleet.fleet.compile_cache_servings#filter); the plan's
        candidate's is P(specfleet.fleet.compile_cache_key#filter)).
    type: str
    required: true
  state:
    description: C(inspect) reads; C(collect) fills the store from O(fetched).
    type: str
    choices: [inspect, collect]
    default: inspect
  fetched:
    description: The golden unit's cache root, fetched to the controller (O(state=collect)); removed once collected.
    type: path
  record:
    description: What to record in key.json (factors, golden unit, its startup seconds).
    type: dict
    default: {}
  verify:
    description: C(full) re-hashes every file of the store, C(quick) compares sizes (O(state=inspect)).
    type: str
    choices: [quick, full]
    default: full
extends_documentation_fragment:
  - specfleet.fleet.attributes
  - specfleet.fleet.attributes.action
attributes:
  check_mode:
    support: full
    details: O(state=collect) reports the change it would make and changes nothing.
  diff_mode:
    support: none
  idempotent:
    support: partial
    details: O(state=inspect) is read-only; O(state=collect) always reports a change and consumes O(fetched).
"""

EXAMPLES = r"""
- name: Inspect the controller store of a key
  specfleet.fleet.specfleet_compile_cache:
    store: /srv/specfleet/store
    key: "{{ specfleet_plan | specfleet.fleet.compile_cache_key }}"
    verify: quick
  register: inspected

- name: Switch the golden unit's fetched cache into the key's store
  specfleet.fleet.specfleet_compile_cache:
    store: /srv/specfleet/store
    key: "{{ specfleet_plan | specfleet.fleet.compile_cache_key }}"
    state: collect
    fetched: "{{ inspected.path }}/.specfleet/fetched"
    record:
      factors: "{{ specfleet_plan | specfleet.fleet.compile_cache_factors }}"
      golden: "{{ inventory_hostname }}"
  when: not inspected.present
"""

RETURN = r"""
key:
  description: The key.
  returned: success
  type: str
  sample: agx_orin-0123456789ab
path:
  description: The key's store directory.
  returned: success
  type: str
present:
  description: The store is complete (key.json and every entry live and matching its manifest).
  returned: when O(state=inspect)
  type: bool
entries:
  description:
    - The store's entries. With O(state=inspect) C(name), C(id) and C(manifest), only when
      present; with O(state=collect) C(name), C(id), C(files) and C(bytes).
  returned: success
  type: list
  elements: dict
problems:
  description: Why the store is not present.
  returned: when O(state=inspect)
  type: list
  elements: str
record:
  description: The store's key.json, or null when unreadable.
  returned: when O(state=inspect)
  type: dict
"""
