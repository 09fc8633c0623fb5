"""cache_store: switch-in and repair of a versioned store, and what a kill at any step leaves.

Every test that kills a switch asserts what the brief promises: the live path resolves to a
whole version at every step (during a repair, the old live cache, untouched, until the link
is switched), and the next run as the role makes it (inspect, copy what is missing, switch in)
completes the switch, after which a run changes nothing.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.specfleet.fleet.plugins.module_utils import store_manifest as sm

from tests.conftest import load_module
from tests.crash_points import killed_at, steps_of
from tests.stores import make_repo

cache_store = load_module("cache_store")
NAME = "models--o--m"


def tree(root: str) -> dict:
    """Every file (its bytes) and link (its target) below ``root``, resolved through ``root``."""
    found = {}
    for directory, _subdirs, names in os.walk(root):
        for name in _subdirs + names:
            path = os.path.join(directory, name)
            relative = os.path.relpath(path, root)
            if os.path.islink(path):
                found[relative] = ("link", os.readlink(path))
            elif os.path.isfile(path):
                with open(path, "rb") as handle:
                    found[relative] = handle.read()
    return found


class Unit:
    """A unit's store of one model, and the controller's copy of the model."""

    def __init__(self, base):
        self.source = base / "store" / NAME
        self.manifest = make_repo(self.source)
        self.root = str(base / "unit")
        self.layout = sm.StoreLayout(self.root, "hub", NAME)

    def stage(self, manifest: dict | None = None) -> None:
        """What the role's rsync does: the controller's copy into the staging directory (a
        staged copy is only ever moved whole, so one that is there is complete)."""
        staging = self.layout.staging_dir((manifest or self.manifest)["id"])
        if not os.path.isdir(staging):
            shutil.copytree(self.source, staging, symlinks=True)

    def make_live(self) -> None:
        self.stage()
        assert sm.promote(self.layout, self.manifest) == []

    def corrupt_live(self) -> dict:
        """Truncate a blob of the live version (a size change, as quick verification sees);
        returns the live tree as it is now."""
        with open(os.path.join(self.layout.live, "blobs", "w"), "r+b") as handle:
            handle.truncate(10)
        return tree(self.layout.live)

    def live_verifies(self, manifest: dict | None = None) -> bool:
        return os.path.isdir(self.layout.live) and not sm.verify_tree(self.layout.live, manifest or self.manifest, True)


def run_module(capsys, unit: Unit, **args) -> dict:
    params = {"root": unit.root, "subdir": "hub", "manifest": unit.manifest, **args}
    with patch_module_args(params), pytest.raises(SystemExit):
        cache_store.main()
    return json.loads(capsys.readouterr().out)


def role_run(capsys, unit: Unit) -> bool:
    """specfleet_hf_cache's sequence: inspect, copy what is missing, switch in where the
    store is not up to date or a killed switch left versions behind. Returns changed."""
    inspected = run_module(capsys, unit, verify="full")
    if inspected["up_to_date"] and not inspected["stale_versions"]:
        return False
    if not inspected["up_to_date"]:
        unit.stage()
    switched = run_module(capsys, unit, state="active")
    assert switched["changed"] and not switched.get("failed"), switched
    return True


def next_run_completes(capsys, unit: Unit) -> None:
    """The next run changes what the killed one left undone (nothing when the kill came after
    its last change), then the store is settled."""
    finished = unit.live_verifies() and not unit.layout.stale_versions()
    assert role_run(capsys, unit) is not finished
    assert_settled(capsys, unit)


def assert_settled(capsys, unit: Unit) -> None:
    """Up to date, nothing left behind, and a run changes nothing."""
    assert unit.live_verifies()
    assert os.listdir(unit.layout.versions) == [unit.layout.live_version()]
    assert os.listdir(unit.layout.incoming) == []
    assert role_run(capsys, unit) is False
    assert run_module(capsys, unit, state="active")["changed"] is False


def test_a_repair_goes_in_beside_the_broken_copy_and_removes_it_after(tmp_path, capsys):
    unit = Unit(tmp_path)
    unit.make_live()
    unit.corrupt_live()
    inspected = run_module(capsys, unit)
    assert inspected["up_to_date"] is False and inspected["problems"] == ["blobs/w: size 10, expected 5000"]
    unit.stage()
    repaired = run_module(capsys, unit, state="active")
    assert repaired["changed"] and repaired["current_id"] == unit.manifest["id"]
    assert unit.layout.live_version() == unit.manifest["id"] + ".2"
    assert unit.layout.current_id() == unit.manifest["id"]
    assert_settled(capsys, unit)
    # The next repair goes back to the plain name, the first one free.
    unit.corrupt_live()
    assert role_run(capsys, unit)
    assert unit.layout.live_version() == unit.manifest["id"]
    assert_settled(capsys, unit)


def test_check_mode_reports_the_repair_and_touches_nothing(tmp_path, capsys):
    unit = Unit(tmp_path)
    unit.make_live()
    broken = unit.corrupt_live()
    unit.stage()
    checked = run_module(capsys, unit, state="active", _ansible_check_mode=True, _ansible_diff=True)
    assert checked["changed"] is True
    assert checked["diff"]["after"] == f"{unit.layout.live} -> {unit.manifest['id']}\n"
    assert tree(unit.layout.live) == broken
    assert os.path.isdir(unit.layout.staging_dir(unit.manifest["id"]))
    assert os.listdir(unit.layout.versions) == [unit.manifest["id"]]


def test_versions_a_killed_switch_left_are_removed_by_the_next_run(tmp_path, capsys):
    unit = Unit(tmp_path)
    unit.make_live()
    leftover = os.path.join(unit.layout.versions, "0123456789abcdef")
    os.makedirs(os.path.join(leftover, "blobs"))
    inspected = run_module(capsys, unit)
    assert inspected["up_to_date"] is True and inspected["stale_versions"] == ["0123456789abcdef"]
    checked = run_module(capsys, unit, state="active", _ansible_check_mode=True, _ansible_diff=True)
    assert checked["changed"] is True and leftover in checked["diff"]["before"] and os.path.isdir(leftover)
    cleaned = run_module(capsys, unit, state="active")
    assert cleaned["changed"] is True and cleaned["stale_versions"] == [] and not os.path.exists(leftover)
    assert_settled(capsys, unit)


def test_a_live_link_left_dangling_by_a_remove_then_rename_repair_is_restored(tmp_path, capsys):
    """What a kill during a repair of the previous release (which removed the live copy before
    renaming the new one in) left on a unit."""
    unit = Unit(tmp_path)
    unit.make_live()
    shutil.rmtree(os.path.realpath(unit.layout.live))
    assert os.path.islink(unit.layout.live) and not os.path.exists(unit.layout.live)
    assert run_module(capsys, unit)["current_id"] is None
    assert role_run(capsys, unit) is True
    assert_settled(capsys, unit)


# ---- a kill at every step --------------------------------------------------------------------
def crash_steps(tmp_path, prepare) -> list[str]:
    unit = prepare(Unit(tmp_path / "clean"))
    steps = steps_of(lambda: sm.promote(unit.layout, unit.manifest))
    assert unit.live_verifies()
    return steps


def switched_at(steps: list[str]) -> int:
    """The step that switches the live path (the link's rename, or the exchange with a
    hand-made cache)."""
    return next(index for index, step in enumerate(steps) if step.startswith(("replace", "exchange")))


def repair_case(unit: Unit) -> Unit:
    unit.make_live()
    unit.broken_dir = os.path.realpath(unit.layout.live)
    unit.broken = unit.corrupt_live()
    unit.stage()
    return unit


def test_a_kill_at_any_step_of_a_repair_leaves_the_old_live_cache_in_place(tmp_path, capsys):
    steps = crash_steps(tmp_path, repair_case)
    switch = switched_at(steps)
    assert steps[switch].startswith("replace")
    killed = []
    for step in range(len(steps)):
        unit = repair_case(Unit(tmp_path / f"killed-at-{step}"))
        assert killed_at(step, lambda unit=unit: sm.promote(unit.layout, unit.manifest))
        assert os.path.islink(unit.layout.live), steps[step]
        if step <= switch:  # the link not yet switched: the old cache, as it was
            assert os.path.realpath(unit.layout.live) == unit.broken_dir, steps[step]
            assert tree(unit.layout.live) == unit.broken, steps[step]
        else:  # switched: the verified copy
            assert os.path.realpath(unit.layout.live) != unit.broken_dir and unit.live_verifies(), steps[step]
        killed.append(unit)
    # The broken copy is removed after the switch, never before.
    assert not any(step.startswith(("unlink", "rmdir")) for step in steps[:switch])
    assert any(step.startswith("rmdir") for step in steps[switch:])
    for unit in killed:
        next_run_completes(capsys, unit)


def new_version_case(unit: Unit) -> Unit:
    unit.make_live()
    unit.old_manifest = unit.manifest
    (unit.source / "blobs" / "c").write_bytes(b'{"a": 2}')
    unit.manifest = sm.build_manifest(str(unit.source), NAME)
    unit.stage()
    return unit


def test_a_kill_at_any_step_of_a_version_switch_leaves_one_whole_version_live(tmp_path, capsys):
    steps = crash_steps(tmp_path, new_version_case)
    switch = switched_at(steps)
    for step in range(len(steps)):
        unit = new_version_case(Unit(tmp_path / f"killed-at-{step}"))
        assert killed_at(step, lambda unit=unit: sm.promote(unit.layout, unit.manifest))
        live = unit.old_manifest if step <= switch else unit.manifest
        assert unit.layout.current_id() == live["id"] and unit.live_verifies(live), steps[step]
        next_run_completes(capsys, unit)


def hand_made_case(unit: Unit) -> Unit:
    os.makedirs(os.path.join(unit.layout.live, "blobs"))
    with open(os.path.join(unit.layout.live, "blobs", "w"), "w") as handle:
        handle.write("by hand")
    unit.stage()
    return unit


def kept_aside(unit: Unit) -> list[str]:
    return [
        name
        for name in os.listdir(unit.layout.versions)
        if name.startswith(sm.UNMANAGED_PREFIX) and os.path.isdir(os.path.join(unit.layout.versions, name))
    ]


def test_a_kill_at_any_step_of_replacing_a_hand_made_cache_never_leaves_the_live_path_missing(tmp_path, capsys):
    steps = crash_steps(tmp_path, hand_made_case)
    switch = switched_at(steps)
    assert steps[switch].startswith("exchange")
    for step in range(len(steps)):
        unit = hand_made_case(Unit(tmp_path / f"killed-at-{step}"))
        assert killed_at(step, lambda unit=unit: sm.promote(unit.layout, unit.manifest))
        if step <= switch:
            assert not os.path.islink(unit.layout.live), steps[step]
            assert open(os.path.join(unit.layout.live, "blobs", "w")).read() == "by hand", steps[step]
        else:
            assert unit.live_verifies(), steps[step]
            (aside,) = kept_aside(unit)
            assert open(os.path.join(unit.layout.versions, aside, "blobs", "w")).read() == "by hand"
        finished = unit.live_verifies() and not unit.layout.stale_versions()
        assert role_run(capsys, unit) is not finished, steps[step]
        (aside,) = kept_aside(unit)  # kept once, never lost, never doubled
        assert open(os.path.join(unit.layout.versions, aside, "blobs", "w")).read() == "by hand"
        assert unit.live_verifies() and role_run(capsys, unit) is False


# ---- a real process, SIGKILLed -----------------------------------------------------------
PAUSE = Path(__file__).resolve().parents[3] / "pause_cache_store.py"


@pytest.mark.parametrize(
    ("step", "switched"),
    [
        ("rename", False),  # before the verified copy moves into versions/
        ("replace", False),  # the copy beside the broken one, the link not yet switched
        ("unlink", True),  # switched; the broken copy about to be removed
    ],
)
def test_a_repair_killed_with_sigkill_leaves_a_whole_live_cache(tmp_path, capsys, step, switched):
    unit = repair_case(Unit(tmp_path))
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"root": unit.root, "subdir": "hub", "manifest": unit.manifest, "state": "active"}))
    process = subprocess.Popen(
        [sys.executable, str(PAUSE), str(args), step], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        ready, _, _ = select.select([process.stdout], [], [], 120)
        paused = process.stdout.readline() if ready else "no answer in 120 s\n"
    finally:
        os.kill(process.pid, signal.SIGKILL)  # ours, alive or not yet reaped
        _, errors = process.communicate()
    assert paused.startswith(f"paused {step} "), paused + errors
    assert process.returncode == -signal.SIGKILL
    assert os.path.islink(unit.layout.live)
    if switched:
        assert unit.live_verifies() and os.path.isdir(unit.broken_dir)
        assert unit.layout.stale_versions() == [os.path.basename(unit.broken_dir)]
    else:
        assert os.path.realpath(unit.layout.live) == unit.broken_dir and tree(unit.layout.live) == unit.broken
    next_run_completes(capsys, unit)
