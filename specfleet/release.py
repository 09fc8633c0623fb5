"""The unit's release record: what it serves now, its last known-good serving, and the
decisions already taken for each candidate configuration.

Pure functions over plain dicts; the rollout reads the record from the unit, updates it
here (through a filter) and writes it back atomically. Secrets never enter the record:
a serving (specfleet.serving) carries the *names* of its secret variables, and the playbook
supplies the values from Vault or the environment at launch.

Version 2 stores servings as structures; a version-1 record (servings as command lines) is
read into version 2, so a unit keeps its known-good serving and the decisions taken for it.

While a candidate is on trial (from the save before its first start until the run records its
decision) the record holds a ``trial`` marker: the candidate, the run trying it and the
known-good to return to. A run that never got to record its decision (killed, its unit lost)
leaves the marker, and the next run (or rollback.yml) puts the known-good back first.

A record that is there but cannot be read is never taken for an empty one: the next save would
overwrite the known-good it may hold. ``parse`` raises ``UnreadableRecord`` and the rollout
stops for that unit, the file left as it is (``unreadable_message`` says what to do).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from specfleet import serving as serving_module

RECORD_VERSION = 2
READ_VERSIONS = (1, RECORD_VERSION)


def empty() -> dict[str, Any]:
    return {"version": RECORD_VERSION, "current": None, "known_good": None, "decisions": {}}


class UnreadableRecord(ValueError):
    """A release record that is there but is not one this specfleet reads (empty, not JSON,
    not an object, another version, a serving slot that is not an object)."""


def parse(text: str | None) -> dict[str, Any]:
    """The record from the unit's file; ``None``: there is no file (a unit that never ran a
    rollout has no known-good serving). Anything else that is not a record raises
    ``UnreadableRecord`` saying why: it may hold the unit's known-good."""
    if text is None:
        return empty()
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise UnreadableRecord(f"not valid JSON ({exc})") from None
    if not isinstance(record, dict):
        raise UnreadableRecord("not a JSON object")
    if record.get("version") not in READ_VERSIONS:
        raise UnreadableRecord(f"record version {record.get('version')!r}, this specfleet reads versions "
                               f"{', '.join(map(str, READ_VERSIONS))}")
    for slot in ("current", "known_good", "trial", "decisions"):
        if record.get(slot) is not None and not isinstance(record[slot], dict):
            raise UnreadableRecord(f"its {slot} is not a JSON object")
    if record["version"] == 1:
        return _from_version_1(record)
    return record


def unreadable_message(host: str, path: str, problem: str) -> str:
    """Why the rollout stops for ``host`` and what the user does next, in one line the report keeps
    whole. The file is kept: a person reads it (the known-good may be recoverable by hand) and
    repairs it or moves it aside; without a record the next rollout measures the unit afresh."""
    return (f"{host}: release record {path} cannot be read ({problem}); nothing on {host} was changed and the "
            f"file is kept (it may hold the known-good). Inspect it, then repair it or move it aside (on the unit: "
            f"sudo mv {path} {path}.unreadable) and run again: {host} is then measured afresh from its baseline.")


def _from_version_1(record: Mapping[str, Any]) -> dict[str, Any]:
    """A version-1 record with its servings read from their command lines. Ids are kept:
    a serving's id is what it runs, and it renders back to the same command line."""
    updated = {**copy.deepcopy(dict(record)), "version": RECORD_VERSION}
    for slot in ("current", "known_good"):
        old = record.get(slot)
        if not old:
            continue
        try:
            spec = serving_module.from_argv(old["kind"], old["image"], old["args"], old.get("files"))
        except (KeyError, TypeError, ValueError):
            updated[slot] = None  # unreadable: no known-good rather than a wrong one
            continue
        updated[slot] = serving_module.for_unit(spec, old.get("env") or {}, old.get("mounts") or [],
                                                old.get("secret_env_names") or [])
    return updated


def serving(record: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    """The unit now serves ``spec``."""
    updated = copy.deepcopy(dict(record))
    updated["current"] = dict(spec)
    return updated


def known_good(record: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` served and passed: it becomes what rollback returns to."""
    updated = serving(record, spec)
    updated["known_good"] = dict(spec)
    return updated


def baseline_serving(record: Mapping[str, Any], baseline: Mapping[str, Any], candidate_id: str) -> dict[str, Any]:
    """The unit serves its ``baseline`` while ``candidate_id`` is measured. The baseline is the
    known-good unless another config already is: a known-good that is the candidate itself, or
    what it was kept as (its lighter variant, its per-batch-size table: the decision's
    ``served_spec_id``), kept earlier and measured again now, is on trial and does not count."""
    earlier = (record.get("known_good") or {}).get("spec_id")
    kept_as = ((record.get("decisions") or {}).get(candidate_id) or {}).get("served_spec_id")
    if earlier in (None, candidate_id) or (kept_as is not None and earlier == kept_as):
        return known_good(record, baseline)
    return serving(record, baseline)


def on_trial(record: Mapping[str, Any], candidate: Mapping[str, Any], run_id: str) -> dict[str, Any]:
    """``candidate`` (or a variant of it: its draft lengths, its lighter retry, its per-batch-size
    table) is about to start on the unit, not yet vetted: the record says which, in which run,
    and the known-good the unit returns to if the run never records its decision."""
    updated = copy.deepcopy(dict(record))
    updated["trial"] = {
        "spec_id": candidate["spec_id"],
        "kind": candidate["kind"],
        **serving_module.speculation(candidate),
        "run_id": run_id,
        "known_good_spec_id": (record.get("known_good") or {}).get("spec_id"),
    }
    return updated


def interrupted_trial(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """The trial marker a run left unfinished (None: no trial was interrupted)."""
    return record.get("trial")


def trial_over(record: Mapping[str, Any]) -> dict[str, Any]:
    """The trial is decided (or its serving is no longer on the unit): no marker. A record
    without one is returned as it is, so an unchanged re-run writes nothing new."""
    updated = copy.deepcopy(dict(record))
    updated.pop("trial", None)
    return updated


def trial_sentence(marker: Mapping[str, Any]) -> str:
    """What was on trial, for a report: "the speculative serving 1a2b3c4d (eagle3, k=5) in run R"."""
    details = ", ".join(str(value) for value in (marker.get("method"),
                                                 f"k={marker['num_speculative_tokens']}"
                                                 if marker.get("num_speculative_tokens") else None) if value)
    return (f"the {marker.get('kind') or 'candidate'} serving {str(marker.get('spec_id') or '?')[:8]}"
            f"{f' ({details})' if details else ''} in run {marker.get('run_id') or '?'}")


def forget_known_good(record: Mapping[str, Any], spec_id: str) -> dict[str, Any]:
    """``spec_id`` did not start again: it is no longer what rollback returns to."""
    updated = copy.deepcopy(dict(record))
    if (updated.get("known_good") or {}).get("spec_id") == spec_id:
        updated["known_good"] = None
    return updated


def serving_nothing(record: Mapping[str, Any]) -> dict[str, Any]:
    """Nothing known-good started: the unit serves nothing, and the record says so."""
    updated = copy.deepcopy(dict(record))
    updated["current"] = updated["known_good"] = None
    return updated


def decided(record: Mapping[str, Any], candidate_id: str, outcome: Mapping[str, Any]) -> dict[str, Any]:
    """Remember the outcome for a candidate so an unchanged re-run does not measure again."""
    updated = copy.deepcopy(dict(record))
    updated["decisions"] = {**updated.get("decisions", {}), candidate_id: dict(outcome)}
    return updated


def swept(record: Mapping[str, Any], key: str, choice: Mapping[str, Any]) -> dict[str, Any]:
    """Remember the draft length a sweep key's canary chose (specfleet.sweep): a re-run plans it
    again, on the canary and, run alone, on any other unit of the key."""
    updated = copy.deepcopy(dict(record))
    updated["sweeps"] = {**updated.get("sweeps", {}), key: dict(choice)}
    return updated


# Failures of the unit's infrastructure, not of the candidate: the next run measures again
# rather than repeating them (a dockerd that died says nothing about the speculative config).
RETRIED_FAILURES = frozenset({"docker_unavailable", "unreachable"})


def candidate_failed(decision: Mapping[str, Any]) -> bool:
    """Whether a unit's decision says its candidate failed: failed once its baseline was
    measured (a baseline that did not start or measure says nothing about the candidate), not
    by the unit's infrastructure (RETRIED_FAILURES)."""
    failure = decision.get("failure") or {}
    return (decision.get("decision") == "failed" and decision.get("baseline") is not None
            and failure.get("failure_class") not in RETRIED_FAILURES)


def previous_decision(record: Mapping[str, Any], candidate_id: str) -> dict[str, Any] | None:
    decision = (record.get("decisions") or {}).get(candidate_id)
    failure = (decision or {}).get("failure") or {}
    if decision and decision.get("decision") == "failed" and failure.get("failure_class") in RETRIED_FAILURES:
        return None
    return decision
