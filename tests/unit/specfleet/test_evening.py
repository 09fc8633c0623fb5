"""The evening's critical path: phases from a timeline, the projection onto real units."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from ansible.executor.playbook_executor import PlaybookExecutor

from specfleet import evening

REPO = Path(__file__).resolve().parents[3]


def test_the_plays_it_names_are_the_playbooks_plays() -> None:
    names = set()
    for path in (REPO / "playbooks").glob("*.yml"):
        names |= {play.get("name") for play in yaml.safe_load(path.read_text()) or [] if isinstance(play, dict)}
    for play in (evening.PREPARE_PLAY, evening.PREWARM_PLAY, evening.CANARY_PLAY, evening.WAVES_PLAY):
        assert play in names


def task(t: float, cpu: float, role: str | None = None, action: str = "ansible.builtin.debug") -> dict:
    return {"kind": "task", "t": t, "cpu": cpu, "role": role, "action": action, "task": "x"}


def result(t: float, host: str, seconds: float, action: str, outcome: str = "created",
           compile_cache: str | None = "hit") -> dict:
    """A timed result as the bench_timeline callback writes it (``outcome``: the module's action)."""
    return {"kind": "result", "t": t, "cpu": 0, "host": host, "action": action, "changed": outcome != "none",
            "outcome": outcome, "compile_cache": compile_cache, "since_task_start": seconds}


TIMELINE = [
    {"kind": "playbook", "t": 0, "cpu": 0, "file": "prepare.yml"},
    {"kind": "play", "t": 0, "cpu": 0, "play": "Preflight, identify and plan"},
    task(0, 0),
    {"kind": "play", "t": 10, "cpu": 5, "play": evening.PREPARE_PLAY},
    task(10, 5, "specfleet_bootstrap"),
    {"kind": "host", "t": 11, "cpu": 5, "host": "u1"},
    task(40, 20, "specfleet_hf_cache"),
    task(45, 22),  # the fan-out role, included by the model role: still the models phase
    task(60, 30, "specfleet_image"),
    {"kind": "playbook", "t": 70, "cpu": 33, "file": "rollout.yml"},
    {"kind": "play", "t": 70, "cpu": 33, "play": "Preflight, identify and plan"},
    task(70, 33),
    {"kind": "play", "t": 75, "cpu": 35, "play": evening.CANARY_PLAY},
    task(75, 35, action=evening.START_ACTION),
    result(95, "u1", 20, evening.START_ACTION),
    {"kind": "play", "t": 100, "cpu": 36, "play": evening.WAVES_PLAY},
    task(100, 36, action=evening.BENCH_ACTION),
    result(130, "u2", 30, evening.BENCH_ACTION, outcome="", compile_cache=None),
    {"kind": "play", "t": 140, "cpu": 40, "play": evening.WAVES_PLAY},
    task(140, 40, action=evening.START_ACTION),
    result(141, "u3", 1, evening.START_ACTION, outcome="none", compile_cache=None),
    result(150, "u4", 10, evening.START_ACTION),
    {"kind": "end", "t": 160, "cpu": 44},
]


def test_phases_cut_the_timeline_by_play_role_and_batch() -> None:
    phases = {p.name: p for p in evening.phases(TIMELINE)}
    assert list(phases) == ["facts (prepare.yml)", "bootstrap", "models", "image", "facts (rollout.yml)",
                            "wave 0 (canaries)", "wave 1", "wave 2"]
    assert (phases["bootstrap"].wall_s, phases["bootstrap"].cpu_s, phases["bootstrap"].kind) == (30, 15, "control")
    # The models phase runs from its first task to the image role's, the included fan-out within.
    assert (phases["models"].wall_s, phases["models"].kind) == (20, "payload")
    # Each facts play adds its time under its playbook's name; the image phase ends at the next playbook.
    assert phases["image"].wall_s == 10
    assert phases["facts (rollout.yml)"].wall_s == 5
    assert phases["wave 1"].timed == [(evening.BENCH_ACTION, {"u2": evening.Timed(30.0)})]
    assert phases["wave 2"].timed == [(evening.START_ACTION, {"u3": evening.Timed(1.0),
                                                               "u4": evening.Timed(10.0, started=True)})]
    assert phases["wave 2"].hosts == {"u3", "u4"}
    assert phases["bootstrap"].hosts == {"u1"} and phases["bootstrap"].timed_hosts() == set()
    assert phases["wave 0 (canaries)"].timed_hosts() == {"u1"}
    assert phases["wave 2"].timed_wall() == 10
    assert (phases["wave 2"].wall_s, phases["wave 2"].cpu_s) == (20, 4)


class Inventory:
    def __init__(self, hosts: int):
        self.hosts = [f"h{i}" for i in range(hosts)]

    def get_hosts(self, pattern: object, order: object = None) -> list[str]:
        return list(self.hosts)


@pytest.mark.parametrize("hosts", [1, 4, 15, 59, 100])
@pytest.mark.parametrize("serial", [[1, 3, "25%", "100%"], [2], ["30%"], []])
def test_serial_batches_are_ansibles(hosts: int, serial: list) -> None:
    executor = PlaybookExecutor.__new__(PlaybookExecutor)
    executor._inventory = Inventory(hosts)
    batches = executor._get_serialized_batches(SimpleNamespace(hosts="all", order=None, serial=serial))
    assert evening.serial_batches(hosts, serial) == [len(b) for b in batches]


def test_rounds_and_fanout_factor() -> None:
    assert [evening.rounds(n, 30) for n in (1, 30, 31, 60, 61)] == [1, 1, 2, 2, 3]
    assert evening.fanout_factor(16, 2.0, 6) == pytest.approx(2.0)
    # 60 units: log2(61) - log2(17) more pieces' time, in pieces of S/6.
    grown = evening.fanout_factor(60, 2.0, 6)
    assert grown == pytest.approx(2.0 * (5 + 5.930737) / (5 + 4.087463), rel=1e-4)


def real(**changes: object) -> evening.Real:
    values = dict(units=60, forks=30, controller_cores=8, link_bytes_s=125e6, fanout_16=2.0, fanout_pieces=6,
                  payload_bytes={"models": 16e9, "image": 12e9}, package_bytes=60e6, start_cold_s=300,
                  start_warm_s=200, bench_scale={"u2": 10.0}, serial=[1, 3, "25%", "100%"], canaries=1)
    values.update(changes)
    return evening.Real(**values)  # type: ignore[arg-type]


def test_the_projection_keeps_the_plan_and_swaps_the_figures() -> None:
    rows = {r["phase"]: r for r in evening.project(evening.phases(TIMELINE), 4, real())}
    without_canaries = [r["phase"] for r in evening.project(evening.phases(TIMELINE), 4, real(canaries=0))]
    assert "wave 0 (canaries)" not in without_canaries and "wave 1" in without_canaries
    # Control: the units' side (30 s, two rounds of 30 forks for 60 units, one for the lab's 4)
    # against the controller's (15 CPU s x 60/4 units over 8 cores = 28.1 s); plus the packages.
    assert rows["bootstrap"]["seconds"] == pytest.approx(60 + 60e6 * 60 / 125e6)
    # A payload: its control plus F(60) x S/B.
    transfer = evening.fanout_factor(60, 2.0, 6) * 16e9 / 125e6
    assert rows["models"]["seconds"] == pytest.approx(max(20 * 2, 10 * 15 / 8) + transfer)
    # The canary: its real warm start (the lab's start started the server, its compile cache hit).
    assert rows["wave 0 (canaries)"]["seconds"] == pytest.approx(max(5.0, 1 * 1 / 4 / 8) + 200)
    # The real waves: 59 units in Ansible's batches; the slowest lab unit's real serving is
    # u2's benchmark block, 30 s x 10; 41 units take two rounds of 30 forks.
    waves = [r for r in rows.values() if r["phase"].startswith("wave ") and r["phase"] != "wave 0 (canaries)"]
    assert [r["units"] for r in waves] == [1, 3, 14, 41]
    control = ((40 - 30) + (20 - 10)) / 2  # each wave's wall less its slowest starts and benchmarks
    assert waves[0]["seconds"] == pytest.approx(max(control, 8 / 3 / 8) + 300)
    assert waves[3]["seconds"] == pytest.approx(max(control * 2, 8 / 3 * 41 / 8) + 300 * 2)
    total, longest = evening.critical(rows.values())
    assert total == pytest.approx(sum(r["seconds"] for r in rows.values()))
    assert longest["phase"] == "wave 4"


def test_a_start_from_a_missed_compile_cache_is_cold_and_a_removal_no_start() -> None:
    timeline = [
        {"kind": "playbook", "t": 0, "cpu": 0, "file": "prewarm.yml"},
        {"kind": "play", "t": 0, "cpu": 0, "play": evening.PREWARM_PLAY},
        task(0, 0, action=evening.START_ACTION),
        result(5, "u1", 5, evening.START_ACTION, compile_cache="miss"),
        result(6, "u2", 6, evening.START_ACTION, outcome="removed", compile_cache=None),
        {"kind": "end", "t": 10, "cpu": 1},
    ]
    (row,) = evening.project(evening.phases(timeline), 2, real())
    assert row["seconds"] == pytest.approx(max(4 * 2, 1 * 30 / 8) + 300)


def test_a_no_log_start_is_read_from_how_the_task_ran() -> None:
    """A no_log task's result holds only "changed": a compare in check mode, a removal and a
    start tell apart by the task; the pre-warm's golden start is cold."""
    def censored(host: str, changed: bool, check_mode: bool = False, state: str = "") -> dict:
        return {"kind": "result", "t": 1, "cpu": 0, "host": host, "action": evening.START_ACTION, "changed": changed,
                "check_mode": check_mode, "state": state, "outcome": "", "compile_cache": None,
                "since_task_start": 2.0}
    assert evening.started(censored("a", True))
    assert not evening.started(censored("a", True, check_mode=True))
    assert not evening.started(censored("a", True, state="absent"))
    assert not evening.started(censored("a", False))
    timeline = [
        {"kind": "playbook", "t": 0, "cpu": 0, "file": "prewarm.yml"},
        {"kind": "play", "t": 0, "cpu": 0, "play": evening.PREWARM_PLAY},
        task(0, 0, action=evening.START_ACTION), censored("u1", True),
        {"kind": "playbook", "t": 5, "cpu": 0, "file": "rollout.yml"},
        {"kind": "play", "t": 5, "cpu": 0, "play": evening.WAVES_PLAY},
        task(5, 0, action=evening.START_ACTION), censored("u1", True),
        {"kind": "end", "t": 10, "cpu": 0},
    ]
    prewarm, wave = evening.phases(timeline)
    assert prewarm.timed[0][1]["u1"] == evening.Timed(2.0, started=True, cold=True)
    assert wave.timed[0][1]["u1"] == evening.Timed(2.0, started=True, cold=False)
