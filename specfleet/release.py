"""The unit's release record: what it serves now, its last known-good serving, and the
decisions already taken for each candidate configuration.

Pure functions over plain dicts; the rollout reads the record from the unit, updates it
here (through a filter) and writes it back atomically. Secrets never enter the record:
a serving (specfleet.serving) carries the *names* of its secret variables, and the playbook
supplies the values from Vault or the environment at launch.

Version 2 stores servings as structures; a version-1 record (servings as command lines) is
read into version 2, so a unit keeps its known-good serving and the decisions taken for it.
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


def parse(text: str | None) -> dict[str, Any]:
    """The record from the unit's file; an absent or unreadable file is an empty record
    (a unit that never ran a rollout has no known-good serving)."""
    if not text or not text.strip():
        return empty()
    try:
        record = json.loads(text)
    except ValueError:
        return empty()
    if not isinstance(record, dict):
        return empty()
    if record.get("version") == 1:
        return _from_version_1(record)
    return record if record.get("version") == RECORD_VERSION else empty()


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


def previous_decision(record: Mapping[str, Any], candidate_id: str) -> dict[str, Any] | None:
    decision = (record.get("decisions") or {}).get(candidate_id)
    failure = (decision or {}).get("failure") or {}
    if decision and decision.get("decision") == "failed" and failure.get("failure_class") in RETRIED_FAILURES:
        return None
    return decision
