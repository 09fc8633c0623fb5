# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Quiet stdout for a fleet run: one line per unit per phase, each failure once, a progress
line per wave; Ansible's full output with -v or C(SPECFLEET_CONSOLE_FULL=1)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: specfleet_console
type: stdout
short_description: Quiet fleet output, one line per unit per phase and each failure once
description:
  - For ansible-playbook runs against many units (60 at a workshop), where the default output
    prints every task for every unit (about 13,000 lines for 60 units).
  - Prints a title per play (and per wave under C(serial)), each failure once as it happens
    with its task and cause, one line per unit when the play or wave ends (C(ok), how many
    changes, or the failure), the playbook's own messages (its debug tasks), a progress line
    per wave (units done, failed, remaining, elapsed), then the usual PLAY RECAP.
  - With C(-v) (or more) or O(full), prints exactly what the default callback prints.
  - File diffs (C(--diff)), warnings and deprecations are shown as Ansible shows them.
  - Python warnings that other packages raise once the run has started (not Ansible's own
    warnings) are left out, unless C(-v) or C(SPECFLEET_PYTHON_WARNINGS=1) asks for them.
author: specfleet contributors (@specfleet)
extends_documentation_fragment:
  - default_callback
  - result_format_callback
options:
  full:
    description:
      - Print the default callback's full task output instead of the quiet one.
    type: bool
    default: false
    env:
      - name: SPECFLEET_CONSOLE_FULL
    ini:
      - section: callback_specfleet_console
        key: full
requirements:
  - The C(specfleet) Python package on the controller (the collection's requirements.txt)
  - Set as C(stdout_callback = specfleet.fleet.specfleet_console) in ansible.cfg
"""

import os
import time

from ansible.playbook.block import Block
from ansible.plugins.callback.default import CallbackModule as DefaultCallback
from ansible_collections.specfleet.fleet.plugins.plugin_utils.controller_package import require_specfleet

try:
    from specfleet.console import Phase, failure_message, phase_title, progress_line, quiet_library_warnings
except ImportError as exc:
    SPECFLEET_IMPORT_ERROR: ImportError | None = exc
else:
    SPECFLEET_IMPORT_ERROR = None


def _rescued(task) -> bool:
    """The task runs in the main part of a block that has a rescue: its failure is handled by
    the playbook (the rollout's rollback), not a failure of the unit."""
    child, parent = task, getattr(task, "_parent", None)
    while parent is not None:
        if isinstance(parent, Block) and parent.rescue:
            handlers = {getattr(handler, "_uuid", None) for handler in [*parent.rescue, *parent.always]}
            if getattr(child, "_uuid", None) not in handlers:
                return True
        child, parent = parent, getattr(parent, "_parent", None)
    return False


def _quiet_or_default(name):
    """An event the quiet console does not print: the default callback's in full mode."""

    def handler(self, *args, **kwargs):
        if self._full():
            return getattr(DefaultCallback, name)(self, *args, **kwargs)
        return None

    handler.__name__ = name
    return handler


class CallbackModule(DefaultCallback):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "specfleet.fleet.specfleet_console"

    def __init__(self):
        require_specfleet(SPECFLEET_IMPORT_ERROR)
        super().__init__()
        # Before the first task: the workers Ansible forks for each task inherit the filter.
        quiet_library_warnings(os.environ, asked=self._display.verbosity > 0)
        self._started = time.monotonic()
        self._phase = None
        self._serial = False
        self._waves: dict[tuple, int] = {}
        # per play (name, uuid): the units that finished a wave, and those that failed
        self._finished: dict[tuple, set[str]] = {}
        self._failed: dict[tuple, set[str]] = {}
        self._play_key: tuple = ()

    def _full(self) -> bool:
        return self._display.verbosity > 0 or bool(self.get_option("full"))

    # --- plays and waves ---------------------------------------------------------------

    def _close_phase(self) -> None:
        phase = self._phase
        if phase is None:
            return
        for line in phase.lines():
            self._display.display(line)
        key = self._play_key
        self._finished.setdefault(key, set()).update(phase.units)
        failed = {host for host, unit in phase.units.items() if unit.failed}
        self._failed.setdefault(key, set()).update(failed)
        if self._serial:
            self._display.display(progress_line(phase.name, phase.wave, len(self._finished[key]),
                                                len(self._failed[key]), phase.hosts_total,
                                                time.monotonic() - self._started))
        self._phase = None

    def v2_playbook_on_play_start(self, play):
        if self._full():
            return super().v2_playbook_on_play_start(play)
        self._close_phase()
        name = play.get_name().strip()
        # One play across its serial waves (each wave runs a copy with the same uuid); a playbook
        # imported twice (site.yml's facts.yml) is two plays.
        key = (name, getattr(play, "_uuid", None) or str(play.hosts))
        self._play_key = key
        self._waves[key] = self._waves.get(key, 0) + 1
        inventory = getattr(play.get_variable_manager(), "_inventory", None)
        # A unit that failed in an earlier play takes no part in the later ones (Ansible drops it).
        dropped = set().union(*(failed for play_key, failed in self._failed.items() if play_key != key))
        batch = len({host.name for host in inventory.get_hosts(play.hosts)} - dropped) if inventory is not None else 0
        total = len({host.name for host in inventory.get_hosts(play.hosts, ignore_restrictions=True)} - dropped) \
            if inventory is not None else batch
        # Waves only where serial cuts the play's units (a first batch of them all is the play).
        self._serial = bool(play.serial) and (batch < total or self._waves[key] > 1)
        self._phase = Phase(name, self._waves[key], total)
        marker = " [CHECK MODE]" if play.check_mode and self.get_option("check_mode_markers") else ""
        self._display.display(phase_title(name, self._waves[key], self._serial, batch) + marker)
        return None

    def v2_playbook_on_stats(self, stats):
        if not self._full():
            self._close_phase()
        return super().v2_playbook_on_stats(stats)

    # --- results ---------------------------------------------------------------------------

    def v2_runner_on_ok(self, result):
        if self._full():
            return super().v2_runner_on_ok(result)
        self._handle_warnings(result.result)  # the failure's cause is in its line (the error block: -v)
        if self._phase is None:
            return None
        host = result.host.get_name()
        self._phase.ok(host, bool(result.result.get("changed")))
        if result.task.action in ("debug", "ansible.builtin.debug", "ansible.legacy.debug") and "msg" in result.result:
            message = result.result["msg"]
            lines = message if isinstance(message, list) else str(message).splitlines()
            self._phase.unit(host).notes.extend(str(line) for line in lines if str(line).strip())
        return None

    def _failure(self, result, unreachable: bool) -> None:
        """A failed or unreachable unit, quiet: printed once with its cause, unless a block's
        rescue handles it (then only its unit line says so)."""
        self._handle_warnings(result.result)  # the failure's cause is in its line (the error block: -v)
        if self._phase is None:
            return
        host, task, cause = result.host.get_name(), result.task.get_name(), failure_message(result.result)
        if not unreachable and _rescued(result.task):
            self._phase.handled(host, task, cause)
            return
        self._display.display(self._phase.fail(host, task, cause, unreachable),
                              stderr=self.get_option("display_failed_stderr"))

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if self._full():
            return super().v2_runner_on_failed(result, ignore_errors)
        if not ignore_errors:
            self._failure(result, unreachable=False)
        return None

    def v2_runner_on_unreachable(self, result):
        if self._full():
            return super().v2_runner_on_unreachable(result)
        self._failure(result, unreachable=True)
        return None

    # Task banners, skips, loop items, includes, retries and async polls: the default's in full
    # mode, nothing in the quiet one (their outcome shows in the unit's line).
    v2_playbook_on_task_start = _quiet_or_default("v2_playbook_on_task_start")
    v2_playbook_on_handler_task_start = _quiet_or_default("v2_playbook_on_handler_task_start")
    v2_runner_on_skipped = _quiet_or_default("v2_runner_on_skipped")
    v2_runner_item_on_ok = _quiet_or_default("v2_runner_item_on_ok")
    v2_runner_item_on_failed = _quiet_or_default("v2_runner_item_on_failed")
    v2_runner_item_on_skipped = _quiet_or_default("v2_runner_item_on_skipped")
    v2_playbook_on_include = _quiet_or_default("v2_playbook_on_include")
    v2_runner_retry = _quiet_or_default("v2_runner_retry")
    v2_runner_on_async_poll = _quiet_or_default("v2_runner_on_async_poll")
    v2_runner_on_async_ok = _quiet_or_default("v2_runner_on_async_ok")
    v2_runner_on_async_failed = _quiet_or_default("v2_runner_on_async_failed")
