# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Assemble a rollout run's report on the controller (once per run)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: specfleet_report
short_description: Write a run's fleet report (JSON, CSV, Markdown, HTML) from its unit records
description:
  - Runs on the controller only, once per run. Reads C(run_dir/units/*.json) and writes
    C(report.json), C(report.csv), C(report.md) and a self-contained C(report.html).
  - Returns C(summary) (kept/reverted/failed) and C(summary_lines) for the playbook's output.
options:
  run_dir:
    description: The run folder.
    type: path
    required: true
attributes:
  check_mode: {support: none}
  diff_mode: {support: none}
  idempotent: {support: full}
"""

from pathlib import Path

from ansible.plugins.action import ActionBase

from specfleet.report import write_report


class ActionModule(ActionBase):
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        run_dir = Path(self._task.args["run_dir"])
        if not (run_dir / "units").is_dir():
            result.update(failed=True, msg=f"{run_dir}: no units/ folder, nothing to report")
            return result
        result.update(changed=True, **write_report(run_dir))
        return result
