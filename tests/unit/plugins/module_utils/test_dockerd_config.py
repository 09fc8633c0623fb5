"""Whether the running dockerd has loaded daemon.json: /proc parsing and the decision."""

from __future__ import annotations

import os

import pytest
from ansible_collections.specfleet.fleet.plugins.module_utils.dockerd_config import (
    ProcStatError,
    loaded,
    parse_proc_stat,
    started_at,
)

# A /proc/<pid>/stat line: starttime (field 22) is 4820175 ticks after boot.
STAT = (
    "212 (dockerd) S 1 212 212 0 -1 4194560 9000 0 3 0 120 80 0 0 20 0 24 0 4820175 "
    "2400000000 12000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0"
)
PATH = "/etc/docker/daemon.json"


def test_stat_line_gives_the_name_and_start():
    assert parse_proc_stat(STAT) == ("dockerd", 4820175)


def test_a_name_with_spaces_and_parentheses_does_not_shift_the_fields():
    odd = STAT.replace("(dockerd)", "(my (odd) d)")
    assert parse_proc_stat(odd) == ("my (odd) d", 4820175)


def test_this_process_can_be_read():
    with open(f"/proc/{os.getpid()}/stat") as handle:
        name, ticks = parse_proc_stat(handle.read())
    assert name and ticks > 0


@pytest.mark.parametrize("text", ["", "212 dockerd S 1", "212 (dockerd) S 1 2 3"])
def test_a_truncated_line_is_refused(text):
    with pytest.raises(ProcStatError):
        parse_proc_stat(text)


def test_start_from_ticks_uptime_and_wall_clock():
    # Started 5 s after boot (500 ticks at 100 Hz); up 105.5 s at wall time 1000: 100.5 s ago.
    assert started_at(500, 100, "105.50 300.00\n", 1000.0) == pytest.approx(899.5)


def test_no_dockerd_has_loaded_nothing():
    assert loaded(PATH, 100.0, None, None) == (False, "dockerd is not running")


def test_no_file_leaves_a_running_dockerd_on_its_defaults():
    is_loaded, reason = loaded(PATH, None, 212, 100.0)
    assert is_loaded and "runs without /etc/docker/daemon.json" in reason


def test_dockerd_started_after_the_last_write_has_loaded_it():
    is_loaded, reason = loaded(PATH, 1_700_000_000.0, 212, 1_700_000_000.4)
    assert is_loaded
    assert reason == (
        "dockerd (pid 212) started at 2023-11-14T22:13:20.400Z, after "
        "/etc/docker/daemon.json was last written at 2023-11-14T22:13:20.000Z"
    )


def test_a_file_written_after_dockerd_started_is_a_restart_owed():
    # What an interrupted run leaves: the file replaced, the daemon still the old one.
    is_loaded, reason = loaded(PATH, 1_700_000_000.4, 212, 1_700_000_000.0)
    assert not is_loaded
    assert reason.startswith("/etc/docker/daemon.json was written at 2023-11-14T22:13:20.400Z, after dockerd")
    assert reason.endswith("the running Docker has not loaded it")
