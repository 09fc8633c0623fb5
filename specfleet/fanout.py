"""Fan-out planning: who copies which part of a store from whom, and when.

Pure functions and a pure state machine, no I/O (the driver in ``fanout_run`` executes
it with real rsync/ssh; the simulator here executes it on a clock).

Why: pushing a store of S bytes from the controller to N units over a controller link of
rate B takes N*S/B. Units that already hold a verified copy can serve it too, so the
number of holders doubles every S/B: ceil(log2(N+1)) * S/B. Splitting the store into P
pieces (groups of whole files) and letting a unit pass on a piece as soon as it verified
that piece pipelines the doubling: about (P + log2(N+1) - 1) * S/(P*B), which tends to
S/B -- every unit receives at its full link rate from the first seconds on.

Rules the scheduler keeps (and the tests check):
- a node serves only pieces it holds *verified* (the controller holds all);
- each node uploads to at most ``unit_slots`` (controller: ``controller_slots``) targets
  at once and downloads at most ``download_slots`` pieces at once;
- a target is served each piece exactly once (on success); a failed copy returns the
  piece to pending and the next attempt prefers another source;
- a node that dies is dropped as source and as target; its pending work is reassigned.

``plan_waves`` runs the scheduler in lock-step rounds (every copy in a round takes the
same time) to show the plan as waves; the driver and ``simulate`` run it event by event,
which is the same schedule when links are equal and adapts when they are not.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

CONTROLLER = "controller"


# ---- pieces ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Piece:
    """Whole files copied (and verified) together."""

    index: int
    files: tuple[str, ...]
    size: int


def split_pieces(files: Mapping[str, int], pieces: int) -> list[Piece]:
    """Group ``files`` (path -> size) into at most ``pieces`` pieces of similar size.

    Files are never split (rsync and the manifest work per file): a file larger than
    S/pieces is a piece of its own. Largest files first into the lightest piece (LPT);
    pieces are returned largest first, files inside sorted by path.
    """
    if pieces < 1:
        raise ValueError("pieces must be >= 1")
    if not files:
        return []
    count = min(pieces, len(files))
    heap: list[tuple[int, int]] = [(0, i) for i in range(count)]
    members: list[list[str]] = [[] for _ in range(count)]
    for path, size in sorted(files.items(), key=lambda item: (-item[1], item[0])):
        load, index = heapq.heappop(heap)
        members[index].append(path)
        heapq.heappush(heap, (load + size, index))
    groups = sorted(
        (sum(files[p] for p in group), tuple(sorted(group))) for group in members if group
    )
    groups.reverse()
    return [Piece(i, group, size) for i, (size, group) in enumerate(groups)]


def manifest_pieces(manifest: Mapping, pieces: int) -> list[Piece]:
    """Pieces of a store manifest (``files``: path -> {size, sha256})."""
    return split_pieces({path: int(entry["size"]) for path, entry in manifest["files"].items()}, pieces)


# ---- the scheduler ---------------------------------------------------------------------
@dataclass(frozen=True)
class Transfer:
    source: str
    target: str
    piece: int


@dataclass
class Scheduler:
    """Decides copies one event at a time. Feed it outcomes; ask it for new copies.

    ``have`` seeds what units already hold verified (a unit whose live store already
    matches holds everything and is a source from the start).
    """

    targets: Sequence[str]
    pieces: Sequence[int] | int = 1
    have: Mapping[str, Iterable[int]] = field(default_factory=dict)
    controller: str = CONTROLLER
    controller_slots: int = 1
    unit_slots: int = 1
    download_slots: int = 1
    # Attempts per (target, piece) before the target is given up.
    max_attempts: int = 4
    # False: only the controller serves (plain push, for comparison).
    units_serve: bool = True

    def __post_init__(self) -> None:
        if self.controller_slots < 1 or self.unit_slots < 1 or self.download_slots < 1:
            raise ValueError("slots must be >= 1")
        if self.controller in self.targets:
            raise ValueError("the controller cannot be a target")
        if len(set(self.targets)) != len(self.targets):
            raise ValueError("duplicate targets")
        self.piece_ids: list[int] = (
            list(range(self.pieces)) if isinstance(self.pieces, int) else list(self.pieces)
        )
        self.all: frozenset[int] = frozenset(self.piece_ids)
        self.order: list[str] = list(self.targets)
        self.holds: dict[str, set[int]] = {t: set(self.have.get(t, ())) & self.all for t in self.order}
        self.holds[self.controller] = set(self.all)
        self.active: set[Transfer] = set()
        self.uploads: dict[str, int] = {n: 0 for n in [self.controller, *self.order]}
        self.downloads: dict[str, int] = {n: 0 for n in self.order}
        self.dead: dict[str, str] = {}
        self.given_up: dict[str, str] = {}
        self.attempts: dict[tuple[str, int], int] = {}
        # (source, target, piece) that failed: avoided while another source can serve.
        self.failed_from: set[tuple[str, str, int]] = set()
        self.served: list[Transfer] = []

    # -- queries ---------------------------------------------------------------------
    def slots(self, node: str) -> int:
        return self.controller_slots if node == self.controller else self.unit_slots

    def alive(self, node: str) -> bool:
        return node not in self.dead

    def complete(self, node: str) -> bool:
        return self.holds.get(node, set()) >= self.all

    def open_targets(self) -> list[str]:
        """Targets still to be served (alive, not given up, incomplete)."""
        return [t for t in self.order
                if self.alive(t) and t not in self.given_up and not self.complete(t)]

    def finished(self) -> bool:
        return not self.active and not self.open_targets()

    def stuck(self) -> bool:
        """Nothing in flight, targets open, and no live node holds what they lack."""
        if self.active or not self.open_targets():
            return False
        return not self.assign(dry_run=True)

    def holders(self, piece: int) -> int:
        return sum(1 for node, held in self.holds.items() if piece in held and self.alive(node))

    def in_flight(self, target: str) -> set[int]:
        return {t.piece for t in self.active if t.target == target}

    # -- decisions -------------------------------------------------------------------
    def assign(self, dry_run: bool = False) -> list[Transfer]:
        """New copies to start now (and marks them active unless ``dry_run``).

        Targets holding the least go first (they are the ones that cannot serve yet);
        each takes the rarest piece it lacks, from a unit source before the controller
        (the controller's link is the scarcest), a source that has not failed it before
        (unless no other can serve), the least busy, then in inventory order.
        """
        uploads = dict(self.uploads)
        downloads = dict(self.downloads)
        planned: list[Transfer] = []
        flying = {(t.target, t.piece) for t in self.active}
        rarity = {p: self.holders(p) + sum(1 for t in self.active if t.piece == p) for p in self.piece_ids}
        candidates = [*self.order, self.controller] if self.units_serve else [self.controller]
        sources = [n for n in candidates if self.alive(n) and self.holds.get(n)]
        position = {n: i for i, n in enumerate(self.order)}
        targets = sorted(self.open_targets(), key=lambda t: (len(self.holds[t]) + len(self.in_flight(t)),
                                                             position[t]))
        for target in targets:
            while downloads[target] < self.download_slots:
                lacking = [p for p in self.piece_ids
                           if p not in self.holds[target] and (target, p) not in flying]
                best: tuple | None = None
                for piece in lacking:
                    for source in sources:
                        if source == target or uploads[source] >= self.slots(source):
                            continue
                        if piece not in self.holds[source]:
                            continue
                        key = (
                            rarity[piece],
                            (source, target, piece) in self.failed_from,
                            source == self.controller,
                            uploads[source],
                            position.get(source, len(position)),
                            piece,
                        )
                        if best is None or key < best[0]:
                            best = (key, source, piece)
                if best is None:
                    break
                _, source, piece = best
                transfer = Transfer(source, target, piece)
                planned.append(transfer)
                uploads[source] += 1
                downloads[target] += 1
                flying.add((target, piece))
                rarity[piece] += 1
        if not dry_run:
            for transfer in planned:
                self.start(transfer)
        return planned

    def start(self, transfer: Transfer) -> None:
        self.active.add(transfer)
        self.uploads[transfer.source] += 1
        self.downloads[transfer.target] += 1
        key = (transfer.target, transfer.piece)
        self.attempts[key] = self.attempts.get(key, 0) + 1

    def _finish(self, transfer: Transfer) -> None:
        self.active.discard(transfer)
        self.uploads[transfer.source] -= 1
        self.downloads[transfer.target] -= 1

    # -- outcomes --------------------------------------------------------------------
    def succeeded(self, transfer: Transfer) -> None:
        """The target copied and verified the piece: it may serve it from now on."""
        self._finish(transfer)
        if not self.alive(transfer.target):
            return
        if transfer.piece in self.holds[transfer.target]:
            raise ValueError(f"{transfer.target} was served piece {transfer.piece} twice")
        self.holds[transfer.target].add(transfer.piece)
        self.served.append(transfer)

    def failed(self, transfer: Transfer, source_alive: bool = True, target_alive: bool = True,
               reason: str = "copy failed") -> None:
        """A copy failed (transport error or checksum mismatch). The piece goes back to
        pending for the target; a dead source or target is dropped."""
        self._finish(transfer)
        self.failed_from.add((transfer.source, transfer.target, transfer.piece))
        if not source_alive:
            self.drop(transfer.source, f"source failed: {reason}")
        if not target_alive:
            self.drop(transfer.target, f"unreachable: {reason}")
        if (self.alive(transfer.target)
                and self.attempts.get((transfer.target, transfer.piece), 0) >= self.max_attempts):
            self.given_up[transfer.target] = (
                f"piece {transfer.piece} failed {self.max_attempts} times; last: {reason}"
            )

    def revoke(self, node: str, pieces: Iterable[int]) -> None:
        """``node`` no longer holds ``pieces`` (its final verification found them bad):
        they are copied again."""
        self.holds[node] -= set(pieces)

    def drop(self, node: str, reason: str) -> list[Transfer]:
        """A node died: never use it again. Returns its copies still marked active (the
        caller reports each as failed when its process ends)."""
        if node == self.controller:
            raise ValueError("the controller cannot be dropped")
        self.dead.setdefault(node, reason)
        return [t for t in self.active if node in (t.source, t.target)]

    def outcome(self) -> dict[str, str]:
        """Per target: ``complete``, ``dead: ...``, ``given up: ...`` or ``incomplete``."""
        result = {}
        for target in self.order:
            if target in self.dead:
                result[target] = f"dead: {self.dead[target]}"
            elif self.complete(target):
                result[target] = "complete"
            elif target in self.given_up:
                result[target] = f"given up: {self.given_up[target]}"
            else:
                result[target] = "incomplete"
        return result


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
