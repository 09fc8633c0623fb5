# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""At the end of a playbook, write the rollout run's fleet report and print its summary.

A callback rather than a final play: Ansible ends the whole playbook when a wave exceeds
max_fail_percentage, and the report matters most exactly then. It runs once, on the
controller, after every unit has written its own record into runs/<run id>/units/.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: specfleet_summary
type: notification
short_description: Write the specfleet fleet report and print a compact per-unit summary
description:
  - When the playbook opened a rollout run folder (runs/<run id>/units/), writes
    report.json, report.csv, report.md and report.html there at the end of the playbook,
    and prints one line per unit (decision, method, speedup, reason) plus the totals.
  - The runs folder is SPECFLEET_RUNS_DIR, else runs/ beside the playbooks folder.
requirements:
  - enable in ansible.cfg (callbacks_enabled = specfleet_summary)
"""

import os
import time
from pathlib import Path

from ansible.plugins.callback import CallbackBase

from specfleet.report import write_report


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "specfleet_summary"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._runs_dir: Path | None = None
        self._started = time.time()

    def v2_playbook_on_start(self, playbook):
        default = Path(playbook._basedir).resolve().parent / "runs"
        self._runs_dir = Path(os.environ.get("SPECFLEET_RUNS_DIR", default))
        self._started = time.time()

    def v2_playbook_on_stats(self, stats):
        if not self._runs_dir or not self._runs_dir.is_dir():
            return
        opened = [
            path for path in self._runs_dir.iterdir()
            if (path / "units").is_dir() and path.stat().st_mtime >= self._started - 1
        ]
        if not opened:
            return
        run_dir = max(opened, key=lambda path: path.stat().st_mtime)
        written = write_report(run_dir)
        self._display.banner("SPECFLEET FLEET SUMMARY")
        for line in written["summary_lines"]:
            self._display.display(line)
        self._display.display(f"report: {run_dir}/report.html (also .md, .csv, .json)")
