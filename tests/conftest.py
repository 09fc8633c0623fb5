"""Shared test wiring."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible_collections.specfleet.fleet.plugins.module_utils import jetson_identity

REPO = Path(__file__).resolve().parents[1]
FIXTURE_UNITS = REPO / "tests" / "fixtures" / "units"


def load_module(name: str):
    """Import plugins/modules/<name>.py as a Python module."""
    spec = importlib.util.spec_from_file_location(name, REPO / "plugins" / "modules" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def unit_facts():
    """Facts of a fixture unit, as `specfleet facts --root` prints them."""

    def read(name: str) -> dict:
        return jetson_identity.read_unit(
            jetson_identity.paths_under(str(FIXTURE_UNITS / name))
        )

    return read


@pytest.fixture
def facts_file(tmp_path, unit_facts):
    def write(name: str) -> str:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(unit_facts(name)))
        return str(path)

    return write


LAB_INVENTORY = REPO / "inventory" / "lab"


def lab_hosts() -> dict[str, dict]:
    """Host -> variables of the lab inventory `lab up` wrote, from every group."""
    data = yaml.safe_load((LAB_INVENTORY / "hosts.yml").read_text())
    found: dict[str, dict] = {}

    def walk(group: dict) -> None:
        found.update(group.get("hosts") or {})
        for child in (group.get("children") or {}).values():
            walk(child or {})

    walk(data["all"])
    return found


def lab_vars() -> dict:
    """The variables `lab up` wrote for every lab unit (inventory/lab/group_vars/all.yml)."""
    return yaml.safe_load((LAB_INVENTORY / "group_vars" / "all.yml").read_text())


def on_unit(
    host: str, command: str, timeout: float = 120, stdin: str | bytes | None = None, text: bool = True
) -> subprocess.CompletedProcess:
    """Run a shell command on a lab unit over SSH (lab units get new host keys on every up).

    `stdin` feeds the command (a secret travels there, never on a command line); with
    `text=False` stdin and output are bytes."""
    unit = lab_hosts()[host]
    return subprocess.run(
        ["ssh", "-i", unit["ansible_ssh_private_key_file"], "-o", "StrictHostKeyChecking=no",
         "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes",
         "-o", "IdentitiesOnly=yes", f"root@{unit['ansible_host']}", command],
        input=stdin, capture_output=True, text=text, timeout=timeout, check=False,
    )


def plan_for(facts: dict, model: str, **overrides) -> dict:
    """The plan for one unit's facts and a catalog model under the policy with `overrides`."""
    from specfleet import policy
    from specfleet.catalog import load_catalog
    from specfleet.plan import plan_unit

    catalog = load_catalog()
    resolved = policy.resolve({"specfleet_model": model, **overrides}, catalog)
    return plan_unit("unit-1", facts, catalog.model(model), resolved, catalog)


LAB_PROFILE = "mixed"
LAB_UNITS = 9


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow lanes run after everything else (the order is otherwise kept): a failure in the
    default lane shows before the long runs start, and the slow lab modules find the lab
    already prepared and rolled out by the default lane's modules. Each still brings the
    lab to the state it needs itself (the fault matrix runs site.yml first): the order
    makes them shorter, and they pass in any order."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is not None)


@pytest.fixture(scope="session")
def fleet_lab():
    """A 9-unit mixed lab (eight Jetsons and a DGX Spark) for the tests that roll out onto units (Molecule reuses its
    Docker engine and unit image). Reuses a lab that is already up, and then leaves it up;
    otherwise brings one up (after clearing a degraded one) and takes it down at the end of
    the session."""
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (network namespaces, its own dockerd)")
    from specfleet_lab import lab
    from specfleet_lab.config import LabConfig

    cfg = LabConfig()
    health = lab.status(cfg)["lab"]
    started = health != "up" or not (cfg.inventory_dir / "hosts.yml").is_file()
    if started:
        if health != "down":
            # A lab left behind by a killed run or a reboot (its dockerd and namespaces gone,
            # its state file kept) cannot serve the tests: clear what is left of it first.
            lab.down(cfg)
        lab.up(cfg, LAB_PROFILE, LAB_UNITS)
    try:
        yield cfg
    finally:
        if started:
            lab.down(cfg)
