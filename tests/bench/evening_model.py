"""The evening's critical path: where a run's wall time went, phase by phase, and what the
same plan would take on real units.

Pure functions over a playbook's timeline (the benchmark's ``bench_timeline`` callback:
plays, tasks with their play-level role, the results of timed actions, each with wall clock
and controller CPU) and over a table of real figures (tests/bench/data/evening_field.yml).
tests/bench/evening.py runs the evening on the lab and prints both.

The projection keeps the lab's plan (its phases: prepare, pre-warm, canaries, measuring) and
swaps the lab's figures for real ones:
- control work (Ansible's tasks) is bounded by the units, whose lab time is an upper bound
  (16 units share this machine's cores, a real unit has its own), repeated once per round of
  ``forks``, and by the controller's CPU, which grows with the number of units;
- payloads take F x S/B (the fan-out's measured factor, growing with log2(N+1));
- the pre-warm's golden starts take the real start time, compiling where the lab's compile
  cache missed;
- each measuring unit's decision is budgeted from what it sends (``unit_budget``): the
  event's own bench settings (prompts, output tokens, warm-up, output check, concurrencies)
  at a real unit's TPOT and TTFT, its container starts at a real unit's start time, over as
  many blocks as the gate took in decisions simulated at the field's speedup; a wave (or, off
  lock-step, the fleet) waits for its slowest unit: the expected largest of that many budgets.
A ``Design`` says what the toolkit does (restarts, output checks, warm-ups, JIT caches, the
schedule): ``BEFORE`` is main's when issue 37 was filed, ``DESIGN`` this tree's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# Plays of the collection's playbooks the critical path names (tests check they exist).
PREPARE_PLAY = "Prepare each unit for its plan"
PREWARM_PLAY = "Pre-warm each key's compile cache and hand it to the units of that key"
CANARY_PLAY = "Roll out on each key's canary first"
MEASURING_PLAY = "Roll out on every other unit, each on its own"
# Prepare roles whose bytes travel (the payloads); the others are control work.
PAYLOAD_ROLES = {"specfleet_hf_cache": "models", "specfleet_image": "image"}
START_ACTION = "specfleet.fleet.vllm_container"
BENCH_ACTION = "specfleet.fleet.spec_bench"
TIMED_ACTIONS = (START_ACTION, BENCH_ACTION)
CANARY_PHASE = "canaries"


@dataclass(frozen=True)
class Timed:
    """One host's result of a timed task: its seconds, and for a container start whether it
    started a server, and from a cold compile cache (its ``compile_cache`` miss; where the
    result does not say, a no_log task's, the pre-warm's golden runs are the cold ones)."""

    seconds: float
    started: bool = False
    cold: bool = False


@dataclass
class Phase:
    """One stretch of the run: a prepare role, the pre-warm, the canaries, the measuring (a
    wave of it under serial), or the facts plays."""

    name: str
    kind: str  # control, payload, prewarm, wave
    wall_s: float = 0.0
    cpu_s: float = 0.0
    hosts: set[str] = field(default_factory=set)
    # The timed tasks, in order: (action, {host: Timed}).
    timed: list[tuple[str, dict[str, Timed]]] = field(default_factory=list)
    # Its play ran each host on its own (the free strategy): no task waits for the others.
    free: bool = False

    def timed_hosts(self) -> set[str]:
        """Hosts that ran a timed task here (the canary play answers for every unit, but
        only the canaries start anything)."""
        return {host for _, hosts in self.timed for host in hosts}

    def control_wall(self) -> float:
        """Lab seconds outside the timed tasks: Ansible's own work."""
        return max(self.wall_s - self.timed_wall(), 0.0)

    def timed_wall(self) -> float:
        """Lab seconds spent in the timed tasks: in lock-step each as long as its slowest host;
        each host on its own, the most one host spent in its own."""
        if self.free:
            per_host: dict[str, float] = {}
            for _, hosts in self.timed:
                for host, timed in hosts.items():
                    per_host[host] = per_host.get(host, 0.0) + timed.seconds
            return max(per_host.values(), default=0.0)
        return sum(max((t.seconds for t in hosts.values()), default=0.0) for _, hosts in self.timed)


def started(result: Mapping[str, Any]) -> bool:
    """Whether a timed container task started a server: the module's action says so, or, for
    a no_log task (whose result holds only ``changed``), a change outside check mode that was
    not a removal."""
    if result.get("outcome"):
        return result["outcome"] in ("created", "recreated")
    return bool(result.get("changed")) and not result.get("check_mode") and result.get("state") != "absent"


def phase_of(play: str, batch: int, role: str | None, playbook: str) -> tuple[str, str]:
    """(name, kind) of a task of ``play`` (its ``batch``-th serial batch) in ``role``."""
    if play == PREPARE_PLAY:
        short = (role or "prepare").removeprefix("specfleet_")
        return PAYLOAD_ROLES.get(role or "", short), "payload" if role in PAYLOAD_ROLES else "control"
    if play == PREWARM_PLAY:
        return "pre-warm", "prewarm"
    if play == CANARY_PLAY:
        return CANARY_PHASE, "wave"
    if play == MEASURING_PLAY:
        return "measuring" if batch == 0 else f"measuring, batch {batch + 1}", "wave"
    return f"facts ({playbook})" if playbook else "facts", "control"


def phases(events: Sequence[Mapping[str, Any]]) -> list[Phase]:
    """The timeline cut into phases, in run order; a phase that comes back (the facts plays
    of each playbook, a role's handlers) adds up under its name."""
    by_name: dict[str, Phase] = {}
    order: list[str] = []
    # Timed task id -> its entry (a task is announced once; its hosts' results come back later,
    # under the free strategy after other tasks' starts).
    entries: dict[str, dict[str, Timed]] = {}
    playbook, play, batch, role, free = "", "", 0, None, False
    current: Phase | None = None
    since: tuple[float, float] | None = None

    def close(t: float, cpu: float) -> None:
        if current is not None and since is not None:
            current.wall_s += t - since[0]
            current.cpu_s += cpu - since[1]

    for event in events:
        kind = event["kind"]
        if kind == "playbook":
            playbook = event["file"]
        elif kind == "play":
            batch = batch + 1 if event["play"] == play else 0
            play, role, free = event["play"], None, event.get("strategy") == "free"
        elif kind == "task":
            # An included role's tasks belong to the role (or play) that included them.
            role = event.get("role") or role
            name, phase_kind = phase_of(play, batch, role, playbook)
            close(event["t"], event["cpu"])
            if name not in by_name:
                by_name[name] = Phase(name, phase_kind, free=free)
                order.append(name)
            current, since = by_name[name], (event["t"], event["cpu"])
            if event.get("action") in TIMED_ACTIONS:
                current.timed.append((event["action"], {}))
                entries[event.get("uuid") or ""] = current.timed[-1][1]
        elif kind == "result" and current is not None:
            current.hosts.add(event["host"])
            # By the task's id; a timeline without ids: the last timed task of that action.
            entry = entries.get(event["uuid"]) if event.get("uuid") else (
                current.timed[-1][1] if current.timed and current.timed[-1][0] == event["action"] else None)
            if entry is not None:
                unsaid = current.kind == "prewarm" and not event.get("compile_cache")
                entry[event["host"]] = Timed(
                    float(event["since_task_start"]), event["action"] == START_ACTION and started(event),
                    cold=event.get("compile_cache") == "miss" or unsaid)
        elif kind == "host" and current is not None:
            current.hosts.add(event["host"])
        elif kind == "end":
            close(event["t"], event["cpu"])
            current, since = None, None
    return [by_name[name] for name in order]


# ---- the projection ------------------------------------------------------------------------
def serial_batches(hosts: int, serial: Sequence[int | str]) -> list[int]:
    """Batch sizes Ansible makes of ``hosts`` with ``serial`` (as its playbook executor does:
    percentages of all the play's hosts, at least 1, the last value repeated)."""
    sizes: list[int] = []
    left, index = hosts, 0
    values = list(serial) or [-1]
    while left > 0:
        value = values[min(index, len(values) - 1)]
        if isinstance(value, str) and value.endswith("%"):
            size = int(int(value[:-1]) / 100.0 * hosts) or 1
        else:
            size = int(value)
        if size <= 0:
            size = left
        sizes.append(min(size, left))
        left -= sizes[-1]
        index += 1
    return sizes


def rounds(units: int, forks: int) -> int:
    """How many times a task runs one after another over ``units`` hosts with ``forks``."""
    return max(1, math.ceil(units / forks))


def fanout_factor(units: int, measured_16: float, pieces: int) -> float:
    """S/B of a fan-out to ``units``: the lab's measured factor at 16, grown as the
    pipelined doubling grows, (P + log2(N+1) - 1) / P."""
    def ideal(n: int) -> float:
        return (pieces + math.log2(n + 1) - 1) / pieces
    return measured_16 * ideal(units) / ideal(16)


# ---- one unit's measurement on a real unit -----------------------------------------------
@dataclass(frozen=True)
class Bench:
    """What one benchmark block sends: spec_bench's options as the rollout play passes them (the
    event inventory's ``specfleet_bench_*`` over the play's defaults), and each prompt set's size."""

    set_sizes: Mapping[str, int]
    concurrency: tuple[int, ...] = (1, 8)
    requests: int = 0
    warmups: int = 1
    repetitions: int = 1
    output_check: int = 8
    max_tokens: int = 128
    warmup_tokens: int = 32

    def run_size(self, level: int, workload: str) -> int:
        """Requests of one measured run (spec_bench: max(4N, requests or the set's size))."""
        return max(4 * level, self.requests or self.set_sizes[workload])


@dataclass(frozen=True)
class Speed:
    """A real unit's serving: the baseline's TPOT and TTFT per concurrency (ms), and the
    candidate's speedup of TPOT per concurrency (both workloads alike)."""

    tpot_ms: Mapping[int, float]
    ttft_ms: Mapping[int, float]
    speedup: Mapping[int, float]

    def tpot(self, level: int, side: str) -> float:
        return self.tpot_ms[level] / (self.speedup[level] if side == "speculative" else 1.0)


@dataclass(frozen=True)
class Starts:
    """Seconds of a container start on a real unit: from ``docker run`` to serving with every
    cache warm, and what a missed torch.compile cache and an empty FlashInfer / Triton JIT
    cache add."""

    warm_s: float
    compile_s: float
    jit_s: float

    def seconds(self, compile_cold: bool, jit_cold: bool) -> float:
        return self.warm_s + (self.compile_s if compile_cold else 0.0) + (self.jit_s if jit_cold else 0.0)


@dataclass(frozen=True)
class Design:
    """How a unit measures and how the fleet is scheduled: the knobs the evening turns on.

    ``restart_per_block``: every block starts its side's server (one container per unit), else
    both serve side by side (the plan's side_by_side): each starts once, and the decided one
    once more alone with its whole budget; ``check_every_block``: the output check
    in every block, else once per serving; ``warm_every_block``: the warm-up in every block, else
    only after a start; ``jit_cached``: the JIT caches are mounted and pre-warmed (else every new
    container compiles its kernels again); ``lockstep``: only keys that sweep have a canary and
    the other units measure in Ansible's serial waves, each task waiting for the wave's slowest
    unit; else each key's canary first, then every other unit at once, each on its own;
    ``serial``: the measuring play's default batches (playbooks/rollout.yml); ``forks``: ansible.cfg's;
    ``max_tokens``: the rollout play's default output tokens per request."""

    name: str
    restart_per_block: bool
    check_every_block: bool
    warm_every_block: bool
    jit_cached: bool
    lockstep: bool
    serial: tuple[int | str, ...]
    forks: int
    max_tokens: int


# What main did when issue 37 was filed (2026-12-06), and what it does now: 128 output tokens a
# request, each key's canary first, then every other unit on its own.
BEFORE = Design("before (main b5f57d3)", restart_per_block=True, check_every_block=True,
                warm_every_block=True, jit_cached=False, lockstep=True, serial=(1, 3, "25%", "100%"),
                forks=30, max_tokens=256)
DESIGN = Design("now", restart_per_block=False, check_every_block=False, warm_every_block=True,
                jit_cached=False, lockstep=False, serial=("100%",), forks=60, max_tokens=128)


@dataclass(frozen=True)
class Work:
    """Requests, output tokens (at most: answers may stop early) and seconds."""

    requests: int = 0
    tokens: int = 0
    seconds: float = 0.0

    def __add__(self, other: Work) -> Work:
        return Work(self.requests + other.requests, self.tokens + other.tokens, self.seconds + other.seconds)


def batch(count: int, tokens: int, level: int, speed: Speed, side: str) -> Work:
    """``count`` requests of ``tokens`` output tokens each on ``side``, ``level`` in flight: as
    many rounds of one request's time (its TTFT, then a token per TPOT)."""
    seconds = math.ceil(count / level) * (speed.ttft_ms[level] + (tokens - 1) * speed.tpot(level, side)) / 1000.0
    return Work(count, count * tokens, seconds)


def block_work(bench: Bench, speed: Speed, side: str, warm_up: bool, check: bool) -> Work:
    """One block of ``side``: per workload its warm-up (when ``warm_up``), its measured runs
    at each concurrency and its output check (when ``check``), as spec_bench sends them."""
    total = Work()
    top = max(bench.concurrency)
    for workload, size in bench.set_sizes.items():
        if warm_up:
            used = min(size, max(bench.run_size(level, workload) for level in bench.concurrency) * bench.repetitions)
            for _ in range(bench.warmups):
                total += batch(used, min(bench.max_tokens, bench.warmup_tokens), top, speed, side)
        for level in bench.concurrency:
            for _ in range(bench.repetitions):
                total += batch(bench.run_size(level, workload), bench.max_tokens, level, speed, side)
        if check and bench.output_check:
            checked = min(bench.output_check, size)
            # Each prompt twice at c=1 (its repeat), then all of them in one batch at the top level.
            total += batch(2 * checked, bench.max_tokens, 1, speed, side)
            if top > 1:
                total += batch(checked, bench.max_tokens, top, speed, side)
    return total


BLOCK_SIDES = ("baseline", "speculative")


@dataclass(frozen=True)
class Budget:
    """One unit's decision on a real unit: its container starts, its blocks, and the requests,
    output tokens and seconds they take (the starts' seconds included)."""

    starts: int
    blocks: int
    work: Work
    start_seconds: float


def unit_budget(design: Design, bench: Bench, speed: Speed, starts: Starts, blocks: int, kept: bool) -> Budget:
    """A unit measured in ``blocks`` (baseline, speculative, baseline, ...) and then ``kept`` or
    not, on a real unit: its compile cache pre-warmed (each start hits it), its JIT caches only
    when ``design.jit_cached``. Restarting per block, each block starts its side and a kept
    candidate is started once more after the last baseline block; side by side, each side
    starts once, and the decided one once more alone on the serving port with its whole budget."""
    total, started, start_seconds = Work(), 0, 0.0
    checked: set[str] = set()
    for index in range(blocks):
        side = BLOCK_SIDES[index % 2]
        starts_here = design.restart_per_block or index < 2
        if starts_here:
            started += 1
            start_seconds += starts.seconds(compile_cold=False, jit_cold=not design.jit_cached)
        total += block_work(bench, speed, side, warm_up=design.warm_every_block or starts_here,
                            check=design.check_every_block or side not in checked)
        checked.add(side)
    if kept or not design.restart_per_block:
        started += 1
        start_seconds += starts.seconds(compile_cold=False, jit_cold=not design.jit_cached)
    return Budget(started, blocks, Work(total.requests, total.tokens, total.seconds + start_seconds), start_seconds)


# ---- the fleet ------------------------------------------------------------------------------
def expected_max(values: Sequence[float], draws: int) -> float:
    """The expected largest of ``draws`` values drawn (with replacement) from ``values``: what
    a wave of that many units waits for."""
    ordered = sorted(values)
    count = len(ordered)
    if not count or draws <= 0:
        return 0.0
    total = 0.0
    for rank, value in enumerate(ordered, start=1):
        total += value * ((rank / count) ** draws - ((rank - 1) / count) ** draws)
    return total


@dataclass(frozen=True)
class Real:
    """What the projection needs to know about the real event."""

    units: int
    controller_cores: int
    link_bytes_s: float
    fanout_16: float
    fanout_pieces: int
    # Bytes of each payload phase (models, image) for one unit, and of the bootstrap's packages.
    payload_bytes: Mapping[str, float]
    package_bytes: float
    starts: Starts
    bench: Bench
    speed: Speed
    # Simulated decisions at the field's speedup: (blocks measured, kept) each.
    decisions: Sequence[tuple[int, bool]]
    # Canaries of keys that sweep their draft length (the lab's canary play), and keys in all.
    canaries: int
    keys: int
    design: Design = DESIGN

    def canary_count(self) -> int:
        """Units that roll out first: a canary per key, or in lock-step only the sweeping keys'."""
        return self.canaries if self.design.lockstep else self.keys

    def budgets(self) -> list[Budget]:
        """Each simulated decision's budget on a real unit."""
        return [unit_budget(self.design, self.bench, self.speed, self.starts, blocks, kept)
                for blocks, kept in self.decisions]


def control_seconds(phase: Phase, lab_units: int, real: Real, units: int | None = None) -> float:
    """A phase's control work (its time outside the timed tasks) on the real event: the
    larger of the units' side (the lab's time, once per round of forks) and the controller's
    CPU (grown with the units, spread over the real controller's cores)."""
    units = real.units if units is None else units
    control = phase.control_wall()
    unit_side = control * rounds(units, real.design.forks) / rounds(lab_units, real.design.forks)
    controller_side = phase.cpu_s * units / max(lab_units, 1) / real.controller_cores
    return max(unit_side, controller_side)


def golden_starts(phase: Phase, real: Real) -> float:
    """The pre-warm on real units: its slowest golden unit's starts, each compiling where its
    compile cache missed, and its JIT kernels (a golden run starts from empty caches)."""
    per_host: dict[str, float] = {}
    for action, hosts in phase.timed:
        for host, timed in hosts.items():
            if action == START_ACTION and timed.started:
                per_host[host] = per_host.get(host, 0.0) + real.starts.seconds(compile_cold=timed.cold, jit_cold=True)
    return max(per_host.values(), default=0.0)


def project_measuring(waves: Sequence[Phase], real: Real) -> list[dict[str, Any]]:
    """The real event's measuring units (all but the canaries): each decision's budget from the
    simulated ones, in the design's serial batches, each as long as the lab's mean wave control
    and its expected slowest unit's decision, once per round of forks. Every unit is budgeted
    alike at the same speed, so waiting for the slowest at every task (lock-step) or once (each
    on its own) comes to the same; forks bound the tasks running at once, and a round of forks
    each is an upper bound for units on their own."""
    if not waves:
        return []
    control = sum(p.control_wall() for p in waves) / len(waves)
    cpu_per_unit = sum(p.cpu_s for p in waves) / max(sum(len(p.hosts) for p in waves), 1)
    seconds = [budget.work.seconds for budget in real.budgets()]
    measuring = real.units - real.canary_count()
    sizes = serial_batches(measuring, real.design.serial)
    rows = []
    for number, size in enumerate(sizes, start=1):
        each = rounds(size, real.design.forks)
        slowest = expected_max(seconds, min(size, real.design.forks))
        name = f"wave {number}" if real.design.lockstep else "measuring" + (f", batch {number}" if number > 1 else "")
        rows.append({"phase": name, "units": size,
                     "seconds": max(control * each, cpu_per_unit * size / real.controller_cores) + slowest * each,
                     "bound": f"slowest of {min(size, real.design.forks)} units' decisions {slowest:.0f} s"
                              + (f", {each} rounds of forks" if each > 1 else "")})
    return rows


def project(lab: Sequence[Phase], lab_units: int, real: Real) -> list[dict[str, Any]]:
    """The lab's phases on the real event, in run order: rows of {phase, units, seconds,
    bound}; the lab's waves become the real event's waves."""
    rows: list[dict[str, Any]] = []
    waves = [p for p in lab if p.kind == "wave" and p.name != CANARY_PHASE]
    for phase in lab:
        control = control_seconds(phase, lab_units, real)
        if phase.kind == "control":
            row = {"phase": phase.name, "units": real.units, "seconds": control, "bound": "control"}
            if phase.name == "bootstrap" and real.package_bytes:
                fetch = real.package_bytes * real.units / real.link_bytes_s
                row.update(seconds=control + fetch, bound=f"control; packages from the controller {fetch:.0f} s")
            rows.append(row)
        elif phase.kind == "payload":
            size = real.payload_bytes.get(phase.name, 0.0)
            transfer = fanout_factor(real.units, real.fanout_16, real.fanout_pieces) * size / real.link_bytes_s
            rows.append({"phase": phase.name, "units": real.units, "seconds": control + transfer,
                         "bound": f"{size / 1e9:.1f} GB fanned out {transfer:.0f} s"})
        elif phase.kind == "prewarm":
            golden = golden_starts(phase, real)
            rows.append({"phase": phase.name, "units": real.units, "seconds": control + golden,
                         "bound": f"golden unit's starts {golden:.0f} s"})
        elif phase.name == CANARY_PHASE:
            if not real.canary_count():
                continue  # no unit rolls out first: the canary play starts nothing
            slowest = canary_seconds(phase, real)
            rows.append({"phase": phase.name, "units": real.canary_count(),
                         "seconds": control_seconds(phase, lab_units, real, real.canary_count()) + slowest,
                         "bound": f"slowest of {real.canary_count()} canaries' decisions {slowest:.0f} s"})
        elif phase is waves[0]:
            rows.extend(project_measuring(waves, real))
    return rows


def canary_seconds(phase: Phase, real: Real) -> float:
    """The canaries on real units, every key at once: the slowest of as many decisions, and no
    less than a sweep of as many blocks as the lab's canary measured (its last k kept)."""
    swept = max((sum(1 for action, hosts in phase.timed if action == BENCH_ACTION and host in hosts)
                 for host in phase.timed_hosts()), default=0)
    sweep = unit_budget(real.design, real.bench, real.speed, real.starts, swept, kept=True).work.seconds
    drawn = expected_max([budget.work.seconds for budget in real.budgets()], real.canary_count())
    return max(sweep, drawn)


def critical(rows: Iterable[Mapping[str, Any]]) -> tuple[float, Mapping[str, Any]]:
    """Total seconds (phases run one after another) and the phase that takes longest."""
    rows = list(rows)
    return sum(r["seconds"] for r in rows), max(rows, key=lambda r: r["seconds"])
