"""The real vLLM 0.32 on this CPU: shapes and behaviours the emulator must match.

Slow lane: each server takes 45-90 s to start, and the tests are ordered so that each mode
(no speculation, ngram, draft_model with an exact copy of the target) starts once.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "lab" / "engines" / "vllm-cpu"))
import vllm_cpu_lane as lane  # noqa: E402

K = 3  # num_speculative_tokens of the pool's servers (conftest.K)

pytestmark = pytest.mark.slow

PROMPT = (
    "def count_tokens(tokens, limit=64):\n    total = []\n    for i in range(limit):\n"
    "        if tokens[i] > 3:\n            total.append(tokens[i] * 2)\n"
    "    return total\n\ndef count_metrics(metrics, limit=64):\n    total = []\n"
)
MESSAGES = [{"role": "user", "content": "The unit reads the metrics. Summarise."}]


def completion(max_tokens: int = 32, stream: bool = True, **extra) -> dict:
    body = {"model": lane.TARGET_MODEL, "prompt": PROMPT, "max_tokens": max_tokens,
            "temperature": 0.0, "top_p": 1.0, "seed": 7, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body | extra


def chat(max_tokens: int = 32, stream: bool = True, **extra) -> dict:
    body = {"model": lane.TARGET_MODEL, "messages": MESSAGES, "max_tokens": max_tokens,
            "temperature": 0.0, "top_p": 1.0, "seed": 7, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body | extra


ENDPOINTS = {
    "completions": ("/v1/completions", completion, "text_completion"),
    "chat": ("/v1/chat/completions", chat, "chat.completion.chunk"),
}


def metrics(srv: lane.Server) -> str:
    status, _, body = lane.request("GET", srv.base_url + "/metrics")
    assert status == 200
    return body.decode()


def assert_usage_chunk(res: lane.StreamResult, obj: str, max_tokens: int) -> None:
    assert res.status == 200
    assert res.done, "stream must end with data: [DONE]"
    assert res.raw.rstrip().endswith(b"data: [DONE]")
    final = res.events[-1]
    assert final["object"] == obj
    assert final["choices"] == []
    usage = final["usage"]
    assert set(usage) >= {"prompt_tokens", "completion_tokens", "total_tokens"}
    assert all(isinstance(usage[k], int) for k in ("prompt_tokens", "completion_tokens"))
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["completion_tokens"] == max_tokens  # ignore_eos
    # Only the final chunk carries usage; every other chunk has one choice.
    assert all("usage" not in ev or ev["usage"] is None for ev in res.events[:-1])
    assert all(len(ev["choices"]) == 1 for ev in res.events[:-1])
    assert res.events[-2]["choices"][0]["finish_reason"] == "length"


# --------------------------------------------------------------------------- no speculation


@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
def test_sse_final_usage_chunk(baseline_server, endpoint):
    path, make, obj = ENDPOINTS[endpoint]
    res = lane.stream(baseline_server.base_url + path, make(24, ignore_eos=True))
    assert_usage_chunk(res, obj, 24)
    # Without speculation a token is its own chunk, unless the API server fell behind: vLLM
    # then merges the outputs queued for a request into one chunk (seen on the loaded
    # 2-core machine: 21 chunks for 24 tokens). Never more chunks than tokens.
    assert 18 <= res.content_chunks <= 24


def test_no_spec_decode_metrics_without_speculation(baseline_server):
    lane.stream(baseline_server.base_url + "/v1/completions", completion(16))
    text = metrics(baseline_server)
    assert "vllm:generation_tokens_total" in text
    assert "vllm:spec_decode" not in text
    assert lane.spec_counters(text) == {}


def test_version_models_health(baseline_server):
    st, _, body = lane.request("GET", baseline_server.base_url + "/version")
    assert st == 200 and json.loads(body) == {"version": "0.32.0"}
    st, _, body = lane.request("GET", baseline_server.base_url + "/v1/models")
    data = json.loads(body)
    assert st == 200 and data["object"] == "list"
    assert [m["id"] for m in data["data"]] == [lane.TARGET_MODEL]
    assert data["data"][0]["max_model_len"] == 1024
    st, _, body = lane.request("GET", baseline_server.base_url + "/health")
    assert st == 200 and body == b""


def test_error_shapes(baseline_server):
    st, _, body = lane.request("POST", baseline_server.base_url + "/v1/completions",
                               completion(5000, stream=False))
    err = json.loads(body)["error"]
    assert st == 400 and err["type"] == "BadRequestError" and err["code"] == 400
    assert "max_tokens=5000 cannot be greater than max_model_len=1024" in err["message"]
    st, _, body = lane.request("POST", baseline_server.base_url + "/v1/completions",
                               completion(8, stream=False, model="no-such/model"))
    err = json.loads(body)["error"]
    assert st == 404 and err["type"] == "NotFoundError" and err["code"] == 404


def test_min_p_accepted_without_speculation(baseline_server):
    st, _, _ = lane.request("POST", baseline_server.base_url + "/v1/completions",
                            completion(4, stream=False, temperature=0.7, min_p=0.1))
    assert st == 200


# --------------------------------------------------------------------------- ngram


def test_ngram_startup_log(ngram_server):
    log = ngram_server.log_text()
    assert lane.ASYNC_NGRAM_WARNING in log
    assert (f"speculative_config=SpeculativeConfig(method='ngram', model=None, "
            f"num_spec_tokens={K})") in log
    assert "min_p and logit_bias parameters won't work with speculative decoding." in log


@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
def test_ngram_sse_final_usage_chunk(ngram_server, endpoint):
    path, make, obj = ENDPOINTS[endpoint]
    res = lane.stream(ngram_server.base_url + path, make(48, ignore_eos=True))
    assert_usage_chunk(res, obj, 48)
    # A chunk may carry several accepted tokens: count tokens from usage, never chunks.
    assert res.content_chunks <= 48


def test_spec_decode_metrics_when_speculating(ngram_server):
    before = lane.spec_counters(metrics(ngram_server))
    lane.stream(ngram_server.base_url + "/v1/completions", completion(64, ignore_eos=True))
    text = metrics(ngram_server)
    after = lane.spec_counters(text)
    for name in ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                 "vllm:spec_decode_num_accepted_tokens_total"):
        assert name in after
        # Real exposition (multiprocess collector): the TYPE line keeps the _total suffix,
        # and each counter has a separate *_created gauge.
        assert f"# TYPE {name} counter" in text
        assert f"# TYPE {name.removesuffix('_total')}_created gauge" in text
    positions = sorted(int(k.split("[")[1].rstrip("]")) for k in after
                       if k.startswith("vllm:spec_decode_num_accepted_tokens_per_pos_total["))
    assert positions == list(range(K))
    sample = next(line for line in text.splitlines()
                  if line.startswith("vllm:spec_decode_num_drafts_total{"))
    # With HF_HUB_OFFLINE=1 vLLM swaps the model id for the snapshot path, and without
    # --served-model-name that path (not the id /v1/models shows) is the model_name label.
    assert 'engine="0"' in sample
    assert re.search(r'model_name="[^"]*/hub/models--specfleet--tiny-llama/snapshots/[0-9a-f]{40}"',
                     sample), sample
    acc = lane.acceptance(before, after)
    assert acc["drafts"] > 0 and 0.0 <= acc["acceptance_rate"] <= 1.0
    assert 1.0 <= acc["mean_acceptance_length"] <= K + 1


@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
@pytest.mark.parametrize("param", [{"min_p": 0.1}, {"logit_bias": {"5": 1.0}}])
def test_min_p_and_logit_bias_rejected_when_speculating(ngram_server, endpoint, param):
    path, make, _ = ENDPOINTS[endpoint]
    st, hd, body = lane.request("POST", ngram_server.base_url + path,
                                make(4, stream=False, temperature=0.7, **param))
    assert st == 400
    assert hd["content-type"] == "application/json"
    err = json.loads(body)["error"]
    assert err == {"message": "The min_p and logit_bias sampling parameters are not yet "
                              "supported with speculative decoding.",
                   "type": "BadRequestError", "param": None, "code": 400}


# --------------------------------------------------------------------------- draft model


def test_copy_draft_accepts_everything(draft_copy_server):
    log = draft_copy_server.log_text()
    assert "SpeculativeConfig(method='draft_model'" in log
    before = lane.spec_counters(metrics(draft_copy_server))
    total = 0
    for _ in range(3):
        res = lane.stream(draft_copy_server.base_url + "/v1/completions",
                          completion(64, ignore_eos=True))
        total += res.usage["completion_tokens"]
    after = lane.spec_counters(metrics(draft_copy_server))
    acc = lane.acceptance(before, after)
    assert total == 192
    assert acc["drafts"] > 0
    assert acc["acceptance_rate"] == 1.0
    assert acc["per_position_acceptance"] == [1.0] * K
    assert acc["mean_acceptance_length"] == pytest.approx(K + 1)


def test_copy_draft_stats_log_line(draft_copy_server):
    lane.stream(draft_copy_server.base_url + "/v1/completions", completion(64, ignore_eos=True))
    deadline = time.monotonic() + 25  # the stats logger prints every 10 s
    while time.monotonic() < deadline:
        lines = [ln for ln in draft_copy_server.log_text().splitlines()
                 if "SpecDecoding metrics:" in ln]
        if lines:
            break
        time.sleep(1)
    assert lines, "no SpecDecoding metrics line within 25 s"
    assert "Avg Draft acceptance rate: 100.0%" in lines[-1]
    assert f"Mean acceptance length: {K + 1:.2f}" in lines[-1]


# --------------------------------------------------------------------------- bad configs


@pytest.mark.parametrize("cfg, message", [
    ({"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_min": 5,
      "prompt_lookup_max": 2},
     "prompt_lookup_min=5 must be <= prompt_lookup_max=2"),
    ({"method": "ngram", "num_speculative_tokens": K, "tensor_parallel_size": 1},
     "'tensor_parallel_size' is not a valid argument in the speculative_config"),
])
def test_rejected_speculative_config(server_pool, tmp_path, cfg, message):
    server_pool.stop()  # one vLLM at a time
    srv = lane.Server(speculative_config=cfg, venv=server_pool.venv, hf_home=server_pool.hf_home,
                      log_path=tmp_path / "rejected.log")
    srv.start()
    try:
        with pytest.raises(RuntimeError, match="exited with 1 before /health answered"):
            srv.wait_ready(timeout=600)
    finally:
        srv.stop()
    assert message in srv.log_text()
