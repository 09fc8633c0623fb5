"""Fan-out planner, simulator and the unit-side helper (pure; no lab)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from ansible_collections.specfleet.fleet.plugins.module_utils import fanout_unit as fu
from ansible_collections.specfleet.fleet.plugins.module_utils import store_manifest as sm

from specfleet import fanout as fo
from tests import fanout_sim as sim

UNITS = [f"u{i:02d}" for i in range(16)]


def run_waves(targets, pieces=1, controller_slots=1, unit_slots=1, fail=None):
    return sim.plan_waves(targets, pieces, controller_slots, unit_slots, fail=fail)


def check_invariants(waves, targets, pieces, controller_slots=1, unit_slots=1, fail=None):
    """Replays the waves: per-source limits, sources only serve what they hold verified,
    every live target gets each piece exactly once. ``fail``: node -> wave it dies at
    (as in plan_waves: copies of the wave before fail too)."""
    fail = fail or {}
    dead = set(fail)
    holds = {t: set() for t in targets}
    holds[fo.CONTROLLER] = set(range(pieces))
    received = {t: [] for t in targets}
    for number, wave in enumerate(waves):
        uploads: dict[str, int] = {}
        downloads: dict[str, int] = {}
        for transfer in wave:
            assert transfer.piece in holds[transfer.source], f"{transfer} from a non-holder"
            assert transfer.source != transfer.target
            uploads[transfer.source] = uploads.get(transfer.source, 0) + 1
            downloads[transfer.target] = downloads.get(transfer.target, 0) + 1
        for source, count in uploads.items():
            assert count <= (controller_slots if source == fo.CONTROLLER else unit_slots)
        assert all(count <= 1 for count in downloads.values())
        # Pieces arrive (and verify) at the end of the wave: serving starts next wave.
        for transfer in wave:
            if all(node not in fail or fail[node] > number + 1 for node in (transfer.source, transfer.target)):
                holds[transfer.target].add(transfer.piece)
                received[transfer.target].append(transfer.piece)
    for target in targets:
        if target in dead:
            continue
        assert sorted(received[target]) == list(range(pieces)), f"{target} got {received[target]}"
    return holds


# ---- pieces ----------------------------------------------------------------------------
def test_split_pieces_balances_whole_files():
    files = {f"f{i}": size for i, size in enumerate([40, 30, 20, 10, 10, 5, 5])}
    pieces = fo.split_pieces(files, 3)
    assert sorted(f for p in pieces for f in p.files) == sorted(files)
    assert sum(p.size for p in pieces) == 120
    assert max(p.size for p in pieces) == 40
    assert fo.split_pieces({"a": 1}, 8) == [fo.Piece(0, ("a",), 1)]
    assert fo.split_pieces({}, 4) == []
    with pytest.raises(ValueError):
        fo.split_pieces(files, 0)


# ---- waves -----------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8, 15, 16, 31, 60])
def test_whole_store_doubles_every_wave(n):
    targets = UNITS[:n] if n <= 16 else [f"h{i}" for i in range(n)]
    waves = run_waves(targets)
    check_invariants(waves, targets, 1)
    assert len(waves) == math.ceil(math.log2(n + 1)) == sim.expected_waves(n)
    # wave k serves 2**k targets (controller + everyone who finished before)
    for k, wave in enumerate(waves[:-1]):
        assert len(wave) == 2 ** k
    # every target is served exactly once
    served = [t.target for wave in waves for t in wave]
    assert sorted(served) == sorted(targets)


def test_sources_only_after_verification_and_controller_first():
    waves = run_waves(UNITS[:8])
    assert [t.source for t in waves[0]] == [fo.CONTROLLER]
    seen_complete = set()
    for wave in waves:
        for t in wave:
            assert t.source == fo.CONTROLLER or t.source in seen_complete
        seen_complete |= {t.target for t in wave}


@pytest.mark.parametrize("controller_slots,unit_slots", [(1, 1), (2, 1), (2, 2), (1, 2)])
def test_concurrency_limits(controller_slots, unit_slots):
    waves = run_waves(UNITS, 4, controller_slots, unit_slots)
    check_invariants(waves, UNITS, 4, controller_slots, unit_slots)
    assert max(sum(t.source == fo.CONTROLLER for t in w) for w in waves) == controller_slots


def test_pipelined_pieces_take_pieces_plus_log_waves():
    for n in (4, 8, 16):
        for pieces in (4, 8):
            waves = run_waves(UNITS[:n], pieces)
            check_invariants(waves, UNITS[:n], pieces)
            # lower bound: P waves through a target's own link, + depth of the tree
            assert len(waves) <= pieces + math.ceil(math.log2(n + 1))


def test_seeded_unit_serves_from_the_start():
    sched = fo.Scheduler(UNITS[:3], 1, have={"u00": [0]})
    first = sched.assign()
    assert {t.source for t in first} == {"u00", fo.CONTROLLER}
    assert {t.target for t in first} == {"u01", "u02"}


def test_dead_source_is_dropped_and_its_targets_reassigned():
    # u00 receives in wave 0, serves in wave 1, dies at the start of wave 2.
    waves = run_waves(UNITS[:8], fail={"u00": 2})
    assert all("u00" not in (t.source, t.target) for wave in waves[2:] for t in wave)
    check_invariants(waves, UNITS[:8], 1, fail={"u00": 2})
    served = {t.target for wave in waves for t in wave if t.source != "u00"}
    assert served >= set(UNITS[1:8])


def test_source_dying_mid_copy_reassigns_to_another_source():
    sched = fo.Scheduler(UNITS[:4], 1)
    (first,) = sched.assign()
    sched.succeeded(first)
    second = sched.assign()
    from_unit = next(t for t in second if t.source == first.target)
    # the copy from the unit fails and the unit is unreachable
    sched.failed(from_unit, source_alive=False, reason="connection reset")
    assert first.target in sched.dead
    later = []
    while not sched.finished():
        later += sched.assign()
        for t in list(sched.active):
            sched.succeeded(t)
    assert all(t.source != first.target for t in later)
    assert any(t.target == from_unit.target for t in later)
    assert sched.outcome()[first.target].startswith("dead")
    assert all(sched.outcome()[t] == "complete" for t in UNITS[:4] if t != first.target)


def test_checksum_failure_is_refetched_from_another_source():
    sched = fo.Scheduler(["a", "b", "c"], 1)
    (t1,) = sched.assign()
    sched.succeeded(t1)  # a holds it
    batch = sched.assign()
    bad = next(t for t in batch if t.source == "a")
    sched.failed(bad, reason="sha256 mismatch")  # both alive: only the pair is suspect
    for t in batch:
        if t != bad:
            sched.succeeded(t)
    retry = [t for t in sched.assign() if t.target == bad.target]
    assert retry and retry[0].source != "a"


def test_gives_up_after_max_attempts():
    sched = fo.Scheduler(["a"], 1, max_attempts=2)
    for _ in range(2):
        (t,) = sched.assign()
        sched.failed(t, reason="disk full")
    assert sched.assign() == [] and sched.finished()
    assert sched.outcome()["a"].startswith("given up")


def test_revoked_piece_is_copied_again():
    sched = fo.Scheduler(["a"], 2)
    while not sched.finished():
        for t in sched.assign():
            sched.succeeded(t)
    sched.revoke("a", [1])
    (again,) = sched.assign()
    assert again.piece == 1


def test_push_mode_uses_only_the_controller():
    sched = fo.Scheduler(UNITS[:4], 1, controller_slots=4, units_serve=False)
    first = sched.assign()
    assert len(first) == 4 and {t.source for t in first} == {fo.CONTROLLER}


def test_bad_input():
    with pytest.raises(ValueError):
        fo.Scheduler([fo.CONTROLLER])
    with pytest.raises(ValueError):
        fo.Scheduler(["a", "a"])
    with pytest.raises(ValueError):
        fo.Scheduler(["a"], unit_slots=0)


# ---- simulator -------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32, 60])
def test_simulator_push_is_linear_and_fanout_logarithmic(n):
    push = sim.simulate(n, "push")
    tree = sim.simulate(n, "fanout", pieces=1)
    piped = sim.simulate(n, "fanout", pieces=8)
    assert push.makespan == pytest.approx(n)
    assert tree.makespan <= math.ceil(math.log2(n + 1)) + 1e-9
    assert piped.makespan <= tree.makespan + 1e-9
    assert piped.makespan <= 2.0  # pipelining: near one S/B whatever N
    assert all(status == "complete" for status in tree.outcome.values())


def test_simulator_log_growth():
    spans = {n: sim.simulate(n, "fanout").makespan for n in (4, 8, 16, 32, 64)}
    # doubling N adds one wave (one S/B), it does not double the time
    for n in (4, 8, 16, 32):
        assert spans[2 * n] - spans[n] <= 1 + 1e-9


def test_simulator_with_overhead_and_failures():
    base = sim.simulate(16, "fanout", pieces=8, overhead=0.02)
    assert 1.0 < base.makespan < 2.0
    hurt = sim.simulate(16, "fanout", pieces=8, fail_at={"u000": 0.3},
                       corrupt=[("u005", 0), ("u007", 3)])
    assert hurt.outcome["u000"].startswith("dead")
    assert all(s == "complete" for n, s in hurt.outcome.items() if n != "u000")
    assert hurt.makespan < 3.0


def test_compare_reports_speedup():
    result = sim.compare(16, pieces=8)
    assert result["push"] / result["fanout_pieces"] >= 4


# ---- unit-side helper ------------------------------------------------------------------
def make_store(root, name="models--o--m"):
    repo = root / name
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / "r").mkdir(parents=True)
    for i in range(4):
        (repo / "blobs" / f"b{i}").write_bytes(bytes([i]) * (1000 * (i + 1)))
    os.symlink("../../blobs/b0", repo / "snapshots" / "r" / "config.json")
    return sm.build_manifest(str(repo), name), repo


def copy_into(src_repo, staging, files):
    for relative in files:
        dst = os.path.join(staging, relative)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(src_repo / relative, "rb") as a, open(dst, "wb") as b:
            b.write(a.read())


def test_helper_prepare_verify_promote(tmp_path):
    manifest, repo = make_store(tmp_path / "ctrl")
    root = str(tmp_path / "unit")
    info = fu.prepare(root, "hub", manifest)
    assert info["have"] == [] and not info["up_to_date"]
    copy_into(repo, info["staging_dir"], ["blobs/b0", "blobs/b1"])
    # corrupt one byte of b1
    with open(os.path.join(info["staging_dir"], "blobs/b1"), "r+b") as handle:
        handle.write(b"X")
    result = fu.verify_files(root, "hub", manifest, ["blobs/b0", "blobs/b1"])
    assert result == {"ok": ["blobs/b0"], "bad": ["blobs/b1"]}
    assert os.path.exists(os.path.join(info["serve_dir"], "blobs/b0"))
    assert not os.path.exists(os.path.join(info["serve_dir"], "blobs/b1"))
    assert not os.path.exists(os.path.join(info["staging_dir"], "blobs/b1"))  # refetched next time
    # a partial copy is never switched in
    assert fu.finish(root, "hub", manifest)["problems"]
    layout = sm.StoreLayout(root, "hub", manifest["name"])
    assert layout.current_id() is None
    # resume: prepare counts what verified
    assert fu.prepare(root, "hub", manifest)["have"] == ["blobs/b0"]
    copy_into(repo, info["staging_dir"], ["blobs/b1", "blobs/b2", "blobs/b3"])
    assert fu.verify_files(root, "hub", manifest, ["blobs/b1", "blobs/b2", "blobs/b3"])["bad"] == []
    assert fu.finish(root, "hub", manifest) == {"problems": [], "changed": True, "live": layout.live}
    assert layout.current_id() == manifest["id"]
    assert not sm.verify_tree(layout.live, manifest, full=True)
    # the serve dir still holds every verified file after the switch-in (hard links)
    for relative in manifest["files"]:
        assert os.path.samefile(os.path.join(info["serve_dir"], relative), os.path.join(layout.live, relative))
    again = fu.prepare(root, "hub", manifest)
    assert again["up_to_date"] and again["have"] == sorted(manifest["files"])


def test_helper_links_unchanged_files_from_live_version(tmp_path):
    manifest, repo = make_store(tmp_path / "ctrl")
    root = str(tmp_path / "unit")
    info = fu.prepare(root, "hub", manifest)
    copy_into(repo, info["staging_dir"], manifest["files"])
    assert fu.finish(root, "hub", manifest)["problems"] == []
    (repo / "blobs" / "b3").write_bytes(b"new")
    manifest2 = sm.build_manifest(str(repo), manifest["name"])
    info2 = fu.prepare(root, "hub", manifest2)
    assert info2["have"] == ["blobs/b0", "blobs/b1", "blobs/b2"]
    assert info2["link_dest"].endswith(manifest["id"])


def test_authorized_line_is_restricted(tmp_path):
    line = fu.authorized_line("/var/lib/x", "ssh-ed25519 AAAAkey old-comment", ["10.0.0.2", "10.0.0.3"],
                              "/usr/bin/rrsync")
    assert line == ('restrict,from="10.0.0.2,10.0.0.3",command="/usr/bin/rrsync -ro /var/lib/x/.specfleet/serve" '
                    "ssh-ed25519 AAAAkey specfleet-fanout")


def test_install_and_remove_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    ssh = tmp_path / ".ssh"
    ssh.mkdir()
    (ssh / "authorized_keys").write_text("ssh-ed25519 AAAAadmin admin@controller\n")
    fu.install_keys(str(tmp_path / "root"), {"public_key": "ssh-ed25519 AAAAfleet x", "private_key": "PRIVATE\n",
                                             "known_hosts": "10.0.0.2 ssh-ed25519 AAAAhost\n", "from": ["10.0.0.2"]})
    fu.install_keys(str(tmp_path / "root"), {"public_key": "ssh-ed25519 AAAAfleet x", "private_key": "PRIVATE\n",
                                             "known_hosts": "", "from": []})
    lines = (ssh / "authorized_keys").read_text().splitlines()
    assert lines[0] == "ssh-ed25519 AAAAadmin admin@controller" and len(lines) == 2
    assert oct((ssh / "specfleet_fanout").stat().st_mode & 0o777) == "0o600"
    fu.remove_keys()
    assert (ssh / "authorized_keys").read_text() == "ssh-ed25519 AAAAadmin admin@controller\n"
    assert not (ssh / "specfleet_fanout").exists()


def test_cleanup_drops_serve_dir_keeps_live_store(tmp_path):
    manifest, repo = make_store(tmp_path / "ctrl")
    root = str(tmp_path / "unit")
    info = fu.prepare(root, "hub", manifest)
    copy_into(repo, info["staging_dir"], manifest["files"])
    fu.verify_files(root, "hub", manifest, list(manifest["files"]))
    assert fu.finish(root, "hub", manifest)["problems"] == []
    fu.cleanup(root, manifest["name"], remove_fleet_keys=False)
    assert not os.path.exists(info["serve_dir"])
    assert os.path.exists(fu.__file__)  # never removes anything but the shipped copy
    assert not sm.verify_tree(sm.StoreLayout(root, "hub", manifest["name"]).live, manifest, full=True)


# ---- the driver's event loop, with copies faked (no ssh) -------------------------------
class FakeRunner:
    """fanout_run.Runner with the remote calls replaced by bookkeeping."""

    @staticmethod
    def make(units, dead_after=None, corrupt=()):
        from specfleet import fanout_run as fr

        class Fake(fr.Runner):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                self.copies = []
                self.corrupt = set(corrupt)
                self.dead_units: set[str] = set()

            def start_master(self, node):
                pass

            def stop_masters(self):
                pass

            def ship_helper(self, node):
                pass


            def helper(self, node, command, request, timeout=None):
                if command == "prepare":
                    return {"up_to_date": False, "have": [], "staging_dir": "/s", "serve_dir": "/v",
                            "link_dest": None}
                if command == "promote":
                    return {"problems": [], "changed": True}
                return {}

            def alive(self, name):
                return name not in self.dead_units

            def copy(self, transfer):
                with self.lock:
                    self.copies.append(transfer)
                    if dead_after and len(self.copies) > dead_after[1]:
                        self.dead_units.add(dead_after[0])
                if {transfer.source, transfer.target} & self.dead_units:
                    return {"ok": False, "seconds": 0, "bad": [], "reason": "connection reset",
                            "source_alive": self.alive(transfer.source),
                            "target_alive": self.alive(transfer.target)}
                if (transfer.target, transfer.piece) in self.corrupt:
                    self.corrupt.discard((transfer.target, transfer.piece))
                    return {"ok": False, "seconds": 0, "bad": ["x"], "reason": "sha256 mismatch",
                            "source_alive": True, "target_alive": True}
                return {"ok": True, "seconds": 0, "bad": []}

        manifest = {"name": "m", "id": "abc", "symlinks": {},
                    "files": {f"f{i}": {"size": 100, "sha256": "0"} for i in range(8)}}
        nodes = [fr.Node(name, f"10.0.0.{i + 10}") for i, name in enumerate(units)]
        return Fake(nodes, Path("/nonexistent"), manifest, fr.Options(pieces=4))


def test_driver_loop_completes_and_counts_sources():
    runner = FakeRunner.make(UNITS[:8])
    result = runner.run()
    assert result["ok"] and result["copies"] == 8 * 4
    assert result["bytes_from"]["peers"] > result["bytes_from"]["controller"]
    assert result["bytes_from"]["controller"] >= 800  # the controller sent every piece at least once


def test_driver_loop_survives_a_dying_source_and_corruption():
    runner = FakeRunner.make(UNITS[:6], dead_after=("u00", 6), corrupt=[("u03", 1)])
    result = runner.run()
    assert result["units"]["u00"].startswith("dead")
    assert all(result["units"][u] == "live" for u in UNITS[1:6])
    assert result["failures"] >= 2
    assert not result["ok"]
