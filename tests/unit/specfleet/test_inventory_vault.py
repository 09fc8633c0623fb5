"""Vault password sources named in ansible.cfg, read from wherever the CLI runs."""

from pathlib import Path

from specfleet.inventory import _anchored


def test_relative_sources_are_taken_from_the_config_folder():
    base = Path("/repo")
    assert _anchored("lab@lab/vault-password-client", base) == "lab@/repo/lab/vault-password-client"
    assert _anchored("lab@/abs/file", base) == "lab@/abs/file"
    assert _anchored("me@prompt", base) == "me@prompt"
    assert _anchored("secret.txt", base) == "/repo/secret.txt"
