# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Benchmark-only callback (tests/bench/evening.py enables it): the playbook's timeline.

Writes JSON to the file named by SPECFLEET_BENCH_TIMELINE at the end of the run: every play
start (each serial batch starts its play again) with its strategy, every task's first start
with the play-level role it belongs to (``roles:``; an ``include_role`` counts as its
caller's) and its id (the free strategy announces a task once per host), each host that
answers, and, for the actions listed in SPECFLEET_BENCH_TIMED_ACTIONS, when each host's
result came back, how long after that host started the task, with what the module says it
did (its ``action``, ``compile_cache``; nothing for a no_log task) and how the task ran it
(check mode, ``state``). Each event carries the wall clock and the controller's CPU seconds
so far (this process and every worker and ssh it has reaped). tests/bench/evening_model.py reads it.
"""

from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
---
name: bench_timeline
type: aggregate
short_description: Record a playbook's timeline for the evening benchmark
description:
  - Writes plays, tasks and timed results, with wall clock and controller CPU, as JSON to
    the file named by SPECFLEET_BENCH_TIMELINE.
"""


def _cpu() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bench_timeline"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self.path = os.environ.get("SPECFLEET_BENCH_TIMELINE", "")
        self.timed = set(filter(None, os.environ.get("SPECFLEET_BENCH_TIMED_ACTIONS", "").split(",")))
        self.events: list[dict] = []
        self.announced: set[str] = set()
        # (task id, host) -> when the host's worker started the task.
        self.started: dict[tuple[str, str], float] = {}

    def _event(self, kind: str, **fields: object) -> None:
        self.events.append({"kind": kind, "t": round(time.time(), 3), "cpu": round(_cpu(), 3), **fields})

    def v2_playbook_on_start(self, playbook) -> None:
        self._event("playbook", file=os.path.basename(playbook._file_name))

    def v2_playbook_on_play_start(self, play) -> None:
        self._event("play", play=play.get_name().strip(), strategy=str(play.strategy))

    def _task(self, task) -> None:
        if task._uuid in self.announced:
            return
        self.announced.add(task._uuid)
        role = task._role
        self._event("task", task=(task.name or task.action).strip(), action=task.action, uuid=task._uuid,
                    role=role.get_name(include_role_fqcn=False) if role is not None and not role.from_include else None)

    def v2_runner_on_start(self, host, task) -> None:
        self.started[task._uuid, host.get_name()] = time.time()

    def v2_playbook_on_task_start(self, task, is_conditional) -> None:
        self._task(task)

    def v2_playbook_on_handler_task_start(self, task) -> None:
        self._task(task)

    def _result(self, result, status: str) -> None:
        task, host = result._task, result._host.get_name()
        if task.action not in self.timed:
            self._event("host", host=host)
            return
        # A no_log task's result holds only "changed" (and "censored"); the task says the rest.
        answer = result._result
        started = self.started.pop((task._uuid, host), time.time())
        self._event("result", task=(task.name or task.action).strip(), action=task.action, uuid=task._uuid,
                    host=host, status=status, changed=bool(answer.get("changed")), check_mode=bool(task.check_mode),
                    state=str(task.args.get("state", "")), outcome=str(answer.get("action", "")),
                    compile_cache=answer.get("compile_cache"), since_task_start=round(time.time() - started, 3))

    def v2_runner_on_ok(self, result) -> None:
        self._result(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False) -> None:
        self._result(result, "failed")

    def v2_runner_on_unreachable(self, result) -> None:
        self._result(result, "unreachable")

    def v2_playbook_on_stats(self, stats) -> None:
        self._event("end")
        if self.path:
            with open(self.path, "w", encoding="utf-8") as out:
                json.dump(self.events, out)
            self.events.pop()  # a later playbook of the same run writes the whole timeline again
