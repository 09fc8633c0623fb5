# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The benchmark's figures: statistics over runs, each request's record, a cell's aggregate
(a workload at one concurrency), and the readers of a bench result the gate and the report use.

Unit-side code, stdlib only (Python 3.10+), shipped by Ansible with the spec_bench module;
the controller and the tests import the same file by its collection name.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

from ansible_collections.specfleet.fleet.plugins.module_utils.bench_stream import (
    BatchResult,
    RequestResult,
    to_ms,
)
from ansible_collections.specfleet.fleet.plugins.module_utils.spec_metrics import (
    acceptance,
    add_deltas,
)


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = math.ceil(position)
    if low == high:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def median(values: list[float]) -> float | None:
    return percentile(values, 50.0)


def spread(values: list[float]) -> float | None:
    """(max - min) / median: the run-to-run spread of a figure."""
    middle = median(values)
    if middle is None or middle == 0:
        return None
    return (max(values) - min(values)) / middle


def summarize(values: list[float], scale: float = 1.0, digits: int = 3) -> dict[str, float | None]:
    """{p50, p90, mean} of values times `scale` (e.g. 1000 for seconds -> ms)."""

    def fmt(value: float | None) -> float | None:
        return None if value is None else round(value * scale, digits)

    return {"p50": fmt(percentile(values, 50)), "p90": fmt(percentile(values, 90)), "mean": fmt(mean(values))}


def cell_key(concurrency: int) -> str:
    """Result key of a concurrency level: 'c1', 'c8' (strings: Ansible/JSON keys)."""
    return f"c{concurrency}"


def text_digest(text: str) -> str:
    """A short digest of one output text: what two servers' answers to a prompt are compared by."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def request_record(result: RequestResult) -> dict[str, Any]:
    """One request as the result keeps it: enough to pair it by prompt with the other server's."""
    record: dict[str, Any] = {
        "prompt": result.prompt_id,
        "tokens": result.completion_tokens,
        "ttft_ms": _round(to_ms(result.ttft_s)),
        "tpot_ms": _round(to_ms(result.tpot_s)),
        "e2e_ms": _round(to_ms(result.e2e_s)),
        "chunks": len(result.chunk_times),
        "text": text_digest(result.text) if result.ok else None,
    }
    if not result.ok:
        record["failed"] = result.error_class
    elif result.bursty:
        record["bursty"] = True
    return record


def aggregate(
    batches: list[BatchResult], deltas: list[dict[str, Any] | None], with_acceptance: bool = True,
    remeasured: int = 0,
) -> dict[str, Any]:
    """Figures of one workload x concurrency from its measured runs (pure).

    Every request is kept (``runs[].requests``) so the gate can pair requests by prompt.
    Latencies are pooled over the successful requests whose stream did not arrive in bursts;
    throughput is per run (output tokens / run wall time), summarised by its median and
    spread over the runs without a failure or a burst. ``bursts`` says how many runs were
    measured again for a burst and how many bursty requests the kept runs still hold (left
    out of every figure).
    """
    clean = [r for batch in batches for r in batch.results if r.ok and not r.bursty]
    runs = []
    for number, batch in enumerate(batches):
        tpots = [t for t in (r.tpot_s for r in batch.results if r.ok and not r.bursty) if t is not None]
        delta = deltas[number] if number < len(deltas) else None
        runs.append(
            {
                "throughput_tok_s": _round(batch.throughput_tok_s),
                "tpot_p50_ms": _round(None if not tpots else percentile(tpots, 50) * 1000.0),
                "wall_s": round(batch.wall_s, 4),
                "output_tokens": batch.output_tokens,
                "requests": [request_record(result) for result in batch.results],
                "failed_requests": len(batch.failed),
                "bursty_requests": sum(1 for result in batch.results if result.ok and result.bursty),
                "spec_decode": None
                if delta is None
                else {k: int(round(delta[k])) for k in ("drafts", "draft_tokens", "accepted")},
            }
        )
    throughputs = [
        r["throughput_tok_s"] for r in runs
        if r["throughput_tok_s"] is not None and not r["failed_requests"] and not r["bursty_requests"]
    ]
    total = add_deltas(deltas) if with_acceptance else None
    return {
        "runs": runs,
        "ttft_ms": summarize([r.ttft_s for r in clean if r.ttft_s is not None], 1000.0),
        "tpot_ms": summarize([t for t in (r.tpot_s for r in clean) if t is not None], 1000.0),
        "itl_ms": summarize([gap for r in clean for gap in r.itl_s], 1000.0),
        "e2e_ms": summarize([r.e2e_s for r in clean if r.e2e_s is not None], 1000.0),
        "throughput_tok_s": {
            "median": _round(median(throughputs)),
            "runs": throughputs,
            "spread": _round(spread(throughputs), 4),
        },
        "acceptance": acceptance(total),
        "output_tokens": sum(batch.output_tokens for batch in batches),
        "requests": sum(len(batch.results) for batch in batches),
        "failed_requests": sum(len(batch.failed) for batch in batches),
        "bursts": {"remeasured_runs": remeasured, "bursty_requests_left_out": sum(r["bursty_requests"] for r in runs)},
    }


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


# --- reading a result (the gate, the report and status read cells only through these) --------
def bench_of(result: Any) -> dict[str, Any]:
    """The ``bench`` dict of a spec_bench result, given it or the whole registered result."""
    if not isinstance(result, dict):
        return {}
    inner = result.get("bench")
    return inner if isinstance(inner, dict) else result


def cell(result: Any, workload: str, key: str) -> dict[str, Any] | None:
    """One workload x concurrency cell (``key`` from cell_key) as aggregate made it, or None."""
    found = ((bench_of(result).get("results") or {}).get(workload) or {}).get(key)
    return found if isinstance(found, dict) else None


def median_throughput(figures: dict[str, Any] | None) -> float | None:
    """Output tokens per second of a cell: the median over its runs."""
    return ((figures or {}).get("throughput_tok_s") or {}).get("median")


def tpot_p50(figures: dict[str, Any] | None) -> float | None:
    """TPOT p50 of a cell in ms, pooled over the requests of every run."""
    return ((figures or {}).get("tpot_ms") or {}).get("p50")


def throughput_runs(figures: dict[str, Any] | None) -> list[float]:
    """Each complete run's throughput (runs with failed requests left out)."""
    values = ((figures or {}).get("throughput_tok_s") or {}).get("runs") or []
    return [float(v) for v in values if isinstance(v, int | float) and v > 0]


def tpot_runs(figures: dict[str, Any] | None) -> list[float]:
    """Each complete run's TPOT p50 in ms."""
    values = [run.get("tpot_p50_ms") for run in (figures or {}).get("runs") or [] if not run.get("failed_requests")]
    return [float(v) for v in values if isinstance(v, int | float) and v > 0]


def cell_acceptance(figures: dict[str, Any] | None) -> dict[str, Any] | None:
    """Acceptance of the drafts in a cell (None: the server exposes no spec-decode counters)."""
    return (figures or {}).get("acceptance")
