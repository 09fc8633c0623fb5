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
- ``blocks``: the measurement so far, in order: {side, spec_id, bench} per block (baseline and
  speculative taking turns, specfleet.gate); ``next``: the side to serve and measure next
  (None: measuring is over), ``next_serving`` the serving that means, ``next_output_check``
  whether its block runs the output check (once per serving: a serving's answers are compared
  once, the later blocks measure only what the gate reads of them), ``next_nonce_salt`` the
  salt of its requests' nonces (a serving measured again: its prefix cache has seen its first
  block's requests);
- ``remeasure_reasons``: why a unit with an earlier decision was measured again;
- ``failure``, ``reported_benches``: why a step failed, and the benches as registered then;
- ``fallback``, ``known_good_failure``: what the rollback is trying after a failure, and why
  the known-good did not start again when it did not;
- ``retry``: the plan's lighter speculative serving (``oom_retry``) placed on the unit and the
  reason, once the candidate ran out of memory at start and it was started in its place;
- ``sweep``: on a key's canary, which measures each draft length of its plan's sweep
  (specfleet.sweep): ``not_started``, those whose serving did not start; ``next_tokens`` the one
  the next speculative block runs;
- ``table``: the per-batch-size table (specfleet.batch_table) measured after the gate reverted
  for a c=8 regression alone: ``bands``, ``serving`` (the measured serving with it), ``without``
  (the verdict on the candidate without it) and ``since`` (its blocks start at the baseline
  block before its first);
- ``max_blocks``: the most blocks this unit's measurement can take (the playbook's loop);
- ``sharing``: the plan's ``side_by_side`` while the candidate is measured beside the baseline
  (each side with its share of memory, the candidate on the trial port: the blocks switch the
  traffic, not the server), None when each block restarts the serving (also once a start beside
  the other serving ran out of memory: ``unshared`` says so);
  ``measured_baseline`` the baseline as measuring serves it (with its share when sharing),
  ``next_beside``
  whether ``next_serving`` starts beside the serving one (the trial container), ``next_alone``
  whether ``serve`` is the candidate started alone after it did not start beside the baseline;
- ``pending_known_good``: the decided serving, known-good once it has started (beside the
  baseline neither side ran with its whole budget while measured); ``decided_started`` says so;
- ``interrupted_trial``: the trial an earlier run left unfinished (release.on_trial), when the
  record has one: ``marker``, ``known_good`` (the serving put back first, None when there is
  none) and ``reason`` (what became of it, for the report, once known).

Before the first candidate starts, the record saved with the serving baseline carries a trial
marker (``baseline_serving``); ``finish`` clears it with the decision. A run that never gets
there (killed, its unit lost) leaves it, and the next run starts by putting the known-good back
(``trial_rolled_back``), as rollback.yml does.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from specfleet import batch_table, gate, paired, release, serving, sweep
from specfleet import policy as policy_module

State = dict[str, Any]


def _state(**fields: Any) -> State:
    state: State = {
        "record": release.empty(), "baseline": None, "candidate": None, "serve": None, "outcome": None,
        "done": False, "failed": False, "earlier": None, "blocks": [], "next": None, "next_serving": None,
        "next_output_check": False, "next_nonce_salt": "", "remeasure_reasons": [], "failure": None,
        "reported_benches": None, "fallback": None, "known_good_failure": None, "retry": None, "sweep": None,
        "next_tokens": None, "table": None, "max_blocks": 0, "interrupted_trial": None, "sharing": None,
        "measured_baseline": None, "next_beside": False, "next_alone": False,
        "unshared": None, "pending_known_good": None,
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
    sweeping: bool = False,
    max_blocks: int = 0,
) -> State:
    """Where a unit starts: a refused plan is reported and nothing is touched; an earlier
    decision for the same candidate is served again without measuring (unless ``remeasure``);
    otherwise the unit is measured, starting from its baseline. ``sweeping``: the unit is its
    key's canary and measures each draft length of its plan's sweep (specfleet.sweep);
    ``max_blocks``: the gate's budget (specfleet_gate_max_blocks), a sweep's own when sweeping.
    A unit planned with its canary's choice keeps it in its record. A record left with a trial
    marker (``interrupted_trial``) means the unit may serve that unvetted candidate: its
    known-good is served first, also for a refused plan; with no known-good to return to, the
    unit is measured (a refused plan: reported). ``record_text`` None: the unit has no record;
    one that cannot be read raises release.UnreadableRecord."""
    record = release.parse(record_text)
    known_good = record.get("known_good")
    if known_good and sorted(known_good.get("secret_env_names") or []) != sorted(secret_env_names):
        # Secrets are the fleet's credentials, not part of what served well: a known-good
        # recorded before an API key was set must not come back without it on a revert.
        record = {**record, "known_good": serving.for_unit(known_good, known_good["env"], known_good["mounts"],
                                                           secret_env_names)}
    interrupted = _interrupted(record)
    if plan.get("refused"):
        outcome = {"decision": "failed", "reasons": [f"plan refused: {'; '.join(plan.get('reasons') or [])}"],
                   "serving": None}
        return _state(outcome=outcome, done=True, record=record, interrupted_trial=interrupted)
    baseline = serving.for_unit(plan["baseline_serving"], env, mounts, secret_env_names)
    candidate = serving.for_unit(plan["serving"], env, mounts, secret_env_names)
    planned = plan.get("sweep") or {}
    if (not sweeping and planned.get("chosen") is not None
            and (sweep.recorded(record, plan) or {}).get("chosen") != planned["chosen"]):
        # The key's choice, for a re-run of this unit alone (a record that holds it already, as
        # the canary's own does, is left as it is: an unchanged re-run writes nothing new).
        record = release.swept(record, planned["key"], {name: planned[name] for name in ("chosen", "canary", "tokens")})
    sharing = plan.get("side_by_side") if plan.get("speculative") is not None else None
    state = _state(record=record, baseline=baseline, candidate=candidate, max_blocks=max_blocks,
                   interrupted_trial=interrupted, sharing=sharing,
                   measured_baseline=_shared(baseline, sharing, beside=False))
    if sweeping and planned:
        state["sweep"] = {"not_started": []}
        state["max_blocks"] = sweep.max_blocks(planned["tokens"])
    elif plan.get("batch_table"):
        # The candidate with its table takes up to a budget of its own, after the last baseline.
        state["max_blocks"] = 2 * max_blocks - 1
    # An interrupted trial with no known-good to go back to: measuring serves the baseline in
    # place of whatever the unit runs (a decision reused could leave the candidate serving).
    unguarded = interrupted is not None and interrupted["known_good"] is None
    earlier = None if remeasure or unguarded else release.previous_decision(record, candidate["spec_id"])
    if earlier is None:
        return state
    if earlier.get("decision") == "kept":
        decided = candidate
        if earlier.get("retried_spec_id"):
            # Kept in its lighter variant (out of memory at start): serve that one, while the
            # plan still makes the same variant; otherwise measure again.
            decided = _placed_retry(plan, candidate)
            if decided is None or decided["spec_id"] != earlier["retried_spec_id"]:
                return state
        kept_table = earlier.get("batch_table") or {}
        if kept_table.get("decision") == gate.KEEP:
            # Kept with its per-batch-size table: the same serving with the same bands, while the
            # plan may have one (specfleet_spec_batch_table false: measured again without).
            if not plan.get("batch_table"):
                return state
            decided = batch_table.with_table(decided, kept_table["table"])
    else:
        decided = record.get("known_good")
    outcome = {**earlier, "reused_from": earlier.get("run_id")}
    if decided is None:
        return _evolve(state, earlier=earlier, outcome=outcome, done=True)
    # A kept decision served again passed when it was decided: it is what a rollback returns
    # to, not an older known-good (another draft length, say) the record still names.
    placed = release.known_good if earlier.get("decision") == "kept" else release.serving
    return _evolve(state, earlier=earlier, outcome=outcome, done=True, serve=decided,
                   record=placed(record, decided))


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


def _interrupted(record: Mapping[str, Any]) -> dict[str, Any] | None:
    marker = release.interrupted_trial(record)
    if marker is None:
        return None
    known_good = record.get("known_good")
    reason = None if known_good else (f"{_interrupted_sentence(marker)}; there was no known-good serving to "
                                      "return to")
    return {"marker": dict(marker), "known_good": known_good, "reason": reason}


def _interrupted_sentence(marker: Mapping[str, Any]) -> str:
    return f"the previous run was interrupted during the trial of {release.trial_sentence(marker)}"


def _serving_name(spec: Mapping[str, Any]) -> str:
    return f"{spec['kind']} serving {spec['spec_id'][:8]}"


def trial_rolled_back(state: Mapping[str, Any]) -> State:
    """The known-good serves again after an interrupted trial: the trial is over, and the rollout
    goes on from ``start``'s state (what it decided to serve next is still to be served)."""
    interrupted = state["interrupted_trial"]
    known_good = interrupted["known_good"]
    reason = (f"{_interrupted_sentence(interrupted['marker'])}: rolled back to the known-good "
              f"{_serving_name(known_good)} first")
    record = release.trial_over(state["record"])
    if state["serve"] is None:  # nothing else to serve before measuring (or a refused plan): the known-good serves
        record = release.serving(record, known_good)
    return _evolve(state, record=record, interrupted_trial={**interrupted, "reason": reason})


def trial_rollback_did_not_start(state: Mapping[str, Any], failure_class: str) -> State:
    """The known-good did not start again after an interrupted trial: it is no longer what
    rollback returns to, and the unit is measured from its baseline (which then is). A refused
    plan measures nothing: its record keeps the marker and the known-good for the next run."""
    interrupted = state["interrupted_trial"]
    known_good = interrupted["known_good"]
    cause = (f"{_interrupted_sentence(interrupted['marker'])}; its known-good {_serving_name(known_good)} did "
             f"not start again ({failure_class or 'failed'})")
    if state["candidate"] is None:
        return _evolve(state, interrupted_trial={**interrupted, "reason": f"{cause}: the next run tries again"})
    record = release.forget_known_good(release.trial_over(state["record"]), known_good["spec_id"])
    return _evolve(state, record=record, earlier=None, outcome=None, done=False, serve=None,
                   interrupted_trial={**interrupted, "reason": f"{cause}: measured again from the baseline"})


def _placed_retry(plan: Mapping[str, Any], candidate: Mapping[str, Any]) -> dict[str, Any] | None:
    """The plan's out-of-memory variant (``oom_retry``) as the unit runs it: the candidate's
    environment, mounts and secret names."""
    retry = plan.get("oom_retry")
    if not retry:
        return None
    return serving.for_unit(retry["serving"], candidate["env"], candidate["mounts"], candidate["secret_env_names"])


# ---- measuring -----------------------------------------------------------------------------
# The order blocks are measured in: baseline, speculative, baseline, then more pairs
# (speculative, baseline) while the gate asks for them (specfleet.gate: MEASURE).
FIRST_BLOCKS = (paired.BASELINE, paired.SPECULATIVE, paired.BASELINE)


def _shared(spec: Mapping[str, Any], sharing: Mapping[str, Any] | None, beside: bool) -> dict[str, Any]:
    """``spec`` as measuring serves it: with its side's share of memory while sharing, on the
    trial port when it serves ``beside`` the serving one."""
    if not sharing:
        return dict(spec)
    return serving.with_share(spec, sharing[spec["kind"]], sharing["port"] if beside else spec["port"])


def _measuring(state: Mapping[str, Any], side: str | None, tokens: int | None = None, **fields: Any) -> State:
    """``state`` with ``fields`` and ``side`` to be served and measured next (a sweep's
    speculative block: the candidate drafting ``tokens``); while sharing, the candidate serves
    beside the baseline, each with its share."""
    updated = _evolve(state, next=side, next_tokens=tokens, **{"next_alone": False, **fields})
    spec = None
    if side == paired.BASELINE:
        spec = updated["baseline"]
    elif side == paired.SPECULATIVE and tokens is not None:
        spec = sweep.with_tokens(updated["candidate"], tokens)
    elif side == paired.SPECULATIVE and updated.get("table"):
        spec = updated["table"]["serving"]
    elif side == paired.SPECULATIVE:
        spec = (updated.get("retry") or {}).get("serving") or updated["candidate"]
    beside = bool(updated.get("sharing")) and side == paired.SPECULATIVE
    updated["next_serving"] = None if spec is None else _shared(spec, updated.get("sharing"), beside)
    updated["next_beside"] = beside
    served = updated["next_serving"]
    blocks = updated.get("blocks") or []
    before = [block for block in blocks if served is not None and block.get("spec_id") == served["spec_id"]]
    updated["next_output_check"] = served is not None and not any(block["bench"].get("outputs") for block in before)
    # A serving measured again (side by side it keeps serving) gets other nonces: its prefix cache
    # holds its first block's requests. Its first block's are the same on both sides (the output
    # check compares the same requests).
    updated["next_nonce_salt"] = f"block{len(blocks) + 1}" if before else ""
    return updated


def baseline_serving(state: Mapping[str, Any], plan: Mapping[str, Any], run_id: str) -> State:
    """The baseline serves while the candidate is measured (beside it: with its share); it is
    the known-good unless another serving already is (release.baseline_serving). Measuring starts
    with it. The record saved now, before any candidate starts, says the candidate is on trial
    (release.on_trial), unless the plan has no speculative method (nothing but the baseline starts)."""
    record = release.baseline_serving(state["record"], state["measured_baseline"], state["candidate"]["spec_id"])
    if plan.get("speculative") is not None:
        record = release.on_trial(record, state["candidate"], run_id)
    return _measuring(state, paired.BASELINE, record=record, serve=None)


def _alone(state: Mapping[str, Any], failure: Mapping[str, Any]) -> State:
    """``state`` after a start beside the other serving ran out of memory: it is measured alone,
    every block restarting its side, as on a unit that does not hold both."""
    cause = _cause(failure)
    reason = (f"the {state['next'] or 'baseline'} serving ran out of memory beside the other one ({cause}): "
              "measured alone, restarting per block")
    return _evolve(state, sharing=None, measured_baseline=state["baseline"], unshared=reason)


def baseline_did_not_start(state: Mapping[str, Any], task: str, result: Mapping[str, Any]) -> State:
    """The baseline did not start with its share of memory: alone with its whole budget once
    (``serve``); any other failure, or one alone, is the unit's (``failure``, as
    candidate_did_not_start)."""
    failure = failure_of(task, result)
    if not state.get("sharing") or failure["failure_class"] != "oom_at_start":
        return _evolve(state, serve=None, failure=failure)
    alone = _alone(state, failure)
    return _evolve(alone, serve=alone["measured_baseline"])


def replacement_did_not_start(state: Mapping[str, Any], plan: Mapping[str, Any], task: str,
                              result: Mapping[str, Any], policy: Mapping[str, Any] | None = None) -> State:
    """What candidate_did_not_start started in place of the candidate did not start either. The
    candidate started alone after it did not start beside the baseline is taken as a first
    failed start (its lighter variant, a sweep's revert, the unit's failure); anything else (the
    lighter variant, a sweep's baseline) is the unit's failure, as it failed."""
    if state.get("next_alone"):
        return candidate_did_not_start(_evolve(state, next_alone=False), plan, task, result, policy)
    return _evolve(state, serve=None, failure=failure_of(task, result))


def baseline_blocks(state: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [block["bench"] for block in state.get("blocks") or [] if block["side"] == paired.BASELINE]


def candidate_did_not_start(state: Mapping[str, Any], plan: Mapping[str, Any], task: str,
                            result: Mapping[str, Any], policy: Mapping[str, Any] | None = None) -> State:
    """The speculative serving did not start. Out of memory at start (``oom_at_start``), the
    plan's lighter variant is started once in its place (and in every later speculative block);
    any other failure, the retry's own, or a plan without a variant is the unit's failure:
    ``serve`` stays None and ``failure`` says why, for the playbook to fail with (then
    ``failed`` rolls the unit back). The candidate with its per-batch-size table not starting,
    the candidate stands as the gate judged it without one (reverted), and the unit goes back to
    its known-good. A candidate out of memory beside the baseline first starts alone (``serve``,
    ``next_alone``), and every later block restarts its side."""
    failure = failure_of(task, result)
    if state.get("next_beside") and failure["failure_class"] == "oom_at_start":
        alone = _measuring(_alone(state, failure), paired.SPECULATIVE, state.get("next_tokens"), next_alone=True)
        return _evolve(alone, serve=alone["next_serving"])
    if state.get("table"):
        cause = _cause(failure)
        without = state["table"]["without"]
        verdict = {**without, "reasons": [*without["reasons"], f"the per-batch-size table did not start "
                                                                f"({failure['failure_class']}: {cause})"]}
        before = state["blocks"][:state["table"]["since"] + 1]  # the blocks the verdict without it saw
        decided = _decided(_evolve(state, table=None, blocks=before), plan, policy or {}, verdict)
        decided["outcome"]["batch_table"] = {"table": state["table"]["bands"], "decision": "did not start"}
        return decided
    if state.get("sweep"):
        # A draft length whose serving does not start is a revert; the baseline serves and is
        # measured in its block, and the sweep goes on.
        cause = _cause(failure)
        not_started = [*state["sweep"]["not_started"], {"tokens": state["next_tokens"],
                                                        "failure_class": failure["failure_class"], "cause": cause}]
        measured = _measuring(state, paired.BASELINE, sweep={**state["sweep"], "not_started": not_started})
        return _evolve(measured, serve=measured["next_serving"])
    retry = _placed_retry(plan, state["candidate"])
    if failure["failure_class"] != "oom_at_start" or retry is None or state.get("retry") is not None:
        return _evolve(state, serve=None, failure=failure)
    cause = _cause(failure)
    reason = (f"the speculative serving ran out of memory at start ({cause}); started once more with "
              f"{plan['oom_retry']['change']}")
    return _measuring(state, paired.SPECULATIVE, serve=retry, retry={"serving": retry, "reason": reason})


def slim(bench: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A bench as the unit's record keeps it: its figures, without the per-request records and
    the output check's tokens (the gate has read them; the record stays small)."""
    if bench is None:
        return None
    results = {
        workload: {level: {**cell, "runs": [{key: value for key, value in run.items() if key != "requests"}
                                            for run in cell.get("runs") or []]}
                   for level, cell in cells.items()}
        for workload, cells in (bench.get("results") or {}).items()
    }
    return {**{key: value for key, value in bench.items() if key not in ("outputs", "outputs_batched")},
            "results": results}


def block_measured(
    state: Mapping[str, Any],
    plan: Mapping[str, Any],
    bench: Mapping[str, Any],
    policy: Mapping[str, Any],
    started: Mapping[str, Any] | None = None,
) -> State:
    """One block's bench completed (of the side ``state["next"]`` named); ``started`` is what
    the serving's start reported (specfleet.fleet.vllm_container). With no speculative method
    that fits, the first baseline block is the whole measurement. Otherwise the blocks go
    baseline, speculative, baseline; after each baseline block that follows a speculative one the
    gate decides: keep (the candidate is served again and becomes the known-good), revert (the
    known-good serves), or measure one more pair."""
    side = state["next"]
    started = started or {}
    block: dict[str, Any] = {"side": side, "spec_id": (state.get("next_serving") or {}).get("spec_id"),
                             "bench": dict(bench)}
    if started.get("startup_seconds") is not None:
        # Started for this block (not already serving): how long it took, and whether
        # torch.compile's cache served it (a miss after an image change costs minutes).
        block["startup"] = {"seconds": started["startup_seconds"], "compile_cache": started.get("compile_cache")}
    if side == paired.SPECULATIVE:
        # What vLLM resolved the speculative config to, as its serving's start reported it.
        block["resolved_speculative_config"] = dict(started.get("resolved_speculative_config") or {}) or None
        if state.get("next_tokens") is not None:
            block["tokens"] = state["next_tokens"]
        if state.get("table"):
            block["batch_table"] = state["table"]["bands"]
    state = _evolve(state, blocks=[*(state.get("blocks") or []), block])
    blocks = state["blocks"]
    if plan.get("speculative") is None:
        outcome = {"decision": "reverted", "reasons": [*plan["reasons"], *state["remeasure_reasons"]],
                   "baseline": slim(bench), "serving": "baseline"}
        return _measuring(state, None, outcome=outcome, done=True)
    if state.get("sweep"):
        return _swept_block(state, plan, policy)
    if len(blocks) < len(FIRST_BLOCKS):
        return _measuring(state, FIRST_BLOCKS[len(blocks)])
    if side == paired.SPECULATIVE:
        return _measuring(state, paired.BASELINE)
    if state.get("table"):
        # The table is judged on its own blocks (the baseline before its first one, then its
        # pairs), with the gate's budget of its own: more pairs while it is unsure; and at c=1
        # against the plain speculation it varies (what its PIECEWISE graphs cost).
        since = state["table"]["since"]
        verdict = gate.decide(blocks[since:], policy, reference=gate.checked_reference(blocks),
                              variant_of=state["table"]["without"])
        if verdict["decision"] == gate.MEASURE:
            return _measuring(state, verdict["next"][0])
        return _decided(state, plan, policy, verdict, since=since)
    verdict = gate.decide(blocks, policy)
    if verdict["decision"] == gate.MEASURE:
        return _measuring(state, verdict["next"][0])
    if plan.get("batch_table") and batch_table.applies(verdict):
        # Speculation pays at c=1 and loses under load: measure it on where it pays only.
        measured = (state.get("retry") or {}).get("serving") or state["candidate"]
        bands = batch_table.table(serving.speculation(measured)["num_speculative_tokens"], plan["batch_table"])
        table = {"bands": bands, "serving": batch_table.with_table(measured, bands), "without": verdict,
                 "since": len(blocks) - 1}
        return _measuring(state, paired.SPECULATIVE, table=table)
    return _decided(state, plan, policy, verdict)


def startup(blocks: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Per side, its first start among ``blocks`` ({"seconds", "compile_cache"}); a side that
    was already serving when its blocks began has none."""
    found: dict[str, Any] = {}
    for block in blocks:
        if block.get("startup") and block["side"] not in found:
            found[block["side"]] = dict(block["startup"])
    return found


def _swept_block(state: Mapping[str, Any], plan: Mapping[str, Any], policy: Mapping[str, Any]) -> State:
    """A canary's block: baseline, then each draft length between baseline blocks
    (specfleet.sweep); once no k is left to measure, the best kept k is the decision."""
    blocks = state["blocks"]
    planned = plan["sweep"]["tokens"]
    if blocks[-1]["side"] == paired.SPECULATIVE:
        return _measuring(state, paired.BASELINE)
    judged = sweep.results(blocks, policy)
    not_started = state["sweep"]["not_started"]
    tokens = sweep.next_tokens(judged, planned, policy_module.MAX_SPEC_TOKENS,
                               [entry["tokens"] for entry in not_started])
    if tokens is not None:
        return _measuring(state, paired.SPECULATIVE, tokens)
    chosen = sweep.best(judged)
    found = sweep.summary(judged, chosen, planned, not_started)
    state = _evolve(state, record=release.swept(state["record"], plan["sweep"]["key"],
                                                {**found, "canary": plan["host"]}))
    if chosen is None:
        # The reasons of the planned k (else the last measured): why the canary reverts.
        own = serving.speculation(plan["serving"])["num_speculative_tokens"]
        shown = next((entry for entry in judged if entry["tokens"] == own), judged[-1] if judged else None)
        if shown is None:  # no draft length started
            causes = [f"k={entry['tokens']}: {entry['cause']}" for entry in not_started]
            reasons = [f"revert to the baseline: no draft length started ({'; '.join(causes)})"]
            return _decided(state, plan, policy, {"decision": gate.REVERT, "reasons": reasons, "figures": {}},
                            found=found, view=1)
        return _decided(state, plan, policy, shown["verdict"], found=found, view=shown["block"])
    # The kept draft length is the unit's candidate from now on: its decision is recorded
    # under it, and a re-run plans it (the record's sweeps) and reuses that decision.
    state = _evolve(state, candidate=sweep.with_tokens(state["candidate"], chosen["tokens"]))
    return _decided(state, plan, policy, chosen["verdict"], found=found, view=chosen["block"])


def _decided(state: Mapping[str, Any], plan: Mapping[str, Any], policy: Mapping[str, Any],
             verdict: Mapping[str, Any], found: Mapping[str, Any] | None = None, view: int | None = None,
             since: int = 0) -> State:
    """The gate's keep or revert: what the unit serves and records. A sweep (``found``) decides
    from the blocks around its speculative block ``view``; a table from the blocks ``since``."""
    keep = verdict["decision"] == gate.KEEP
    record = state["record"]
    known_good = record.get("known_good")
    retry = state.get("retry")
    table = state.get("table")
    blocks = state["blocks"][since:] if view is None else state["blocks"][view - 1:view + 2]
    first_baseline = next(block["bench"] for block in blocks if block["side"] == paired.BASELINE)
    speculative = [block for block in blocks if block["side"] == paired.SPECULATIVE]
    last_candidate = speculative[-1]["bench"] if speculative else None
    resolved = next((block["resolved_speculative_config"] for block in speculative
                     if block.get("resolved_speculative_config")), None)
    # A sweep measured the draft length; the rule of thumb has nothing to add to it.
    advice = [] if found is not None or plan.get("sweep") else _draft_length_advice(plan, policy, verdict["figures"])
    outcome = {
        "decision": "kept" if keep else "reverted",
        "reasons": [*plan["reasons"], *_retry_reasons(state), *verdict["reasons"], *advice,
                    *([sweep.sentence(found)] if found is not None else []),
                    *([batch_table.sentence(table["bands"], table["without"], keep)] if table else []),
                    *state["remeasure_reasons"]],
        "figures": verdict["figures"],
        "measurement": {**measurement(verdict), **starts(blocks, state)},
        "baseline": slim(first_baseline),
        "speculative": slim(last_candidate),
        "resolved_speculative_config": resolved,
        "startup": startup(blocks),
        "serving": "speculative" if keep else (known_good or {}).get("kind"),
    }
    if retry is not None:
        outcome["retried_spec_id"] = retry["serving"]["spec_id"]
    if found is not None:
        outcome["sweep"] = dict(found)
    if table is not None:
        outcome["batch_table"] = {"table": table["bands"], "decision": verdict["decision"]}
    if keep:
        measured = table["serving"] if table else retry["serving"] if retry is not None else state["candidate"]
        # What the candidate is kept as: on trial, like the candidate, when it is measured again.
        outcome["served_spec_id"] = measured["spec_id"]
        if state.get("sharing"):
            # Measured with its share beside the baseline: known-good once it serves with its whole budget.
            return _measuring(state, None, outcome=outcome, done=True, serve=measured, pending_known_good=measured)
        return _measuring(state, None, outcome=outcome, done=True, serve=measured,
                          record=release.known_good(record, measured))
    shared = plan.get("side_by_side")  # tried, even when a start beside the other fell back to alone
    if known_good and shared and known_good["spec_id"] == _shared(state["baseline"], shared, False)["spec_id"]:
        # The baseline measured with its share is the known-good: it serves with its whole budget
        # (known-good once it does).
        return _measuring(state, None, outcome=outcome, done=True, serve=state["baseline"],
                          pending_known_good=state["baseline"])
    return _measuring(state, None, outcome=outcome, done=True, serve=known_good,
                      record=release.serving(record, known_good) if known_good else record)


def decided_started(state: Mapping[str, Any]) -> State:
    """The decided serving started (the playbook's last start of a measured unit): one measured
    with its share beside the other is the known-good now."""
    pending = state.get("pending_known_good")
    if pending is None:
        return _evolve(state)
    return _evolve(state, pending_known_good=None, record=release.known_good(state["record"], pending))


def measurement(verdict: Mapping[str, Any]) -> dict[str, Any]:
    """How the gate measured, for the report: the blocks, the baseline's drift, the thresholds
    (the confidence among them) and the output check's findings (first divergences, not every token)."""
    found = verdict.get("output_check") or {}
    return {
        # The gated workloads in the gate's order, the primary first (records are written with
        # sorted keys, so the figures' own order does not survive).
        "workloads": list(verdict.get("gate_workloads") or []),
        "blocks": list(verdict.get("blocks") or []),
        # Reverted because the budget ran out with checks still open (the attention list's
        # "measure again with two more blocks"), not because one failed.
        "inconclusive": bool(verdict.get("inconclusive")),
        "deciding": verdict.get("deciding"),
        # Every specfleet_gate_* value the verdict was taken with (the report's settings and the
        # speedup threshold drawn on its charts).
        "thresholds": dict(verdict.get("thresholds") or {}),
        "drift": verdict.get("drift"),
        "output_check": {key: found.get(key) for key in ("compared", "identical", "ties", "diverged", "inconclusive",
                                                          "self", "drafting", "repeats", "batched")},
    }


def starts(blocks: Sequence[Mapping[str, Any]], state: Mapping[str, Any]) -> dict[str, Any]:
    """Whether the candidate was measured beside the baseline, and for each block whether its
    serving was started for it (False: it already served; the first block's baseline started
    before measuring). Beside the baseline, a baseline block never starts anything; a
    speculative block only when its serving changes (the first, a sweep's next draft length, a
    per-batch-size table)."""
    return {"side_by_side": bool(state.get("sharing")), "started": [bool(block.get("startup")) for block in blocks]}


def _draft_length_advice(plan: Mapping[str, Any], policy: Mapping[str, Any], figures: Mapping[str, Any]) -> list[str]:
    """The draft-length rule (specfleet.gate.draft_length_advice) on the first gated workload."""
    tokens = serving.speculation(plan.get("serving")).get("num_speculative_tokens")
    first = next(iter(figures.values()), None) or {}
    rate = (first.get("acceptance_c1") or {}).get("rate")
    start = policy_module.defaults()["specfleet_spec_tokens"].get(plan.get("device_class"))
    advice = gate.draft_length_advice(rate, tokens, start, policy_module.MAX_SPEC_TOKENS)
    return [advice] if advice else []


def _retry_reasons(state: Mapping[str, Any]) -> list[str]:
    retry = state.get("retry")
    return [reason for reason in (state.get("unshared"), retry["reason"] if retry else None) if reason]


# ---- failing -------------------------------------------------------------------------------
def _cause(failure: Mapping[str, Any]) -> str:
    """The line that says why a start failed: its first decisive log line, else its message."""
    return (failure["decisive_lines"] or [failure["message"]])[0]


def failure_of(task: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """Why a task failed: the launch module's class and decisive log lines, a failed
    benchmark's own account, or Ansible's message. A failure handed on by the rollout's own
    step (``failed_task``) keeps the task that failed first."""
    bench_failure = (result.get("bench") or {}).get("failure") or {}
    return {
        "task": result.get("failed_task") or task or "?",
        "failure_class": result.get("failure_class") or bench_failure.get("class") or "failed",
        "message": bench_failure.get("message") or result.get("msg") or "",
        "decisive_lines": list(result.get("decisive_lines") or []),
    }


def failed(state: Mapping[str, Any], task: str, result: Mapping[str, Any]) -> State:
    """A step of the measurement failed: the unit goes back to its known-good serving. The
    report gets the first baseline block and the last speculative one, the failed bench (its
    label says its side) in its place."""
    reported = {side: next((block["bench"] for block in reversed(state.get("blocks") or [])
                            if block["side"] == side), None) for side in paired.SIDES}
    reported[paired.BASELINE] = next(iter(baseline_blocks(state)), None)
    bench = result.get("bench")
    if isinstance(bench, Mapping) and bench.get("label") in paired.SIDES and not bench.get("ok", True):
        reported[bench["label"]] = dict(bench)
    return _evolve(state, failed=True, done=True, failure=failure_of(task, result),
                   reported_benches={side: slim(found) for side, found in reported.items()},
                   serve=state["record"].get("known_good"), fallback="known_good", next=None, next_serving=None)


def rollback_did_not_start(state: Mapping[str, Any], failure_class: str) -> State:
    """The serving the rollback started did not start: the known-good yields to the
    baseline this run served and measured; when that fails too, the unit serves nothing."""
    record = state["record"]
    if state["fallback"] == "known_good":
        kind = (record.get("known_good") or {}).get("kind")
        noted = {"kind": kind, "failure_class": failure_class or "failed"}
        if baseline_blocks(state):
            return _evolve(state, serve=state["measured_baseline"], fallback="baseline", known_good_failure=noted)
        return _evolve(state, serve=None, fallback=None, known_good_failure=noted,
                       record=release.serving_nothing(record))
    return _evolve(state, serve=None, fallback=None, record=release.serving_nothing(record))


def rolled_back(state: Mapping[str, Any]) -> State:
    """The rollback's serving started (the baseline of this run is the known-good now)."""
    if state["fallback"] == "baseline":
        return _evolve(state, serve=None, record=release.known_good(state["record"], state["measured_baseline"]))
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
    was measured: before that it says nothing about the candidate). The trial is over: the
    record's marker goes (a refused plan's stays, its trial unresolved). The outcome says what
    became of an interrupted trial (the record's decision does not: it is about the candidate)."""
    finished = _finished(state, run_id)
    if state["candidate"] is not None:
        finished["record"] = release.trial_over(finished["record"])
    reason = (state.get("interrupted_trial") or {}).get("reason")
    if reason and finished["outcome"] is not None:
        finished["outcome"] = {**finished["outcome"], "reasons": [*finished["outcome"]["reasons"], reason]}
    return finished


def _finished(state: Mapping[str, Any], run_id: str) -> State:
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
                        _rollback_sentence(state), *_retry_reasons(state), *state["remeasure_reasons"]],
            "failure": failure,
            "baseline": benches.get("baseline"),
            "speculative": benches.get("speculative"),
            "serving": known_good["kind"] if known_good else None,
        }
        if known_good:
            record = release.serving(record, known_good)
        if not baseline_blocks(state):
            return _evolve(state, outcome=outcome, record=record)
    decision = {**outcome, "run_id": run_id}
    return _evolve(state, outcome=outcome, record=release.decided(record, state["candidate"]["spec_id"], decision))


def unit_record(state: Mapping[str, Any], plan: Mapping[str, Any], host: str, run_id: str) -> dict[str, Any]:
    """The unit's file in the run folder: its outcome and what it was planned to serve (a
    canary: the draft length its sweep chose)."""
    found = ((state["outcome"] or {}).get("sweep") or {}).get("chosen")
    return {
        **(state["outcome"] or {}),
        "host": host,
        "device_class": plan.get("device_class"),
        "model": plan.get("model"),
        "image": plan.get("image"),
        "plan_reasons": plan.get("reasons") or [],
        "run_id": run_id,
        **serving.speculation(plan.get("serving")),
        **({"num_speculative_tokens": found} if found is not None else {}),
        # A canary's sweep (every k measured), or the canary a later unit's k came from.
        "sweep": (state["outcome"] or {}).get("sweep") or (
            {key: plan["sweep"][key] for key in ("canary", "chosen")} if (plan.get("sweep") or {}).get("canary")
            else None),
    }


# ---- rollback.yml --------------------------------------------------------------------------
def rollback(record_text: str | None) -> State:
    """playbooks/rollback.yml: serve the record's known-good (None when it has none). A trial an
    interrupted run left is over once it serves (``interrupted_trial`` says which)."""
    record = release.parse(record_text)
    known_good = record.get("known_good")
    interrupted = _interrupted(record)
    if known_good is None:
        return _state(record=record, done=True, interrupted_trial=interrupted)
    if interrupted is not None:
        interrupted["reason"] = (f"{_interrupted_sentence(interrupted['marker'])}: rolled back to the known-good "
                                 f"{_serving_name(known_good)}")
    return _state(record=release.serving(release.trial_over(record), known_good), serve=known_good, done=True,
                  interrupted_trial=interrupted)
