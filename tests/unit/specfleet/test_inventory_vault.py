"""Vault password sources named in ansible.cfg, read from wherever the CLI runs."""

import json
import subprocess
import sys
from pathlib import Path

from specfleet.inventory import _anchored
from tests.conftest import REPO


def test_relative_sources_are_taken_from_the_config_folder():
    base = Path("/repo")
    assert _anchored("lab@lab/vault-password-client", base) == "lab@/repo/lab/vault-password-client"
    assert _anchored("lab@/abs/file", base) == "lab@/abs/file"
    assert _anchored("me@prompt", base) == "me@prompt"
    assert _anchored("secret.txt", base) == "/repo/secret.txt"


def test_inline_vaulted_values_decrypt_with_the_configs_password_file(tmp_path):
    """`ansible-vault encrypt_string` output in group_vars, as the README's quick start writes
    it; the password file named by the folder's ansible.cfg, relative to it."""
    (tmp_path / "ansible.cfg").write_text("[defaults]\nvault_password_file = vault-pass\n")
    (tmp_path / "vault-pass").write_text("correct horse\n")
    encrypted = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-vault")), "encrypt_string", "--stdin-name",
         "ansible_become_password"], input="s3cret", cwd=tmp_path, capture_output=True, text=True, check=True)
    (tmp_path / "group_vars" / "all").mkdir(parents=True)
    (tmp_path / "group_vars" / "all" / "vault.yml").write_text(encrypted.stdout)
    (tmp_path / "inventory.yml").write_text("all:\n  hosts:\n    unit-1:\n")
    read = subprocess.run(
        [sys.executable, "-c", "import json; from specfleet.inventory import host_variables; "
         "print(json.dumps(host_variables('inventory.yml')))"],
        cwd=tmp_path, capture_output=True, text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout)["unit-1"]["ansible_become_password"] == "s3cret"
