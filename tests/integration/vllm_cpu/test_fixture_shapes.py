"""Fast checks of the captured real-vLLM fixtures and of the lane's parsers (no server).

They keep the fixtures self-consistent, so a contract test that reads them can trust them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "lab" / "engines" / "vllm-cpu"))
import vllm_cpu_lane as lane  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MODES = ["none", "ngram", "draft-copy", "draft-indep"]
SPEC_MODES = MODES[1:]


def sse_events(path: Path) -> tuple[list[dict], bool]:
    events, done = [], False
    for line in path.read_text().splitlines():
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            done = True
        else:
            events.append(json.loads(line[6:]))
    return events, done


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["chat", "completions"])
def test_sse_fixture_ends_with_usage(mode, kind):
    raw = (FIXTURES / mode / f"sse_{kind}.txt").read_bytes()
    assert raw.endswith(b"data: [DONE]\n\n")
    events, done = sse_events(FIXTURES / mode / f"sse_{kind}.txt")
    assert done
    assert events[-1]["choices"] == []
    assert list(events[-1]["usage"]) == ["prompt_tokens", "total_tokens", "completion_tokens"]
    assert events[-1]["usage"]["completion_tokens"] == 64


@pytest.mark.parametrize("mode", MODES)
def test_spec_counters_only_when_speculating(mode):
    after = lane.spec_counters((FIXTURES / mode / "metrics_after.txt").read_text())
    if mode == "none":
        assert after == {}
    else:
        assert after["vllm:spec_decode_num_drafts_total"] > 0
        assert [k for k in after if "per_pos" in k] == [
            f"vllm:spec_decode_num_accepted_tokens_per_pos_total[{i}]" for i in range(3)]


def test_copy_draft_fixture_full_acceptance():
    fig = json.loads((FIXTURES / "draft-copy" / "figures.json").read_text())
    assert fig["acceptance"]["acceptance_rate"] == 1.0
    assert fig["acceptance"]["mean_acceptance_length"] == 4.0
    # Counters in the final scrape agree: everything drafted was accepted.
    after = lane.spec_counters((FIXTURES / "draft-copy" / "metrics_after.txt").read_text())
    assert after["vllm:spec_decode_num_accepted_tokens_total"] == \
        after["vllm:spec_decode_num_draft_tokens_total"]


@pytest.mark.parametrize("mode", SPEC_MODES)
def test_min_p_rejected_fixture(mode):
    rec = json.loads((FIXTURES / mode / "errors" / "min_p_completions.json").read_text())
    assert rec["status"] == 400
    assert rec["body"]["error"]["type"] == "BadRequestError"


def test_acceptance_math():
    before = {"vllm:spec_decode_num_drafts_total": 10, "vllm:spec_decode_num_draft_tokens_total": 30,
              "vllm:spec_decode_num_accepted_tokens_total": 15,
              "vllm:spec_decode_num_accepted_tokens_per_pos_total[0]": 8,
              "vllm:spec_decode_num_accepted_tokens_per_pos_total[1]": 5,
              "vllm:spec_decode_num_accepted_tokens_per_pos_total[2]": 2}
    after = {"vllm:spec_decode_num_drafts_total": 20, "vllm:spec_decode_num_draft_tokens_total": 60,
             "vllm:spec_decode_num_accepted_tokens_total": 30,
             "vllm:spec_decode_num_accepted_tokens_per_pos_total[0]": 16,
             "vllm:spec_decode_num_accepted_tokens_per_pos_total[1]": 10,
             "vllm:spec_decode_num_accepted_tokens_per_pos_total[2]": 4}
    acc = lane.acceptance(before, after)
    assert acc["acceptance_rate"] == 0.5
    assert acc["mean_acceptance_length"] == 2.5
    assert acc["per_position_acceptance"] == [0.8, 0.5, 0.2]


def test_loopback_only():
    with pytest.raises(ValueError):
        lane.request("GET", "http://10.0.0.1:8000/health")
