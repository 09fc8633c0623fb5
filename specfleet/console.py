"""The quiet console of a fleet run: one line per unit per phase, a progress line per wave,
each failure once with its cause (the specfleet_console stdout callback wires Ansible's events
to these; pure functions and one small state class, so the wording is tested without a run).

A phase is one play of the playbook (facts, prepare, pre-warm, rollout); under ``serial`` each
wave of the play is reported as it ends.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# What the command modules say of any failed command; its stderr says why.
COMMAND_FAILED = "non-zero return code"
CAUSE_LIMIT = 300  # characters of a failure's cause on the console
RECORD_CAUSE_LIMIT = 500  # ... in the record the summary callback writes for the report
# Set to 1, shows the Python warnings of other packages (quiet_library_warnings).
SHOW_LIBRARY_WARNINGS = "SPECFLEET_PYTHON_WARNINGS"


def quiet_library_warnings(environ: Mapping[str, str], asked: bool = False) -> None:
    """Keep other packages' Python warnings off the console: a deprecation that ansible-core's
    imports set off in cryptography, say, is for those packages' developers, not for an organiser
    (as ansible-core's `deprecation_warnings` setting keeps its own). Shown when ``asked`` (the
    playbook's -v), with SPECFLEET_PYTHON_WARNINGS=1, or when Python's own -W / PYTHONWARNINGS
    says what to do with warnings. specfleet's own warnings always show. Called by the `specfleet`
    CLI and the specfleet_console callback as they start."""
    if asked or sys.warnoptions or environ.get(SHOW_LIBRARY_WARNINGS) == "1":
        return
    # `module` is matched at the start of the name of the module a warning is raised in: anything
    # but specfleet and the specfleet.fleet collection's plugins.
    warnings.filterwarnings("ignore", module=r"(?!specfleet(\.|$)|ansible_collections\.specfleet\.)")


def _failed_detail(outcome: Mapping[str, Any]) -> Mapping[str, Any]:
    """What says why a task failed: a loop says "One or more items failed", so its first failed
    item; else the result itself."""
    failed_items = [item for item in outcome.get("results") or [] if isinstance(item, Mapping) and item.get("failed")]
    return failed_items[0] if failed_items else outcome


def failure_message(outcome: Mapping[str, Any], limit: int = CAUSE_LIMIT) -> str:
    """One line saying why a task failed (_failed_detail's msg, reason, stderr or censored note), at most
    ``limit`` characters."""
    detail = _failed_detail(outcome)
    # A no_log task's result reaches callbacks as Ansible's "censored" note alone.
    message = str(detail.get("msg") or detail.get("reason") or detail.get("stderr") or detail.get("censored")
                  or "failed").strip()
    if message == COMMAND_FAILED and str(detail.get("stderr") or "").strip():
        # A command's own words say why (its last line: a traceback's exception, argparse's error).
        last = [line.strip() for line in str(detail["stderr"]).splitlines() if line.strip()][-1]
        message = f"exit {detail.get('rc')}: {last}"
    message = message.removeprefix("Task failed: ")  # ansible-core 2.19's prefix says nothing the line does not
    lines = [line.strip() for line in message.splitlines() if line.strip()] or ["failed"]
    first = lines[0]
    if first.endswith(":") and len(lines) > 1:
        # "invalid specfleet variables:" and its list below: the list is the cause.
        first = f"{first} {'; '.join(line.removeprefix('- ') for line in lines[1:])}"
    return first if len(first) <= limit else first[: limit - 3] + "..."


def failure_class(outcome: Mapping[str, Any]) -> str | None:
    return _failed_detail(outcome).get("failure_class")


@dataclass
class UnitInPhase:
    changed: int = 0
    failed: str | None = None  # "FAILED in 'task' (above)" or "UNREACHABLE in ..."
    handled: str | None = None  # a failure a block's rescue took over: "'task': cause"
    notes: list[str] = field(default_factory=list)  # the playbook's own messages (debug tasks)


@dataclass
class Phase:
    """One play, or one wave of it."""

    name: str
    wave: int  # 1 for a play without serial
    hosts_total: int  # units the play covers in all its waves (after -l)
    units: dict[str, UnitInPhase] = field(default_factory=dict)

    def unit(self, host: str) -> UnitInPhase:
        return self.units.setdefault(host, UnitInPhase())

    def ok(self, host: str, changed: bool) -> None:
        self.unit(host).changed += int(changed)

    def fail(self, host: str, task: str, cause: str, unreachable: bool) -> str:
        """Record a unit's failure; returns the line to print now, with the cause (the unit's
        line as the phase ends names the task only: each cause is printed once)."""
        what = "UNREACHABLE" if unreachable else "FAILED"
        self.unit(host).failed = f"{what} in '{task}' (above)"
        return f"  {host}: {what} in '{task}': {cause}"

    def handled(self, host: str, task: str, cause: str) -> None:
        """A failure inside a block with a rescue: the playbook handles it (a rollback), so it
        is no failure of the unit; its line says so."""
        self.unit(host).handled = f"'{task}': {cause}"

    def lines(self) -> list[str]:
        """One line per unit as the phase (or wave) ends, host names in one column."""
        width = max((len(host) for host in self.units), default=0)
        lines = []
        for host in sorted(self.units):
            unit = self.units[host]
            state = unit.failed or (f"ok, {unit.changed} changed" if unit.changed else "ok")
            if unit.handled and not unit.failed:
                state += f", after a failure its playbook handled in {unit.handled}"
            lines.append(f"  {host.ljust(width)}  {state}")
            lines += [f"  {' ' * width}  {note}" for note in unit.notes]
        return lines


def units_text(count: int) -> str:
    """"1 unit", "8 units" (the console's and the report's counts)."""
    return f"{count} unit{'' if count == 1 else 's'}"


def phase_title(name: str, wave: int, serial: bool, hosts: int) -> str:
    suffix = f", wave {wave}" if serial else ""
    return f"== {name or 'play'}{suffix} ({units_text(hosts)})"


def progress_line(name: str, wave: int, done: int, failed: int, total: int, elapsed_s: float) -> str:
    """The line a wave ends with: how far the play is through its units."""
    minutes, seconds = divmod(int(elapsed_s), 60)
    return (f"-- {name or 'play'}: wave {wave} done: {done}/{total} units, {failed} failed, "
            f"{max(0, total - done)} remaining, {minutes}:{seconds:02d} elapsed")
