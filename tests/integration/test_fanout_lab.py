"""Fan-out on a small lab of stock units: real rsync over SSH between unit containers, as the
login user `nvidia` (sudo with a password, which rsync cannot answer), not root.

1. The role (playbooks/distribute.yml) distributes a store to every unit; every unit's
   live store verifies against the manifest (sha256 of every file) and the fleet key is
   gone afterwards.
2. The driver distributes a new version while a unit that already serves pieces loses
   its link mid-copy: the others still complete from other sources, and no unit (the
   dead one included) has a partial store live. The fleet key is gone from every unit
   but the dead one, which the result names; the next run removes it there first.
3. A unit without rrsync gets no fleet key at all (it would be a shell for every peer): it
   is served by the controller only and serves no peer; the others hold only confined
   keys of this run while it lasts, one per peer, each from that peer's address and
   expiring; afterwards every authorized_keys is as it was. A unit's private key taken to
   another unit is refused there (from=), while each unit's own key works.
4. The role's fan-out killed mid-copy (SIGKILL: the driver cleans nothing up): the role's
   `always` removes the fleet key from every unit, and no unit has a partial store live.
5. Prepare's model role (specfleet_hf_cache) fans a model that several units lack out unit to
   unit, and pushes from the controller what fewer units lack; a second run copies nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from specfleet_lab import engine, lab
from specfleet_lab.config import LabConfig

from specfleet import cache
from specfleet.fanout_run import Node, Options, Runner, key_lifetime, nodes_from_inventory
from tests.conftest import (
    FLEET_PROBE,
    fanout_record_task,
    fleet_leftovers,
    require_no_lab,
    trust_lab_host_keys,
    unavailable,
)

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
UNITS = int(os.environ.get("SPECFLEET_FANOUT_TEST_UNITS", "4"))
MBIT = 20.0
ROOT = "/var/lib/specfleet-fanout-test"
NAME = "models--test--fanout"


@pytest.fixture(scope="module")
def lab_units() -> Iterator[list[Node]]:
    if os.geteuid() != 0:
        unavailable("the lab needs root (network namespaces, its own dockerd, iptables)")
    if shutil.which("ip") is None or shutil.which("rsync") is None:
        unavailable("iproute2 or rsync is missing")
    cfg = LabConfig()
    require_no_lab(cfg)
    try:
        lab.up(cfg, "workshop", UNITS, MBIT, stock=True)
        trust_lab_host_keys()
        nodes = nodes_from_inventory(str(cfg.inventory_dir / "hosts.yml"))
        yield nodes
    finally:
        lab.down(cfg)


def make_store(base: Path, salt: bytes, blob_kib: int = 384) -> dict:
    repo = base / "hub" / NAME
    shutil.rmtree(repo, ignore_errors=True)
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / "main").mkdir(parents=True)
    for index in range(16):
        # 6 MiB in all by default; rsync cannot shortcut random bytes.
        (repo / "blobs" / f"b{index:02d}").write_bytes(salt + os.urandom(blob_kib * 1024 - len(salt)))
        os.symlink(f"../../blobs/b{index:02d}", repo / "snapshots" / "main" / f"shard-{index:02d}")
    (manifest,) = cache.write_manifests(base, "hub")
    return manifest


def ssh(node: Node, command: str, timeout: float = 60, stdin: str | None = None) -> subprocess.CompletedProcess:
    argv = ["ssh", "-p", str(node.port), "-l", node.user, "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
            *(["-i", node.key_file] if node.key_file else []), *node.ssh_args, node.host, command]
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)


VERIFY = r"""
import hashlib, json, os, sys
manifest = json.load(sys.stdin)
live = os.path.join(sys.argv[1], "hub", manifest["name"])
if not os.path.lexists(live):
    print(json.dumps({"live": None})); sys.exit()
real = os.path.realpath(live)
bad = []
for rel, entry in manifest["files"].items():
    path = os.path.join(real, rel)
    try:
        digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
    except OSError:
        digest = None
    if digest != entry["sha256"]:
        bad.append(rel)
for rel, target in manifest["symlinks"].items():
    path = os.path.join(real, rel)
    if not os.path.islink(path) or os.readlink(path) != target:
        bad.append(rel)
print(json.dumps({"live": os.path.basename(real), "bad": bad}))
"""


def live_state(node: Node, manifest: dict) -> dict:
    return live_state_at(node, manifest, ROOT)


def live_state_at(node: Node, manifest: dict, root: str) -> dict:
    """The unit's live copy of the manifest's store below ``root``: its version and every file
    that does not match (sha256, symlink targets)."""
    argv = ["ssh", "-p", str(node.port), "-l", node.user, "-o", "BatchMode=yes",
            *(["-i", node.key_file] if node.key_file else []), *node.ssh_args, node.host,
            f"python3 -c {shlex.quote(VERIFY)} {root}"]
    proc = subprocess.run(argv, input=json.dumps(manifest), capture_output=True, text=True, timeout=60,
                          check=True)
    return json.loads(proc.stdout)


def test_role_distributes_and_every_live_store_verifies(lab_units, tmp_path):
    store = tmp_path / "store"
    manifest = make_store(store, b"v1")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    proc = subprocess.run(
        [str(REPO / ".venv/bin/ansible-playbook"), "-i", str(REPO / "inventory/lab"),
         str(REPO / "playbooks/distribute.yml"),
         "-e", f"specfleet_fanout_store={store}", "-e", f"specfleet_fanout_name={NAME}",
         "-e", f"specfleet_fanout_root={ROOT}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    for node in lab_units:
        assert node.user == "nvidia", node
        state = live_state(node, manifest)
        assert state == {"live": manifest["id"], "bad": []}, node.name
        owners = ssh(node, f"stat -c %U {ROOT} {ROOT}/hub {ROOT}/hub/{NAME}/ {ROOT}/.specfleet").stdout.split()
        assert owners == ["nvidia"] * 4, (node.name, owners)
        left = ssh(node, "ls ~/.ssh; grep -c specfleet-fanout ~/.ssh/authorized_keys || true").stdout
        assert "specfleet_fanout" not in left.split() and left.strip().endswith("0"), left


def test_source_dies_mid_distribution(lab_units, tmp_path):
    cfg = LabConfig()
    store = tmp_path / "store"
    manifest = make_store(store, b"v2")
    killed: dict[str, str] = {}
    lock = threading.Lock()
    by_name = {n.name: n for n in lab_units}

    def port_of(name: str) -> str:
        return "sfv" + by_name[name].host.rsplit(".", 1)[1]

    def on_event(kind: str, data: dict) -> None:
        # The first unit that starts serving a peer loses its link (both directions).
        if kind == "start" and data["source"] != "controller":
            with lock:
                if killed:
                    return
                killed["name"] = data["source"]
            subprocess.run(["ip", "-n", cfg.bridge_netns, "link", "set", port_of(data["source"]), "down"],
                           check=True)

    options = Options(root=ROOT, subdir="hub", pieces=8, rsync_timeout=15)
    try:
        result = Runner(lab_units, store, manifest, options, on_event).run()
        dead = killed.get("name")
        # While its link is still down: the driver removed the key from every unit it reaches.
        for node in lab_units:
            if node.name != dead:
                assert fleet_entries(node) == [], node.name
    finally:
        if killed:
            subprocess.run(["ip", "-n", cfg.bridge_netns, "link", "set", port_of(killed["name"]), "up"],
                           check=True)
    assert killed, "no unit ever served a peer"
    assert result["units"][dead].startswith("dead"), result
    # The dead unit still holds this run's key, and the result says so and when it goes.
    assert list(result["fleet_key"]["may_remain"]) == [dead], result["fleet_key"]
    assert result["fleet_key"]["may_remain"][dead].endswith(f"removed at the start of the next run that reaches {dead}")
    # (an entry per peer, with the run's private key and peers' host keys the driver put there:
    # all of it goes then)
    assert [entry.split()[-1] for entry in fleet_entries(by_name[dead])] == [
        f"specfleet-fanout:{result['fleet_key']['run']}"] * (len(lab_units) - 1) + [
        "specfleet_fanout", "specfleet_fanout_known_hosts"]
    for name, status in result["units"].items():
        if name != dead:
            assert status == "live", result
    assert result["failures"] >= 1
    # Every unit: either the new version, verified in full, or the old one -- never partial.
    for node in lab_units:
        state = live_state(node, manifest)
        if node.name == dead:
            # The old version (from the test before) or the new one complete; a live
            # symlink only ever points at a copy promote verified in full.
            assert state["live"] != manifest["id"] or state["bad"] == [], state
        else:
            assert state == {"live": manifest["id"], "bad": []}, node.name


def fleet_entries(node: Node) -> list[str]:
    """The fleet key entries (any run) in the login user's authorized_keys, and a line per
    fleet key file left in ~/.ssh."""
    proc = ssh(node, FLEET_PROBE)
    assert proc.returncode == 0, proc.stderr
    return fleet_leftovers(proc.stdout)


# Seconds from now (the unit's clock) to an expiry-time value, read as sshd reads it: local time.
UNTIL = "import sys, time; print(time.mktime(time.strptime(sys.argv[1], '%Y%m%d%H%M%S')) - time.time())"


def check_fleet_entries(node: Node, entries: list[str], units: list[Node], run: str, lifetime: int) -> None:
    """``node``'s fleet key entries while the run lasts: one per other unit, each confined to
    rrsync, from that unit's address alone, and expiring ``lifetime`` from their install on
    ``node``'s clock (the test reads them within a few minutes of it)."""
    from ansible_collections.specfleet.fleet.plugins.module_utils import fleet_key

    peers = []
    expiries = set()
    for entry in entries:
        options, _, _, comment = fleet_key.split_entry(entry)
        assert comment == f"specfleet-fanout:{run}", entry
        assert options.startswith('restrict,expiry-time="'), entry
        assert options.endswith(f'rrsync -ro {ROOT}/.specfleet/serve"'), entry
        expiries.add(options.split('expiry-time="', 1)[1].split('"', 1)[0])
        peers.append(options.split('from="', 1)[1].split('"', 1)[0])
    assert sorted(peers) == sorted(unit.peer for unit in units if unit.name != node.name), (node.name, entries)
    (expiry,) = expiries
    left = float(ssh(node, f"python3 -c {shlex.quote(UNTIL)} {expiry}").stdout)
    assert lifetime - 300 < left <= lifetime + 1, (node.name, expiry, left, lifetime)


def authorized_keys(node: Node) -> str:
    """The login user's authorized_keys without fleet entries (what the run must leave as it is)."""
    from ansible_collections.specfleet.fleet.plugins.module_utils import fleet_key

    return fleet_key.without_fleet_entries(ssh(node, "cat ~/.ssh/authorized_keys").stdout)[0]


def test_the_next_run_removes_what_a_dead_unit_kept_first(lab_units, tmp_path):
    """After test_source_dies_mid_distribution: its dead unit's key goes at the next run's
    start (prepare), before any copy, even in push mode (which installs no key)."""
    store = tmp_path / "store"
    manifest = make_store(store, b"v2b")
    result = Runner(lab_units, store, manifest, Options(root=ROOT, subdir="hub", pieces=2, push=True)).run()
    assert result["ok"], result
    for node in lab_units:
        assert fleet_entries(node) == [], node.name


def test_unit_without_rrsync_gets_no_key_and_is_served_by_the_controller(lab_units, tmp_path):
    store = tmp_path / "store"
    manifest = make_store(store, b"v3")
    bare = lab_units[1]
    before = {node.name: authorized_keys(node) for node in lab_units}
    during: dict[str, list[str]] = {}

    def on_event(kind: str, data: dict) -> None:
        # Every unit is prepared (keys installed) and no copy has started yet.
        if kind == "prepared":
            for node in lab_units:
                during[node.name] = fleet_entries(node)

    cfg = LabConfig()

    def as_root(command: str) -> subprocess.CompletedProcess:
        # A stock unit takes no root login: the lab's engine runs the command in the unit.
        return engine.docker(cfg, ["exec", f"{cfg.prefix}-{bare.name}", "sh", "-c", command], check=False)

    hidden = as_root("mv /usr/bin/rrsync /usr/bin/rrsync.specfleet-test && ! command -v rrsync")
    assert hidden.returncode == 0, hidden.stderr
    try:
        assert ssh(bare, "command -v rrsync").returncode != 0  # not on the login user's PATH either
        runner = Runner(lab_units, store, manifest, Options(root=ROOT, subdir="hub", pieces=8, rsync_timeout=15),
                        on_event)
        result = runner.run()
    finally:
        as_root("mv /usr/bin/rrsync.specfleet-test /usr/bin/rrsync")
    assert all(status == "live" for status in result["units"].values()), result
    run = result["fleet_key"]["run"]
    # No fleet key on the unit without rrsync, not even the private one.
    assert during[bare.name] == [], during
    lifetime = key_lifetime(runner.opt, len(lab_units), runner.workers)
    for node in lab_units:
        if node.name == bare.name:
            continue
        entries = [entry for entry in during[node.name] if not entry.startswith("file ")]
        # The bare unit's public key too: its refusal is known only after the prepares, and its
        # private key never left the controller's run directory (it installed nothing).
        check_fleet_entries(node, entries, lab_units, run, lifetime)
        files = during[node.name][len(entries):]
        assert files == ["file specfleet_fanout", "file specfleet_fanout_known_hosts"], during[node.name]
    assert list(result["fleet_key"]["refused"]) == [bare.name]
    message = result["fleet_key"]["refused"][bare.name]
    assert message.startswith(f"{bare.name}: rrsync not found") and "/usr/bin/rrsync" in message
    starts = [e for e in runner.log if e["event"] == "start"]
    assert {e["source"] for e in starts if e["target"] == bare.name} == {"controller"}
    assert not [e for e in starts if e["source"] == bare.name]
    assert any(e["source"] not in ("controller", bare.name) for e in starts)  # the others still fan out
    # Afterwards: no fleet key anywhere, every authorized_keys exactly as before the run.
    assert result["fleet_key"]["may_remain"] == {}
    for node in lab_units:
        assert fleet_entries(node) == [], node.name
        assert ssh(node, "cat ~/.ssh/authorized_keys").stdout == before[node.name], node.name
        assert live_state(node, manifest) == {"live": manifest["id"], "bad": []}, node.name


STOLEN = "/tmp/specfleet-test-stolen-fleet-key"


def peer_login(unit: Node, key: str, peer: Node) -> subprocess.CompletedProcess:
    """On ``unit``: log in to ``peer`` as the fan-out does (its known_hosts, no multiplexing)
    with the private key file ``key`` on ``unit``. rrsync, the forced command, refuses `true`:
    only ssh's own 255 means the key itself was refused."""
    argv = ["ssh", "-i", key, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "ControlPath=none",
            "-o", "UserKnownHostsFile=~/.ssh/specfleet_fanout_known_hosts", "-o", "StrictHostKeyChecking=yes",
            "-o", "ConnectTimeout=5", "-p", str(peer.peer_port), "-l", peer.user, "--", peer.peer, "true"]
    return ssh(unit, shlex.join(argv))


def test_a_units_fleet_key_works_from_its_own_address_only(lab_units, tmp_path):
    """A key pair per unit, each authorized from its unit's address alone: B's private key taken
    to C does not open A, while C's own key does (same host, same command), and so does B's
    from B. Checked once every unit is prepared, before any copy."""
    store = tmp_path / "store"
    manifest = make_store(store, b"v3b", blob_kib=64)
    a, b, c = lab_units[:3]
    seen: dict[str, object] = {}

    def on_event(kind: str, data: dict) -> None:
        if kind != "prepared":
            return
        # Collected here, asserted after the run: an exception here would end the run.
        seen["entries"] = {node.name: fleet_entries(node) for node in lab_units}
        stolen = ssh(b, "cat ~/.ssh/specfleet_fanout").stdout
        seen["copied"] = ssh(c, f"umask 077 && cat > {STOLEN}", stdin=stolen).returncode
        seen["stolen"] = peer_login(c, STOLEN, a)
        seen["own"] = peer_login(c, "~/.ssh/specfleet_fanout", a)
        seen["owner"] = peer_login(b, "~/.ssh/specfleet_fanout", a)

    options = Options(root=ROOT, subdir="hub", pieces=4, rsync_timeout=15)
    runner = Runner(lab_units, store, manifest, options, on_event)
    try:
        result = runner.run()
    finally:
        ssh(c, f"rm -f {STOLEN}")
    assert result["ok"], result
    assert seen["copied"] == 0, seen
    stolen, own, owner = seen["stolen"], seen["own"], seen["owner"]
    assert stolen.returncode == 255 and "Permission denied (publickey" in stolen.stderr, stolen
    for allowed in (own, owner):
        assert allowed.returncode != 255 and "Permission denied" not in allowed.stderr, allowed
    lifetime = key_lifetime(options, len(lab_units), runner.workers)
    for node in lab_units:
        entries = [entry for entry in seen["entries"][node.name] if not entry.startswith("file ")]
        check_fleet_entries(node, entries, lab_units, result["fleet_key"]["run"], lifetime)
        assert fleet_entries(node) == [], node.name  # and the run removed them all


def processes(wanted: Callable[[list[str]], bool]) -> list[int]:
    """Processes whose argument list ``wanted`` accepts."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if wanted(argv):
            found.append(int(entry.name))
    return found


def with_descendants(pids: list[int]) -> list[int]:
    """``pids`` and every process below them (a killed driver's ssh and rsync children)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(parent, []).append(int(entry.name))
    found, queue = [], list(pids)
    while queue:
        pid = queue.pop()
        found.append(pid)
        queue += parents.get(pid, [])
    return found


def test_role_run_killed_mid_copy_leaves_no_fleet_key(lab_units, tmp_path):
    store = tmp_path / "store"
    manifest = make_store(store, b"v4", blob_kib=2048)  # 32 MiB: the copies outlast the polling
    temporary = Path(tempfile.gettempdir())  # where the driver makes its run's directory
    runs_before = set(temporary.glob("sf-fo-*"))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    log = tmp_path / "play.log"
    with log.open("w") as sink:
        play = subprocess.Popen(
            [str(REPO / ".venv/bin/ansible-playbook"), "-i", str(REPO / "inventory/lab"),
             str(REPO / "playbooks/distribute.yml"),
             "-e", f"specfleet_fanout_store={store}", "-e", f"specfleet_fanout_name={NAME}",
             "-e", f"specfleet_fanout_root={ROOT}"],
            cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT, text=True)

    def is_driver(argv: list[str]) -> bool:  # `specfleet distribute --store <this store> ...`
        return "distribute" in argv and "--store" in argv and str(store) in argv

    killed = []
    try:
        # Kill the driver once the fleet key is on a unit (copies are under way then), with its
        # ssh and rsync children and its ssh masters (daemons, not its children): a driver that
        # dies with its connections. (Its masters left running, a key install still in flight
        # on another unit can land after the role's removal: the next run removes it.)
        deadline = time.monotonic() + 300
        while not killed and time.monotonic() < deadline and play.poll() is None:
            if [entry for entry in fleet_entries(lab_units[0]) if not entry.startswith("file ")]:
                runs = set(temporary.glob("sf-fo-*")) - runs_before
                masters = processes(lambda argv, runs=runs: any(f"ControlPath={run}/" in arg
                                                                for run in runs for arg in argv))
                for pid in with_descendants(processes(is_driver)) + masters:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            time.sleep(0.2)
        play.wait(timeout=600)
    finally:
        if play.poll() is None:
            play.kill()
        # What the killed driver could not clean up on the controller: its ssh masters and
        # its temporary directory (the run's private key).
        for leftover in set(temporary.glob("sf-fo-*")) - runs_before:
            for pid in processes(lambda argv, d=leftover: any(f"ControlPath={d}/" in arg for arg in argv)):
                os.kill(pid, signal.SIGTERM)
            shutil.rmtree(leftover, ignore_errors=True)
    output = log.read_text()
    assert killed, "the fleet key never appeared on a unit"
    assert play.returncode != 0, output[-4000:]
    assert "Remove the fleet key from every unit that took part, whatever happened" in output, output[-4000:]
    for node in lab_units:
        assert fleet_entries(node) == [], (node.name, output[-3000:])
        state = live_state(node, manifest)
        # The new version verified in full, or what was live before: never a partial store.
        assert state["live"] != manifest["id"] or state["bad"] == [], (node.name, state)


HF_ROOT = "/var/lib/specfleet-hf-fanout-test"
HF_PLAY = """
- name: Prepare's model role, on its own
  hosts: all
  gather_facts: false
  become: true
  roles:
    - role: specfleet.fleet.specfleet_hf_cache
      vars:
        specfleet_hf_cache_store: {store}
        specfleet_hf_cache_dir: {root}
        specfleet_hf_cache_models: [test/fanout]
"""


def run_model_role(lab_units: list[Node], tmp_path: Path, store: Path, *extra: str) -> tuple[str, dict]:
    """The model role on every lab unit; (output, per unit: fanned models and fan-out results)."""
    out = tmp_path / f"out-{len(list(tmp_path.glob('out-*')))}"
    out.mkdir()
    playbook = tmp_path / "models.yml"
    playbook.write_text(HF_PLAY.format(store=store, root=HF_ROOT)
                        + fanout_record_task("specfleet_hf_cache_fanned | default(none)", out))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default"}
    proc = subprocess.run(
        [str(REPO / ".venv/bin/ansible-playbook"), "-i", str(REPO / "inventory/lab"), str(playbook), *extra],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return proc.stdout, {node.name: json.loads((out / f"{node.name}.json").read_text()) for node in lab_units}


def test_prepare_fans_a_model_several_units_lack_out_unit_to_unit(lab_units, tmp_path):
    store = tmp_path / "store"
    manifest = make_store(store, b"hf1")
    size = sum(int(entry["size"]) for entry in manifest["files"].values())

    # Every unit lacks it (more than specfleet_hf_cache_fanout_min_units, 3): one fan-out.
    _, seen = run_model_role(lab_units, tmp_path, store)
    (run_json,) = seen[lab_units[0].name]["runs"]
    run = json.loads(run_json)
    assert run["mode"] == "fanout" and run["units"] == {node.name: "live" for node in lab_units}, run
    # The controller sent each piece at least once and less than a push would (one copy per
    # unit); the units sent the rest to each other.
    assert size <= run["bytes_from"]["controller"] < len(lab_units) * size, run["bytes_from"]
    assert run["bytes_from"]["controller"] + run["bytes_from"]["peers"] == len(lab_units) * size, run
    for node in lab_units:
        assert seen[node.name]["fanned"] == ["test/fanout"], (node.name, seen[node.name])
        assert live_state_at(node, manifest, HF_ROOT) == {"live": manifest["id"], "bad": []}, node.name
        assert fleet_entries(node) == [], node.name

    # A second run: nothing lacks it, so the role's question ends it there (the copy tasks, which
    # note what was fanned, are not even included): no fan-out, nothing changes.
    output, seen = run_model_role(lab_units, tmp_path, store)
    assert all(state == {"fanned": None, "runs": []} for state in seen.values()), seen
    recap = output.split("PLAY RECAP")[-1]
    assert "changed=0" in recap and "changed=1" not in recap and "failed=0" in recap, recap

    # A new version that fewer units than the minimum lack: the controller copies it to each.
    manifest = make_store(store, b"hf2")
    output, seen = run_model_role(lab_units, tmp_path, store,
                                  "-e", f"specfleet_hf_cache_fanout_min_units={len(lab_units) + 1}")
    assert all(state == {"fanned": [], "runs": []} for state in seen.values()), seen
    assert "Copy what is missing into each model's staging directory" in output
    for node in lab_units:
        assert live_state_at(node, manifest, HF_ROOT) == {"live": manifest["id"], "bad": []}, node.name


def test_units_on_ssh_port_2222_copy_unit_to_unit_with_host_keys_checked(lab_units, tmp_path):
    """Every unit's sshd also listens on 2222, and the inventory says so (ansible_port, which
    peers use too): the controller writes each peer's host key as `[addr]:2222`, the name ssh
    looks a unit on another port up by, and the units' copies between them (StrictHostKeyChecking
    yes, that known_hosts only) all succeed; nothing is served by the controller alone."""
    cfg = LabConfig()

    def in_unit(node: Node, *argv: str) -> None:
        # As root inside the unit: a stock unit's login is `nvidia`, whose sudo asks a password.
        engine.docker(cfg, ["exec", f"{cfg.prefix}-{node.name}", *argv])

    for node in lab_units:
        in_unit(node, "/usr/sbin/sshd", "-p", "2222", "-o", "PidFile=/run/sshd-2222.pid")
    try:
        moved = [dataclasses.replace(node, port=2222, peer_port=2222) for node in lab_units]
        assert {node.known_hosts_name() for node in moved} == {f"[{node.peer}]:2222" for node in moved}
        store = tmp_path / "store"
        manifest = make_store(store, b"v2222")
        # A root the login owns (ROOT is made by the module's role tests, which become root).
        root = "/tmp/specfleet-fanout-2222"
        result = Runner(moved, store, manifest, Options(root=root, subdir="hub", pieces=8)).run()
        assert result["ok"] and result["failures"] == 0, json.dumps(result)[:6000]
        assert result["bytes_from"]["peers"] > 0, result
        for node in moved:
            assert live_state_at(node, manifest, root) == {"live": manifest["id"], "bad": []}, node.name
    finally:
        for node in lab_units:
            in_unit(node, "sh", "-c", "kill $(cat /run/sshd-2222.pid)")


def ssh_dir(node: Node) -> str:
    """The login user's ~/.ssh: every file but a socket (name, size, time) and authorized_keys.
    An earlier fan-out's ssh control sockets (ControlPersist) go away on their own, and the
    folder's time with them."""
    return ssh(node, "find ~/.ssh -mindepth 1 ! -type s -printf '%y %f %s %T@\\n' | sort; "
                     "cat ~/.ssh/authorized_keys").stdout


def inventory_hosts_map(inventory: dict) -> dict:
    """The first ``hosts`` map of an inventory document (the lab's units)."""
    stack = [inventory]
    while stack:
        found = stack.pop()
        if isinstance(found, dict):
            if isinstance(found.get("hosts"), dict) and found["hosts"]:
                return found["hosts"]
            stack.extend(found.values())
    raise AssertionError("no hosts in the lab's inventory")


@pytest.mark.parametrize("hostile", ["host-name", "ansible-host"])
def test_a_host_name_or_address_that_is_an_ssh_option_reaches_no_unit(lab_units, tmp_path, hostile):
    """The lab's own inventory with one entry made hostile (a host named `-oProxyCommand=...`,
    or a real unit's ansible_host set to it): distribute, hostkeys and status refuse it before
    ssh runs; the ProxyCommand's file is not created and no unit is touched."""
    cfg = LabConfig()
    document = yaml.safe_load((cfg.inventory_dir / "hosts.yml").read_text())
    hosts = inventory_hosts_map(document)
    marker = tmp_path / "pwned"
    victim = next(iter(hosts))
    if hostile == "host-name":
        hosts[f"-oProxyCommand=touch {marker}"] = dict(hosts[victim])
    else:
        hosts[victim] = {**hosts[victim], "ansible_host": f"-oProxyCommand=touch {marker}"}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump(document))
    store = tmp_path / "store"
    make_store(store, b"hostile")
    before = {node.name: ssh_dir(node) for node in lab_units}
    commands = {"distribute": ["--store", str(store), "--name", NAME, "--root", ROOT],
                "hostkeys": [], "status": ["--timeout", "5"]}
    for command, extra in commands.items():
        result = subprocess.run([str(REPO / ".venv/bin/specfleet"), command, "-i", str(inventory), *extra],
                                cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
        assert result.returncode == 2, (command, result.stdout[-2000:], result.stderr[-2000:])
        complaint = result.stderr.strip().splitlines()[-1]
        variable = "inventory_hostname" if hostile == "host-name" else "ansible_host"
        assert variable in complaint and "Traceback" not in result.stderr, (command, result.stderr)
        assert not marker.exists(), command
    assert {node.name: ssh_dir(node) for node in lab_units} == before
