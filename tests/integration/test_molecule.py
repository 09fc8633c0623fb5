"""Every role's Molecule scenario (docker driver, the lab's unit image, no pulls, no network):
destroy, syntax, create, prepare, check, converge, idempotence, verify, destroy.

The scenarios run side by side, a few at a time: each has its own container
(specfleet-molecule-<role>) and Molecule's ephemeral directory of its own role, and a scenario
spends most of its time in ansible-playbook's start-up and in its container's apt, so three at
once take about half as long as one after another on two cores."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
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
# Three at a time. tests/molecule/base.yml turns molecule's prerun off: it would install the
# collection into the one ~/.ansible/collections for every scenario at once ("Directory not
# empty"), and the scenarios read the checkout's collection through ANSIBLE_COLLECTIONS_PATH.
SIDE_BY_SIDE = 3
SCENARIO_TIMEOUT_S = 1500


def run_scenario(fleet_lab, role: str) -> subprocess.CompletedProcess:
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
    return subprocess.run(
        [str(Path(sys.executable).with_name("molecule")), "-c", str(REPO / "tests/molecule/base.yml"), "test"],
        cwd=REPO / "roles" / role, env=env, capture_output=True, text=True, timeout=SCENARIO_TIMEOUT_S,
    )


class Scenarios:
    """Scenarios started SIDE_BY_SIDE at a time, each once."""

    def __init__(self, fleet_lab, pool: ThreadPoolExecutor) -> None:
        self._lab, self._pool = fleet_lab, pool
        self._runs: dict[str, Future] = {}

    def result(self, upcoming: list[str]) -> subprocess.CompletedProcess:
        """Start the scenarios of this test and of the ones right after it (the pool runs a few at
        a time, in this order); the first one's result."""
        for role in upcoming:
            if role not in self._runs:
                self._runs[role] = self._pool.submit(run_scenario, self._lab, role)
        return self._runs[upcoming[0]].result()


@pytest.fixture(scope="module")
def scenarios(fleet_lab) -> Iterator[Scenarios]:
    pool = ThreadPoolExecutor(max_workers=SIDE_BY_SIDE)
    try:
        yield Scenarios(fleet_lab, pool)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def upcoming_roles(request: pytest.FixtureRequest) -> list[str]:
    """This test's role and those of the Molecule tests that run right after it (the slow lane's
    come at the end of the session, after other modules: they start at their own turn)."""
    items = request.session.items
    roles = []
    for item in items[items.index(request.node):]:
        if getattr(item, "originalname", None) != "test_molecule_scenario":
            break
        roles.append(item.callspec.params["role"])
    return roles


@pytest.mark.molecule
@pytest.mark.parametrize("role", ROLES)
def test_molecule_scenario(scenarios, request, role):
    result = scenarios.result(upcoming_roles(request))
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
