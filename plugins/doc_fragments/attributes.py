# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""What the `attributes` of the collection's modules mean; each module states its support."""

from __future__ import annotations


class ModuleDocFragment:
    # Every module: check mode, diff mode, idempotence.
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying the target.
  diff_mode:
    description: Will return details on what has changed (or would change in check mode), when in diff mode.
  idempotent:
    description:
      - When run twice in a row outside check mode, with the same arguments, the second run reports no change.
      - This assumes the system the module controls or queries has not changed in a relevant way meanwhile.
"""

    # The doc-only modules of the controller-side action plugins (with DOCUMENTATION).
    ACTION = r"""
options: {}
requirements:
  - The C(specfleet) Python package on the controller (the collection's requirements.txt)
attributes:
  action:
    description: Has a corresponding action plugin, which does the work on the controller.
    support: full
  bypass_host_loop:
    description: Runs once for the play rather than per host.
    support: none
"""

    # Modules and actions that set host facts.
    FACTS = r"""
options: {}
attributes:
  facts:
    description: Returns an C(ansible_facts) dictionary that updates the host's facts.
    support: full
"""
