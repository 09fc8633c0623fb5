"""The rollout's decisions for one unit: where it starts, what it serves next, what it
records and what the report says.

The playbook (playbooks/rollout.yml) only sequences: serve, bench, serve, bench, decide,
apply. At each step it hands what happened to one of these pure functions (through the
``specfleet_rollout`` action plugin), which return the unit's new rollout state:

- ``record``: the unit's release record (specfleet.release) as it is to be saved;
- ``baseline`` / ``candidate``: the plan's servings placed on the unit (specfleet.serving);
- ``serve``: the serving to start next (None: nothing to start);
- ``outcome``: the unit's result for the report so far (None until there is one);
- ``done``: nothing more to measure; ``failed``: the unit counts as failed;
- ``earlier``: the decision an earlier run took for this candidate, when it is reused;
- ``baseline_bench`` / ``candidate_bench``: spec_bench results that completed;
- ``remeasure_reasons``: why a unit with an earlier decision was measured again;
- ``failure``, ``reported_benches``: why a step failed, and the benches as registered then;
- ``fallback``, ``known_good_failure``: what the rollback is trying after a failure, and why
  the known-good did not start again when it did not.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from specfleet import gate, release, report, serving

State = dict[str, Any]


def _state(**fields: Any) -> State:
    state: State = {
        "record": release.empty(), "baseline": None, "candidate": None, "serve": None, "outcome": None,
        "done": False, "failed": False, "earlier": None, "baseline_bench": None, "candidate_bench": None,
        "remeasure_reasons": [], "failure": None, "reported_benches": None, "fallback": None,
        "known_good_failure": None,
    }
    state.update(fields)
    return state


def _evolve(state: Mapping[str, Any], **fields: Any) -> State:
    updated = copy.deepcopy(dict(state))
    updated.update(fields)
    return updated


# ---- the start -----------------------------------------------------------------------------
def start(
    plan: Mapping[str, Any],
    record_text: str | None,
    env: Mapping[str, str],
    mounts: Sequence[str],
    secret_env_names: Sequence[str],
    remeasure: bool,
) -> State:
    """Where a unit starts: a refused plan is reported and nothing is touched; an earlier
    decision for the same candidate is served again without measuring (unless ``remeasure``);
    otherwise the unit is measured, starting from its baseline."""
    if plan.get("refused"):
        outcome = {"decision": "failed", "reasons": [f"plan refused: {'; '.join(plan.get('reasons') or [])}"],
                   "serving": None}
        return _state(outcome=outcome, done=True)
    baseline = serving.for_unit(plan["baseline_serving"], env, mounts, secret_env_names)
    candidate = serving.for_unit(plan["serving"], env, mounts, secret_env_names)
    record = release.parse(record_text)
    known_good = record.get("known_good")
    if known_good and sorted(known_good.get("secret_env_names") or []) != sorted(secret_env_names):
        # Secrets are the fleet's credentials, not part of what served well: a known-good
        # recorded before an API key was set must not come back without it on a revert.
        record = {**record, "known_good": serving.for_unit(known_good, known_good["env"], known_good["mounts"],
                                                           secret_env_names)}
    state = _state(record=record, baseline=baseline, candidate=candidate)
    earlier = None if remeasure else release.previous_decision(record, candidate["spec_id"])
    if earlier is None:
        return state
    decided = candidate if earlier.get("decision") == "kept" else record.get("known_good")
    outcome = {**earlier, "reused_from": earlier.get("run_id")}
    if decided is None:
        return _evolve(state, earlier=earlier, outcome=outcome, done=True)
    return _evolve(state, earlier=earlier, outcome=outcome, done=True, serve=decided,
                   record=release.serving(record, decided))


def earlier_did_not_start(state: Mapping[str, Any], failure_class: str) -> State:
    """The serving decided earlier no longer starts (a unit that changed since, a container
    that went away): it is not known-good any more, and the unit is measured again."""
    decided = state["serve"]
    run_id = (state.get("earlier") or {}).get("run_id") or "?"
    reason = (f"the {decided['kind']} serving decided in run {run_id} did not start again "
              f"({failure_class or 'failed'}): measured again")
    record = release.forget_known_good(state["record"], decided["spec_id"])
    # The record as read, less the serving that failed: what it said the unit served is stale.
    return _evolve(state, record=record, earlier=None, outcome=None, done=False, serve=None,
                   remeasure_reasons=[*state["remeasure_reasons"], reason])


# ---- measuring -----------------------------------------------------------------------------
def baseline_serving(state: Mapping[str, Any]) -> State:
    """The baseline serves while the candidate is measured; it is the known-good unless
    another serving already is (release.baseline_serving)."""
    record = release.baseline_serving(state["record"], state["baseline"], state["candidate"]["spec_id"])
    return _evolve(state, record=record, serve=None)


def baseline_measured(state: Mapping[str, Any], plan: Mapping[str, Any], bench: Mapping[str, Any]) -> State:
    """The baseline's bench completed. With no speculative method that fits, that is the
    whole measurement: the unit keeps its baseline."""
    state = _evolve(state, baseline_bench=dict(bench))
    if plan.get("speculative") is not None:
        return state
    outcome = {"decision": "reverted", "reasons": [*plan["reasons"], *state["remeasure_reasons"]],
               "baseline": dict(bench), "serving": "baseline"}
    return _evolve(state, outcome=outcome, done=True)


def candidate_measured(
    state: Mapping[str, Any],
    plan: Mapping[str, Any],
    bench: Mapping[str, Any],
    policy: Mapping[str, Any],
    resolved_speculative_config: Mapping[str, Any] | None = None,
) -> State:
    """The gate's decision on the two benches: keep the candidate (it becomes the
    known-good), or serve the known-good again."""
    verdict = gate.decide(state["baseline_bench"], bench, policy)
    keep = verdict["decision"] == "keep"
    record = state["record"]
    known_good = record.get("known_good")
    outcome = {
        "decision": "kept" if keep else "reverted",
        "reasons": [*plan["reasons"], *verdict["reasons"], *state["remeasure_reasons"]],
        "figures": verdict["figures"],
        "baseline": state["baseline_bench"],
        "speculative": dict(bench),
        "resolved_speculative_config": resolved_speculative_config,
        "serving": "speculative" if keep else (known_good or {}).get("kind"),
    }
    if keep:
        return _evolve(state, candidate_bench=dict(bench), outcome=outcome, done=True, serve=None,
                       record=release.known_good(record, state["candidate"]))
    return _evolve(state, candidate_bench=dict(bench), outcome=outcome, done=True, serve=known_good,
                   record=release.serving(record, known_good) if known_good else record)


# ---- failing -------------------------------------------------------------------------------
def failure_of(task: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """Why a task failed: the launch module's class and decisive log lines, a failed
    benchmark's own account, or Ansible's message."""
    bench_failure = (result.get("bench") or {}).get("failure") or {}
    return {
        "task": task or "?",
        "failure_class": result.get("failure_class") or bench_failure.get("class") or "failed",
        "message": bench_failure.get("message") or result.get("msg") or "",
        "decisive_lines": list(result.get("decisive_lines") or []),
    }


def failed(
    state: Mapping[str, Any],
    task: str,
    result: Mapping[str, Any],
    baseline_bench: Mapping[str, Any] | None = None,
    candidate_bench: Mapping[str, Any] | None = None,
) -> State:
    """A step of the measurement failed: the unit goes back to its known-good serving.
    ``*_bench`` are the benches as registered, a failed one included, for the report."""
    return _evolve(state, failed=True, done=True, failure=failure_of(task, result),
                   reported_benches={"baseline": baseline_bench, "speculative": candidate_bench},
                   serve=state["record"].get("known_good"), fallback="known_good")


def rollback_did_not_start(state: Mapping[str, Any], failure_class: str) -> State:
    """The serving the rollback started did not start: the known-good yields to the
    baseline this run served and measured; when that fails too, the unit serves nothing."""
    record = state["record"]
    if state["fallback"] == "known_good":
        kind = (record.get("known_good") or {}).get("kind")
        noted = {"kind": kind, "failure_class": failure_class or "failed"}
        if state["baseline_bench"] is not None:
            return _evolve(state, serve=state["baseline"], fallback="baseline", known_good_failure=noted)
        return _evolve(state, serve=None, fallback=None, known_good_failure=noted,
                       record=release.serving_nothing(record))
    return _evolve(state, serve=None, fallback=None, record=release.serving_nothing(record))


def rolled_back(state: Mapping[str, Any]) -> State:
    """The rollback's serving started (the baseline of this run is the known-good now)."""
    if state["fallback"] == "baseline":
        return _evolve(state, serve=None, record=release.known_good(state["record"], state["baseline"]))
    return _evolve(state, serve=None)


def _rollback_sentence(state: Mapping[str, Any]) -> str:
    known_good = state["record"].get("known_good")
    noted = state["known_good_failure"]
    if noted:
        left = "serving this run's measured baseline, now the known-good" if known_good else "the unit serves nothing"
        return f"the known-good {noted['kind']} serving did not start again ({noted['failure_class']}); {left}"
    if known_good:
        return f"rolled back to the known-good {known_good['kind']} serving"
    return "no known-good serving: the unit serves nothing"


# ---- the end -------------------------------------------------------------------------------
def finish(state: Mapping[str, Any], run_id: str) -> State:
    """What the unit records: its outcome, and the decision for this candidate so an
    unchanged re-run does not measure again (a failure only once the baseline served and
    was measured: before that it says nothing about the candidate)."""
    if state.get("earlier") is not None or state["candidate"] is None:
        return _evolve(state)  # a reused decision or a refused plan: nothing new to decide
    record = state["record"]
    outcome = state["outcome"]
    if state["failed"]:
        failure = state["failure"]
        known_good = record.get("known_good")
        benches = state["reported_benches"] or {}
        outcome = {
            "decision": "failed",
            "reasons": [f"{failure['task']}: {failure['failure_class']}: {failure['message']}",
                        _rollback_sentence(state), *state["remeasure_reasons"]],
            "failure": failure,
            "baseline": benches.get("baseline"),
            "speculative": benches.get("speculative"),
            "serving": known_good["kind"] if known_good else None,
        }
        if known_good:
            record = release.serving(record, known_good)
        if state["baseline_bench"] is None:
            return _evolve(state, outcome=outcome, record=record)
    decision = {**outcome, "run_id": run_id}
    return _evolve(state, outcome=outcome, record=release.decided(record, state["candidate"]["spec_id"], decision))


def unit_record_path(host: str, run_id: str) -> str:
    """Where the unit's file goes: its run's folder (specfleet.report.run_folder)."""
    return str(report.run_folder(run_id) / "units" / f"{host}.json")


def unit_record(state: Mapping[str, Any], plan: Mapping[str, Any], host: str, run_id: str) -> dict[str, Any]:
    """The unit's file in the run folder: its outcome and what it was planned to serve."""
    return {
        **(state["outcome"] or {}),
        "host": host,
        "device_class": plan.get("device_class"),
        "model": plan.get("model"),
        "image": plan.get("image"),
        "plan_reasons": plan.get("reasons") or [],
        "run_id": run_id,
        **serving.speculation(plan.get("serving")),
    }


# ---- rollback.yml --------------------------------------------------------------------------
def rollback(record_text: str | None) -> State:
    """playbooks/rollback.yml: serve the record's known-good (None when it has none)."""
    record = release.parse(record_text)
    known_good = record.get("known_good")
    return _state(record=release.serving(record, known_good) if known_good else record, serve=known_good,
                  done=True)
