"""specfleet.console: the quiet console's wording (the callback's run: test_console_callback)."""

from __future__ import annotations

import sys
import warnings
from unittest import mock

from specfleet import console


def test_a_failures_cause_is_its_first_failed_items_first_line_cut_short():
    loop = {"msg": "One or more items failed", "results": [{"failed": False, "msg": "fine"},
                                                          {"failed": True, "msg": "rsync: no space\ndetail"}]}
    assert console.failure_message(loop) == "rsync: no space"
    assert console.failure_message({"msg": "Task failed: Failed to connect"}) == "Failed to connect"
    assert console.failure_message({"stderr": "boom"}) == "boom" and console.failure_message({}) == "failed"
    hidden = "the output has been hidden due to the fact that 'no_log: true' was specified for this result"
    assert console.failure_message({"censored": hidden, "failed": True}) == hidden
    # A failed command: its stderr's last line, not the module's "non-zero return code".
    command = {"failed": True, "msg": "non-zero return code", "rc": 2,
               "stderr": "Traceback (most recent call last):\n  ...\nValueError: no hosts\n"}
    assert console.failure_message(command) == "exit 2: ValueError: no hosts"
    assert console.failure_message({"failed": True, "msg": "non-zero return code", "rc": 1}) == "non-zero return code"
    # A first line that announces a list (the preflight's): the list is the cause.
    listed = {"msg": "thor-01: invalid specfleet variables:\n  - thor-01: specfleet_x: not a specfleet variable\n"
                     "  - thor-01: specfleet_y: must be a number\n"}
    assert console.failure_message(listed) == (
        "thor-01: invalid specfleet variables: thor-01: specfleet_x: not a specfleet variable; "
        "thor-01: specfleet_y: must be a number")
    long = console.failure_message({"msg": "x" * 1000})
    assert len(long) == console.CAUSE_LIMIT and long.endswith("...")


def test_a_phase_prints_each_unit_once_failures_without_their_cause_again():
    phase = console.Phase("Roll out", 2, 60)
    phase.ok("thor-02", changed=True)
    assert phase.fail("orin-01", "Start", "CUDA out of memory", False) == (
        "  orin-01: FAILED in 'Start': CUDA out of memory")
    phase.handled("nano-01", "Wait", "crashed")
    phase.ok("nano-01", changed=False)
    phase.unit("thor-02").notes.append("thor-02: 2 models")
    assert phase.lines() == ["  nano-01  ok, after a failure its playbook handled in 'Wait': crashed",
                             "  orin-01  FAILED in 'Start' (above)",
                             "  thor-02  ok, 1 changed",
                             "           thor-02: 2 models"]
    assert console.phase_title("Roll out", 2, True, 8) == "== Roll out, wave 2 (8 units)"
    assert console.progress_line("Roll out", 2, 9, 1, 60, 754) == (
        "-- Roll out: wave 2 done: 9/60 units, 1 failed, 51 remaining, 12:34 elapsed")


def _shown(module: str, environ: dict[str, str], warnoptions: list[str] | None = None,
           asked: bool = False) -> list[str]:
    """The warnings raised in `module` that reach the console after quiet_library_warnings."""
    with warnings.catch_warnings(record=True) as caught, mock.patch.object(sys, "warnoptions", warnoptions or []):
        warnings.resetwarnings()
        warnings.simplefilter("always")
        console.quiet_library_warnings(environ, asked=asked)
        warnings.warn_explicit("DSA is deprecated", UserWarning, "x.py", 18, module=module)
    return [str(w.message) for w in caught]


def test_other_packages_warnings_stay_off_the_console():
    # cryptography's DSA deprecation, as ansible-core's import of it raises it
    assert _shown("ansible._internal._ssh._ssh_agent", {}) == []
    assert _shown("specfleetish", {}) == []


def test_specfleets_own_warnings_show():
    assert _shown("specfleet.plan", {}) == ["DSA is deprecated"]
    assert _shown("specfleet", {}) == ["DSA is deprecated"]


def test_the_collections_own_plugins_warnings_show():
    assert _shown("ansible_collections.specfleet.fleet.plugins.action.specfleet_plan", {}) == ["DSA is deprecated"]
    assert _shown("ansible_collections.community.docker.plugins.modules.x", {}) == []


def test_library_warnings_show_when_asked():
    assert _shown("ansible.cli", {"SPECFLEET_PYTHON_WARNINGS": "1"}) == ["DSA is deprecated"]
    assert _shown("ansible.cli", {}, asked=True) == ["DSA is deprecated"]  # the playbook's -v
    # Python's own -W / PYTHONWARNINGS: the user's filters decide, ours stay out
    assert _shown("ansible.cli", {}, warnoptions=["default"]) == ["DSA is deprecated"]
