"""What the organiser does next: the units of a run that need attention, each with its cause
in one sentence and the exact command that moves it on.

Read from the unit records a rollout run wrote (specfleet.runs.load_run) and nothing else,
so the report, the console summary and ``specfleet report`` say the same. Pure functions.

The commands follow how the playbooks remember decisions: a unit's decision stands for its
serving (specfleet.release), so re-running rollout.yml reuses it, and only
``specfleet_rollout_remeasure=true`` measures a decided unit again; a unit the rollout never
reached (or lost) needs no switch, its next run picks it up where it stopped.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Most urgent first (after any unit that serves nothing): a unit that may serve something
# unknown, then one that failed, one whose measurement said nothing, then one that serves its
# baseline by the gate's decision.
UNREACHABLE, FAILED, INCONCLUSIVE, REVERTED = "unreachable", "failed", "inconclusive", "reverted"
ORDER = (UNREACHABLE, FAILED, INCONCLUSIVE, REVERTED)
REMEASURE = "specfleet_rollout_remeasure=true"
MAX_BLOCKS = "specfleet_gate_max_blocks"
SENTENCE_LIMIT = 300  # a cause longer than this is cut (the full reasons stay in the unit table)
NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")  # figures differ between units with the same cause


@dataclass(frozen=True)
class Attention:
    """Units in the same state for the same cause: one sentence and one command for them all
    (60 units reverted on one check read as one item, not 60)."""

    hosts: tuple[str, ...]
    status: str  # one of ORDER
    cause: str  # one plain sentence, the first unit's figures
    command: str  # what to run next, typed as the run was (Invocation), limited to `hosts`
    serving: str  # what the units serve now: baseline, speculative, unchanged, nothing or unknown (_serving)


@dataclass(frozen=True)
class Invocation:
    """How the run was started (the summary callback records it), so that the next command is
    typed the same way: the playbook as given, a path or a collection playbook name
    (``specfleet.fleet.site``, as the README's event folder runs it), and the ``-i`` given, if any."""

    playbook: str = "playbooks/site.yml"
    inventory: tuple[str, ...] = ()

    def command(self, playbook: str, host: str, *extra: str) -> str:
        """``ansible-playbook [-i ...] PLAYBOOK -l HOST [-e ...]`` with ``playbook`` (site, rollout)
        where the run's own was, quoted for a shell."""
        if self.playbook.endswith((".yml", ".yaml")):
            named = posixpath.join(posixpath.dirname(self.playbook), f"{playbook}.yml")
        else:
            named = f"{self.playbook.rsplit('.', 1)[0]}.{playbook}" if "." in self.playbook else playbook
        words = [*self._start(named), "-l", host]
        for assignment in extra:
            words += ["-e", assignment]
        return shlex.join(words)

    def command_line(self) -> str:
        """The run's own command (without its other options, which the callback does not see)."""
        return shlex.join(self._start(self.playbook))

    def _start(self, playbook: str) -> list[str]:
        return ["ansible-playbook", *(word for path in self.inventory for word in ("-i", path)), playbook]


def _sentence(text: str) -> str:
    text = " ".join(str(text).split())
    if len(text) > SENTENCE_LIMIT:
        text = text[: SENTENCE_LIMIT - 3].rstrip() + "..."
    return text if text.endswith((".", "!", "?", "...")) else text + "."


PLAN_REFUSED = "plan refused: "  # specfleet.rollout's reason for a plan it did not roll out
NO_METHOD_FITS = "no speculative method fits"  # specfleet.plan's reason for a baseline-only plan


def _refused(record: Mapping) -> bool:
    return any(str(reason).startswith(PLAN_REFUSED) for reason in record.get("reasons") or [])


def _serving(record: Mapping) -> str:
    """What the unit serves now, as a noun: "baseline", "speculative", "unchanged" (what it
    served before the run: the rollout did not reach it, or its plan was refused), "nothing"
    (a failure with no known-good to go back to) or "unknown" (the controller lost it)."""
    serving = record.get("serving")
    if serving not in (None, ""):
        return str(serving)
    if _refused(record):
        return "unchanged"
    return "nothing" if record.get("failure") else "unknown"


def _serving_phrase(serving: str) -> str:
    return {"unknown": "an unknown serving", "unchanged": "what it served before this run",
            "nothing": "nothing"}.get(serving, f"its {serving} serving")


def gate_decided(record: Mapping) -> bool:
    """Whether the gate judged the unit (its reasons open with the gate's headline), rather than
    the plan leaving nothing to measure."""
    return bool(record.get("figures"))


def _measured_baseline(record: Mapping) -> bool:
    return bool((record.get("baseline") or {}).get("ok"))


def _blocks(record: Mapping) -> int:
    return len((record.get("measurement") or {}).get("blocks") or [])


def deciding_reason(reasons: Sequence[str]) -> str:
    """The first reason after the gate's headline (which only counts the failed checks): the
    check that decided."""
    return reasons[1] if len(reasons) > 1 else (reasons[0] if reasons else "no reason recorded")


@dataclass(frozen=True)
class _Finding:
    """One unit's state as the attention list needs it."""

    status: str
    kind: str  # what the cause is, without its figures: units alike in it share an item
    cause: str
    playbook: str
    extra: tuple[str, ...]
    blocks: int


def _kind(host: str, *parts: Any) -> str:
    """The cause without what differs between units alike in it: figures, and the unit's own
    name (ssh quotes it in "connect to host NAME")."""
    text = " | ".join(" ".join(str(part).split()) for part in parts)
    return NUMBER.sub("#", text.replace(host, "HOST") if host else text)


def finding(record: Mapping) -> _Finding | None:
    """What one unit's record asks of the organiser; None for a kept unit."""
    host = str(record.get("host") or "")
    decision = record.get("decision")
    reasons = [str(reason) for reason in record.get("reasons") or []]
    failure = record.get("failure") or {}
    serving = _serving(record)
    if decision == "failed" and not failure and _refused(record):
        cause = next(reason for reason in reasons if reason.startswith(PLAN_REFUSED)).removeprefix(PLAN_REFUSED)
        return _Finding(FAILED, _kind(host, PLAN_REFUSED, cause), _sentence(
            f"Its plan was refused ({cause}); the rollout changed nothing on the unit. Fix that, check the "
            "unit's plan with this command, then run the rollout for it"), "plan", (), 0)
    if decision == "failed":
        task, cause = failure.get("task") or "a task", failure.get("message") or deciding_reason(reasons)
        failure_class = failure.get("failure_class") or "failed"
        kind = _kind(host, task, failure_class, cause)
        if failure_class == "unreachable":
            return _Finding(UNREACHABLE, kind, _sentence(
                f"The controller lost the unit during '{task}' ({cause}); once it answers, the rollout returns it "
                "to its known-good serving or measures it again"), "rollout", (), 0)
        if serving == "unchanged":
            return _Finding(FAILED, kind, _sentence(
                f"'{task}' failed before the rollout reached the unit ({cause}); fix that and run the whole "
                "sequence for it"), "site", (), 0)
        if not _measured_baseline(record):
            # specfleet.rollout records no decision before a baseline was measured: a plain
            # re-run measures the unit again.
            return _Finding(FAILED, kind, _sentence(
                f"'{task}' failed ({failure_class}: {cause}) before the baseline was measured; the unit serves "
                f"{_serving_phrase(serving)}; fix that and run the rollout again"), "rollout", (), 0)
        return _Finding(FAILED, kind, _sentence(
            f"'{task}' failed ({failure_class}: {cause}); the unit serves {_serving_phrase(serving)}, and a "
            "plain re-run keeps this decision"), "rollout", (REMEASURE,), 0)
    if decision == "reverted" and not gate_decided(record):
        # The plan left nothing to measure (no method fits): measuring again changes nothing.
        cause = "; ".join(reason for reason in reasons if not reason.startswith(NO_METHOD_FITS)) or (
            reasons[0] if reasons else "no speculative method in the plan")
        return _Finding(REVERTED, _kind(host, NO_METHOD_FITS, cause), _sentence(
            f"No speculative method fits this unit ({cause}); it serves its baseline. The plan command shows "
            "why; a change of model, image or memory is needed first"), "plan", (), 0)
    if decision == "reverted":
        # The gate names its deciding check (records from before it did: the reason after its headline).
        check = (record.get("measurement") or {}).get("deciding") or deciding_reason(reasons)
        if (record.get("measurement") or {}).get("inconclusive"):
            return _Finding(INCONCLUSIVE, _kind(host, check), _sentence(
                f"The measurement could not tell within its budget ({check}); the unit serves its baseline; "
                "measure again with two more blocks"), "rollout", (REMEASURE,), max(_blocks(record), 3))
        return _Finding(REVERTED, _kind(host, check), _sentence(
            f"Speculation did not pay on this unit ({check}); it serves its baseline, and measuring again "
            "helps only after a change (image, method, k, power mode)"), "rollout", (REMEASURE,), 0)
    return None


def needing_attention(records: Sequence[Mapping], invocation: Invocation) -> list[Attention]:
    """Every unit that was not kept, grouped by state and cause, most urgent first (ORDER),
    then the largest group, then by first host name."""
    groups: dict[tuple[str, str, str, tuple[str, ...], str], list[tuple[str, _Finding]]] = {}
    for record in records:
        found = finding(record)
        if found is not None:
            key = (found.status, found.kind, found.playbook, found.extra, _serving(record))
            groups.setdefault(key, []).append((str(record["host"]), found))
    items = []
    for (status, _, playbook, extra, serving), members in groups.items():
        hosts = tuple(sorted(host for host, _ in members))
        cause = members[0][1].cause
        if len(hosts) > 1:
            cause = f"{len(hosts)} units, the first one's figures: {cause}"
        if status == INCONCLUSIVE:
            extra = (*extra, f"{MAX_BLOCKS}={max(found.blocks for _, found in members) + 2}")
        items.append(Attention(hosts, status, cause, invocation.command(playbook, ",".join(hosts), *extra), serving))
    # A unit that serves nothing comes first, whatever its state.
    return sorted(items, key=lambda item: (item.serving != "nothing", ORDER.index(item.status), -len(item.hosts),
                                           item.hosts))
