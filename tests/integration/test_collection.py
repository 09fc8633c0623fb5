"""The repository as the specfleet.fleet collection: built and installed with ansible-galaxy,
its playbooks run by FQCN from a directory that knows nothing of the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

from tests.conftest import REPO

BIN = Path(sys.executable).parent


def run(*argv: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_built_collection_installs_and_its_playbooks_run_from_an_empty_directory(tmp_path):
    # Nothing of the checkout: no ansible.cfg (the working directory is empty and
    # ANSIBLE_CONFIG is unset), no collections path but where the tarball is installed.
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update(HOME=str(tmp_path / "home"), ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "collections"))
    empty = tmp_path / "empty"
    empty.mkdir()

    built = run("ansible-galaxy", "collection", "build", "--output-path", str(tmp_path / "dist"), str(REPO),
                cwd=empty, env=env)
    assert built.returncode == 0, built.stdout + built.stderr
    (tarball,) = (tmp_path / "dist").glob("specfleet-fleet-*.tar.gz")
    with tarfile.open(tarball) as archive:
        names = set(archive.getnames())
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    assert tarball.name == f"specfleet-fleet-{galaxy['version']}.tar.gz"
    assert {"meta/runtime.yml", "playbooks/site.yml", "plugins/modules/vllm_container.py",
            "roles/specfleet_serve/tasks/main.yml", "requirements.txt"} <= names
    # The product only: the controller package ships with pip, the lab and tests not at all.
    assert not [name for name in names if name.split("/")[0] in ("specfleet", "lab", "collections", "scripts")]
    assert not [name for name in names if name.startswith("tests/") and not name.startswith("tests/sanity")]

    # The dependencies (community.docker, ansible.posix) come with the `ansible` pip package.
    installed = run("ansible-galaxy", "collection", "install", "--no-deps", "-p", str(tmp_path / "collections"),
                    str(tarball), cwd=empty, env=env)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    listed = run("ansible-galaxy", "collection", "list", "specfleet.fleet", cwd=empty, env=env)
    assert str(tmp_path / "collections") in listed.stdout and galaxy["version"] in listed.stdout, listed.stdout

    for playbook in ("plan", "site", "rollback"):
        checked = run("ansible-playbook", f"specfleet.fleet.{playbook}", "-i", str(REPO / "inventory" / "mixed"),
                      "--syntax-check", cwd=empty, env=env)
        assert checked.returncode == 0, checked.stdout + checked.stderr

    # The controller-side plugins are documented where they are installed.
    doc = run("ansible-doc", "-t", "module", "specfleet.fleet.specfleet_rollout", cwd=empty, env=env)
    assert doc.returncode == 0 and "earlier_did_not_start" in doc.stdout, doc.stdout + doc.stderr
