"""A per-batch-size speculation table: speculation where it pays, off where it loses.

vLLM's dynamic speculative decoding takes ``num_speculative_tokens_per_batch_size`` in
``--speculative-config``: inclusive bands ``[first_batch, last_batch, k]``, the first starting
at 1; each engine step drafts the k of the band its number of scheduled requests falls in,
never more than ``num_speculative_tokens``, and k 0 turns drafting off in that band
(docs/features/speculative_decoding/dynamic_speculative_decoding.md,
vllm/v1/spec_decode/dynamic/utils.py). It came with vllm-project/vllm PR #32374, first released
in vLLM 0.24.0; an older SpeculativeConfig refuses the key, so only an image whose vLLM is known
to be 0.24.0 or newer (the image matrix's ``vllm_version``) is given one.

Speculation commonly pays for one request at a time and loses under load (vLLM issues #27379
and #31014; TensorRT Edge-LLM's Thor tables: EAGLE-3 3.45x at batch 1, 0.61-0.87x at batch 8).
When the gate reverts a unit for that one reason (its primary workload regresses at c=8 while
every other check passes) and its image has the table, the rollout measures the candidate once
more with speculation on where it was measured to pay (batch 1: the c=1 runs) and off above it,
up to the server's ``--max-num-seqs`` (the most requests a step schedules, the class's peak):
``[[1, 1, k], [2, max_num_seqs, 0]]``. That variant is judged like any candidate, on its own
pair of blocks between baselines (A, B(table), A), and at c=1 against the plain speculation it
varies as well (gate.decide's ``variant_of``): a table is not free. With one, vLLM's V1 model
runner captures PIECEWISE CUDA graphs only (vllm-project/vllm#48494), which published
measurements put at +7% TPOT in the k=0 band over no speculation (#49652) and more at high
concurrency (#49986); a table measured to cost more than the gate's margin at c=1 (even its upper
bound below it) is not kept, nor one whose k=0 band cannot be shown within it at c=8. Kept, it is
what the unit serves and what a re-run serves again without measuring. A canary's draft-length
sweep does not try tables: its k values are judged as measured.

Pure functions; the rollout (specfleet.rollout) sequences the blocks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specfleet import gate, serving
from specfleet.catalog import version_key

# The key's name in every released vLLM (0.24.0 on): one name, so no version switch. An open
# PR (vllm-project/vllm #48944) renames it `speculative_token_schedule` and keeps this name as
# an alias; should a release ever drop the alias, the name must follow the image's vllm_version.
FIELD = "num_speculative_tokens_per_batch_size"
# The first vLLM release with the field (vllm-project/vllm PR #32374, in v0.24.0).
SUPPORTED_SINCE = (0, 24, 0)
# Speculation stays on up to the largest concurrency measured to pay: the bench's c=1.
SPECULATE_UP_TO = 1
# The methods vLLM's documentation says the table was tested with (EAGLE and EAGLE-3; DFlash,
# which this toolkit does not plan): docs/features/speculative_decoding/dynamic_speculative_decoding.md.
TESTED_METHODS = ("eagle", "eagle3")

Table = list[list[int]]


def supported(vllm_version: str | None) -> bool:
    """Whether an image's vLLM takes the field (an unknown version does not: it may refuse it)."""
    found = version_key(vllm_version) if vllm_version else ()
    return bool(found) and found >= SUPPORTED_SINCE


def for_plan(plan: Mapping[str, Any], policy: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the plan says about a table: the batch sizes it would cover (``max_batch``: the
    server's --max-num-seqs), or None when the plan has none to try (no vLLM speculation, a
    method vLLM did not test the table with, an image without the field, or
    specfleet_spec_batch_table false)."""
    spec = plan.get("serving") or {}
    if plan.get("refused") or not plan.get("speculative") or spec.get("engine") != "vllm":
        return None
    if plan["speculative"].get("method") not in TESTED_METHODS:
        return None
    if not policy.get("specfleet_spec_batch_table") or not supported(plan.get("vllm_version")):
        return None
    return {"speculate_up_to": SPECULATE_UP_TO, "max_batch": int(policy["specfleet_max_num_seqs"])}


def table(tokens: int, planned: Mapping[str, Any]) -> Table:
    """The bands: ``tokens`` drafted up to ``speculate_up_to`` requests a step, none above."""
    edge = int(planned["speculate_up_to"])
    return [[1, edge, int(tokens)], [edge + 1, int(planned["max_batch"]), 0]]


def with_table(spec: Mapping[str, Any], bands: Sequence[Sequence[int]]) -> dict[str, Any]:
    """A vLLM speculative serving with the table; a serving placed on a unit
    (specfleet.serving.for_unit) gets the id of what it now runs."""
    return serving.with_speculative(spec, **{FIELD: [list(band) for band in bands]})


def applies(verdict: Mapping[str, Any]) -> bool:
    """Whether the gate reverted for the primary workload's measured c=8 regression alone: every
    other check passed (none failed, none inconclusive)."""
    if verdict.get("decision") != gate.REVERT:
        return False
    primary = (verdict.get("gate_workloads") or [None])[0]
    if ((verdict.get("figures") or {}).get(primary) or {}).get("throughput_change_c8", {}).get("value") is None:
        return False  # c=8 not measured: nothing says speculation loses under load
    failing = [check for check in verdict.get("checks") or [] if check["verdict"] == gate.FAIL]
    opened = [check for check in verdict.get("checks") or [] if check["verdict"] == gate.OPEN]
    return (not opened and bool(failing)
            and all((check["workload"], check["check"]) == (primary, "throughput_c8") for check in failing))


def describe(bands: Sequence[Sequence[int]]) -> str:
    """``k=3 at batch 1, off at 2-8``: the table in words."""
    parts = []
    for first, last, tokens in bands:
        where = f"{first}" if first == last else f"{first}-{last}"
        parts.append(f"k={tokens} at batch {where}" if tokens else f"off at batch {where}")
    return ", ".join(parts)


def sentence(bands: Sequence[Sequence[int]], without: Mapping[str, Any], kept: bool) -> str:
    """Why a table was measured and what came of it, for the unit's reasons."""
    c8 = next((check["reason"] for check in without.get("checks") or []
               if check["verdict"] == gate.FAIL and check["check"] == "throughput_c8"), "c=8 regresses")
    outcome = "kept: speculation where it pays, off under load" if kept else "reverted as well"
    return f"per-batch-size table ({describe(bands)}) measured after {c8}: {outcome}"


def report_text(found: Mapping[str, Any] | None) -> str | None:
    """The report's table column: the bands and the gate's decision on them."""
    if not found:
        return None
    return f"{describe(found['table'])}: {found['decision']}"
