# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""At the end of a playbook, write the rollout run's fleet report and print its summary.

A callback rather than a final play: Ansible ends the whole playbook when a play exceeds its
max_fail_percentage (the canaries', specfleet_rollout_canary_max_fail_percentage) or every unit
of a batch fails, and the report matters most exactly then. It runs once, on the
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
  - The run is the one the playbook names (the fact C(specfleet_run_id), set once per run by
    the collection's facts play); its folder is C(SPECFLEET_RUNS_DIR)/<run id>, else
    C(runs/)<run id> in the working directory, where the rollout writes its unit records.
  - Beside them it writes C(run.json), how the run was started (the playbook as given, the
    inventory when it is not ansible.cfg's) and how long it took, so the report's next commands
    are typed as the run was.
author: specfleet contributors (@specfleet)
requirements:
  - The C(specfleet) Python package on the controller (the collection's requirements.txt)
  - Enabled in ansible.cfg (C(callbacks_enabled = specfleet.fleet.specfleet_summary))
"""

import json
import os
import time

from ansible import constants as C
from ansible import context
from ansible.plugins.callback import CallbackBase
from ansible_collections.specfleet.fleet.plugins.module_utils.atomic_files import write_file
from ansible_collections.specfleet.fleet.plugins.plugin_utils.controller_package import require_specfleet

try:
    from specfleet.console import RECORD_CAUSE_LIMIT, failure_class, failure_message
    from specfleet.loading import FileProblem
    from specfleet.report import RECORD_MODE, unrecorded_failure, write_report
    from specfleet.runs import RUN_INFO, run_folder, run_info, unit_file
    from specfleet.variables import is_file_name
except ImportError as exc:
    SPECFLEET_IMPORT_ERROR: ImportError | None = exc
else:
    SPECFLEET_IMPORT_ERROR = None


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "specfleet_summary"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        # Enabled without the package: Ansible warns with this error and runs without the callback.
        require_specfleet(SPECFLEET_IMPORT_ERROR)
        super().__init__()
        self._run_id: str | None = None
        self._started = time.time()
        self._playbook = ""
        # host -> (task, message, unreachable, failure class) of its last unhandled failure
        self._failures: dict[str, tuple[str, str, bool, str | None]] = {}

    def v2_playbook_on_start(self, playbook):
        given = context.CLIARGS.get("args") or ()
        self._playbook = str(given[0]) if given else str(playbook._file_name)

    def _inventory(self) -> list[str]:
        """The -i the run was given, relative to the working directory when inside it; none when
        it is ansible.cfg's own (Ansible fills that in, so the next command needs no -i either)."""
        given = list(context.CLIARGS.get("inventory") or ())
        if given == list(C.DEFAULT_HOST_LIST or ()):
            return []
        here = os.getcwd()
        return [os.path.relpath(path, here) if os.path.isabs(path) and path.startswith(here + os.sep) else path
                for path in given]

    def _remember(self, result, unreachable: bool) -> None:
        outcome = result._result
        self._failures[result._host.get_name()] = (
            result._task.get_name(), failure_message(outcome, RECORD_CAUSE_LIMIT), unreachable, failure_class(outcome))

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if not ignore_errors:
            self._remember(result, unreachable=False)

    def v2_runner_on_unreachable(self, result):
        self._remember(result, unreachable=True)

    def v2_runner_on_ok(self, result):
        # The run is named once, by the facts play ("Name this run"); its folder follows.
        run_id = (result._result.get("ansible_facts") or {}).get("specfleet_run_id")
        if run_id:
            self._run_id = str(run_id)

    def v2_playbook_on_stats(self, stats):
        if not is_file_name(self._run_id):
            return  # no run named (or a name the preflight refused)
        run_dir = run_folder(self._run_id)
        if not (run_dir / "units").is_dir():
            return  # no unit reached the rollout's records (a plan or prepare run)
        for host, (task, message, unreachable, failure_class) in sorted(self._failures.items()):
            if not is_file_name(host):
                continue  # the preflight refused it; its name would lead outside the run folder
            record = unit_file(run_dir, host)
            if not record.exists():
                failure = unrecorded_failure(host, run_dir.name, task, message, unreachable, failure_class)
                write_file(record, json.dumps(failure, indent=1), mode=RECORD_MODE)
        write_file(run_dir / RUN_INFO, json.dumps(run_info(self._playbook, self._inventory(), self._started,
                                                           time.time()), indent=1), mode=RECORD_MODE)
        try:
            written = write_report(run_dir)
        except FileProblem as exc:  # a record someone edited or a disk that corrupted it
            self._display.error(f"specfleet: no fleet report: {exc}")
            return
        self._display.banner("SPECFLEET FLEET SUMMARY")
        for line in written["summary_lines"]:
            self._display.display(line)
        self._display.display(f"report: {run_dir}/report.html (also .md, .csv, .json)")
