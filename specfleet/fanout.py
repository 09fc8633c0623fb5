"""Fan-out planning: who copies which part of a store from whom, and when.

Pure functions and a pure state machine, no I/O (the driver in ``fanout_run`` executes
it with real rsync/ssh; the tests' simulator, tests/fanout_sim.py, executes it on a clock).

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
- a node that dies is dropped as source and as target; its pending work is reassigned;
- a ``controller_only`` target (a unit that cannot hold the fleet key confined, see
  ``fleet_key``) receives from the controller only and serves no one.

The driver runs the scheduler event by event, as copies finish: when links are equal
that is the lock-step schedule of waves the tests check, and it adapts when they are not.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

CONTROLLER = "controller"


# ---- jobs ------------------------------------------------------------------------------
def distribution_job(label: str, store: str, name: str, subdir: str, root: str, units: Sequence[str],
                     **extra: Any) -> dict[str, Any]:
    """One run of `specfleet distribute`, as the specfleet_fanout role's ``distribute`` tasks
    take it (``specfleet_fanout_jobs``): the controller ``store`` holding ``<subdir>/<name>/``
    and ``manifests/<name>.json``, the ``root`` of the stores on the units, the ``units`` that
    take it, and the ``label`` the play shows for it. ``extra`` keys ride along for the caller
    to read back from the registered results (the model role's repo id)."""
    if not units:
        raise ValueError(f"{label}: a distribution job needs at least one unit")
    return {**extra, "label": label, "store": store, "name": name, "subdir": subdir, "root": root,
            "units": list(units)}


def lacked_jobs(lacking: Iterable[Sequence[Any]], min_units: int, store: str, subdir: str, root: str,
                variable: str, name_of: Callable[[str], str], carry: str) -> list[dict[str, Any]]:
    """One distribution job per payload that at least ``min_units`` units lack (0: none).

    ``lacking``: (host, payloads) pairs in play order; ``name_of`` gives a payload's store entry
    (a repo id's hub directory, a tarball's entry), and each job carries its payload as
    ``carry`` and as its label. Pushing S bytes from the controller to N units takes N*S over
    its one link; a fan-out takes about S (units pass verified pieces on to each other) but
    first sets up a fleet key on every unit, which pays only from a few units on: a payload
    fewer units lack is the caller's to push. ``variable`` names the minimum's setting in the
    error for a negative one. Jobs are sorted by entry; units keep play order.
    """
    if min_units < 0:
        raise ValueError(f"{variable} must be 0 (off) or more, not {min_units}")
    units_of: dict[str, list[str]] = {}
    payload_of: dict[str, str] = {}
    for host, payloads in lacking:
        for payload in payloads:
            name = name_of(payload)
            payload_of[name] = payload
            units_of.setdefault(name, []).append(host)
    if min_units == 0:
        return []
    return [distribution_job(payload_of[name], store, name, subdir, root, hosts, **{carry: payload_of[name]})
            for name, hosts in sorted(units_of.items()) if len(hosts) >= min_units]


def served(results: Iterable[Mapping[str, Any]], host: str, field: str = "name") -> list[Any]:
    """``field`` of each job that made its entry live on ``host``: from the registered results
    of the specfleet_fanout role's ``distribute`` tasks (``specfleet_fanout_runs``), whose
    stdout is `specfleet distribute --format json`. A unit a fan-out could not serve (a dropped
    link, a failed check) is not among them, nor any in check mode (no stdout): the caller
    copies to it from the controller, as to a single unit."""
    return [result["item"][field] for result in results
            if result.get("stdout") and json.loads(result["stdout"]).get("units", {}).get(host) == "live"]


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
    # Targets that take part in no unit-to-unit copy: served by the controller, serving none.
    controller_only: Iterable[str] = ()

    def __post_init__(self) -> None:
        if self.controller_slots < 1 or self.unit_slots < 1 or self.download_slots < 1:
            raise ValueError("slots must be >= 1")
        if self.controller in self.targets:
            raise ValueError("the controller cannot be a target")
        if len(set(self.targets)) != len(self.targets):
            raise ValueError("duplicate targets")
        self.controller_only = frozenset(self.controller_only)
        strangers = self.controller_only - set(self.targets)
        if strangers:
            raise ValueError(f"controller_only names no target: {', '.join(sorted(strangers))}")
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
        peers = [n for n in self.order if n not in self.controller_only] if self.units_serve else []
        candidates = [*peers, self.controller]
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
                        if target in self.controller_only and source != self.controller:
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
