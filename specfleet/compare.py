"""Run against run: per unit, what changed between two rollout runs and which figures moved
beyond their noise (the upgrade sentinel: a new image, JetPack or k, and what it did).

Pure functions over the unit records two runs wrote (specfleet.runs.load_run). A figure has
moved when the change is larger than its own noise says it could be by chance:
- the gate's speedups (c=1 throughput, c=8 throughput change): their confidence intervals
  (paired by prompt, specfleet.paired) do not overlap;
- acceptance: the two rates differ by more than three standard errors of the difference
  (each rate a share of its drafted tokens);
- TTFT and TPOT p50 of each side: the change exceeds the larger of 10 % and the first run's
  own p50-to-p90 spread (per-request variation the p50 of a few dozen requests still carries);
- a side's start (seconds to serving, one sample per run): 1.5 times longer or shorter and at
  least a second apart, with whether torch.compile's cache served it (vLLM's start log).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.specfleet.fleet.plugins.module_utils.bench_figures import cell, cell_key

from specfleet import attention, runs

LATENCY_FLOOR = 0.10
ACCEPTANCE_SIGMAS = 3.0
ONLY_LISTED = 10
STARTUP_RATIO = 1.5
STARTUP_FLOOR_S = 1.0
COMPILE_CACHE_HINT = ("TTFT up after an image change: usually the torch.compile cache missed (the new image's "
                      "cache was not pre-warmed; run prewarm.yml, then measure again)")
# A run that recorded no invocation: the next command as the README types it.
README_INVOCATION = attention.Invocation()
COLD_START_HINT = ("the new image's first start compiled its graphs (torch.compile cache miss): pre-warm it before "
                   "the event, `{command}`, so every start is warm")


@dataclass
class UnitComparison:
    host: str
    changes: list[str] = field(default_factory=list)  # "image: a -> b"
    moved: list[str] = field(default_factory=list)  # "TTFT p50 baseline 8.9 -> 31.0 ms (+249%)"
    hints: list[str] = field(default_factory=list)

    @property
    def noteworthy(self) -> bool:
        return bool(self.changes or self.moved)


def _software(record: Mapping) -> str | None:
    found = (runs.bench_context(record, "runtime") or {}).get("server_version")
    return str(found) if found else None


def _jetpack(record: Mapping) -> str | None:
    """"JetPack 7.0, L4T 38.2.0" from the bench context's hardware line."""
    found = re.search(r"JetPack [^,]+, L4T \S+", str(runs.bench_context(record, "hardware") or ""))
    return found.group(0) if found else None


# What a unit was asked to serve and where it ended: (title, reader).
SETTINGS = (
    ("decision", lambda r: r.get("decision")),
    ("serving", lambda r: r.get("serving")),
    ("image", lambda r: r.get("image")),
    ("vLLM", _software),
    ("JetPack", _jetpack),
    ("model", lambda r: r.get("model")),
    ("method", lambda r: r.get("method")),
    ("k", lambda r: r.get("num_speculative_tokens")),
    ("draft", lambda r: (r.get("resolved_speculative_config") or {}).get("model")),
)


def _interval_moved(before: Mapping | None, after: Mapping | None) -> bool:
    if not before or not after or None in (before.get("lower"), before.get("upper"), after.get("lower"),
                                            after.get("upper")):
        return False
    return after["lower"] > before["upper"] or after["upper"] < before["lower"]


def _acceptance_moved(before: Mapping | None, after: Mapping | None) -> bool:
    if not before or not after or not before.get("draft_tokens") or not after.get("draft_tokens"):
        return False
    rates = [before["rate"], after["rate"]]
    error = math.sqrt(sum(rate * (1 - rate) / max(1, found["draft_tokens"])
                          for rate, found in zip(rates, (before, after), strict=True)))
    return abs(rates[1] - rates[0]) > ACCEPTANCE_SIGMAS * max(error, 1e-9)


def _cell(record: Mapping, side: str, workload: str) -> Mapping:
    return cell(record.get(side), workload, cell_key(1)) or {}


def _latency_moves(before: Mapping, after: Mapping, workload: str) -> list[tuple[str, str, float]]:
    """(figure, "a -> b ms (+x%)", relative change) of TTFT and TPOT p50 per side beyond their noise."""
    moves = []
    for side in ("baseline", "speculative"):
        for figure in ("ttft_ms", "tpot_ms"):
            old, new = _cell(before, side, workload).get(figure) or {}, _cell(after, side, workload).get(figure) or {}
            if not old.get("p50") or new.get("p50") is None:
                continue
            spread = (old.get("p90") or old["p50"]) / old["p50"] - 1
            change = new["p50"] / old["p50"] - 1
            if abs(change) > max(LATENCY_FLOOR, spread):
                name = f"{figure.removesuffix('_ms').upper()} p50 {side}"
                moves.append((name, f"{old['p50']:.1f} -> {new['p50']:.1f} ms ({change * 100:+.0f}%)", change))
    return moves


def _startup_moves(before: Mapping, after: Mapping) -> list[tuple[str, str, bool]]:
    """(side, "a -> b s (compile cache hit -> miss)", whether the later start missed the compile
    cache) of each side whose start moved beyond one sample's noise."""
    moves = []
    for side in ("baseline", "speculative"):
        old, new = (before.get("startup") or {}).get(side) or {}, (after.get("startup") or {}).get(side) or {}
        if not old.get("seconds") or new.get("seconds") is None:
            continue
        ratio = new["seconds"] / old["seconds"]
        if abs(new["seconds"] - old["seconds"]) < STARTUP_FLOOR_S or 1 / STARTUP_RATIO < ratio < STARTUP_RATIO:
            continue
        cache = ""
        if old.get("compile_cache") or new.get("compile_cache"):
            cache = f" (torch.compile cache {old.get('compile_cache') or '-'} -> {new.get('compile_cache') or '-'})"
        missed = new.get("compile_cache") == "miss"
        moves.append((side, f"{old['seconds']:.1f} -> {new['seconds']:.1f} s{cache}", missed))
    return moves


def compare_unit(before: Mapping, after: Mapping,
                 invocation: attention.Invocation = README_INVOCATION) -> UnitComparison:
    """What changed on one unit and which figures moved; a hint's command is typed as the later
    run was started (``invocation``)."""
    found = UnitComparison(str(after["host"]))
    for title, read in SETTINGS:
        old, new = read(before), read(after)
        if old != new:
            found.changes.append(f"{title}: {old if old is not None else '-'} -> {new if new is not None else '-'}")
    workload, figures = runs.gated(after)
    old_workload, old_figures = runs.gated(before)
    if workload is not None and workload == old_workload:
        for name, key, show in (("speedup c=1", "throughput_gain_c1", lambda v: f"{1 + v:.2f}x"),
                                ("throughput change c=8", "throughput_change_c8", lambda v: f"{v * 100:+.1f}%")):
            old, new = old_figures.get(key), figures.get(key)
            if _interval_moved(old, new):
                found.moved.append(f"{name} ({workload}) {show(old['value'])} -> {show(new['value'])}, beyond "
                                   "both confidence intervals")
        old, new = old_figures.get("acceptance_c1"), figures.get("acceptance_c1")
        if _acceptance_moved(old, new):
            found.moved.append(f"acceptance ({workload}) {old['rate'] * 100:.1f}% -> {new['rate'] * 100:.1f}%")
    image_changed = before.get("image") != after.get("image")
    starts = _startup_moves(before, after)
    found.moved += [f"start to serving ({side}) {text}" for side, text, _ in starts]
    if image_changed and any(missed for _, _, missed in starts):
        found.hints.append(COLD_START_HINT.format(command=invocation.command("prewarm", found.host)))
    shared = workload or old_workload
    if shared:
        moves = _latency_moves(before, after, shared)
        found.moved += [f"{name} ({shared}) {text}" for name, text, _ in moves]
        if image_changed and any(name.startswith("TTFT") and change > 0 for name, _, change in moves):
            found.hints.append(COMPILE_CACHE_HINT)
    return found


def compare_runs(before: Sequence[Mapping], after: Sequence[Mapping],
                 invocation: attention.Invocation = README_INVOCATION) -> dict[str, Any]:
    """Units in both runs compared; units only in one named. ``invocation``: how the later run
    was started (its hints' commands are typed the same way)."""
    old = {str(record["host"]): record for record in before}
    new = {str(record["host"]): record for record in after}
    units = [compare_unit(old[host], new[host], invocation) for host in sorted(old.keys() & new.keys())]
    return {"units": units, "only_before": sorted(old.keys() - new.keys()),
            "only_after": sorted(new.keys() - old.keys())}


def to_markdown(found: Mapping[str, Any], before_id: str, after_id: str, heading: str = "#") -> str:
    units: list[UnitComparison] = found["units"]
    changed = [unit for unit in units if unit.noteworthy]
    lines = [f"{heading} Changes from run {before_id} to run {after_id}", "",
             f"{len(units)} units in both runs: {len(changed)} changed or moved beyond their noise, "
             f"{len(units) - len(changed)} the same."]
    for run_id, hosts in ((before_id, found["only_before"]), (after_id, found["only_after"])):
        if hosts:  # a run limited with -l holds a few units: the rest are counted, not listed
            named = ", ".join(hosts[:ONLY_LISTED]) + (f" and {len(hosts) - ONLY_LISTED} more"
                                                        if len(hosts) > ONLY_LISTED else "")
            lines.append(f"Only in {run_id} ({len(hosts)}): {named}.")
    for unit in changed:
        lines += ["", f"- **{unit.host}**"]
        lines += [f"  - changed: {text}" for text in unit.changes]
        lines += [f"  - moved: {text}" for text in unit.moved]
        lines += [f"  - {text}" for text in unit.hints]
    return "\n".join(lines) + "\n"
