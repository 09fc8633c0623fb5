"""The evening's critical path: where a run's wall time went, phase by phase and wave by
wave, and what the same plan would take on real units.

Pure functions over a playbook's timeline (the benchmark's ``bench_timeline`` callback:
plays, tasks with their play-level role, the results of timed actions, each with wall clock
and controller CPU) and over a table of real figures (tests/bench/data/evening_field.yml).
tests/bench/evening.py runs the evening on the lab and prints both.

The projection keeps the lab's plan (its phases, its waves, each unit's container starts
and benchmark blocks) and swaps the lab's figures for real ones:
- control work (Ansible's tasks) is bounded by the units, whose lab time is an upper bound
  (16 units share this machine's cores, a real unit has its own), repeated once per round of
  ``forks``, and by the controller's CPU, which grows with the number of units;
- payloads take F x S/B (the fan-out's measured factor, growing with log2(N+1));
- a container start that started a server takes the real start time, cold where the lab's
  compile cache missed (the pre-warm's golden runs), warm where it hit, and a benchmark
  block takes its lab time scaled by the real unit's TPOT over the lab's (its fixed costs,
  HTTP and the client, scale with it: an overestimate).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# Plays of the collection's playbooks the critical path names (tests check they exist).
PREPARE_PLAY = "Prepare each unit for its plan"
PREWARM_PLAY = "Pre-warm each key's compile cache and hand it to the units of that key"
CANARY_PLAY = "Roll out on each key's canary, measuring its draft lengths"
WAVES_PLAY = "Roll out speculative serving, wave by wave"
# Prepare roles whose bytes travel (the payloads); the others are control work.
PAYLOAD_ROLES = {"specfleet_hf_cache": "models", "specfleet_image": "image"}
START_ACTION = "specfleet.fleet.vllm_container"
BENCH_ACTION = "specfleet.fleet.spec_bench"
TIMED_ACTIONS = (START_ACTION, BENCH_ACTION)
CANARY_PHASE = "wave 0 (canaries)"


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
    """One stretch of the run: a prepare role, the pre-warm, a wave, or the facts plays."""

    name: str
    kind: str  # control, payload, prewarm, wave
    wall_s: float = 0.0
    cpu_s: float = 0.0
    hosts: set[str] = field(default_factory=set)
    # The timed tasks, in order: (action, {host: Timed}).
    timed: list[tuple[str, dict[str, Timed]]] = field(default_factory=list)

    def timed_hosts(self) -> set[str]:
        """Hosts that ran a timed task here (the canary play answers for every unit, but
        only the canaries start anything)."""
        return {host for _, hosts in self.timed for host in hosts}

    def control_wall(self) -> float:
        """Lab seconds outside the timed tasks: Ansible's own work."""
        return max(self.wall_s - self.timed_wall(), 0.0)

    def timed_wall(self) -> float:
        """Lab seconds spent in the timed tasks (each as long as its slowest host)."""
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
    if play == WAVES_PLAY:
        return f"wave {batch + 1}", "wave"
    return f"facts ({playbook})" if playbook else "facts", "control"


def phases(events: Sequence[Mapping[str, Any]]) -> list[Phase]:
    """The timeline cut into phases, in run order; a phase that comes back (the facts plays
    of each playbook, a role's handlers) adds up under its name."""
    by_name: dict[str, Phase] = {}
    order: list[str] = []
    playbook, play, batch, role = "", "", 0, None
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
            play, role = event["play"], None
        elif kind == "task":
            # An included role's tasks belong to the role (or play) that included them.
            role = event.get("role") or role
            name, phase_kind = phase_of(play, batch, role, playbook)
            close(event["t"], event["cpu"])
            if name not in by_name:
                by_name[name] = Phase(name, phase_kind)
                order.append(name)
            current, since = by_name[name], (event["t"], event["cpu"])
            if event.get("action") in TIMED_ACTIONS:
                current.timed.append((event["action"], {}))
        elif kind == "result" and current is not None:
            current.hosts.add(event["host"])
            if current.timed and current.timed[-1][0] == event["action"]:
                unsaid = current.kind == "prewarm" and not event.get("compile_cache")
                current.timed[-1][1][event["host"]] = Timed(
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


@dataclass(frozen=True)
class Real:
    """What the projection needs to know about the real event."""

    units: int
    forks: int
    controller_cores: int
    link_bytes_s: float
    fanout_16: float
    fanout_pieces: int
    # Bytes of each payload phase (models, image) for one unit, and of the bootstrap's packages.
    payload_bytes: Mapping[str, float]
    package_bytes: float
    start_cold_s: float
    start_warm_s: float
    # Real TPOT over the lab's, per lab host (benchmark blocks scale by it).
    bench_scale: Mapping[str, float]
    serial: Sequence[int | str]
    canaries: int


def control_seconds(phase: Phase, lab_units: int, real: Real, units: int | None = None) -> float:
    """A phase's control work (its time outside the timed tasks) on the real event: the
    larger of the units' side (the lab's time, once per round of forks) and the controller's
    CPU (grown with the units, spread over the real controller's cores)."""
    units = real.units if units is None else units
    control = phase.control_wall()
    unit_side = control * rounds(units, real.forks) / rounds(lab_units, real.forks)
    controller_side = phase.cpu_s * units / max(lab_units, 1) / real.controller_cores
    return max(unit_side, controller_side)


def real_serving(phase: Phase, real: Real) -> dict[str, float]:
    """Per lab host: its container starts and benchmark blocks on a real unit (seconds). A
    start that started nothing (the server already ran the spec, a removal) keeps its lab time."""
    seconds: dict[str, float] = {}
    for action, hosts in phase.timed:
        for host, timed in hosts.items():
            if action == START_ACTION:
                value = (real.start_cold_s if timed.cold else real.start_warm_s) if timed.started else timed.seconds
            else:
                value = timed.seconds * real.bench_scale.get(host, 1.0)
            seconds[host] = seconds.get(host, 0.0) + value
    return seconds


def project_waves(waves: Sequence[Phase], real: Real) -> list[dict[str, Any]]:
    """The real event's waves (Ansible's batches of its units less the canaries), each as
    long as the lab's mean wave control and the slowest lab unit's serving on a real unit,
    once per round of forks."""
    if not waves:
        return []
    control = sum(p.control_wall() for p in waves) / len(waves)
    cpu_per_unit = sum(p.cpu_s for p in waves) / max(sum(len(p.hosts) for p in waves), 1)
    slowest = max((s for p in waves for s in real_serving(p, real).values()), default=0.0)
    rows = []
    for number, size in enumerate(serial_batches(real.units - real.canaries, real.serial), start=1):
        each = rounds(size, real.forks)
        rows.append({"phase": f"wave {number}", "units": size,
                     "seconds": max(control * each, cpu_per_unit * size / real.controller_cores) + slowest * each,
                     "bound": f"slowest unit's starts and benchmarks {slowest:.0f} s"
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
            golden = max(real_serving(phase, real).values(), default=0.0)
            rows.append({"phase": phase.name, "units": real.units, "seconds": control + golden,
                         "bound": f"golden unit's starts {golden:.0f} s"})
        elif phase.name == CANARY_PHASE:
            if not real.canaries:
                continue  # no key sweeps its draft length: the canary play starts nothing
            slowest = max(real_serving(phase, real).values(), default=0.0)
            rows.append({"phase": phase.name, "units": real.canaries,
                         "seconds": control_seconds(phase, lab_units, real, real.canaries) + slowest,
                         "bound": f"slowest canary's starts and benchmarks {slowest:.0f} s"})
        elif phase is waves[0]:
            rows.extend(project_waves(waves, real))
    return rows


def critical(rows: Iterable[Mapping[str, Any]]) -> tuple[float, Mapping[str, Any]]:
    """Total seconds (phases run one after another) and the phase that takes longest."""
    rows = list(rows)
    return sum(r["seconds"] for r in rows), max(rows, key=lambda r: r["seconds"])
