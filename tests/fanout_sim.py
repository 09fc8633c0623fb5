"""The fan-out scheduler run on a clock instead of on units: lock-step waves and an event
simulator, for the tests and benchmarks (the product runs it on real units, fanout_run)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from specfleet.fanout import Scheduler, Transfer


# ---- waves -----------------------------------------------------------------------------
def plan_waves(targets: Sequence[str], pieces: int = 1, controller_slots: int = 1,
               unit_slots: int = 1, have: Mapping[str, Iterable[int]] | None = None,
               fail: Mapping[str, int] | None = None) -> list[list[Transfer]]:
    """The schedule as lock-step waves (each copy of a piece takes one wave).

    ``fail`` maps a node to the wave at whose start it dies (copies it was part of in
    that wave fail; its targets are reassigned from the next wave on).
    """
    scheduler = Scheduler(targets, pieces, have or {}, controller_slots=controller_slots,
                          unit_slots=unit_slots)
    fail = dict(fail or {})
    waves: list[list[Transfer]] = []
    while not scheduler.finished():
        wave_no = len(waves)
        for node, when in list(fail.items()):
            if when <= wave_no:
                scheduler.drop(node, f"died at wave {when}")
                del fail[node]
        wave = scheduler.assign()
        if not wave:
            if scheduler.open_targets() and not scheduler.active:
                break  # nobody alive holds what is missing
        for transfer in wave:
            if scheduler.alive(transfer.source) and scheduler.alive(transfer.target) and not (
                    fail.get(transfer.source) == wave_no + 1 or fail.get(transfer.target) == wave_no + 1):
                scheduler.succeeded(transfer)
            else:
                scheduler.failed(transfer, scheduler.alive(transfer.source), scheduler.alive(transfer.target))
        waves.append(wave)
        if len(waves) > 10_000:
            raise RuntimeError("schedule does not converge")
    return waves


def expected_waves(units: int, controller_slots: int = 1, unit_slots: int = 1) -> int:
    """Waves for a whole store (one piece): holders grow by (1 + slots) per wave."""
    holders, covered, waves = controller_slots, 0, 0
    while covered < units:
        new = min(units - covered, holders if waves == 0 else
                  controller_slots + covered * unit_slots)
        covered += new
        waves += 1
    return waves


# ---- simulator -------------------------------------------------------------------------
@dataclass
class SimResult:
    mode: str
    units: int
    makespan: float  # in units of S/B
    transfers: int
    finished: dict[str, float]  # target -> time it became complete (S/B)
    outcome: dict[str, str]


def simulate(units: int, mode: str = "fanout", pieces: int = 1, controller_slots: int = 1,
             unit_slots: int = 1, overhead: float = 0.0, fail_at: Mapping[str, float] | None = None,
             corrupt: Iterable[tuple[str, int]] = (), piece_sizes: Sequence[float] | None = None,
             controller_rate: float = 1.0) -> SimResult:
    """Makespan (in S/B) of copying a store of size S to ``units`` units whose links carry
    B in each direction; the controller's uplink carries ``controller_rate`` * B.

    ``push``: the controller copies to every unit at once (its uplink is shared N ways).
    ``fanout``: the scheduler above, event by event. Concurrent copies share a link
    equally (rate = B / max(uploads at source, downloads at target)). ``overhead`` adds a
    fixed time (S/B) to every copy (connection set-up, verification). ``fail_at`` kills a
    node at a time; ``corrupt`` lists (target, piece) whose first copy fails its checksum.
    """
    names = [f"u{i:03d}" for i in range(units)]
    if mode == "push":
        scheduler = Scheduler(names, 1, controller_slots=max(1, units), units_serve=False)
    elif mode == "fanout":
        scheduler = Scheduler(names, pieces, controller_slots=controller_slots, unit_slots=unit_slots)
    else:
        raise ValueError(f"unknown mode {mode!r}")
    count = len(scheduler.piece_ids)
    sizes = list(piece_sizes) if piece_sizes else [1.0 / count] * count
    total = sum(sizes)
    sizes = [s / total for s in sizes]
    corrupt_left = set(corrupt)
    deaths = sorted((t, n) for n, t in (fail_at or {}).items())
    remaining: dict[Transfer, float] = {}
    setup: dict[Transfer, float] = {}
    now = 0.0
    finished: dict[str, float] = {}
    transfers = 0

    def rate(t: Transfer) -> float:
        up = controller_rate if t.source == scheduler.controller else 1.0
        share = max(scheduler.uploads[t.source], 1)
        return min(up / share, 1.0 / max(scheduler.downloads[t.target], 1))

    while True:
        for transfer in scheduler.assign():
            remaining[transfer] = sizes[scheduler.piece_ids.index(transfer.piece)]
            setup[transfer] = overhead
            transfers += 1
        if not scheduler.active:
            break
        # Time to the next event: a copy finishing, or a node dying.
        step = math.inf
        for t in scheduler.active:
            step = min(step, setup[t] + remaining[t] / rate(t))
        if deaths and deaths[0][0] - now < step:
            step = max(deaths[0][0] - now, 0.0)
        rates = {t: rate(t) for t in scheduler.active}
        for t in list(scheduler.active):
            spend = min(step, setup[t])
            setup[t] -= spend
            remaining[t] -= (step - spend) * rates[t]
        now += step
        while deaths and deaths[0][0] <= now + 1e-12:
            _, node = deaths.pop(0)
            for t in scheduler.drop(node, f"died at {now:.2f}"):
                scheduler.failed(t, scheduler.alive(t.source), scheduler.alive(t.target), "node died")
                remaining.pop(t, None)
        for t in sorted(scheduler.active, key=lambda x: (x.target, x.piece)):
            if setup[t] <= 1e-12 and remaining[t] <= 1e-9:
                remaining.pop(t)
                if (t.target, t.piece) in corrupt_left:
                    corrupt_left.discard((t.target, t.piece))
                    scheduler.failed(t, reason="sha256 mismatch")
                    continue
                scheduler.succeeded(t)
                if scheduler.complete(t.target):
                    finished[t.target] = now
    return SimResult(mode, units, now, transfers, finished, scheduler.outcome())


def compare(units: int, pieces: int = 8, overhead: float = 0.0) -> dict[str, float]:
    """Push vs fan-out makespans (S/B) for ``units`` units."""
    push = simulate(units, "push", overhead=overhead).makespan
    tree = simulate(units, "fanout", pieces=1, overhead=overhead).makespan
    piped = simulate(units, "fanout", pieces=pieces, overhead=overhead).makespan
    return {"units": units, "push": push, "fanout_whole": tree, "fanout_pieces": piped,
            "log2": math.ceil(math.log2(units + 1))}
