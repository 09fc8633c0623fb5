# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Keep or revert speculation on a unit from its two bench results (controller only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: specfleet_gate
short_description: Decide keep or revert from a unit's baseline and speculative bench results
description:
  - Runs on the controller only. Applies the specfleet_gate_* thresholds of the host's
    resolved policy (fact C(specfleet_policy)) through specfleet.gate.decide.
  - Returns C(decision) (keep or revert), C(reasons) and C(figures); never fails the host.
options:
  baseline:
    description: spec_bench result of the baseline serving.
    type: dict
    required: true
  candidate:
    description: spec_bench result of the speculative serving.
    type: dict
    required: true
attributes:
  check_mode: {support: full}
  diff_mode: {support: none}
  idempotent: {support: full}
"""

from ansible.plugins.action import ActionBase

from specfleet.gate import decide


class ActionModule(ActionBase):
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        policy = self._templar.template(task_vars.get("specfleet_policy"))
        if not policy:
            result.update(failed=True, msg="run specfleet_preflight before specfleet_gate")
            return result
        verdict = decide(self._task.args["baseline"], self._task.args["candidate"], policy)
        result.update(changed=False, **verdict)
        return result
