"""fanout_key as Ansible runs it: removes the fleet key of any run, reports it, check mode and
diff, and a second run changes nothing."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args

from tests.conftest import load_module

fanout_key = load_module("fanout_key")

ADMIN = "ssh-ed25519 AAAAadmin admin@controller\n"
RUN1 = 'restrict,command="/usr/bin/rrsync -ro /r/.specfleet/serve" ssh-ed25519 AAAAfleet specfleet-fanout:run1\n'


def run_module(capsys, args: dict) -> dict:
    with patch_module_args(args), pytest.raises(SystemExit):
        fanout_key.main()
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def ssh(tmp_path):
    (tmp_path / "authorized_keys").write_text(ADMIN + RUN1 + "ssh-ed25519 AAAAold specfleet-fanout\n")
    (tmp_path / "specfleet_fanout").write_text("PRIVATE\n")
    (tmp_path / "specfleet_fanout_known_hosts").write_text("10.0.0.2 ssh-ed25519 AAAAhost\n")
    return tmp_path


def test_check_mode_says_what_would_go_and_removes_nothing(capsys, ssh):
    result = run_module(capsys, {"ssh_dir": str(ssh), "_ansible_check_mode": True, "_ansible_diff": True})
    assert result["changed"] is True and result["removed_runs"] == ["run1", ""]
    assert result["diff"]["before"] == RUN1 + "ssh-ed25519 AAAAold specfleet-fanout\n" and result["diff"]["after"] == ""
    assert "PRIVATE" not in json.dumps(result)
    assert (ssh / "specfleet_fanout").exists() and (ssh / "authorized_keys").read_text().count("\n") == 3


def test_removes_every_runs_key_then_changes_nothing(capsys, ssh):
    result = run_module(capsys, {"ssh_dir": str(ssh)})
    assert result["changed"] is True and result["removed_runs"] == ["run1", ""]
    assert sorted(result["removed_files"]) == [str(ssh / "specfleet_fanout"), str(ssh / "specfleet_fanout_known_hosts")]
    assert (ssh / "authorized_keys").read_text() == ADMIN
    assert sorted(p.name for p in ssh.iterdir()) == ["authorized_keys"]
    again = run_module(capsys, {"ssh_dir": str(ssh)})
    assert again["changed"] is False and again["removed_runs"] == [] and again["removed_files"] == []


def test_a_unit_without_authorized_keys_is_no_change(capsys, tmp_path):
    result = run_module(capsys, {"ssh_dir": str(tmp_path / "missing")})
    assert result["changed"] is False and not (tmp_path / "missing").exists()


def test_a_run_with_an_entry_per_peer_is_named_once(capsys, tmp_path):
    """A run leaves one entry per peer (a key pair per unit): every entry goes, the run is named once."""
    peer = RUN1.replace("AAAAfleet", "AAAApeer")
    (tmp_path / "authorized_keys").write_text(ADMIN + RUN1 + peer + RUN1.replace("AAAAfleet", "AAAAthird"))
    result = run_module(capsys, {"ssh_dir": str(tmp_path), "_ansible_diff": True})
    assert result["changed"] is True and result["removed_runs"] == ["run1"]
    assert result["diff"]["before"].count("specfleet-fanout:run1") == 3
    assert (tmp_path / "authorized_keys").read_text() == ADMIN
