from __future__ import annotations

import re
from pathlib import Path

import yaml

from specfleet import event_key


def test_the_key_lives_in_a_hidden_folder_beside_the_inventory():
    # Hidden: Ansible never reads it as an inventory source when -i names the directory, and
    # group_vars/all/ would hide a group_vars/all.yml.
    assert event_key.key_file("/srv/event/inventory") == Path("/srv/event/inventory/.specfleet/api_key.yml")


def test_keys_are_random_and_256_bits():
    keys = {event_key.new_key() for _ in range(50)}
    assert len(keys) == 50
    assert all(re.fullmatch(r"sk-specfleet-[A-Za-z0-9_-]{43}", key) for key in keys)


def test_the_plaintext_sets_the_variable_a_run_reads():
    key = event_key.new_key()
    assert yaml.safe_load(event_key.key_yaml(key)) == {"specfleet_api_key": key}


def test_the_refusal_names_the_variable_the_file_and_every_way_out():
    message = event_key.missing_vault_message(Path("/inv/.specfleet/api_key.yml"), "default")
    assert message.startswith("specfleet_api_key: not set")
    parts = ("vault id 'default'", "/inv/.specfleet/api_key.yml", "--ask-vault-pass", "specfleet_open_server: true")
    for part in parts:
        assert part in message


def test_without_a_vault_id_asked_for_the_refusal_names_none():
    message = event_key.missing_vault_message(Path("/inv/.specfleet/api_key.yml"), None)
    assert "has no vault password to keep a generated one in /inv/.specfleet/api_key.yml" in message
    assert "vault id" not in message
