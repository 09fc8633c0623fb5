"""The specfleet_console stdout callback on a real ansible-playbook run (local connections).

Five units, a play in waves of two (serial) where one unit fails and one is unreachable, and a
play whose one batch holds every unit (serial 100%, each unit on its own: no waves): the quiet
output has a title per play and wave, each failure once with its task and cause, one line per
unit per phase with the playbook's own messages, a progress line per wave, and the PLAY RECAP;
-v or SPECFLEET_CONSOLE_FULL gives the default's output.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

PLAYBOOK = """
- name: Prepare the units
  hosts: units
  gather_facts: false
  serial: 2
  tasks:
    - name: Change something
      ansible.builtin.command: "true"
      changed_when: true
    - name: Say what the unit holds
      ansible.builtin.debug:
        msg: "{{ inventory_hostname }}: 2 models, 1 encoding"
    - name: Fail one unit
      ansible.builtin.fail:
        msg: "rsync: write failed: No space left on device (28)"
      when: inventory_hostname == 'u3'
    - name: Try, and roll back on failure
      when: inventory_hostname == 'u2'
      block:
        - name: Start the candidate
          ansible.builtin.fail:
            msg: "CUDA out of memory"
      rescue:
        - name: Roll back
          ansible.builtin.command: "true"
          changed_when: true
    - name: Skip everywhere
      ansible.builtin.command: "true"
      when: false
- name: Roll out
  hosts: units
  gather_facts: false
  serial: "{{ ['100%'] }}"
  strategy: free
  tasks:
    - name: Nothing to change
      ansible.builtin.command: "true"
      changed_when: false
"""


def run(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> str:
    units = {f"u{n}": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
             for n in range(1, 5)}
    units["gone"] = {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"units": {"hosts": units}}))
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    config = tmp_path / "ansible.cfg"
    config.write_text(f"[defaults]\ncollections_path = {REPO / 'collections'}\n"
                      "stdout_callback = specfleet.fleet.specfleet_console\nhost_key_checking = False\n")
    clean = {key: value for key, value in os.environ.items() if key != "SPECFLEET_CONSOLE_FULL"}
    result = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "hosts.yml", "play.yml", *extra],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**clean, "ANSIBLE_CONFIG": str(config), "ANSIBLE_NOCOLOR": "1", **(env or {})})
    assert result.returncode == 4, result.stdout + result.stderr  # a unit unreachable (and one failed)
    return result.stdout


def test_the_quiet_console_prints_each_unit_once_per_phase_and_each_failure_once(tmp_path: Path):
    out = run(tmp_path)
    lines = out.splitlines()
    assert "TASK [" not in out and "skipping:" not in out, out
    assert [line for line in lines if line.startswith("== ")] == [
        "== Prepare the units, wave 1 (2 units)", "== Prepare the units, wave 2 (2 units)",
        "== Prepare the units, wave 3 (1 unit)", "== Roll out (3 units)"], out
    causes = [line for line in lines if re.match(r"  \S+: (FAILED|UNREACHABLE) in ", line)]
    assert len(causes) == 2, out
    assert "  u3: FAILED in 'Fail one unit': rsync: write failed: No space left on device (28)" in causes
    assert any(line.startswith("  gone: UNREACHABLE in 'Change something': ") and "port 1" in line for line in causes)
    assert out.count("No space left on device") == 1 and out.count("port 1") == 1, "a cause printed twice"
    # The units' lines as each wave ends, with the playbook's own message under each.
    assert re.search(r"^  u1 +ok, 1 changed\n +u1: 2 models, 1 encoding$", out, re.MULTILINE), out
    assert re.search(r"^  u3 +FAILED in 'Fail one unit' \(above\)$", out, re.MULTILINE), out
    # A failure the playbook rescued is no failure of the unit: said once, in its line.
    assert re.search(r"^  u2 +ok, 2 changed, after a failure its playbook handled in 'Start the candidate': CUDA out "
                     r"of memory$", out, re.MULTILINE), out
    assert out.count("CUDA out of memory") == 1, out
    assert "gone: UNREACHABLE in 'Change something': Failed to connect to the host via ssh" in out, out
    progress = [line for line in lines if line.startswith("-- ")]
    assert [re.sub(r", \d+:\d\d elapsed$", "", line) for line in progress] == [
        "-- Prepare the units: wave 1 done: 2/5 units, 1 failed, 3 remaining",
        "-- Prepare the units: wave 2 done: 4/5 units, 2 failed, 1 remaining",
        "-- Prepare the units: wave 3 done: 5/5 units, 2 failed, 0 remaining"], out
    assert re.search(r"^u1\s+: ok=3\s+changed=1 .* failed=0", out, re.MULTILINE), out  # the usual PLAY RECAP
    assert re.search(r"^u2\s+: .* rescued=1 ", out, re.MULTILINE), out
    assert len(lines) < 40, out


@pytest.mark.parametrize("how", ["-v", "SPECFLEET_CONSOLE_FULL"])
def test_verbose_or_full_prints_ansibles_own_output(tmp_path: Path, how: str):
    out = run(tmp_path, *(["-v"] if how == "-v" else []), env={how: "1"} if how != "-v" else None)
    assert "TASK [Fail one unit]" in out and "fatal: [u3]: FAILED!" in out and "== Prepare" not in out, out
