"""The lock (requirements/, written by scripts/lock): what it says, and that this venv is it.

The venv the tests run in is the one scripts/lib/python-env.sh made from requirements/dev.txt,
so an installed package that is not the locked one fails here; the README's "Your own fleet"
venv is checked against requirements/controller.txt by its own test (test_stock_lab)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("lockfile", REPO / "scripts" / "lib" / "lockfile.py")
lockfile = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lockfile)

DEV, CONTROLLER = REPO / "requirements" / "dev.txt", REPO / "requirements" / "controller.txt"
SAMPLE = """\
# The lock: written by scripts/lock from pyproject.toml; edit neither by hand.
PyYAML==6.0.3 \\
    --hash=sha256:aaaa \\
    --hash=sha256:bbbb
    # via specfleet (pyproject.toml)
ruamel.yaml==0.19.1 ; python_version >= "3.11" \\
    --hash=sha256:cccc

# The following packages are considered to be unsafe in a requirements file:
pip==26.3 \\
    --hash=sha256:dddd
"""


def pins(path: Path) -> dict[str, str]:
    return lockfile.parse_lock(path.read_text())


def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_a_lock_is_read_by_normalised_name():
    assert lockfile.parse_lock(SAMPLE) == {"pyyaml": "6.0.3", "ruamel-yaml": "0.19.1", "pip": "26.3"}


def test_every_difference_is_named_and_the_checkout_packages_are_not_compared():
    locked = {"pyyaml": "6.0.3", "rich": "15.0.0", "pip": "26.3"}
    installed = {"pyyaml": "6.0.2", "pip": "26.3", "cryptography": "51.0.1", "specfleet": "0.2.0",
                 "specfleet-lab": "0.2.0"}
    assert lockfile.mismatches(locked, installed) == [
        "cryptography 51.0.1 is installed but not in the lock",
        "pyyaml is 6.0.2, the lock says 6.0.3",
        "rich 15.0.0 is locked but not installed",
    ]
    assert lockfile.mismatches(locked, dict(locked)) == []


def test_the_check_exits_1_naming_the_package(tmp_path):
    lock = tmp_path / "lock.txt"
    lock.write_text("pytest==0.0.1 \\\n    --hash=sha256:aaaa\n")
    result = subprocess.run([sys.executable, str(REPO / "scripts/lib/lockfile.py"), "check", str(lock)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 1
    assert f"pytest is {pytest.__version__}, the lock says 0.0.1 ({lock})" in result.stderr


def test_this_venv_holds_exactly_the_dev_lock():
    assert lockfile.mismatches(pins(DEV), lockfile.installed_packages()) == []


@pytest.mark.parametrize("path", [DEV, CONTROLLER], ids=lambda p: p.name)
def test_a_lock_names_packages_and_hashes_not_pip_settings(path):
    options = [line for line in path.read_text().splitlines() if line.startswith("-")]
    assert options == [], f"{path.name}: {options} (a setting of the machine that wrote it)"


@pytest.mark.parametrize("path", [DEV, CONTROLLER], ids=lambda p: p.name)
def test_every_locked_package_has_its_hashes(path):
    text = path.read_text()
    blocks = [block for block in text.split("\n") if lockfile._PIN.match(block)]
    assert len(blocks) == len(pins(path)) > 0
    for line in blocks:
        following = text.split(line + "\n", 1)[1].lstrip()
        assert following.startswith("--hash=sha256:"), line


def test_the_controller_lock_is_the_dev_locks_versions():
    dev, controller = pins(DEV), pins(CONTROLLER)
    assert {name: dev.get(name) for name in controller} == controller
    # pip-compile drops what the controller does not need: the development tools are not in it
    assert not {"pytest", "molecule", "ansible-lint", "pip-tools"} & controller.keys()


def test_direct_dependencies_are_locked_at_pyprojects_pins():
    project = pyproject()["project"]
    runtime = [Requirement(text) for text in project["dependencies"]]
    dev_tools = [Requirement(text) for text in project["optional-dependencies"]["dev"]]
    for requirement in runtime + dev_tools:
        locked = pins(DEV)[lockfile.canonical_name(requirement.name)]
        assert requirement.specifier.contains(locked), (requirement, locked)
    for requirement in runtime:
        assert requirement.specifier.contains(pins(CONTROLLER)[lockfile.canonical_name(requirement.name)])


@pytest.mark.parametrize("path", [DEV, CONTROLLER], ids=lambda p: p.name)
def test_the_installer_and_build_backend_are_locked_as_pyproject_asks(path):
    locked = pins(path)
    assert "pip" in locked
    for text in pyproject()["build-system"]["requires"]:
        requirement = Requirement(text)
        assert requirement.specifier.contains(locked[lockfile.canonical_name(requirement.name)]), requirement


@pytest.mark.parametrize("path", [DEV, CONTROLLER], ids=lambda p: p.name)
def test_the_constraints_hold(path):
    lines = (REPO / "requirements" / "constraints.txt").read_text().splitlines()
    constraints = [Requirement(line) for line in lines if line.strip() and not line.startswith("#")]
    assert constraints
    for requirement in constraints:
        assert requirement.specifier.contains(pins(path)[lockfile.canonical_name(requirement.name)]), requirement


def test_the_collections_requirements_say_the_controller_locks_versions():
    written = (REPO / "requirements.txt").read_text()
    assert written == lockfile.collection_requirements(pins(CONTROLLER), "requirements/controller.txt")
    listed = dict(line.split("==") for line in written.splitlines() if "==" in line)
    assert listed == {name: version for name, version in pins(CONTROLLER).items()
                      if name not in lockfile.INSTALLER_PACKAGES}
    assert listed["cryptography"] == pins(DEV)["cryptography"]


@pytest.mark.parametrize("command", [["ansible-playbook", "--version"], ["ansible", "--version"],
                                     ["ansible-inventory", "--version"], ["ansible-vault", "--help"],
                                     ["specfleet", "--help"]])
def test_the_locked_tools_start_without_a_warning(command):
    # cryptography 51 made each of these print a CryptographyDeprecationWarning first; the lock
    # keeps the release ansible-core 2.19 imports quietly (requirements/constraints.txt)
    result = subprocess.run([str(Path(sys.executable).parent / command[0]), *command[1:]],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0 and result.stderr == "", result.stderr
