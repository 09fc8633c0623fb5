"""An emulated unit's page-cache bookkeeping: the EMULATED sysctl wrapper and boot step
(lab/images/unit/rootfs/usr/lib/specfleet-lab/specfleet-lab-page-cache, run as subprocesses
against a scratch root through SPECFLEET_LAB_PAGE_CACHE_ROOT, with a stand-in for the real
/usr/sbin/sysctl there), its place in both unit images, the init, the runtime shim's
read-write mount, and the chain to the vLLM emulator's count. No lab needed."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from specfleet_lab import images

REPO = Path(__file__).resolve().parents[3]
IMAGES = REPO / "lab" / "images"
STAND_IN_PATH = "/" + images.PAGE_CACHE_REL
STAND_IN = IMAGES / "unit" / "rootfs" / images.PAGE_CACHE_REL
INIT = IMAGES / "unit" / "rootfs" / "usr" / "local" / "sbin" / "specfleet-lab-init"
SHIM = IMAGES / "nvidia-container-toolkit" / "files" / "usr" / "bin" / "nvidia-container-runtime"
STATE = "etc/specfleet-lab/page-cache"

sys.path.insert(0, str(REPO / "lab" / "emulator"))
from vllm_emulator.pagecache import DEFAULT_PAGE_CACHE_DIR, load_page_cache, parse_drop  # noqa: E402

# The real sysctl, as far as the wrapper can tell: it echoes each setting as procps does
# ("vm.drop_caches = 3"), notes its arguments, and fails like a non-root write when asked.
FAKE_SYSCTL = """#!/bin/sh
printf '%s\\n' "$@" > "$(dirname "$0")/sysctl.args"
if [ -n "$FAKE_SYSCTL_DENY" ]; then
    echo 'sysctl: permission denied on key "vm.drop_caches"' >&2
    exit 255
fi
for arg in "$@"; do
    case "$arg" in *=*) echo "${arg%%=*} = ${arg#*=}" ;; esac
done
"""


def load_script(path: Path, name: str) -> ModuleType:
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


class UnitRoot:
    """A scratch unit: the stand-in run as `sysctl` (a link by that name, as the image's copy
    at /usr/local/sbin/sysctl is named) and a fake real sysctl at usr/sbin/sysctl."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "usr" / "local" / "sbin").mkdir(parents=True)
        (root / "usr" / "local" / "sbin" / "sysctl").symlink_to(STAND_IN)
        real = root / "usr" / "sbin" / "sysctl"
        real.parent.mkdir(parents=True)
        real.write_text(FAKE_SYSCTL)
        real.chmod(0o755)
        self.state = root / STATE

    def run(self, command: str, *args: str, deny: bool = False) -> subprocess.CompletedProcess[str]:
        exe = str(STAND_IN) if command == "self" else str(self.root / "usr" / "local" / "sbin" / command)
        env = {"PATH": "/usr/bin:/bin", "SPECFLEET_LAB_PAGE_CACHE_ROOT": str(self.root)}
        if deny:
            env["FAKE_SYSCTL_DENY"] = "1"
        return subprocess.run([exe, *args], env=env, capture_output=True, text=True, check=False, timeout=30)

    def real_args(self) -> list[str]:
        return (self.root / "usr" / "sbin" / "sysctl.args").read_text().splitlines()

    def dropped(self) -> dict[str, Any] | None:
        path = self.state / "dropped.json"
        return json.loads(path.read_text()) if path.exists() else None


@pytest.fixture()
def unit(tmp_path: Path) -> UnitRoot:
    return UnitRoot(tmp_path / "unit")


# ---- which sysctl calls are drops --------------------------------------------------------------
@pytest.mark.parametrize(("args", "value"), [
    (["-w", "vm.drop_caches=3"], 3),
    (["vm.drop_caches=1"], 1),  # procps writes any key=value, -w or not
    (["-q", "-w", "vm/drop_caches=3"], 3),
    (["-w", "vm.drop_caches= 3"], 3),
    (["-w", "vm.drop_caches=2"], None),  # dentries and inodes only: the page cache stays
    (["-w", "vm.drop_caches=4"], None),
    (["vm.drop_caches"], None),  # a read
    (["-w", "vm.swappiness=3"], None),
    (["-p", "/etc/sysctl.d/drop.conf"], None),  # from a file: not parsed
    (["--system"], None),
    ([], None),
])
def test_which_arguments_drop_the_page_cache(args, value):
    script = load_script(STAND_IN, "specfleet_lab_page_cache_under_test")
    assert script.drop_request(args) == value


# ---- the wrapper against a scratch root ---------------------------------------------------------
def test_a_drop_runs_the_real_sysctl_and_is_recorded(unit):
    before = time.time_ns()
    proc = unit.run("sysctl", "-w", "vm.drop_caches=3")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "vm.drop_caches = 3\n", "")
    assert unit.real_args() == ["-w", "vm.drop_caches=3"]
    record = unit.dropped()
    assert record is not None and record["emulated"] is True and record["drop_caches"] == 3
    assert before <= record["dropped_at_ns"] <= time.time_ns()
    assert parse_drop(record).reason == "sysctl vm.drop_caches=3"
    assert stat.S_IMODE((unit.state / "reads").stat().st_mode) == 0o1777


@pytest.mark.parametrize("args", [("-w", "vm.drop_caches=2"), ("vm.drop_caches",), ("-w", "vm.swappiness=10")])
def test_other_calls_pass_through_and_record_nothing(unit, args):
    proc = unit.run("sysctl", *args)
    assert proc.returncode == 0 and unit.real_args() == list(args)
    assert unit.dropped() is None


def test_a_failed_drop_is_no_drop(unit):
    # Not root: the real sysctl refuses, the cache stays; its status and message come through.
    proc = unit.run("sysctl", "-w", "vm.drop_caches=3", deny=True)
    assert proc.returncode == 255 and "permission denied" in proc.stderr
    assert unit.dropped() is None


def test_boot_empties_the_cache_and_a_drop_keeps_only_later_reads(unit):
    assert "EMULATED page cache emptied" in unit.run("self", "boot").stdout
    boot = unit.dropped()
    assert boot is not None and boot["reason"] == "boot"
    reads = unit.state / "reads"
    # A server read after the boot; another one's record is stamped after the coming drop
    # (it read while the drop ran): the drop removes the first, which it emptied, only.
    old, late = reads / "1-old.json", reads / "2-late.json"
    old.write_text(json.dumps({"read_at_ns": boot["dropped_at_ns"] + 1, "models": []}))
    late.write_text(json.dumps({"read_at_ns": time.time_ns() + 3_600_000_000_000, "models": []}))
    (reads / "3-garbage.json").write_text("{")
    unit.run("sysctl", "-w", "vm.drop_caches=1")
    drop = unit.dropped()
    assert drop is not None and drop["dropped_at_ns"] > boot["dropped_at_ns"] and drop["drop_caches"] == 1
    assert sorted(p.name for p in reads.iterdir()) == ["2-late.json"]


def test_help_and_version_say_emulated(unit):
    for option in ("--help", "--version"):
        proc = unit.run("self", option)
        assert proc.returncode == 0 and "EMULATION" in proc.stdout


# ---- the images, the init and the shim ----------------------------------------------------------
@pytest.mark.parametrize("flavour", [images.ROOT_UNIT, images.STOCK_UNIT], ids=["root", "stock"])
def test_both_unit_images_put_the_wrapper_ahead_of_procps(flavour):
    files = images.context_files(IMAGES, flavour)
    # One source: the stand-in, and the same file as /usr/local/sbin/sysctl (first on root's
    # PATH and in sudo's secure_path, before /usr/sbin).
    assert files[f"rootfs/{images.PAGE_CACHE_REL}"] == STAND_IN
    assert files[f"rootfs/{images.SYSCTL_WRAPPER_REL}"] == STAND_IN
    assert STAND_IN.stat().st_mode & 0o111


def test_the_init_empties_the_cache_before_sshd_and_dockerd(monkeypatch):
    init = load_script(INIT, "specfleet_lab_init_page_cache_under_test")
    assert init.PAGE_CACHE == STAND_IN_PATH
    calls: list[list[str]] = []
    monkeypatch.setattr(init.os.path, "exists", lambda p: p == STAND_IN_PATH)
    monkeypatch.setattr(init.subprocess, "run", lambda argv, **_: calls.append(argv))
    init.boot_page_cache()
    assert calls == [[STAND_IN_PATH, "boot"]]
    source = INIT.read_text()
    assert source.index("    boot_page_cache()") < source.index("    sshd = start_sshd()")


def test_the_shim_mounts_the_page_cache_state_read_write(tmp_path, monkeypatch):
    shim = load_script(SHIM, "nvidia_container_runtime_page_cache_under_test")
    # The three ends agree: the unit writes here, the shim mounts it there, the emulator reads.
    pairs = dict(shim.INJECT)
    assert pairs["/" + STATE] == DEFAULT_PAGE_CACHE_DIR and DEFAULT_PAGE_CACHE_DIR in shim.WRITABLE
    gpu, state = tmp_path / "gpu.json", tmp_path / "page-cache"
    gpu.write_text("{}")
    state.mkdir()
    monkeypatch.setattr(shim, "INJECT", ((str(gpu), "/run/specfleet-lab/gpu.json"),
                                         (str(state), DEFAULT_PAGE_CACHE_DIR)))
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({"process": {"env": []}, "mounts": []}))
    assert shim.inject(str(bundle)) == ["/run/specfleet-lab/gpu.json", DEFAULT_PAGE_CACHE_DIR]
    mounts = {m["destination"]: m for m in json.loads((bundle / "config.json").read_text())["mounts"]}
    assert "rw" in mounts[DEFAULT_PAGE_CACHE_DIR]["options"] and "ro" not in mounts[DEFAULT_PAGE_CACHE_DIR]["options"]
    assert "ro" in mounts["/run/specfleet-lab/gpu.json"]["options"]


# ---- the chain to the emulator -------------------------------------------------------------------
def stand_in(hub: Path, repo: str, weights_gib: float) -> None:
    snapshot = hub / ("models--" + repo.replace("/", "--")) / "snapshots" / "rev"
    snapshot.mkdir(parents=True)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("rev")
    (snapshot / "config.json").write_text(json.dumps({"specfleet_emulated": {"weights_gib": weights_gib}}))


def wait_for_file_clock_past(directory: Path, at_ns: int) -> None:
    """Until a file made now gets a ctime after `at_ns`: the kernel stamps files from a
    coarse clock (up to a tick behind time.time_ns), and a copy made within that tick of a
    drop would look older than the drop. A real copy comes seconds after."""
    probe = directory / ".clock-probe"
    deadline = time.monotonic() + 2
    while True:
        probe.write_text("")
        if probe.stat().st_ctime_ns > at_ns or time.monotonic() > deadline:
            break
        probe.unlink()
        time.sleep(0.002)
    probe.unlink()


def test_the_emulator_counts_what_came_after_the_units_last_drop(unit, tmp_path):
    hub = tmp_path / "hf" / "hub"
    env = {"SPECFLEET_EMULATOR_PAGE_CACHE_DIR": str(unit.state)}  # where the shim mounts it
    assert load_page_cache(env, hub) is None  # before the unit's first boot: nothing emulated
    unit.run("self", "boot")
    boot = unit.dropped()
    assert boot is not None
    hub.mkdir(parents=True)
    wait_for_file_clock_past(hub, boot["dropped_at_ns"])
    stand_in(hub, "org/before-the-drop", 8.0)
    cache = load_page_cache(env, hub)
    assert cache is not None and [(m.model, m.weights_gib) for m in cache.models] == [("org/before-the-drop", 8.0)]
    unit.run("sysctl", "-w", "vm.drop_caches=3")
    cache = load_page_cache(env, hub)
    assert cache is not None and cache.models == () and cache.drop.reason == "sysctl vm.drop_caches=3"
    # Files copied after the drop fill it again.
    wait_for_file_clock_past(hub, cache.drop.at_ns)
    stand_in(hub, "org/after-the-drop", 2.5)
    cache = load_page_cache(env, hub)
    assert cache is not None and [(m.model, m.weights_gib) for m in cache.models] == [("org/after-the-drop", 2.5)]
    assert os.access(unit.state / "reads", os.W_OK)
