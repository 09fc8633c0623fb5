"""Each key's canary, and the draft length it measures: ``num_speculative_tokens``.

The first unit of each key (device class, unit memory, model, method, image: what decides a
speculative serving's figures) in the play is its canary, and rolls out before the key's other
units (playbooks/rollout.yml): a candidate that fails there is not tried on the key's other
units, which serve their baseline with the canary named as the reason (a canary whose own
infrastructure failed, or whose baseline never measured, says nothing about the candidate).

NVIDIA's jetson-speculative-decoding skill starts k at 5 on Thor and 3 on AGX Orin and says a
longer draft pays "only if the draft acceptance rate is >0.6". Which k pays on a given unit,
model and method is a measurement, not a rule of thumb: on a fast target every drafted
position costs a sizeable share of a step, and a long draft can lose on open chat what it wins
on code edits.

So where its class has a sweep, a key's canary measures the key's candidate at each k of
``specfleet_spec_tokens_sweep`` (per class), interleaved with its baseline (A, B(k1), A, B(k2),
A, ...), each k judged by the gate on the baseline blocks either side of it; then, when the
best k is the longest planned and its drafts are accepted more than 60 % of the time, one
longer (the skill's rule, as a measurement). A k that does not start is a revert, and the
sweep goes on. The best k is the one the gate keeps with the highest lower bound of the primary
speedup; the key's other units are planned with it. Every unit's release record keeps its
key's choice (``sweeps``), so a re-run, also of one unit alone, plans the same k and reuses its
decision. The report shows every k measured.

Pure functions; the rollout (specfleet.rollout) sequences the blocks.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from specfleet import gate, paired, release, serving


# ---- planning ------------------------------------------------------------------------------
def key(plan: Mapping[str, Any]) -> str | None:
    """The sweep key of a unit's plan, or None when its plan has nothing to sweep (refused, no
    speculation, or an engine other than vLLM)."""
    spec = plan.get("serving") or {}
    if plan.get("refused") or not plan.get("speculative") or spec.get("engine") != "vllm":
        return None
    # The unit's memory too: an AGX Orin 32 GB or an Orin NX 8 GB is not measured by its 64 GB
    # or 16 GB sibling (other memory bandwidth, other KV room).
    memory = round((plan.get("memory") or {}).get("unit_gib") or 0)
    factors = [plan.get("device_class"), memory, plan.get("model"), serving.speculation(spec)["method"],
               plan.get("image_digest") or plan.get("image")]
    return hashlib.sha256(json.dumps(factors).encode()).hexdigest()[:12]


def for_plan(plan: Mapping[str, Any], policy: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the plan says about the sweep: its key and the draft lengths its key's canary
    measures; None when the plan has nothing to sweep or its class sweeps nothing."""
    sweep_key = key(plan)
    tokens = sorted(set((policy.get("specfleet_spec_tokens_sweep") or {}).get(plan.get("device_class")) or []))
    if sweep_key is None or not tokens:
        return None
    return {"key": sweep_key, "tokens": tokens}


def canaries(plans: Iterable[Mapping[str, Any] | None]) -> dict[str, str]:
    """key -> host: the first unit (in the order given, the inventory's) of each key; plans with
    nothing to measure (refused, no speculation, another engine) have none."""
    found: dict[str, str] = {}
    for plan in plans:
        plan_key = key(plan or {})
        if plan_key is not None:
            found.setdefault(plan_key, plan["host"])  # type: ignore[index]
    return found


def canary_of(plan: Mapping[str, Any], canaries_: Mapping[str, str]) -> str | None:
    """The canary of the plan's key (``canaries_``: key -> host), None for a plan without one."""
    plan_key = key(plan)
    return canaries_.get(plan_key) if plan_key else None


def not_tried(plan: Mapping[str, Any], canary: str, outcome: Mapping[str, Any]) -> dict[str, Any]:
    """A key's later unit whose canary failed: the candidate is not tried here; the unit serves
    its baseline only (as a plan where no method fits), with the canary's failure as the reason."""
    cause = (outcome.get("reasons") or ["no reason recorded"])[0]
    return {**copy.deepcopy(dict(plan)), "speculative": None, "oom_retry": None, "sweep": None, "batch_table": None,
            "serving": {**plan["baseline_serving"], "kind": "speculative"},
            "reasons": [*plan["reasons"], f"not tried here: {canary}, the canary of this unit's key, failed "
                                          f"({cause}); serving the baseline only"]}


def with_tokens(spec: Mapping[str, Any], tokens: int) -> dict[str, Any]:
    """A vLLM speculative serving drafting ``tokens`` tokens; a serving placed on a unit
    (specfleet.serving.for_unit) gets the id of what it now runs."""
    return serving.with_speculative(spec, num_speculative_tokens=int(tokens))


def planned_with(plan: Mapping[str, Any], tokens: int, canary: str) -> dict[str, Any]:
    """A key's later unit planned with the draft length its canary chose."""
    updated = copy.deepcopy(dict(plan))
    updated["sweep"] = {**plan["sweep"], "canary": canary, "chosen": int(tokens)}
    planned = serving.speculation(plan["serving"])["num_speculative_tokens"]
    if planned == tokens:
        updated["reasons"] = [*plan["reasons"], f"num_speculative_tokens {tokens}: confirmed by {canary}'s sweep"]
        return updated
    updated["speculative"] = {**plan["speculative"], "num_speculative_tokens": int(tokens)}
    updated["serving"] = with_tokens(plan["serving"], tokens)
    if plan.get("oom_retry"):
        updated["oom_retry"] = {**plan["oom_retry"], "serving": with_tokens(plan["oom_retry"]["serving"], tokens)}
    updated["reasons"] = [*plan["reasons"],
                          f"num_speculative_tokens {tokens} (planned {planned}): chosen by {canary}'s sweep"]
    return updated


# ---- measuring -----------------------------------------------------------------------------
def results(blocks: Sequence[Mapping[str, Any]], policy: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each draft length measured, judged by the gate on its speculative block and the baseline
    blocks either side of it. ``blocks``: {side, bench, tokens (speculative blocks)}."""
    judged = []
    # One pair per k: an inconclusive k is not kept (a canary cannot measure every k again).
    # The canary keeps the best of the k it measured, so each k is judged at the policy's error
    # shared among them (Bonferroni): choosing among several does not buy a keep that one k
    # measured alone would not get.
    # Each k on its own three blocks, with the block noise the sweep's baseline blocks show.
    between = [index for index, block in enumerate(blocks)
               if block["side"] == paired.SPECULATIVE and 0 < index < len(blocks) - 1]
    once = {**policy, "specfleet_gate_max_blocks": 3,
            "specfleet_gate_block_noise": block_noise(blocks, {**gate.gate_defaults(), **policy})}
    reference = gate.checked_reference(blocks)
    for index in between:
        block = blocks[index]
        verdict = gate.decide([blocks[index - 1], block, blocks[index + 1]], once, compared=len(between),
                              reference=reference)
        primary = next(iter(verdict["figures"].values()), {})
        gain = primary.get("throughput_gain_c1") or {}
        kept = verdict["decision"] == gate.KEEP
        judged.append({
            "tokens": block["tokens"],
            "decision": gate.KEEP if kept else gate.REVERT,
            "gain": gain.get("value"), "gain_lower": gain.get("lower"), "gain_upper": gain.get("upper"),
            "acceptance": (primary.get("acceptance_c1") or {}).get("rate"),
            # What decided: the first failing or open check, or the keep itself.
            "reason": verdict["reasons"][0] if kept else (verdict["reasons"][1:] or verdict["reasons"])[0],
            "block": index,
            "block_noise": once["specfleet_gate_block_noise"],
            "verdict": verdict,
        })
    return judged


def block_noise(blocks: Sequence[Mapping[str, Any]], policy: Mapping[str, Any]) -> float:
    """The block noise each k is judged with: the policy's, or what the sweep's baseline blocks
    show on the primary workload at c=1 when that is more (specfleet.paired.placebo_block_noise)."""
    workload = (policy.get("specfleet_gate_workloads") or gate.gate_defaults()["specfleet_gate_workloads"])[0]
    benches = [block["bench"] for block in blocks if block["side"] == paired.BASELINE]
    baselines = gate.cleaned_blocks(benches, [paired.BASELINE] * len(benches), workload, gate.SINGLE,
                                    "time_per_token", either_side=True)
    prompts = paired.common_prompts(baselines)
    if len(prompts) < 2:
        return policy["specfleet_gate_block_noise"]
    levels = [paired.log_level(block, prompts) for block in baselines]
    return paired.placebo_block_noise(levels, policy["specfleet_gate_block_noise"])


def best(judged: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The kept draft length with the highest lower bound of the primary speedup (the shorter
    on a tie: it costs less memory and less when drafts miss); None when the gate kept none."""
    kept = [entry for entry in judged if entry["decision"] == gate.KEEP]
    if not kept:
        return None
    return max(kept, key=lambda entry: (entry["gain_lower"] or 0.0, -entry["tokens"]))


def next_tokens(judged: Sequence[Mapping[str, Any]], planned: Sequence[int], max_tokens: int,
                not_started: Sequence[int] = ()) -> int | None:
    """The next draft length to measure: the planned ones in order, then one longer (once) when
    the best is the longest planned and its drafts were accepted above the rule's rate."""
    tried = {entry["tokens"] for entry in judged} | set(not_started)
    for tokens in planned:
        if tokens not in tried:
            return tokens
    top = best(judged)
    if top is None or top["tokens"] != max(planned) or top["tokens"] >= max_tokens or top["tokens"] + 1 in tried:
        return None
    # The draft-length rule (gate.draft_length_advice): a longer draft only above its rate.
    if (top["acceptance"] or 0.0) > gate.DRAFT_LENGTH_ACCEPTANCE:
        return top["tokens"] + 1
    return None


def max_blocks(planned: Sequence[int]) -> int:
    """The blocks a sweep of ``planned`` can take: the first baseline, then a pair per k and
    for the one longer k (a k that does not start takes a baseline block in its place)."""
    return 1 + 2 * (len(planned) + 1)


def summary(judged: Sequence[Mapping[str, Any]], chosen: Mapping[str, Any] | None, planned: Sequence[int],
            not_started: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """What the record and the report keep of a sweep: the k planned, every k with its decision,
    speedup bounds and acceptance (a k that did not start: a revert with its failure), and the
    k chosen (None: the gate kept none)."""
    fields = ("tokens", "decision", "gain", "gain_lower", "gain_upper", "acceptance", "reason")
    measured = [{name: entry[name] for name in fields} for entry in judged]
    measured += [{"tokens": entry["tokens"], "decision": gate.REVERT, "gain": None, "gain_lower": None,
                  "gain_upper": None, "acceptance": None, "reason": f"did not start ({entry['failure_class']})"}
                 for entry in not_started]
    return {"chosen": chosen["tokens"] if chosen else None, "tokens": list(planned),
            "measured": sorted(measured, key=lambda entry: entry["tokens"])}


def sentence(found: Mapping[str, Any]) -> str:
    """A sweep (its summary) in one line for the unit's reasons and the report."""
    parts = []
    for entry in found["measured"]:
        gain = entry["reason"] if entry["gain"] is None else f"{entry['gain'] * 100:+.0f}%"
        accepted = "" if entry["acceptance"] is None else f", {entry['acceptance'] * 100:.0f}% accepted"
        parts.append(f"k={entry['tokens']} {entry['decision']} ({gain}{accepted})")
    outcome = f"k={found['chosen']} chosen" if found["chosen"] is not None else "no k kept"
    return f"draft length measured: {'; '.join(parts)}: {outcome}"


def recorded(record: Mapping[str, Any] | None, plan: Mapping[str, Any]) -> dict[str, Any] | None:
    """The choice a unit's release record keeps for its plan's key, while the key still sweeps
    the same draft lengths (None: none, or another sweep)."""
    planned = plan.get("sweep")
    found = ((record or {}).get("sweeps") or {}).get(planned["key"]) if planned else None
    if not found or list(found.get("tokens") or []) != list(planned["tokens"]):
        return None
    return dict(found)


def unit_plan(plan: Mapping[str, Any], host: str, canaries_: Mapping[str, str], own_record: Mapping[str, Any],
              canary_state: Mapping[str, Any] | None, remeasure: bool) -> tuple[dict[str, Any], bool]:
    """(the plan a unit rolls out with, whether it sweeps). A key's later unit whose canary
    (``canaries_``: key -> host; ``canary_state``: its rollout) failed with its candidate
    (release.candidate_failed) does not try it (``not_tried``). A key's canary sweeps, unless
    its own record keeps the key's choice (and no re-measure is asked): then it plans that, as
    the key's other units plan what their canary's record keeps, or the planned k, with the
    reason, when it chose none."""
    canary = canary_of(plan, canaries_)
    outcome = (canary_state or {}).get("outcome") or {}
    if canary is not None and canary != host and release.candidate_failed(outcome):
        return not_tried(plan, canary, outcome), False
    planned = plan.get("sweep")
    if canary is None or not planned:
        return dict(plan), False
    if canary == host:
        found = None if remeasure else recorded(own_record, plan)
        if found is None:
            return dict(plan), True
    else:
        found = recorded((canary_state or {}).get("record"), plan)
    own = serving.speculation(plan["serving"])["num_speculative_tokens"]
    if found is None:
        return {**plan, "sweep": {**planned, "canary": canary, "chosen": None},
                "reasons": [*plan["reasons"], f"num_speculative_tokens {own} as planned: {canary}'s sweep did not "
                                              f"finish"]}, False
    if found.get("chosen") is None:
        return {**plan, "sweep": {**planned, "canary": found["canary"], "chosen": None},
                "reasons": [*plan["reasons"], f"num_speculative_tokens {own} as planned: {found['canary']}'s sweep "
                                              f"kept no draft length"]}, False
    return planned_with(plan, found["chosen"], found["canary"]), False


def report_text(found: Mapping[str, Any] | None) -> str | None:
    """The report's sweep column: a canary's every k (decision, speedup) and its choice, or
    which canary a later unit's k came from."""
    if not found:
        return None
    if "measured" in found:
        parts = [f"k={entry['tokens']} {entry['decision']}"
                 + ("" if entry["gain"] is None else f" {1 + entry['gain']:.2f}x") for entry in found["measured"]]
        return f"{', '.join(parts)}: " + (f"k={found['chosen']}" if found["chosen"] is not None else "none kept")
    if found.get("canary"):
        return f"k={found['chosen']} from {found['canary']}" if found["chosen"] is not None else \
            f"planned k (none from {found['canary']})"
    return None
