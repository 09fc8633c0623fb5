# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Has the running dockerd loaded daemon.json as it is now? Standard library only.

dockerd reads daemon.json when it starts. A run that replaced the file and was interrupted
before it restarted Docker leaves a file newer than the daemon, and the next run finds the
file already as it wants it: only comparing the daemon's start with the file's last write
tells that the restart is still owed. The ``dockerd_config_state`` module reads the times
(pidfile, ``/proc``, ``stat``); the decision below is pure.

Why times and not a marker file or ``docker info``: ``docker info`` shows a few keys only
(runtimes, default runtime, registries), not log options, data root or the rest a site
sets; a marker the role writes after a restart misses a file someone else changed. The
process start comes from ``/proc`` in the boot clock, converted with ``/proc/uptime`` read
at the same moment, so it is exact to a clock tick on systemd units and on the lab's
init-script units alike. It shares one assumption with every mtime comparison: the wall
clock did not jump back between the file's write and this check.
"""

from __future__ import annotations

import os
import time

DOCKERD_COMM = "dockerd"


class ProcStatError(ValueError):
    """A /proc/<pid>/stat line that does not have the fields we read."""


def parse_proc_stat(text: str) -> tuple[str, int]:
    """(command name, start time in clock ticks after boot) from a /proc/<pid>/stat line.

    The name sits in parentheses and may itself hold spaces or parentheses, so the fields
    are counted from the last closing parenthesis: starttime is field 22 of the line, the
    20th after the name (proc(5))."""
    opened, closed = text.find("("), text.rfind(")")
    if opened < 0 or closed < opened:
        raise ProcStatError(f"no command name in {text[:80]!r}")
    fields = text[closed + 1 :].split()
    if len(fields) < 20 or not fields[19].isdigit():
        raise ProcStatError(f"no start time in {text[:80]!r}")
    return text[opened + 1 : closed], int(fields[19])


def started_at(start_ticks: int, clock_ticks: int, uptime_text: str, now: float) -> float:
    """Wall-clock time (epoch seconds) a process started, from its start in ticks after
    boot, the ticks per second, /proc/uptime's text and the wall clock read with it."""
    uptime = float(uptime_text.split()[0])
    return now - (uptime - start_ticks / clock_ticks)


def _when(epoch: float) -> str:
    """UTC, to the millisecond: the two times compared are often less than a second apart."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + f".{int(epoch * 1000) % 1000:03d}Z"


def loaded(path: str, config_written: float | None, pid: int | None, dockerd_started: float | None) -> tuple[bool, str]:
    """Whether the running dockerd has loaded ``path`` as it is now, and why (one line).

    ``config_written`` is the file's mtime (None: no file); ``pid`` and ``dockerd_started``
    are None when no dockerd runs. A daemon that is not running has loaded nothing (starting
    it is what is owed); a missing file leaves a running daemon on its defaults."""
    if pid is None or dockerd_started is None:
        return False, "dockerd is not running"
    if config_written is None:
        return True, f"dockerd (pid {pid}) runs without {path}, on its defaults"
    if dockerd_started >= config_written:
        return True, (
            f"dockerd (pid {pid}) started at {_when(dockerd_started)}, "
            f"after {path} was last written at {_when(config_written)}"
        )
    return False, (
        f"{path} was written at {_when(config_written)}, after dockerd (pid {pid}) started "
        f"at {_when(dockerd_started)}: the running Docker has not loaded it"
    )


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def running_dockerd(pidfile: str) -> tuple[int | None, float | None]:
    """(pid, start as epoch seconds) of the dockerd the pidfile names, or (None, None) when
    there is no pidfile or its process is gone or is not a dockerd (a reused pid)."""
    text = (_read(pidfile) or "").strip()
    if not text.isdigit():
        return None, None
    pid = int(text)
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None, None
    try:
        comm, start_ticks = parse_proc_stat(stat)
    except ProcStatError:
        return None, None
    if comm != DOCKERD_COMM:
        return None, None
    # Read uptime and the wall clock together: the difference is the process's age.
    uptime, now = _read("/proc/uptime"), time.time()
    if uptime is None:
        return None, None
    return pid, started_at(start_ticks, os.sysconf("SC_CLK_TCK"), uptime, now)
