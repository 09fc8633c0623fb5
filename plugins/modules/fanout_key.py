#!/usr/bin/python
# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: fanout_key
short_description: Remove the fan-out's fleet key from a unit, whichever run left it
description:
  - The fan-out (C(specfleet distribute)) makes new key pairs for each run, one per unit, and
    installs them on the units for that run only; each of its authorized_keys entries names the
    run in its comment (C(specfleet-fanout:<run id>)), and stops working at its C(expiry-time)
    should no run remove it.
  - This module removes every such entry, of any run (and the unnamed C(specfleet-fanout)
    entries of releases before run ids), the fleet private key C(specfleet_fanout) and its
    C(specfleet_fanout_known_hosts), from the login user's C(~/.ssh). Every other line of
    authorized_keys stays as it was, and so does the file's mode; a file that held only fleet
    entries is removed.
  - The fan-out role runs it before the copy (what an interrupted run left) and in an
    C(always) after it (whatever happened). Run it without become, as the login user whose
    C(~/.ssh) the fan-out used.
version_added: "0.3.0"
author: specfleet contributors (@specfleet)
options:
  ssh_dir:
    description: The login user's SSH directory.
    type: path
    default: ~/.ssh
  state:
    description: C(absent) is the only state; the driver installs a run's key itself.
    type: str
    choices: [absent]
    default: absent
extends_documentation_fragment:
  - specfleet.fleet.attributes
attributes:
  check_mode:
    support: full
    details: Reports what it would remove and removes nothing.
  diff_mode:
    support: full
    details: The fleet key entries removed from authorized_keys (public keys; the private key's content never).
  idempotent:
    support: full
"""

EXAMPLES = r"""
- name: Remove any fleet key the fan-out left
  become: false
  specfleet.fleet.fanout_key:
    state: absent
"""

RETURN = r"""
removed_runs:
  description: >-
    The runs whose authorized_keys entries were removed, each named once (an empty string for the
    entries without a run id).
  returned: always
  type: list
  elements: str
removed_files:
  description: The fleet private key and known_hosts files removed.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specfleet.fleet.plugins.module_utils.fanout_unit import remove_keys


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "ssh_dir": {"type": "path", "default": "~/.ssh"},
            "state": {"type": "str", "choices": ["absent"], "default": "absent"},
        },
        supports_check_mode=True,
    )
    try:
        result = remove_keys(module.params["ssh_dir"], dry_run=module.check_mode)
    except OSError as err:
        module.fail_json(msg=f"fanout_key: cannot remove the fleet key from {module.params['ssh_dir']}: {err}")
    entries = result.pop("removed_entries")
    module.exit_json(
        diff={
            "before_header": "authorized_keys (fleet key entries)",
            "after_header": "authorized_keys",
            "before": "".join(entry + "\n" for entry in entries),
            "after": "",
        },
        **result,
    )


if __name__ == "__main__":
    main()
