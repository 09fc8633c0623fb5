# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""vLLM's Prometheus ``/metrics``: the speculative-decoding counters, read before and after a
run, and the acceptance their difference shows.

Unit-side code, stdlib only (Python 3.10+), shipped by Ansible with the spec_bench module;
the controller and the tests import the same file by its collection name.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.specfleet.fleet.plugins.module_utils.bench_http import (
    HTTP_ERROR,
    ClientError,
    Endpoint,
    error_message,
    http_get,
)

SPEC_PREFIX = "vllm:spec_decode_"


SPEC_COUNTERS = {
    "vllm:spec_decode_num_drafts_total": "drafts",
    "vllm:spec_decode_num_draft_tokens_total": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens_total": "accepted",
}


SPEC_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*$")


_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def _unescape(value: str) -> str:
    return value.replace("\\\\", "\x00").replace('\\"', '"').replace("\\n", "\n").replace("\x00", "\\")


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Samples of a Prometheus text exposition: (name, labels, value); comments skipped."""
    samples: list[tuple[str, dict[str, str], float]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, label_text, value_text = match.groups()
        labels = {key: _unescape(value) for key, value in _LABEL.findall(label_text or "")}
        try:
            value = float(value_text)
        except ValueError:
            continue
        samples.append((name, labels, value))
    return samples


def spec_decode_counters(text: str, model_name: str | None = None) -> dict[str, Any] | None:
    """Cumulative `vllm:spec_decode_*_total` counters, summed over engines.

    Returns None when the server exposes no spec-decode counters (a baseline server: vLLM
    registers them only with --speculative-config). When `model_name` is given and some
    samples carry that label, only those count.
    """
    samples = [s for s in parse_prometheus(text) if s[0].startswith(SPEC_PREFIX) and s[0].endswith("_total")]
    if not samples:
        return None
    if model_name is not None and any(s[1].get("model_name") == model_name for s in samples):
        samples = [s for s in samples if s[1].get("model_name", model_name) == model_name]
    counters: dict[str, Any] = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0, "per_position": {}}
    for name, labels, value in samples:
        if name in SPEC_COUNTERS:
            counters[SPEC_COUNTERS[name]] += value
        elif name == SPEC_PER_POSITION:
            try:
                position = int(labels.get("position", ""))
            except ValueError:
                continue
            counters["per_position"][position] = counters["per_position"].get(position, 0.0) + value
    return counters


def _zero_counters(like: dict[str, Any]) -> dict[str, Any]:
    zero_positions = dict.fromkeys(like["per_position"], 0.0)
    return {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0, "per_position": zero_positions}


def counter_delta(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any] | None:
    """after - before; None when the server has no spec-decode counters."""
    if after is None:
        return None
    before = before or _zero_counters(after)
    positions = sorted(set(after["per_position"]) | set(before["per_position"]))
    return {
        "drafts": after["drafts"] - before["drafts"],
        "draft_tokens": after["draft_tokens"] - before["draft_tokens"],
        "accepted": after["accepted"] - before["accepted"],
        "per_position": {
            p: after["per_position"].get(p, 0.0) - before["per_position"].get(p, 0.0) for p in positions
        },
    }


def add_deltas(deltas: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Sum of counter deltas; None if no delta had counters."""
    present = [d for d in deltas if d is not None]
    if not present:
        return None
    total: dict[str, Any] = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0, "per_position": {}}
    for delta in present:
        for key in ("drafts", "draft_tokens", "accepted"):
            total[key] += delta[key]
        for position, value in delta["per_position"].items():
            total["per_position"][position] = total["per_position"].get(position, 0.0) + value
    return total


def acceptance(delta: dict[str, Any] | None) -> dict[str, Any] | None:
    """Acceptance figures from a counter delta (vLLM's formulas); None without counters.

    rate = d_accepted / d_draft_tokens; mean_length = 1 + d_accepted / d_drafts;
    per_position[i] = d_per_pos[i] / d_drafts. Ratios are None when their denominator
    did not move (speculation configured but no drafts in the window).
    """
    if delta is None:
        return None
    drafts, draft_tokens, accepted = delta["drafts"], delta["draft_tokens"], delta["accepted"]
    positions = sorted(delta["per_position"])
    return {
        "rate": round(accepted / draft_tokens, 6) if draft_tokens > 0 else None,
        "mean_length": round(1.0 + accepted / drafts, 6) if drafts > 0 else None,
        "per_position": [round(delta["per_position"][p] / drafts, 6) for p in positions] if drafts > 0 else None,
        "drafts": int(round(drafts)),
        "draft_tokens": int(round(draft_tokens)),
        "accepted": int(round(accepted)),
    }


def scrape_spec_counters(endpoint: Endpoint, timeout: float, model_name: str | None = None) -> dict[str, Any] | None:
    """GET /metrics and return the spec-decode counters (None if there are none).

    Raises ClientError when /metrics does not answer 200.
    """
    status, body = http_get(endpoint, "/metrics", timeout)
    if status != 200:
        raise ClientError(HTTP_ERROR, "/metrics: " + error_message(status, body))
    return spec_decode_counters(body.decode("utf-8", "replace"), model_name)
