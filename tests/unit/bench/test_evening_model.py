"""The evening's critical path: phases from a timeline, the projection onto real units."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from ansible.executor.playbook_executor import PlaybookExecutor

from tests.bench import evening_model as evening

REPO = Path(__file__).resolve().parents[3]


def test_the_plays_it_names_are_the_playbooks_plays() -> None:
    names = set()
    for path in (REPO / "playbooks").glob("*.yml"):
        names |= {play.get("name") for play in yaml.safe_load(path.read_text()) or [] if isinstance(play, dict)}
    for play in (evening.PREPARE_PLAY, evening.PREWARM_PLAY, evening.CANARY_PLAY, evening.MEASURING_PLAY):
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
    {"kind": "play", "t": 100, "cpu": 36, "play": evening.MEASURING_PLAY},
    task(100, 36, action=evening.BENCH_ACTION),
    result(130, "u2", 30, evening.BENCH_ACTION, outcome="", compile_cache=None),
    {"kind": "play", "t": 140, "cpu": 40, "play": evening.MEASURING_PLAY},
    task(140, 40, action=evening.START_ACTION),
    result(141, "u3", 1, evening.START_ACTION, outcome="none", compile_cache=None),
    result(150, "u4", 10, evening.START_ACTION),
    {"kind": "end", "t": 160, "cpu": 44},
]


def test_phases_cut_the_timeline_by_play_role_and_batch() -> None:
    phases = {p.name: p for p in evening.phases(TIMELINE)}
    assert list(phases) == ["facts (prepare.yml)", "bootstrap", "models", "image", "facts (rollout.yml)",
                            "canaries", "measuring", "measuring, batch 2"]
    assert (phases["bootstrap"].wall_s, phases["bootstrap"].cpu_s, phases["bootstrap"].kind) == (30, 15, "control")
    # The models phase runs from its first task to the image role's, the included fan-out within.
    assert (phases["models"].wall_s, phases["models"].kind) == (20, "payload")
    # Each facts play adds its time under its playbook's name; the image phase ends at the next playbook.
    assert phases["image"].wall_s == 10
    assert phases["facts (rollout.yml)"].wall_s == 5
    assert phases["measuring"].timed == [(evening.BENCH_ACTION, {"u2": evening.Timed(30.0)})]
    assert phases["measuring, batch 2"].timed == [(evening.START_ACTION, {"u3": evening.Timed(1.0),
                                                               "u4": evening.Timed(10.0, started=True)})]
    assert phases["measuring, batch 2"].hosts == {"u3", "u4"}
    assert phases["bootstrap"].hosts == {"u1"} and phases["bootstrap"].timed_hosts() == set()
    assert phases["canaries"].timed_hosts() == {"u1"}
    assert phases["measuring, batch 2"].timed_wall() == 10
    assert (phases["measuring, batch 2"].wall_s, phases["measuring, batch 2"].cpu_s) == (20, 4)


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


BENCH = evening.Bench(set_sizes={"code_edit": 40, "chat": 40}, max_tokens=256)
# TPOT 20 / 40 ms at c=1 / c=8, TTFT 100 / 400 ms, the candidate 2x / 1.25x faster per token.
SPEED = evening.Speed(tpot_ms={1: 20.0, 8: 40.0}, ttft_ms={1: 100.0, 8: 400.0}, speedup={1: 2.0, 8: 1.25})
STARTS = evening.Starts(warm_s=25.0, compile_s=45.0, jit_s=60.0)
SIDE_BY_SIDE = evening.Design("side by side", restart_per_block=False, check_every_block=False,
                              warm_every_block=False, jit_cached=True, lockstep=False, serial=("100%",),
                              forks=60, max_tokens=256)


def test_a_block_is_what_spec_bench_sends() -> None:
    """Per workload: a warm-up pass over the 40 prompts (32 tokens, at c=8), 40 requests at c=1
    and 40 at c=8 (max(4N, the set)), and the output check's 8 at c=1 twice (each repeated) and
    once in a batch at c=8."""
    found = evening.block_work(BENCH, SPEED, "baseline", warm_up=True, check=True)
    assert found.requests == 2 * (40 + 40 + 40 + 16 + 8)
    assert found.tokens == 2 * (40 * 32 + (40 + 40 + 16 + 8) * 256)
    per_workload = (5 * (400 + 31 * 40) + 40 * (100 + 255 * 20) + 5 * (400 + 255 * 40) + 16 * (100 + 255 * 20)
                    + (400 + 255 * 40)) / 1000
    assert found.seconds == pytest.approx(2 * per_workload)
    bare = evening.block_work(BENCH, SPEED, "speculative", warm_up=False, check=False)
    assert bare.requests == 2 * 80
    assert bare.seconds == pytest.approx(2 * (40 * (100 + 255 * 10) + 5 * (400 + 255 * 32)) / 1000)
    # Requests a run: never fewer than 4 x the concurrency.
    few = evening.Bench(set_sizes={"chat": 40}, requests=8, warmups=0, output_check=0)
    assert evening.block_work(few, SPEED, "baseline", warm_up=True, check=True).requests == 8 + 32


def test_a_unit_restarting_per_block_starts_each_block_and_the_kept_candidate_again() -> None:
    before = evening.BEFORE
    kept = evening.unit_budget(before, BENCH, SPEED, STARTS, 3, kept=True)
    reverted = evening.unit_budget(before, BENCH, SPEED, STARTS, 3, kept=False)
    assert (kept.starts, reverted.starts) == (4, 3)
    # Every start compiles its JIT kernels again (a new container, the caches not mounted).
    assert kept.start_seconds == pytest.approx(4 * (25 + 60))
    blocks = [evening.block_work(BENCH, SPEED, side, True, True) for side in ("baseline", "speculative", "baseline")]
    assert reverted.work.seconds == pytest.approx(sum(b.seconds for b in blocks) + 3 * 85)
    assert reverted.work.requests == sum(b.requests for b in blocks)


@pytest.mark.parametrize("kept", [True, False])
def test_side_by_side_a_unit_decides_with_two_starts_and_measures_each_serving_once_warm_and_checked(kept) -> None:
    found = evening.unit_budget(SIDE_BY_SIDE, BENCH, SPEED, STARTS, 5, kept=kept)
    # Two starts decide; the decided serving then starts alone with its whole budget.
    assert (found.starts, found.blocks, found.start_seconds) == (3, 5, 75.0)
    first = [evening.block_work(BENCH, SPEED, side, True, True) for side in ("baseline", "speculative")]
    later = [evening.block_work(BENCH, SPEED, side, False, False) for side in ("baseline", "speculative", "baseline")]
    assert found.work.seconds == pytest.approx(sum(b.seconds for b in first + later) + 75)


def test_the_expected_slowest_of_a_wave() -> None:
    assert evening.expected_max([1.0, 2.0], 1) == pytest.approx(1.5)
    assert evening.expected_max([2.0, 1.0], 2) == pytest.approx(1 * 0.25 + 2 * 0.75)
    assert evening.expected_max([3.0] * 5 + [9.0], 60) == pytest.approx(9.0 - 6 * (5 / 6) ** 60)
    assert evening.expected_max([], 4) == 0.0


def real(**changes: object) -> evening.Real:
    values = dict(units=60, controller_cores=8, link_bytes_s=125e6, fanout_16=2.0, fanout_pieces=6,
                  payload_bytes={"models": 16e9, "image": 12e9}, package_bytes=60e6, starts=STARTS, bench=BENCH,
                  speed=SPEED, decisions=[(3, True)] * 3 + [(5, False)], canaries=1, keys=2,
                  design=evening.BEFORE)
    values.update(changes)
    return evening.Real(**values)  # type: ignore[arg-type]


def test_the_projection_keeps_the_plan_and_budgets_each_unit() -> None:
    rows = {r["phase"]: r for r in evening.project(evening.phases(TIMELINE), 4, real())}
    without_canaries = [r["phase"] for r in evening.project(evening.phases(TIMELINE), 4, real(canaries=0))]
    assert "canaries" not in without_canaries and "wave 1" in without_canaries
    # Control: the units' side (30 s, two rounds of 30 forks for 60 units, one for the lab's 4)
    # against the controller's (15 CPU s x 60/4 units over 8 cores = 28.1 s); plus the packages.
    assert rows["bootstrap"]["seconds"] == pytest.approx(60 + 60e6 * 60 / 125e6)
    # A payload: its control plus F(60) x S/B.
    transfer = evening.fanout_factor(60, 2.0, 6) * 16e9 / 125e6
    assert rows["models"]["seconds"] == pytest.approx(max(20 * 2, 10 * 15 / 8) + transfer)
    # The canary measured no block in the lab (its sweep: a start); it takes a decision's time.
    budgets = [b.work.seconds for b in real().budgets()]
    assert rows["canaries"]["seconds"] == pytest.approx(max(5.0, 1 * 1 / 4 / 8) + max(85, sum(budgets) / 4))
    # The real waves: 59 units in Ansible's batches, each waiting for its expected slowest unit
    # (three of four decisions take 3 blocks, one 5); 41 units take two rounds of 30 forks.
    waves = [r for r in rows.values() if r["phase"].startswith("wave ")]
    assert [r["units"] for r in waves] == [1, 3, 14, 41]
    control = ((40 - 30) + (20 - 10)) / 2  # each wave's wall less its slowest starts and benchmarks
    assert waves[0]["seconds"] == pytest.approx(max(control, 8 / 3 / 8) + sum(budgets) / 4)
    slowest_30 = evening.expected_max(budgets, 30)
    assert waves[3]["seconds"] == pytest.approx(max(control * 2, 8 / 3 * 41 / 8) + slowest_30 * 2)
    total, longest = evening.critical(rows.values())
    assert total == pytest.approx(sum(r["seconds"] for r in rows.values()))
    assert longest["phase"] == "wave 4"
    # Off lock-step each key's canary goes first (two keys: the slowest of two decisions), then
    # every other unit at once, waiting for the slowest once.
    free = {r["phase"]: r for r in evening.project(evening.phases(TIMELINE), 4, real(design=SIDE_BY_SIDE))}
    assert "wave 1" not in free
    budgets = [b.work.seconds for b in real(design=SIDE_BY_SIDE).budgets()]
    assert free["canaries"]["units"] == 2
    assert free["canaries"]["seconds"] == pytest.approx(max(5.0, 1 * 2 / 4 / 8) + evening.expected_max(budgets, 2))
    assert free["measuring"]["units"] == 58
    assert free["measuring"]["seconds"] == pytest.approx(max(control, 8 / 3 * 58 / 8)
                                                         + evening.expected_max(budgets, 58))


def test_a_golden_start_from_a_missed_compile_cache_compiles_and_a_removal_no_start() -> None:
    timeline = [
        {"kind": "playbook", "t": 0, "cpu": 0, "file": "prewarm.yml"},
        {"kind": "play", "t": 0, "cpu": 0, "play": evening.PREWARM_PLAY},
        task(0, 0, action=evening.START_ACTION),
        result(5, "u1", 5, evening.START_ACTION, compile_cache="miss"),
        result(6, "u2", 6, evening.START_ACTION, outcome="removed", compile_cache=None),
        {"kind": "end", "t": 10, "cpu": 1},
    ]
    (row,) = evening.project(evening.phases(timeline), 2, real())
    assert row["seconds"] == pytest.approx(max(4 * 2, 1 * 30 / 8) + 25 + 45 + 60)


def test_each_unit_on_its_own_spends_its_own_timed_seconds() -> None:
    """A free play: results come back by task id, after other tasks started; the phase's timed
    seconds are the most one unit spent in its own timed tasks."""
    def timed_result(t: float, host: str, seconds: float, uuid: str) -> dict:
        return {**result(t, host, seconds, evening.BENCH_ACTION, outcome="", compile_cache=None), "uuid": uuid}
    timeline = [
        {"kind": "playbook", "t": 0, "cpu": 0, "file": "rollout.yml"},
        {"kind": "play", "t": 0, "cpu": 0, "play": evening.MEASURING_PLAY, "strategy": "free"},
        {**task(0, 0, action=evening.BENCH_ACTION), "uuid": "a"},
        {**task(1, 0, action=evening.BENCH_ACTION), "uuid": "b"},
        timed_result(30, "u1", 30, "a"),
        timed_result(40, "u2", 39, "b"),
        timed_result(50, "u2", 10, "a"),
        {"kind": "end", "t": 60, "cpu": 2},
    ]
    [measuring] = evening.phases(timeline)
    assert measuring.free and measuring.name == "measuring"
    assert measuring.timed == [(evening.BENCH_ACTION, {"u1": evening.Timed(30.0), "u2": evening.Timed(10.0)}),
                               (evening.BENCH_ACTION, {"u2": evening.Timed(39.0)})]
    assert measuring.timed_wall() == 49.0 and measuring.control_wall() == 11.0


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
        {"kind": "play", "t": 5, "cpu": 0, "play": evening.MEASURING_PLAY},
        task(5, 0, action=evening.START_ACTION), censored("u1", True),
        {"kind": "end", "t": 10, "cpu": 0},
    ]
    prewarm, wave = evening.phases(timeline)
    assert prewarm.timed[0][1]["u1"] == evening.Timed(2.0, started=True, cold=True)
    assert wave.timed[0][1]["u1"] == evening.Timed(2.0, started=True, cold=False)
