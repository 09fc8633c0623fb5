# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Documentation of the event_api_key action plugin (plugins/action/event_api_key.py).

ansible-doc reads a plugin's documentation from the module of its name; the action
plugin does the work, on the controller.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: event_api_key
short_description: Make this event's vLLM API key once, kept in Ansible Vault beside the inventory
description:
  - Runs on the controller only. When C(<inventory_dir>/.specfleet/api_key.yml) does not
    exist, generates a random key (256 bits) and writes it there as C(specfleet_api_key),
    encrypted with the run's vault password (O(vault_id)'s, when given), mode 0600, atomically. Every
    later run reads the same file, so each unit serves with the same key until the file is
    removed.
  - An existing file is never replaced (C(changed) is false).
  - Fails, naming C(specfleet_api_key), when the run has no vault password (of O(vault_id)), as the
    key would then have nowhere safe to live.
  - The key itself is never returned; read it into the run with M(ansible.builtin.include_vars)
    of RV(path).
version_added: "0.1.0"
author: specfleet contributors (@specfleet)
options:
  inventory_dir:
    description: The inventory directory whose C(.specfleet/) holds the key. Defaults to the
      host's C(inventory_dir).
    type: path
  vault_id:
    description: Vault id whose password encrypts the key. Defaults to Ansible's
      C(vault_encrypt_identity); when that is not set either, the run's only (or first) vault
      password, as C(ansible-vault encrypt) chooses.
    type: str
extends_documentation_fragment:
  - specfleet.fleet.attributes
  - specfleet.fleet.attributes.action
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  idempotent:
    support: full
    details: An existing key file is kept as it is.
"""

EXAMPLES = r"""
- name: Make this event's API key unless one is given
  specfleet.fleet.event_api_key:
  delegate_to: localhost
  run_once: true
  register: event_key
  when: specfleet_api_key | default('') | length == 0

- name: Read it into the run
  ansible.builtin.include_vars:
    file: "{{ event_key.path }}"
  no_log: true
  when: event_key.path is defined and event_key.path is file
"""

RETURN = r"""
path:
  description: The key file (whether it was made now or earlier).
  returned: always
  type: str
  sample: /home/me/event/inventory/.specfleet/api_key.yml
"""
