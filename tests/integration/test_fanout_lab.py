"""Fan-out on a small lab of stock units: real rsync over SSH between unit containers, as the
login user `nvidia` (sudo with a password, which rsync cannot answer), not root.

1. The role (playbooks/distribute.yml) distributes a store to every unit; every unit's
   live store verifies against the manifest (sha256 of every file) and the fleet key is
   gone afterwards.
2. The driver distributes a new version while a unit that already serves pieces loses
   its link mid-copy: the others still complete from other sources, and no unit (the
   dead one included) has a partial store live.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from specfleet_lab import lab
from specfleet_lab.config import LabConfig

from specfleet import cache
from specfleet.fanout_run import Node, Options, Runner, nodes_from_inventory
from tests.conftest import require_no_lab, trust_lab_host_keys, unavailable

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


def make_store(base: Path, salt: bytes) -> dict:
    repo = base / "hub" / NAME
    shutil.rmtree(repo, ignore_errors=True)
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / "main").mkdir(parents=True)
    for index in range(16):
        # 6 MiB in all; rsync cannot shortcut random bytes.
        (repo / "blobs" / f"b{index:02d}").write_bytes(salt + os.urandom(384 * 1024 - len(salt)))
        os.symlink(f"../../blobs/b{index:02d}", repo / "snapshots" / "main" / f"shard-{index:02d}")
    (manifest,) = cache.write_manifests(base, "hub")
    return manifest


def ssh(node: Node, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
    argv = ["ssh", "-p", str(node.port), "-l", node.user, "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
            *(["-i", node.key_file] if node.key_file else []), *node.ssh_args, node.host, command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


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
    argv = ["ssh", "-p", str(node.port), "-l", node.user, "-o", "BatchMode=yes",
            *(["-i", node.key_file] if node.key_file else []), *node.ssh_args, node.host,
            f"python3 -c {shlex.quote(VERIFY)} {ROOT}"]
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
         "-e", f"specfleet_fanout_root={ROOT}", "-e", f"specfleet_fanout_key_file={tmp_path}/fleet_key"],
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

    options = Options(root=ROOT, subdir="hub", pieces=8,
                      key_file=tmp_path / "fleet_key", rsync_timeout=15)
    try:
        result = Runner(lab_units, store, manifest, options, on_event).run()
    finally:
        if killed:
            subprocess.run(["ip", "-n", cfg.bridge_netns, "link", "set", port_of(killed["name"]), "up"],
                           check=True)
    assert killed, "no unit ever served a peer"
    dead = killed["name"]
    assert result["units"][dead].startswith("dead"), result
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
