"""Fan-out planner, simulator and the unit-side helper (pure; no lab)."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible_collections.specfleet.fleet.plugins.module_utils import fanout_unit as fu
from ansible_collections.specfleet.fleet.plugins.module_utils import fleet_key
from ansible_collections.specfleet.fleet.plugins.module_utils import store_manifest as sm

from specfleet import fanout as fo
from specfleet import fanout_run as fr
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
def test_a_distribution_job_names_its_store_entry_units_and_label_and_carries_extra_keys():
    job = fo.distribution_job("org/m", "/ctl/store", "models--org--m", "hub", "/unit/hf", ("u1", "u2"), repo="org/m")
    assert job == {"repo": "org/m", "label": "org/m", "store": "/ctl/store", "name": "models--org--m",
                   "subdir": "hub", "root": "/unit/hf", "units": ["u1", "u2"]}
    with pytest.raises(ValueError, match="org/m: a distribution job needs at least one unit"):
        fo.distribution_job("org/m", "/ctl/store", "models--org--m", "hub", "/unit/hf", [])


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


def test_controller_only_unit_receives_from_the_controller_and_serves_no_one():
    """A unit without rrsync holds no fleet key: no peer may copy to or from it."""
    sched = fo.Scheduler(UNITS[:6], 4, have={"u00": range(4)}, controller_slots=2,
                         controller_only={"u00", "u03"})
    copies = []
    while not sched.finished():
        wave = sched.assign()
        assert wave, "stuck"
        for transfer in wave:
            sched.succeeded(transfer)
        copies += wave
    assert all(sched.complete(unit) for unit in UNITS[:6])
    assert {t.source for t in copies if t.target == "u03"} == {fo.CONTROLLER}
    assert not [t for t in copies if t.source in ("u00", "u03")]  # u00 holds everything, serves nothing
    assert any(t.source not in (fo.CONTROLLER,) for t in copies)  # the others still fan out


def test_bad_input():
    with pytest.raises(ValueError):
        fo.Scheduler([fo.CONTROLLER])
    with pytest.raises(ValueError):
        fo.Scheduler(["a", "a"])
    with pytest.raises(ValueError):
        fo.Scheduler(["a"], unit_slots=0)
    with pytest.raises(ValueError, match="controller_only names no target: b"):
        fo.Scheduler(["a"], controller_only={"b"})


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


# ---- the fleet key on a unit -------------------------------------------------------------
ADMIN = "ssh-ed25519 AAAAadmin admin@controller"


def key_request(run_id="run2", peers=("10.0.0.2",)):
    return {"run_id": run_id, "private_key": "PRIVATE\n", "known_hosts": "10.0.0.2 ssh-ed25519 AAAAhost\n",
            "key_lifetime_s": 3600,
            "authorized": [{"address": peer, "public_key": f"ssh-ed25519 AAAA{peer}{run_id}"} for peer in peers]}


# 2025-01-01 12:00:00 UTC, the units' clock in these tests.
NOW = 1735732800


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A login user's home with an authorized_keys an earlier run left two fleet entries in:
    the fail-open one of releases before run ids, and one of run1."""
    monkeypatch.setenv("HOME", str(tmp_path))
    ssh = tmp_path / ".ssh"
    ssh.mkdir(mode=0o700)
    (ssh / "authorized_keys").write_text(
        f"{ADMIN}\n"
        'restrict,from="10.0.0.2" ssh-ed25519 AAAAold specfleet-fanout\n'
        'restrict,command="/usr/bin/rrsync -ro /r/.specfleet/serve" ssh-ed25519 AAAAfleetrun1 specfleet-fanout:run1\n')
    (ssh / "authorized_keys").chmod(0o644)
    (ssh / "specfleet_fanout").write_text("OLD PRIVATE\n")
    return ssh


@pytest.fixture
def utc(monkeypatch):
    """The units' time zone in these tests (expiry-time is their local time)."""
    monkeypatch.setenv("TZ", "UTC0")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_install_replaces_every_earlier_runs_key_with_a_confined_one(home, monkeypatch, utc):
    monkeypatch.setattr(fu, "find_rrsync", lambda: "/usr/bin/rrsync")
    result = fu.install_keys("/var/lib/x", key_request(), now=NOW)
    assert result["fleet_key"] == "installed" and result["stale_runs"] == ["", "run1"]
    assert result["expiry_time"] == "20250101130000"  # the unit's clock plus key_lifetime_s
    lines = (home / "authorized_keys").read_text().splitlines()
    assert lines == [ADMIN, 'restrict,expiry-time="20250101130000",from="10.0.0.2",'
                            'command="/usr/bin/rrsync -ro /var/lib/x/.specfleet/serve" '
                            "ssh-ed25519 AAAA10.0.0.2run2 specfleet-fanout:run2"]
    assert result["authorized"] == lines[1:]
    assert oct((home / "authorized_keys").stat().st_mode & 0o777) == "0o644"  # as it was
    assert (home / "specfleet_fanout").read_text() == "PRIVATE\n"
    assert oct((home / "specfleet_fanout").stat().st_mode & 0o777) == "0o600"


def test_each_peer_key_is_authorized_from_its_own_address_only(home, monkeypatch, utc):
    """One key pair per unit: a unit's authorized_keys holds each peer's public key, from= that
    peer's address alone, all named by the run (so the sweep and cleanup remove every one)."""
    monkeypatch.setattr(fu, "find_rrsync", lambda: "/usr/bin/rrsync")
    peers = ("10.0.0.11", "10.0.0.12", "10.0.0.13")
    result = fu.install_keys("/var/lib/x", key_request(peers=peers), now=NOW)
    entries = (home / "authorized_keys").read_text().splitlines()[1:]
    assert entries == result["authorized"] and len(entries) == 3
    for peer, line in zip(peers, entries, strict=True):
        options, _, key, comment = fleet_key.split_entry(line)
        assert key == f"AAAA{peer}run2" and comment == "specfleet-fanout:run2"
        assert options == (f'restrict,expiry-time="20250101130000",from="{peer}",'
                           'command="/usr/bin/rrsync -ro /var/lib/x/.specfleet/serve"')
    removed = fu.remove_keys()
    assert removed["removed_runs"] == ["run2"] and removed["removed_entries"] == entries  # one run, every entry
    assert (home / "authorized_keys").read_text() == f"{ADMIN}\n"


def test_expiry_is_the_units_local_time(home, monkeypatch):
    """sshd reads expiry-time in the unit's time zone; no Z (OpenSSH before 9.1 refuses it)."""
    monkeypatch.setattr(fu, "find_rrsync", lambda: "/usr/bin/rrsync")
    monkeypatch.setenv("TZ", "JST-9")
    time.tzset()
    try:
        result = fu.install_keys("/var/lib/x", key_request(), now=NOW)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert result["expiry_time"] == "20250101220000"  # 13:00 UTC is 22:00 in UTC+9
    assert 'expiry-time="20250101220000"' in (home / "authorized_keys").read_text()


@pytest.mark.parametrize("rrsync", ["/usr/bin/rrsync", None])
def test_a_lone_unit_gets_no_key_and_old_ones_go(home, monkeypatch, rrsync):
    """No peer: nothing of this run is installed (an entry without from= is never made, and a
    private key with no one to pull from is not left lying there); earlier runs' keys still go."""
    monkeypatch.setattr(fu, "find_rrsync", lambda: rrsync)
    result = fu.install_keys("/var/lib/x", key_request(peers=()), now=NOW)
    assert result == {"fleet_key": "none", "reason": "no peer", "stale_runs": ["", "run1"]}
    assert (home / "authorized_keys").read_text() == f"{ADMIN}\n"
    assert sorted(p.name for p in home.iterdir()) == ["authorized_keys"]


def test_without_rrsync_no_key_is_installed_and_old_ones_go(home, monkeypatch):
    """Fails closed: the old helper installed `restrict,from=` alone (a shell for every peer)."""
    monkeypatch.setattr(fu, "find_rrsync", lambda: None)
    result = fu.install_keys("/var/lib/x", key_request(peers=("10.0.0.2", "10.0.0.3")))
    assert result == {"fleet_key": "refused", "reason": "rrsync not found", "stale_runs": ["", "run1"]}
    assert (home / "authorized_keys").read_text() == f"{ADMIN}\n"
    assert not (home / "specfleet_fanout").exists() and not (home / "specfleet_fanout_known_hosts").exists()


def test_find_rrsync_takes_path_or_the_packaged_places(monkeypatch, tmp_path):
    monkeypatch.setattr(fu.shutil, "which", lambda name: "/opt/bin/rrsync")
    assert fu.find_rrsync() == "/opt/bin/rrsync"
    monkeypatch.setattr(fu.shutil, "which", lambda name: None)
    monkeypatch.setattr(fu.os, "access", lambda path, mode: path == "/usr/local/bin/rrsync")
    assert fu.find_rrsync() == "/usr/local/bin/rrsync"
    monkeypatch.setattr(fu.os, "access", lambda path, mode: False)
    assert fu.find_rrsync() is None


def test_install_then_remove_leaves_authorized_keys_as_it_found_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(fu, "find_rrsync", lambda: "/usr/bin/rrsync")
    ssh = tmp_path / ".ssh"
    ssh.mkdir()
    before = f"# admins\n{ADMIN}\n\nssh-rsa AAAAB3other ops@laptop\n"
    (ssh / "authorized_keys").write_text(before)
    fu.install_keys(str(tmp_path / "root"), key_request(peers=("10.0.0.2", "10.0.0.3")))
    removed = fu.remove_keys()
    assert removed["changed"] and removed["removed_runs"] == ["run2"]
    assert sorted(removed["removed_files"]) == [str(ssh / "specfleet_fanout"),
                                                str(ssh / "specfleet_fanout_known_hosts")]
    assert (ssh / "authorized_keys").read_text() == before
    assert sorted(p.name for p in ssh.iterdir()) == ["authorized_keys"]
    assert fu.remove_keys() == {"changed": False, "removed_entries": [], "removed_runs": [], "removed_files": []}


def test_remove_keys_dry_run_changes_nothing(home):
    before = (home / "authorized_keys").read_text()
    result = fu.remove_keys(dry_run=True)
    assert result["changed"] and result["removed_runs"] == ["", "run1"]
    assert (home / "authorized_keys").read_text() == before and (home / "specfleet_fanout").exists()


def test_remove_keys_removes_a_file_that_held_only_fleet_entries(tmp_path):
    (tmp_path / "authorized_keys").write_text("ssh-ed25519 AAAAx specfleet-fanout:run1\n")
    assert fu.remove_keys(str(tmp_path))["removed_runs"] == ["run1"]
    assert not (tmp_path / "authorized_keys").exists()


def test_shipped_helper_prepare_sweeps_old_keys_before_anything_else(home, tmp_path):
    """As the driver runs it on a unit: the files of HELPER_FILES alone, outside the collection."""
    from specfleet import fanout_run as fr

    shipped = tmp_path / "root" / ".specfleet" / "fanout"
    shipped.mkdir(parents=True)
    for name in fr.HELPER_FILES:
        (shipped / name).write_bytes((fr.UNIT_HELPER_DIR / name).read_bytes())
    manifest, _ = make_store(tmp_path / "ctrl")
    request = {"root": str(tmp_path / "root"), "subdir": "hub", "manifest": manifest}
    proc = subprocess.run([sys.executable, "-I", str(shipped / "fanout_unit.py"), "prepare"],
                          input=json.dumps(request), capture_output=True, text=True, check=False,
                          env={"HOME": str(home.parent), "PATH": os.environ["PATH"]})
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["fleet_key"] == "none" and result["stale_runs"] == ["", "run1"]
    assert (home / "authorized_keys").read_text() == f"{ADMIN}\n"
    assert not (home / "specfleet_fanout").exists()


def test_cleanup_drops_serve_dir_keeps_live_store(tmp_path):
    manifest, repo = make_store(tmp_path / "ctrl")
    root = str(tmp_path / "unit")
    info = fu.prepare(root, "hub", manifest)
    copy_into(repo, info["staging_dir"], manifest["files"])
    fu.verify_files(root, "hub", manifest, list(manifest["files"]))
    assert fu.finish(root, "hub", manifest)["problems"] == []
    fu.cleanup(root, manifest["name"])
    assert not os.path.exists(info["serve_dir"])
    assert os.path.exists(fu.__file__)  # never removes anything but the shipped copy
    assert not sm.verify_tree(sm.StoreLayout(root, "hub", manifest["name"]).live, manifest, full=True)


# ---- the driver's event loop, with copies faked (no ssh) -------------------------------
class FakeRunner:
    """fanout_run.Runner with the remote calls replaced by bookkeeping."""

    @staticmethod
    def make(units, dead_after=None, corrupt=(), no_rrsync=(), not_reached=(), push=False):
        """``no_rrsync``: units whose prepare refuses the fleet key; ``not_reached``: units
        whose setup fails (the helper never gets there)."""
        from specfleet import fanout_run as fr

        class Fake(fr.Runner):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                self.copies = []
                self.corrupt = set(corrupt)
                self.dead_units: set[str] = set()
                self.calls: list[tuple[str, str, dict, bool]] = []

            def start_master(self, node):
                if node.name in not_reached:
                    raise fr.RemoteError(node.name, "ssh", 255, "Connection timed out")

            def stop_masters(self):
                pass

            def ship_helper(self, node):
                self.shipped.add(node.name)

            def helper(self, node, command, request, timeout=None, multiplex=True):
                with self.lock:
                    self.calls.append((command, node.name, request, multiplex))
                if command == "cleanup" and node.name in self.dead_units:
                    raise fr.RemoteError(node.name, command, 255, "No route to host")
                if command == "prepare":
                    refused = node.name in no_rrsync and request.get("keys")
                    return {"up_to_date": False, "have": [], "staging_dir": "/s", "serve_dir": "/v",
                            "link_dest": None, "fleet_key": "refused" if refused else "installed"}
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
        return Fake(nodes, Path("/nonexistent"), manifest, fr.Options(pieces=4, push=push))


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


# ---- the driver's fleet key: per run, fail closed, always removed ------------------------
def test_run_id_is_the_start_time_and_a_token():
    from specfleet import fanout_run as fr

    assert fr.new_run_id(0, "abc123") == "19700101T000000Z-abc123"
    assert fr.new_run_id() != fr.new_run_id()  # a random token: two runs in one second differ


def public_of(private_key: str) -> str:
    """The public key (type and key, no comment) of an OpenSSH private key."""
    proc = subprocess.run(["ssh-keygen", "-y", "-f", "/dev/stdin"], input=private_key, capture_output=True,
                          text=True, check=True)
    return " ".join(proc.stdout.split()[:2])


def test_driver_makes_new_keys_per_run_and_unit_and_drops_them_with_the_run():
    runs = [FakeRunner.make(UNITS[:3]), FakeRunner.make(UNITS[:3])]
    requests = []
    for runner in runs:
        result = runner.run()
        assert result["ok"] and result["fleet_key"]["run"] == runner.run_id
        requests.append({name: r["keys"] for c, name, r, _ in runner.calls if c == "prepare"})
        assert not runner.tmp.exists()  # the controller's copies of the private keys are gone
    assert runs[0].run_id != runs[1].run_id
    privates = [keys["private_key"] for run in requests for keys in run.values()]
    assert len(set(privates)) == 6  # a pair per unit and run
    address = {name: f"10.0.0.{index + 10}" for index, name in enumerate(UNITS[:3])}
    for runner, by_unit in zip(runs, requests, strict=True):
        assert sorted(by_unit) == UNITS[:3]
        public = {name: public_of(keys["private_key"]) for name, keys in by_unit.items()}
        for name, keys in by_unit.items():
            assert keys["run_id"] == runner.run_id
            assert keys["key_lifetime_s"] == fr.key_lifetime(runner.opt, 3, runner.workers)
            # every other unit's public key, with the address it connects from; never its own
            assert keys["authorized"] == [{"address": address[peer], "public_key": public[peer]}
                                          for peer in UNITS[:3] if peer != name]


def test_the_request_per_unit_stays_small_for_60_units():
    """A key pair per unit: the prepare request grows by a public key and an address per peer."""
    runner = FakeRunner.make(UNITS[:1])
    nodes = [fr.Node(f"u{i:02d}", f"10.0.{i // 250}.{i % 250 + 1}") for i in range(60)]
    runner.nodes = {node.name: node for node in nodes}
    runner.host_keys = {node.name: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI" + "h" * 32 for node in nodes}
    try:
        requests = runner.key_request(nodes)
    finally:
        shutil.rmtree(runner.tmp, ignore_errors=True)
    sizes = [len(json.dumps(request)) for request in requests.values()]
    assert len(sizes) == 60 and max(sizes) < 16_000, max(sizes)  # known_hosts ~6 kB, peers ~7 kB


def test_key_lifetime_is_the_runs_longest_life_from_its_own_limits():
    """Prepares (PREPARE_TIMEOUT, ``workers`` at a time), then per target its pieces and the
    log2 rounds before it has a source, each up to max_attempts copies of pull_timeout, plus
    KEY_MARGIN."""
    defaults = fr.Options()
    assert defaults.pull_timeout() == 600
    assert fr.key_lifetime(defaults, 4, 4) == 600 + (8 + 3) * 4 * 600 + 600
    assert fr.key_lifetime(defaults, 60, 32) == 2 * 600 + (8 + 6) * 4 * 600 + 600
    fast = fr.Options(pieces=2, max_attempts=2, rsync_timeout=15)
    assert fr.key_lifetime(fast, 1, 4) == 600 + (2 + 1) * 2 * 300 + 600


def test_driver_serves_a_unit_without_rrsync_from_the_controller_only():
    runner = FakeRunner.make(UNITS[:6], no_rrsync=["u02"])
    result = runner.run()
    assert result["ok"] and result["units"]["u02"] == "live"
    assert {t.source for t in runner.copies if t.target == "u02"} == {fo.CONTROLLER}
    assert not [t for t in runner.copies if t.source == "u02"]
    message = result["fleet_key"]["refused"]["u02"]
    assert message.startswith("u02: rrsync not found") and "shell as root" in message
    assert "/usr/bin/rrsync" in message and "/usr/local/bin/rrsync" in message
    assert list(result["fleet_key"]["refused"]) == ["u02"]
    assert any(e["event"] == "refused" and e["unit"] == "u02" for e in runner.log)


def test_driver_cleanup_tries_units_that_dropped_out_and_names_what_may_remain():
    """The old driver skipped dead units' cleanup: their fleet key stayed, unreported."""
    runner = FakeRunner.make(UNITS[:6], dead_after=("u00", 6), not_reached=["u05"])
    result = runner.run()
    assert result["units"]["u00"].startswith("dead")
    cleaned = {name: multiplex for command, name, _, multiplex in runner.calls if command == "cleanup"}
    assert set(cleaned) == set(UNITS[:5])  # every unit the helper reached, the dead one too
    assert cleaned["u00"] is False and cleaned["u01"] is True  # a dropped unit over a fresh connection
    may_remain = result["fleet_key"]["may_remain"]
    assert sorted(may_remain) == ["u00", "u05"]
    assert may_remain["u00"].startswith("u00: a fleet key may remain there (cleanup failed")
    assert "No route to host" in may_remain["u00"]
    assert may_remain["u05"].startswith("u05: a fleet key may remain there (not reached this run")
    assert all(m.endswith(f"removed at the start of the next run that reaches {u}") for u, m in may_remain.items())


def test_push_mode_installs_no_key_and_still_cleans_up():
    runner = FakeRunner.make(UNITS[:3], push=True)
    result = runner.run()
    assert result["ok"] and result["fleet_key"]["refused"] == {} and result["fleet_key"]["may_remain"] == {}
    assert all(request == {} for command, _, request, _ in runner.calls if command == "prepare")
    assert sorted(name for command, name, _, _ in runner.calls if command == "cleanup") == UNITS[:3]


def test_peers_record_a_unit_off_port_22_as_ssh_looks_it_up():
    """ssh matches known_hosts entries of a unit on another port as ``[addr]:port``."""
    from specfleet.fanout_run import Node

    assert Node(name="u", host="10.0.0.5").known_hosts_name() == "10.0.0.5"
    assert Node(name="u", host="10.0.0.5", port=2222, peer_port=2222).known_hosts_name() == "[10.0.0.5]:2222"
    assert Node(name="u", host="127.0.0.1", peer="10.0.0.5", peer_port=2200).known_hosts_name() == "[10.0.0.5]:2200"
