"""Shared test wiring."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible_collections.specfleet.fleet.plugins.module_utils import dockerd_config, jetson_identity

REPO = Path(__file__).resolve().parents[1]
FIXTURE_UNITS = REPO / "tests" / "fixtures" / "units"
# Tests read Ansible's own task lines (TASK [...], changed:, fatal:), which the quiet console
# (ansible.cfg's stdout callback) leaves out; it is tested on its own (test_console_callback)
# and on the README's main command (test_scripts_up), which take this out of their environment.
CONSOLE_FULL = "SPECFLEET_CONSOLE_FULL"
# Unit records a lab rollout wrote (a Thor reverted on the chat check, two AGX Orins kept), read
# with specfleet.runs.load_run by the report, comparison and visual tests.
RECORDED_RUN = REPO / "tests" / "fixtures" / "runs" / "lab-rollout"
os.environ.setdefault(CONSOLE_FULL, "1")


def unavailable(reason: str) -> None:
    """A test that cannot get what it needs (root, the lab, a browser): skipped on a developer's
    machine, failed where CI=true, so CI never passes on tests it did not run."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI needs this test to run: {reason}")
    pytest.skip(reason)


def own_message(stderr: str) -> str:
    """A command's own message on stderr: its last line. A library it imports may print before
    it (a deprecation warning); what the command says is what it says last."""
    lines = stderr.strip().splitlines()
    return lines[-1] if lines else ""


def require_no_lab(cfg) -> None:
    """Before a test brings up its own lab: what a killed run or a reboot left (a state file,
    nothing of it running; CI's machine may start with one) is cleared; a lab with anything
    alive is someone's and is never touched: the test is unavailable."""
    from specfleet_lab import lab

    status = lab.status(cfg)
    if lab.is_leftover(status):
        lab.down(cfg)
    elif status["lab"] != "down":
        unavailable("a lab is already up; run `specfleet lab down` before the lab tests")


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


# On a unit: the HTTP status of its vLLM's GET /v1/models, with the headers given on stdin.
MODELS_STATUS = "curl -s -o /dev/null -w '%{http_code}' -H @- http://127.0.0.1:8000/v1/models"


def lab_api_key() -> str:
    """The API key the lab's first run generated (specfleet.event_key), read as a user does:
    ansible-vault view of inventory/lab/.specfleet/api_key.yml (the lab's vault id)."""
    from specfleet import event_key

    return _viewed_api_key(event_key.key_file(LAB_INVENTORY).read_bytes())


@functools.lru_cache(maxsize=4)
def _viewed_api_key(vaulted: bytes) -> str:
    """One ansible-vault run per key file content: tests poll units with the key in loops."""
    from specfleet import event_key

    viewed = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-vault")), "view", str(event_key.key_file(LAB_INVENTORY))],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )
    assert viewed.returncode == 0, f"the lab's API key: {viewed.stderr.strip()}"
    return yaml.safe_load(viewed.stdout)[event_key.KEY_VARIABLE]


def unit_models(host: str, path: str = "/v1/models") -> subprocess.CompletedProcess:
    """GET the unit's vLLM ``path`` with the lab's API key (sent on stdin, never on a command
    line); the unit serves when it returns 0 (curl -f)."""
    return on_unit(host, f"curl -sf -H @- http://127.0.0.1:8000{path}",
                   stdin=f"Authorization: Bearer {lab_api_key()}\n")


# What a fan-out may leave on a unit: fleet key entries (any run) in the login user's
# authorized_keys and key files in ~/.ssh. FLEET_PROBE prints both; fleet_leftovers reads its output.
FLEET_PROBE = "cat ~/.ssh/authorized_keys 2>/dev/null; echo '--- ls'; ls -1 ~/.ssh"


def fleet_leftovers(probe_output: str) -> list[str]:
    """Each fleet key entry of FLEET_PROBE's output, and ``file NAME`` per fleet key file."""
    from ansible_collections.specfleet.fleet.plugins.module_utils import fleet_key

    authorized, listing = probe_output.split("--- ls\n", 1)
    entries = [line for line in authorized.splitlines() if fleet_key.fleet_run(line) is not None]
    return entries + [f"file {name}" for name in listing.split() if name.startswith("specfleet_fanout")]


def fanout_record_task(fanned: str, out: Path) -> str:
    """The post task of a test's own play around one prepare role: per host, what came unit to
    unit (the expression ``fanned``) and the fan-outs' results, as JSON in ``out``/<host>.json."""
    return f"""  post_tasks:
    - name: Record what came unit to unit, and the fan-outs' results
      ansible.builtin.copy:
        content: >-
          {{{{ {{'fanned': {fanned},
                'runs': specfleet_fanout_runs.results | default([]) | map(attribute='stdout') | list}}
             | to_json }}}}
        dest: "{out}/{{{{ inventory_hostname }}}}.json"
        mode: "0644"
      delegate_to: localhost
      become: false
      changed_when: false  # the test's own record: the recap counts the role's changes alone
"""


def _lab_playbook_argv(name: str, *extra: str) -> list[str]:
    return [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(LAB_INVENTORY), f"playbooks/{name}",
            *extra]


def lab_playbook(name: str, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`ansible-playbook -i inventory/lab playbooks/<name> ...` from the checkout, as a user runs it."""
    return subprocess.run(
        _lab_playbook_argv(name, *extra),
        cwd=REPO, capture_output=True, text=True, timeout=3600,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", **(env or {})},
    )


def start_lab_playbook(name: str, *extra: str, env: dict | None = None, output: Path) -> subprocess.Popen:
    """`lab_playbook`, started and not waited for, in a process group of its own (a test kills the
    whole run, its forks and SSH connections with it, as a user's Ctrl-C or a dead laptop would),
    its output into the file ``output``."""
    with output.open("w") as handle:
        return subprocess.Popen(
            _lab_playbook_argv(name, *extra), cwd=REPO, stdout=handle, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "ANSIBLE_NOCOLOR": "1", **(env or {})}, start_new_session=True,
        )


def kill_when(run: subprocess.Popen, output: Path, reached: Callable[[], Any], within: float, what: str) -> Any:
    """Poll ``reached`` (every 0.5 s) until it returns something true, while the playbook ``run``
    (start_lab_playbook, its output in ``output``) goes on; then SIGKILL the run's process group,
    as a controller that dies, and return what ``reached`` returned. Fails naming ``what`` when the
    run ends first or ``within`` seconds pass; the run is killed either way."""
    try:
        deadline = time.monotonic() + within
        while not (found := reached()):
            assert run.poll() is None, f"the run ended before {what}:\n{output.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"never reached: {what}"
            time.sleep(0.5)
        return found
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=60)


def recap(output: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP counters per host."""
    return {host: {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", fields)}
            for host, fields in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output, re.MULTILINE)}


def changed_tasks(output: str) -> list[str]:
    """'TASK name: host' for each task the default callback reported as changed, to name them in
    an idempotence assertion's message."""
    found, task = [], "?"
    for line in output.splitlines():
        if line.startswith("TASK ["):
            task = line[len("TASK ["):].split("]", 1)[0]
        elif line.startswith("changed: ["):
            found.append(f"{task}: {line[len('changed: ['):].split(']', 1)[0]}")
    return found


def serving_options(host: str) -> tuple[str, str]:
    """The options file of the serving the unit's record says it runs, and its text as the
    running trtllm-serve was started with it (the path is on its command line)."""
    from specfleet import serving

    current = json.loads(on_unit(host, "cat /var/lib/specfleet/release.json").stdout)["current"]
    (path,) = serving.files(current)
    args = json.loads(on_unit(host, "docker inspect -f '{{json .Args}}' specfleet-vllm").stdout)
    assert path in args, (path, args)
    return path, on_unit(host, f"docker exec specfleet-vllm cat {path}").stdout


def trust_lab_host_keys() -> None:
    """`specfleet hostkeys -i inventory/lab`, as an organiser collects a fleet's host keys:
    the lab inventory checks them (lab/build/known_hosts, under each unit's name), and a unit
    keeps its keys across `lab up`, so a second call finds every unit known."""
    proc = subprocess.run([sys.executable, "-m", "specfleet.cli", "hostkeys", "-i", "inventory/lab"], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def plan_for(facts: dict, model: str, **overrides) -> dict:
    """The plan for one unit's facts and a catalog model under the policy with `overrides`."""
    from specfleet import policy
    from specfleet.catalog import load_catalog
    from specfleet.plan import plan_unit

    catalog = load_catalog()
    resolved = policy.resolve({"specfleet_model": model, **overrides}, catalog)
    return plan_unit("unit-1", facts, catalog.model(model), resolved, catalog)


# What the gate decides on each kind of the mixed lab, as the emulator's model makes them (ratios
# with speculation: code edits at c=1 / c=8, chat at c=1; noiseless figures of
# lab/emulator/vllm_emulator/perfmodel.py): AGX Orin, BF16 + EAGLE-3 k=3, 1.81 / 1.53 / 2.27:
# kept. Thor, FP4 + EAGLE-3 k=5, 1.69 / 1.49 / 2.06 (the head's published chat acceptance):
# kept. Orin NX, FP4 + draft
# model k=3, 1.32 / 1.14 / 0.83, and Orin Nano, n-gram, below 1.1: reverted. The DGX Spark's
# EAGLE-3 head on TensorRT-LLM costs more than it saves: reverted. Far from every threshold, so
# a lab test can assert them.
LAB_DECISIONS = {"thor": "kept", "agxorin": "kept", "orinnx": "reverted", "orinnano": "reverted",
                 "spark": "reverted"}


def lab_decision(host: str) -> str:
    """The decision the gate takes on a lab unit of the mixed profile (LAB_DECISIONS)."""
    return LAB_DECISIONS[host.split("-", 1)[0]]


LAB_GROUP = "lab"  # the xdist scope (one worker's unit of work) of the modules that drive the lab
LAB_PROFILE = "mixed"
LAB_UNITS = 9


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow lanes run after everything else (the order is otherwise kept): a failure in the
    default lane shows before the long runs start, and the slow lab modules find the lab
    already prepared and rolled out by the default lane's modules; those on the mixed lab
    (fleet_lab) come before those that take it down for a lab of their own. Each still brings
    the lab to the state it needs itself (the fault matrix runs site.yml first): the order
    makes them shorter, and they pass in any order."""

    def position(item: pytest.Item) -> tuple[int, int]:
        if item.get_closest_marker("slow") is None:
            return (0, 0)
        return (1, 0 if "fleet_lab" in getattr(item, "fixturenames", ()) else 1)

    items.sort(key=position)


@functools.cache
def drives_the_lab(module_path: str) -> bool:
    """Whether a test module (a path from the rootdir, as in node ids) drives the lab: marked
    `lab` (or `molecule`, whose scenarios run on the lab's Docker engine) in its source, which
    is where every module of this suite marks it (pytestmark or a decorator)."""
    source = (REPO / module_path).read_text()
    return "pytest.mark.lab" in source or "pytest.mark.molecule" in source


@pytest.hookimpl(optionalhook=True)  # pytest without xdist (-p no:xdist) has no such hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """There is one lab per machine (its dockerd, namespaces and state file): under pytest-xdist
    (scripts/test runs two workers) every module that drives it goes to one worker as one unit
    of work, in the order pytest_collection_modifyitems gives, and the other modules run on the
    other worker meanwhile (the lab's tests mostly wait on units: about half the CPU idles).
    A scheduler of our own: xdist's `loadgroup` marks node ids in a way pytest 9 no longer reads."""
    from xdist.scheduler import LoadScopeScheduling

    class LabOnOneWorker(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return LAB_GROUP if drives_the_lab(module) else module

    return LabOnOneWorker(config, log)


@pytest.fixture(scope="session")
def lab_session():
    """The lab's configuration for the session, and at its end: the lab goes down again when
    the tests brought one up (a lab that was up before, as the tests want it, stays up)."""
    if os.geteuid() != 0:
        unavailable("the lab needs root (network namespaces, its own dockerd)")
    from specfleet_lab import lab
    from specfleet_lab.config import LabConfig

    cfg = LabConfig()
    brought_up: list[bool] = []
    yield cfg, brought_up
    if brought_up:
        lab.down(cfg)


@pytest.fixture(scope="module")
def fleet_lab(lab_session):
    """A 9-unit mixed lab (eight Jetsons and a DGX Spark, root login) for the tests that roll
    out onto units (Molecule reuses its Docker engine and images), its host keys trusted.
    Per module: a module that needs another lab (the stock units, scripts/up) takes this one
    down, and the next module brings it back. A lab that is not this one (another profile,
    stock units, or degraded: a killed run's or a reboot's state file, its dockerd gone) is
    cleared first."""
    from specfleet_lab import lab

    cfg, brought_up = lab_session
    status = lab.status(cfg)
    wanted = (status["lab"] == "up" and status.get("profile") == LAB_PROFILE and not status.get("stock")
              and len(status["units"]) == LAB_UNITS and (cfg.inventory_dir / "hosts.yml").is_file())
    if not wanted:
        if status["lab"] != "down":
            lab.down(cfg)
        lab.up(cfg, LAB_PROFILE, LAB_UNITS)
        brought_up.append(True)
    trust_lab_host_keys()
    return cfg


@pytest.fixture
def stand_in_dockerd(tmp_path, monkeypatch):
    """A `sleep` taken for dockerd (by dockerd_config_state and unit_state's dockerd check), its
    pidfile, and daemon.json written before it started (comfortably more than the clock ticks
    the comparison can be off by). Yields ({path, pidfile}, the process)."""
    config = tmp_path / "daemon.json"
    config.write_text("{}\n")
    time.sleep(0.2)
    process = subprocess.Popen(["sleep", "60"])
    pidfile = tmp_path / "docker.pid"
    pidfile.write_text(f"{process.pid}\n")
    monkeypatch.setattr(dockerd_config, "DOCKERD_COMM", "sleep")
    yield {"path": str(config), "pidfile": str(pidfile)}, process
    process.kill()
    process.wait()
