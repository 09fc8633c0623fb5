"""Host keys are checked everywhere (issue 16): by Ansible's connections and by every bulk copy."""

from __future__ import annotations

import configparser
from collections.abc import Iterator
from pathlib import Path

import yaml

from tests.conftest import REPO


def tasks_in(node: object) -> Iterator[dict]:
    """Every task mapping in a tasks file or playbook, blocks and handlers included."""
    if isinstance(node, list):
        for item in node:
            yield from tasks_in(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            yield from tasks_in(node.get(key))


def synchronize_tasks() -> list[tuple[Path, dict]]:
    found = []
    for path in sorted([*REPO.glob("roles/*/tasks/*.yml"), *REPO.glob("roles/*/handlers/*.yml"),
                        *REPO.glob("playbooks/**/*.yml")]):
        for task in tasks_in(yaml.safe_load(path.read_text())):
            for name in ("ansible.posix.synchronize", "synchronize"):
                if name in task:
                    found.append((path.relative_to(REPO), task[name]))
    return found


def test_every_bulk_copy_checks_host_keys():
    copies = synchronize_tasks()
    assert len(copies) >= 4  # models, image tarball, compile cache, Open WebUI wheelhouse
    unchecked = [str(path) for path, args in copies
                 if args.get("verify_host") is not True or args.get("use_ssh_args") is not True]
    assert unchecked == []


def test_ansible_checks_host_keys():
    config = configparser.ConfigParser()
    config.read(REPO / "ansible.cfg")
    assert config.getboolean("defaults", "host_key_checking")
    assert "StrictHostKeyChecking=no" not in config.get("ssh_connection", "ssh_args")
