"""A process killed at a chosen file system step, in process: for crash-consistency tests.

``Crash`` replaces every call that changes the file system (``os.rename``, ``os.replace``,
``os.symlink``, ``os.unlink``, ``os.rmdir``, ``os.mkdir``, ``os.link``, ``os.chmod``,
``os.fsync``, and ``atomic_files.exchange``) with one that counts it and, at the chosen step,
raises ``Killed`` instead of doing it. ``Killed`` is a BaseException, like the end of a
process: ``except Exception`` and ``shutil.rmtree(ignore_errors=True)`` do not swallow it,
and every later step raises too, so a cleanup handler cannot tidy up what a real kill would
have left. Everything before the step is done for real on disk.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ansible_collections.specfleet.fleet.plugins.module_utils import atomic_files

STEPS = ("rename", "replace", "symlink", "unlink", "rmdir", "mkdir", "link", "chmod", "fsync")


class Killed(BaseException):
    """The process died here."""


class Crash:
    def __init__(self, at: int | None):
        self.at = at  # the step (0-based) that kills; None counts only
        self.steps: list[str] = []
        self.fired = False

    def _wrap(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def step(*args: Any, **kwargs: Any) -> Any:
            if self.fired:
                raise Killed(f"{name} after the kill")
            if self.at is not None and len(self.steps) == self.at:
                self.fired = True
                raise Killed(f"killed at step {self.at}: {name}{args}")
            self.steps.append(f"{name}{tuple(str(a) for a in args)}")
            return real(*args, **kwargs)

        return step

    @contextmanager
    def armed(self) -> Iterator[Crash]:
        saved = {name: getattr(os, name) for name in STEPS}
        saved_exchange = atomic_files.exchange
        try:
            for name, real in saved.items():
                setattr(os, name, self._wrap(name, real))
            atomic_files.exchange = self._wrap("exchange", saved_exchange)
            yield self
        finally:
            for name, real in saved.items():
                setattr(os, name, real)
            atomic_files.exchange = saved_exchange


def steps_of(action: Callable[[], Any]) -> list[str]:
    """The file system steps ``action`` takes when nothing kills it."""
    crash = Crash(None)
    with crash.armed():
        action()
    return crash.steps


def killed_at(step: int, action: Callable[[], Any]) -> bool:
    """Run ``action`` and kill it at ``step``; False when it finished before that step."""
    crash = Crash(step)
    with crash.armed():
        try:
            action()
        except Killed:
            return True
    return False
