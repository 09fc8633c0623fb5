"""The repository as the specfleet.fleet collection, both ways it ships: the wheel (one install:
the controller and the collection) and the Galaxy tarball; its playbooks run by FQCN from a
directory that knows nothing of the checkout."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
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


def controller_packages(into: Path) -> Path:
    """A folder of links to the packages requirements/controller.txt locks, as this venv has
    them: what `pip install --require-hashes -r requirements/controller.txt` puts beside the
    wheel, without the network a test may not use. Nothing else of this venv (no test tool, no
    lab, no editable checkout) is in it."""
    locked = [line.split("==")[0] for line in (REPO / "requirements" / "controller.txt").read_text().splitlines()
              if "==" in line and not line.startswith(("#", " "))]
    into.mkdir()
    for name in locked:
        dist = importlib.metadata.distribution(name)
        for top in {file.parts[0] for file in dist.files or () if file.parts[0] != ".."}:
            if not top.endswith(".pth") and not (into / top).exists():
                (into / top).symlink_to(dist.locate_file(top))
    return into


def test_the_wheel_alone_gives_the_cli_and_the_collection(tmp_path):
    """`pip install` of the built wheel is the whole install: from an empty directory, with no
    ansible.cfg, no collections path and no Galaxy step, the collection's playbooks run by FQCN
    and `specfleet` plans, both from the wheel's files; the collection in the wheel is the one
    `ansible-galaxy collection build` packs."""
    source = tmp_path / "source"  # a copy: setuptools builds in the source tree (build/, *.egg-info)
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "lab", "collections", "runs", "reports", "build", "*.egg-info", "__pycache__", ".*_cache"))
    wheel_dir = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-index",
                            "--no-build-isolation", "--wheel-dir", str(wheel_dir), str(source)],
                           capture_output=True, text=True, timeout=300, check=False)
    assert built.returncode == 0, built.stderr
    (wheel,) = wheel_dir.glob("specfleet-*.whl")
    prefix = "ansible_collections/specfleet/fleet/"
    with zipfile.ZipFile(wheel) as archive:
        shipped = {name.removeprefix(prefix) for name in archive.namelist() if name.startswith(prefix)}
    galaxy_dir = tmp_path / "galaxy"
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(galaxy_dir), str(REPO)],
                   capture_output=True, text=True, timeout=300, check=True)
    with tarfile.open(next(galaxy_dir.glob("*.tar.gz"))) as archive:
        packed = {member.name for member in archive.getmembers() if member.isfile()}
    # Galaxy writes MANIFEST.json and FILES.json from galaxy.yml; the wheel ships galaxy.yml.
    assert shipped - {"galaxy.yml"} == packed - {"MANIFEST.json", "FILES.json"}

    fresh = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(fresh)], check=True, timeout=300)
    python = str(fresh / "bin" / "python")
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "controller-packages.pth").write_text(f"{controller_packages(tmp_path / 'locked')}\n")
    installed = subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps",
                                "--no-index", str(wheel)], capture_output=True, text=True, timeout=300, check=False)
    assert installed.returncode == 0, installed.stderr

    empty = tmp_path / "empty"
    empty.mkdir()
    env = {"PATH": f"{fresh / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path / "home"), "COLUMNS": "250",
           "LANG": "C.UTF-8"}
    mixed = str(REPO / "inventory" / "mixed")
    # `ansible-playbook` is the locked ansible-core's, run as its module: the venv's own bin holds
    # only what the wheel installed.
    checked = subprocess.run([python, "-m", "ansible.cli.playbook", "specfleet.fleet.plan",
                              "-i", mixed, "--syntax-check"], cwd=empty, env=env, capture_output=True, text=True,
                             timeout=300, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"playbook: {site}/{prefix}playbooks/plan.yml" in checked.stdout, checked.stdout
    planned = subprocess.run([str(fresh / "bin" / "specfleet"), "plan", "-i", mixed], cwd=empty, env=env,
                             capture_output=True, text=True, timeout=300, check=False)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    hosts = yaml.safe_load((REPO / "inventory" / "mixed" / "hosts.yml").read_text())
    names = {host for group in hosts["all"]["children"].values() for host in (group.get("hosts") or {})}
    assert names and all(name in planned.stdout for name in names), planned.stdout
    where = subprocess.run([python, "-c", "import specfleet.plan, specfleet.cli; "
                            "from ansible_collections.specfleet.fleet.plugins.module_utils import jetson_identity; "
                            "print(specfleet.plan.__file__); print(jetson_identity.__file__)"],
                           cwd=empty, env=env, capture_output=True, text=True, check=True)
    assert where.stdout.split() == [f"{site}/specfleet/plan.py",
                                    f"{site}/{prefix}plugins/module_utils/jetson_identity.py"]
