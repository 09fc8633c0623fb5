"""Every role's Molecule scenario (docker driver, the lab's unit image, no pulls, no network):
destroy, syntax, create, prepare, check, converge, idempotence, verify, destroy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

# Open WebUI installs a 250 MB wheelhouse into its scenario (~4-6 min): a slow lane, with the
# rest of Open WebUI's tests (test_openwebui_lab.py).
SLOW_ROLES = {"specfleet_openwebui"}
ROLES = [
    pytest.param(role, marks=[pytest.mark.slow]) if role in SLOW_ROLES else role
    for role in sorted(path.parents[2].name for path in (REPO / "roles").glob("*/molecule/default/molecule.yml"))
]


@pytest.mark.molecule
@pytest.mark.parametrize("role", ROLES)
def test_molecule_scenario(fleet_lab, role):
    from specfleet_lab.config import STOCK_UNIT_IMAGE, UNIT_IMAGE

    env = {
        **os.environ,
        "DOCKER_HOST": fleet_lab.docker_host,
        "SPECFLEET_REPO": str(REPO),
        "SPECFLEET_UNIT_IMAGE": UNIT_IMAGE,
        # The bootstrap's scenario: a stock unit and the lab's apt mirror.
        "SPECFLEET_UNIT_STOCK_IMAGE": STOCK_UNIT_IMAGE,
        "SPECFLEET_LAB_APT_MIRROR": str(fleet_lab.apt_mirror_dir),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "ANSIBLE_FORCE_COLOR": "0",
    }
    result = subprocess.run(
        [str(Path(sys.executable).with_name("molecule")), "-c", str(REPO / "tests/molecule/base.yml"), "test"],
        cwd=REPO / "roles" / role, env=env, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
