"""`specfleet status` against the lab's units over real SSH, through Ansible (read only; only
thor-01 may be rolled out here, and only when it has no release record yet)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, lab_hosts, on_unit

pytestmark = pytest.mark.lab
INVENTORY = REPO / "inventory" / "lab"
RECORDED = "thor-01"


def specfleet_status(inventory: Path, *extra: str) -> tuple[subprocess.CompletedProcess, float]:
    began = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "specfleet.cli", "status", "-i", str(inventory), "--format", "json", *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return result, time.monotonic() - began


def known_hosts_state() -> tuple[bool, float | None, int | None]:
    path = Path.home() / ".ssh" / "known_hosts"
    return (
        path.exists(),
        path.stat().st_mtime if path.exists() else None,
        path.stat().st_size if path.exists() else None,
    )


@pytest.fixture(scope="module")
def recorded_unit(fleet_lab, tmp_path_factory):
    """thor-01 with a release record: roll it out once (site.yml -l thor-01) if it has none."""
    if on_unit(RECORDED, "test -s /var/lib/specfleet/release.json").returncode != 0:
        runs = tmp_path_factory.mktemp("runs")
        result = subprocess.run(
            [
                str(Path(sys.executable).with_name("ansible-playbook")),
                "-i",
                str(INVENTORY),
                "playbooks/site.yml",
                "-l",
                RECORDED,
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=3600,
            env={**os.environ, "ANSIBLE_NOCOLOR": "1", "SPECFLEET_RUNS_DIR": str(runs)},
        )
        assert result.returncode == 0, result.stdout[-5000:]
    return json.loads(on_unit(RECORDED, "cat /var/lib/specfleet/release.json").stdout)


def test_every_unit_reported_with_its_address(recorded_unit):
    before = known_hosts_state()
    result, seconds = specfleet_status(INVENTORY)
    assert result.returncode == 0, result.stderr
    rows = {row["host"]: row for row in json.loads(result.stdout)}
    expected = {host: unit["ansible_host"] for host, unit in lab_hosts().items()}
    assert {host: row["address"] for host, row in rows.items()} == expected
    assert all(row["reachable"] and row["error"] is None for row in rows.values()), rows
    # Eight units in parallel, not one after the other (each answers in well under a second).
    assert seconds < 30, f"status took {seconds:.1f} s"
    # The lab's units are recreated often: their keys must not land in the user's known_hosts.
    assert known_hosts_state() == before

    row = rows[RECORDED]
    assert row["release_record"] == "present"
    assert row["known_good"]["spec_id"] == recorded_unit["known_good"]["spec_id"]
    assert row["known_good"]["image"] == recorded_unit["known_good"]["image"]
    if row["serving"] == "running" and row["current_matches_record"]:
        assert row["current"]["spec_id"] == recorded_unit["current"]["spec_id"]
        assert row["current_is_known_good"] == (
            recorded_unit["current"]["spec_id"] == recorded_unit["known_good"]["spec_id"]
        )
    decisions = recorded_unit.get("decisions") or {}
    if len(decisions) == 1:
        ((candidate, outcome),) = decisions.items()
        assert row["last"]["candidate_spec_id"] == candidate
        assert row["last"]["decision"] == outcome["decision"]


def test_limit_reads_only_matching_units(fleet_lab):
    result, _ = specfleet_status(INVENTORY, "--limit", "thor")
    assert result.returncode == 0, result.stderr
    assert sorted(row["host"] for row in json.loads(result.stdout)) == sorted(
        host for host in lab_hosts() if host.startswith("thor-")
    )


def test_unreachable_unit_is_reported_and_the_others_still_are(fleet_lab, tmp_path):
    # The lab inventory plus one extra file, as one inventory directory.
    inventory = tmp_path / "inventory"
    inventory.mkdir()
    (inventory / "hosts.yml").symlink_to(INVENTORY / "hosts.yml")
    (inventory / "group_vars").symlink_to(INVENTORY / "group_vars")
    (inventory / "gone.yml").write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "gone-01": {
                            "ansible_host": "127.0.0.1",
                            "ansible_port": 1,
                            "ansible_user": "root",
                            "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
                        }
                    }
                }
            }
        )
    )
    result, seconds = specfleet_status(inventory, "--timeout", "5")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    rows = {row["host"]: row for row in json.loads(result.stdout)}
    gone = rows.pop("gone-01")
    assert (gone["reachable"], gone["address"]) == (False, "127.0.0.1")
    assert gone["error"] == "connection refused: ssh: connect to host 127.0.0.1 port 1: Connection refused"
    assert set(rows) == set(lab_hosts())
    assert all(row["reachable"] for row in rows.values())
    assert seconds < 30


def test_table_output_names_the_unreachable_unit(fleet_lab, tmp_path):
    extra = tmp_path / "gone.yml"
    extra.write_text(yaml.safe_dump({"all": {"hosts": {"gone-01": {"ansible_host": "127.0.0.1", "ansible_port": 1}}}}))
    result = subprocess.run(
        [sys.executable, "-m", "specfleet.cli", "status", "-i", str(extra)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "UNREACHABLE" in result.stdout and "connection refused" in result.stdout


def test_ssh_config_alias_and_proxyjump_are_honoured(fleet_lab, tmp_path):
    # Reached only by an ~/.ssh/config-style alias that jumps through another unit: what the
    # playbooks' ssh does, and status now does too (it runs Ansible's ssh).
    units = lab_hosts()
    target, jump = units["thor-01"], units["thor-02"]
    common = (
        "  User root\n"
        f"  IdentityFile {target['ansible_ssh_private_key_file']}\n"
        "  IdentitiesOnly yes\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
    )
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host specfleet-jump\n  HostName {jump['ansible_host']}\n{common}"
        f"Host specfleet-behind-jump\n  HostName {target['ansible_host']}\n  ProxyJump specfleet-jump\n{common}"
    )
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "aliased-01": {
                            "ansible_host": "specfleet-behind-jump",
                            "ansible_ssh_common_args": f"-F {config}",
                        }
                    }
                }
            }
        )
    )
    result, _ = specfleet_status(inventory, "--timeout", "10")
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert (row["host"], row["address"], row["reachable"]) == ("aliased-01", "specfleet-behind-jump", True), row
    assert row["release_record"] in ("present", "missing")


@pytest.mark.parametrize("verbose", [[], ["-v"], ["-vvv"]], ids=["plain", "v", "vvv"])
def test_status_fetches_no_container_secret_even_with_a_log_callback_on(recorded_unit, tmp_path, verbose):
    """A whole `docker inspect` carries Config.Env (the serving's API key, its Hugging Face
    token): status asks Docker for the fields it shows only, so a log callback a user enables
    (community.general.log_plays here) keeps no secret, and neither does status's output, with
    Ansible's -v lines too."""
    log = tmp_path / "log"
    result = subprocess.run(
        [sys.executable, "-m", "specfleet.cli", "status", "-i", str(INVENTORY), "--limit", RECORDED,
         "--format", "json", *verbose],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "ANSIBLE_CALLBACKS_ENABLED": "community.general.log_plays",
             "ANSIBLE_LOG_FOLDER": str(log)},
    )
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert row["reachable"] and row["serving"] in ("running", "exited"), row
    # log_plays writes each result as JSON: the command's output is a JSON string inside it.
    logged = "".join(path.read_text(errors="replace") for path in log.rglob("*") if path.is_file())
    logged = logged.replace('\\"', '"')
    assert RECORDED in {path.name for path in log.iterdir()} and '"Status"' in logged, logged[:2000]
    environment = json.loads(on_unit(RECORDED, "docker inspect -f '{{json .Config.Env}}' specfleet-vllm").stdout)
    assert environment  # the container does carry an environment, and none of it travels
    printed = result.stdout + result.stderr
    assert '"Env"' not in logged and '"Env"' not in printed
    if verbose:  # -v reached Ansible, and what it says is on stderr
        assert "as config file" in result.stderr, result.stderr[-2000:]
    if verbose == ["-vvv"]:
        assert "ESTABLISH SSH CONNECTION" in result.stderr, result.stderr[-2000:]
    secret_names = set(recorded_unit["current"].get("secret_env_names") or [])
    secrets = [value for name, _, value in (entry.partition("=") for entry in environment)
               if name in secret_names and value]
    assert secrets  # the serving does hold secrets: the check below can fail
    assert [value for value in secrets if value in logged or value in printed] == []
