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
  - A unit that failed without writing its own record (unreachable mid-rollout, or failed
    in prepare before the rollout reached it) gets one from the callback, naming the task
    and the error, so the report lists every unit the playbook touched.
  - The runs folder is SPECFLEET_RUNS_DIR, else runs/ beside the playbooks folder.
requirements:
  - enable in ansible.cfg (callbacks_enabled = specfleet_summary)
"""

import json
import os
import time
from pathlib import Path

from ansible.plugins.callback import CallbackBase

from specfleet.report import unrecorded_failure, write_report


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "specfleet_summary"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._runs_dir: Path | None = None
        self._started = time.time()
        # host -> (task, message, unreachable, failure class) of its last unhandled failure
        self._failures: dict[str, tuple[str, str, bool, str | None]] = {}

    def _remember(self, result, unreachable: bool) -> None:
        outcome = result._result
        # A loop says "One or more items failed"; the first failed item says what.
        failed_items = [item for item in outcome.get("results") or [] if isinstance(item, dict) and item.get("failed")]
        detail = failed_items[0] if failed_items else outcome
        message = str(detail.get("msg") or detail.get("reason") or detail.get("stderr") or "failed").strip()
        self._failures[result._host.get_name()] = (
            result._task.get_name(), message.splitlines()[0][:500] if message else "failed",
            unreachable, detail.get("failure_class"))

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if not ignore_errors:
            self._remember(result, unreachable=False)

    def v2_runner_on_unreachable(self, result):
        self._remember(result, unreachable=True)

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
        for host, (task, message, unreachable, failure_class) in sorted(self._failures.items()):
            record = run_dir / "units" / f"{host}.json"
            if not record.exists():
                record.write_text(json.dumps(
                    unrecorded_failure(host, run_dir.name, task, message, unreachable, failure_class), indent=1))
        written = write_report(run_dir)
        self._display.banner("SPECFLEET FLEET SUMMARY")
        for line in written["summary_lines"]:
            self._display.display(line)
        self._display.display(f"report: {run_dir}/report.html (also .md, .csv, .json)")
