"""dockerd_config_state as Ansible runs it, against a real process standing in for dockerd:
a file written before the process started counts as loaded, one written after does not."""

from __future__ import annotations

import json
import os
import time

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.specfleet.fleet.plugins.module_utils import dockerd_config

from tests.conftest import load_module

dockerd_config_state = load_module("dockerd_config_state")


def run_module(capsys, args: dict) -> dict:
    with patch_module_args(args), pytest.raises(SystemExit):
        dockerd_config_state.main()
    return json.loads(capsys.readouterr().out)


def test_a_file_written_before_dockerd_started_is_loaded(capsys, stand_in_dockerd):
    args, process = stand_in_dockerd
    result = run_module(capsys, args)
    assert result["changed"] is False
    assert result["loaded"] is True, result["reason"]
    assert result["pid"] == process.pid
    assert result["config_written"] < result["dockerd_started"] <= time.time()


def test_a_file_written_after_dockerd_started_is_not(capsys, stand_in_dockerd):
    args, _process = stand_in_dockerd
    time.sleep(0.2)
    with open(args["path"], "w") as handle:
        handle.write('{"debug": true}\n')
    result = run_module(capsys, args)
    assert result["loaded"] is False
    assert result["reason"].endswith("the running Docker has not loaded it")


def test_a_pid_that_is_not_a_dockerd_is_no_dockerd(capsys, stand_in_dockerd, monkeypatch):
    args, _process = stand_in_dockerd
    monkeypatch.setattr(dockerd_config, "DOCKERD_COMM", "dockerd")
    result = run_module(capsys, args)
    assert (result["loaded"], result["reason"], result["pid"]) == (False, "dockerd is not running", None)


def test_no_pidfile_is_no_dockerd(capsys, tmp_path):
    result = run_module(capsys, {"path": str(tmp_path / "daemon.json"), "pidfile": str(tmp_path / "none.pid")})
    assert (result["loaded"], result["reason"]) == (False, "dockerd is not running")


def test_no_file_is_loaded_by_a_running_dockerd(capsys, stand_in_dockerd):
    args, _process = stand_in_dockerd
    os.unlink(args["path"])
    result = run_module(capsys, args)
    assert result["loaded"] is True and result["config_written"] is None
