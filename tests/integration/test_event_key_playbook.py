"""This event's API key (issue 19, item 10): a fleet serves with a key unless told otherwise.

Real ansible-playbook runs on this machine against two units behind a closed port (as the
bad-input suite's inventories): what happens before any unit is contacted is the point. The
lab tests (test_rollout_lab.py) show the units then refusing /v1 without the key.
"""

from __future__ import annotations

import re
import secrets
import stat
import subprocess
import sys
from pathlib import Path

import yaml

from specfleet import event_key
from tests.conftest import REPO
from tests.integration.test_bad_input import CONTROLLER_TASKS, Case, run, write_inventory

BIN = Path(sys.executable).parent
MAKE_TASK = "Make this event's API key, once, into Vault"


def playbook(inventory: Path, name: str, *extra: str, env: dict[str, str] | None = None) -> str:
    result = run([str(BIN / "ansible-playbook"), "-i", str(inventory), f"playbooks/{name}", *extra],
                 inventory.parent / "runs", env)
    return result.stdout + result.stderr


def tasks_run(out: str) -> set[str]:
    return set(re.findall(r"^TASK \[(.+?)\]", out, re.MULTILINE))


def password_file(directory: Path) -> Path:
    path = directory / "vault-password"
    path.write_text(secrets.token_urlsafe(24) + "\n")
    path.chmod(0o600)
    return path


def viewed(path: Path, password: Path) -> dict:
    shown = subprocess.run([str(BIN / "ansible-vault"), "view", str(path), "--vault-password-file", str(password)],
                           cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert shown.returncode == 0, shown.stderr
    return yaml.safe_load(shown.stdout)


def test_no_key_and_no_vault_password_is_refused_before_any_unit(tmp_path: Path):
    inventory = write_inventory(tmp_path, Case("valid", {}, "", ""))
    out = playbook(inventory, "site.yml")
    assert "specfleet_api_key: not set, and the run has no vault password (vault id 'default')" in out, out
    assert f"{event_key.OPEN_VARIABLE}: true to serve /v1 without a key" in out, out
    assert tasks_run(out) == CONTROLLER_TASKS | {MAKE_TASK}, out
    assert "UNREACHABLE" not in out and "Traceback" not in out, out
    assert not event_key.key_file(tmp_path).exists()


def test_a_vault_password_makes_the_events_key_once(tmp_path: Path):
    inventory = write_inventory(tmp_path, Case("valid", {}, "", ""))
    password = password_file(tmp_path)
    out = playbook(inventory, "site.yml", "--vault-password-file", str(password))
    key_file = event_key.key_file(tmp_path)
    assert key_file.is_file(), out
    assert "Read the unit's identity" in out and "UNREACHABLE" in out, "the run went on to the units: " + out
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    content = key_file.read_bytes()
    assert content.startswith(b"$ANSIBLE_VAULT;1.1;AES256\n"), content[:40]
    key = viewed(key_file, password)[event_key.KEY_VARIABLE]
    assert re.fullmatch(r"sk-specfleet-[A-Za-z0-9_-]{43}", key), "a 256-bit key"
    assert key not in out

    again = playbook(inventory, "site.yml", "--vault-password-file", str(password))
    assert key_file.read_bytes() == content, "a second run keeps the event's key"
    assert key not in again

    other = tmp_path / "other"
    other.mkdir()
    inventory_two = write_inventory(other, Case("valid", {}, "", ""))
    playbook(inventory_two, "site.yml", "--vault-password-file", str(password))
    assert viewed(event_key.key_file(other), password)[event_key.KEY_VARIABLE] != key, "each event its own key"


def readme_config(directory: Path, password: Path | None) -> dict[str, str]:
    """The environment of a run under an ansible.cfg like the README's event folder's: a
    vault_password_file (when given) and no vault ids, unlike this checkout's, which names the
    lab's and an encrypt identity."""
    config = directory / "ansible.cfg"
    config.write_text(f"[defaults]\ncollections_path = {REPO / 'collections'}\n"
                      + (f"vault_password_file = {password}\n" if password else ""))
    return {"ANSIBLE_CONFIG": str(config)}


def test_the_readmes_event_settings_make_the_key_with_their_one_vault_password(tmp_path: Path):
    """The README's ansible.cfg names a vault_password_file and no vault ids: the key is made with it."""
    password = password_file(tmp_path)
    inventory = write_inventory(tmp_path, Case("valid", {}, "", ""))
    out = playbook(inventory, "site.yml", env=readme_config(tmp_path, password))
    key_file = event_key.key_file(tmp_path)
    assert key_file.read_bytes().startswith(b"$ANSIBLE_VAULT;1.1;AES256\n"), out
    assert re.fullmatch(r"sk-specfleet-[A-Za-z0-9_-]{43}", viewed(key_file, password)[event_key.KEY_VARIABLE])
    assert "Read the unit's identity" in out and "UNREACHABLE" in out, "the run went on to the units: " + out

    no_password = tmp_path / "none"
    no_password.mkdir()
    out = playbook(write_inventory(no_password, Case("valid", {}, "", "")), "site.yml",
                   env=readme_config(no_password, None))
    assert "specfleet_api_key: not set, and the run has no vault password to keep a generated one in" in out, out
    assert tasks_run(out) == CONTROLLER_TASKS | {MAKE_TASK} and "Traceback" not in out, out


def test_check_mode_makes_no_key(tmp_path: Path):
    inventory = write_inventory(tmp_path, Case("valid", {}, "", ""))
    out = playbook(inventory, "site.yml", "--check", "--vault-password-file", str(password_file(tmp_path)))
    assert MAKE_TASK in tasks_run(out), out
    assert not event_key.key_file(tmp_path).exists()


def test_a_given_key_an_open_server_or_a_plan_make_none(tmp_path: Path):
    runs = {
        "given": ("site.yml", {"specfleet_api_key": "sk-given-by-the-environment"}),
        "open": ("site.yml", {"specfleet_open_server": True}),
        "plan": ("plan.yml", {}),
    }
    for name, (book, variables) in runs.items():
        directory = tmp_path / name
        directory.mkdir()
        inventory = write_inventory(directory, Case(name, variables, "", "", host=None))
        out = playbook(inventory, book)
        assert "UNREACHABLE" in out, f"{name}: the run goes on to the units: {out}"
        assert not event_key.key_file(directory).exists(), name
