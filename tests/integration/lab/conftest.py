"""Fixtures for the lab integration tests: one small lab for the whole module.

The lab needs root (namespaces, its own dockerd, iptables); without root every lab test
is skipped with that reason. A lab that is already up is never touched: the tests skip
(fail where CI=true) rather than take down someone's lab. What a killed run or a reboot
left (a state file, nothing of it running) is cleared first.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from labtools import snapshot
from specfleet_lab import lab
from specfleet_lab.config import LabConfig

from tests.conftest import require_no_lab, trust_lab_host_keys, unavailable

LAB_UNITS = int(os.environ.get("SPECFLEET_LAB_TEST_UNITS", "3"))


@pytest.fixture(scope="session")
def cfg() -> LabConfig:
    return LabConfig()


@pytest.fixture(scope="module")
def running_lab(cfg: LabConfig) -> Iterator[dict]:
    if os.geteuid() != 0:
        unavailable("the lab needs root (network namespaces, its own dockerd, iptables)")
    if shutil.which("ip") is None:
        unavailable("iproute2 is missing")
    require_no_lab(cfg)
    before = snapshot()
    result = lab.up(cfg, "mixed", LAB_UNITS)
    # The inventory checks host keys; the lab leaves collecting them to the toolkit.
    trust_lab_host_keys()
    info = {"before": before, "up": result, "status": lab.status(cfg)}
    try:
        yield info
    finally:
        lab.down(cfg)  # idempotent: the last test has normally done it already


@pytest.fixture(scope="session")
def ansible_bin() -> Path:
    """The `ansible` of the venv the tests run in: the locked one (requirements/dev.txt)."""
    return Path(sys.executable).parent / "ansible"
