"""The evening benchmark's timeline callback, in a real ansible-playbook run (local hosts):
serial batches start their play again, tasks carry their play-level role (an included role
counts as its caller's), the timed actions' results carry host, changed and duration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.bench import evening_model as evening

REPO = Path(__file__).resolve().parents[3]

PLAYBOOK = """
- name: Outer
  hosts: all
  gather_facts: false
  roles:
    - outer
- name: In waves
  hosts: all
  gather_facts: false
  serial: 1
  tasks:
    - name: Timed
      ansible.builtin.command: sleep 0.2
      changed_when: inventory_hostname == 'h1'
- name: On their own
  hosts: all
  gather_facts: false
  strategy: free
  tasks:
    - name: Timed free
      ansible.builtin.command: "sleep {{ '3' if inventory_hostname == 'h1' else '0.2' }}"
"""


def test_the_timeline_of_a_real_run(tmp_path: Path) -> None:
    (tmp_path / "roles" / "outer" / "tasks").mkdir(parents=True)
    (tmp_path / "roles" / "inner" / "tasks").mkdir(parents=True)
    (tmp_path / "roles" / "outer" / "tasks" / "main.yml").write_text(
        "- name: Outer's own\n  ansible.builtin.debug:\n    msg: outer\n"
        "- name: Include inner\n  ansible.builtin.include_role:\n    name: inner\n")
    (tmp_path / "roles" / "inner" / "tasks" / "main.yml").write_text(
        "- name: Inner's own\n  ansible.builtin.debug:\n    msg: inner\n")
    (tmp_path / "site.yml").write_text(PLAYBOOK)
    (tmp_path / "hosts").write_text("h1 ansible_connection=local\nh2 ansible_connection=local\n")
    timeline = tmp_path / "timeline.json"
    env = {**os.environ, "ANSIBLE_CALLBACK_PLUGINS": str(REPO / "tests" / "bench" / "callbacks"),
           "ANSIBLE_CALLBACKS_ENABLED": "bench_timeline", "ANSIBLE_STDOUT_CALLBACK": "default",
           "ANSIBLE_ROLES_PATH": str(tmp_path / "roles"), "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
           "SPECFLEET_BENCH_TIMELINE": str(timeline), "SPECFLEET_BENCH_TIMED_ACTIONS": "ansible.builtin.command"}
    run = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", "hosts", "site.yml"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    events = json.loads(timeline.read_text())

    assert [e["play"] for e in events if e["kind"] == "play"] == ["Outer", "In waves", "In waves", "On their own"]
    assert {e["play"]: e["strategy"] for e in events if e["kind"] == "play"}["On their own"] == "free"
    roles = {e["task"]: e["role"] for e in events if e["kind"] == "task"}
    assert roles["Outer's own"] == "outer" and roles["Include inner"] == "outer"
    assert roles["Inner's own"] is None  # included: the phase stays the caller's
    timed = [e for e in events if e["kind"] == "result" and e["task"] == "Timed"]
    assert [(e["host"], e["changed"]) for e in timed] == [("h1", True), ("h2", False)]
    assert all(0.2 <= e["since_task_start"] < 30 for e in timed)
    # The free strategy announces a task once per host: the timeline holds it once, and each
    # host's result carries its id and the time since that host started it.
    [free_task] = [e for e in events if e["kind"] == "task" and e["task"] == "Timed free"]
    free = {e["host"]: e for e in events if e["kind"] == "result" and e["task"] == "Timed free"}
    assert {e["uuid"] for e in free.values()} == {free_task["uuid"]}
    # Each host's own time: h2's short sleep is not h1's long one (with room for a loaded machine).
    assert 3.0 <= free["h1"]["since_task_start"] < 30 and 0.2 <= free["h2"]["since_task_start"]
    assert free["h2"]["since_task_start"] < free["h1"]["since_task_start"] - 1.5
    assert events[-1]["kind"] == "end" and events[-1]["cpu"] >= events[0]["cpu"]
    # Every other result names its host (a phase's units), no more.
    answered = [e for e in events if e["kind"] == "host"]
    assert {e["host"] for e in answered} == {"h1", "h2"}
    assert all(set(e) == {"kind", "t", "cpu", "host"} for e in answered)

    phases = evening.phases(events)
    assert [p.name for p in phases] == ["facts (site.yml)"]  # plays the critical path does not name
    assert phases[0].wall_s == events[-1]["t"] - next(e["t"] for e in events if e["kind"] == "task")
