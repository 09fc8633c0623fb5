#!/usr/bin/env python3
"""Run the real vLLM CPU server in each lab mode and save what it says, for contract tests.

    python3 lab/engines/vllm-cpu/capture_fixtures.py [--out DIR] [--modes none,ngram,draft-copy]
                                                     [--no-rejected] [--k 3]

Writes under DIR (default tests/integration/vllm_cpu/fixtures/):

    <mode>/startup.log          server output up to /health 200
    <mode>/server.log           everything the server printed, up to shutdown
    <mode>/command.json         argv and environment the server ran with
    <mode>/health.json          /health status, headers, body
    <mode>/models.json          GET /v1/models body    <mode>/version.json   GET /version body
    <mode>/metrics_before.txt   /metrics right after startup (no request yet)
    <mode>/metrics_after.txt    /metrics after the warm-up, the SSE captures and the timed runs
    <mode>/sse_chat.txt         raw SSE bytes of one streamed chat completion (include_usage)
    <mode>/sse_completions.txt  raw SSE bytes of one streamed completion (include_usage)
    <mode>/errors/*.json        status/headers/body of rejected requests
    <mode>/figures.json         startup s, RSS, tok/s, acceptance (from /metrics deltas)
    rejected/<name>.log         output of servers started with a bad --speculative-config
    figures.json                all figures together

One server at a time, 127.0.0.1 only, each stopped by its own process group.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vllm_cpu_lane as lane  # noqa: E402

MODEL = lane.TARGET_MODEL
# A prompt with repeats, so ngram lookup has something to find.
CODE_PROMPT = (
    "def count_tokens(tokens, limit=64):\n"
    "    total = []\n"
    "    for i in range(limit):\n"
    "        if tokens[i] > 3:\n"
    "            total.append(tokens[i] * 2)\n"
    "    return {\"count\": len(total), \"total\": sum(total)}\n\n"
    "def count_metrics(metrics, limit=64):\n"
    "    total = []\n"
    "    for i in range(limit):\n"
)
CHAT_MESSAGES = [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "The unit reads the metrics before the deadline. Summarise."},
]
TIMED_RUNS = 5
TIMED_MAX_TOKENS = 128


def dump(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, sort_keys=False) + "\n")


def response_record(status: int, headers: dict, body: bytes) -> dict:
    try:
        parsed = json.loads(body) if body else None
    except ValueError:
        parsed = None
    keep = {k: v for k, v in headers.items() if k in ("content-type", "content-length")}
    return {"status": status, "headers": keep, "body": parsed,
            "body_raw": None if parsed is not None else body.decode(errors="replace")}


def completion_body(max_tokens: int, stream: bool = True, **extra) -> dict:
    body = {"model": MODEL, "prompt": CODE_PROMPT, "max_tokens": max_tokens,
            "temperature": 0.0, "top_p": 1.0, "seed": 1234, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    body.update(extra)
    return body


def chat_body(max_tokens: int, stream: bool = True, **extra) -> dict:
    body = {"model": MODEL, "messages": CHAT_MESSAGES, "max_tokens": max_tokens,
            "temperature": 0.0, "top_p": 1.0, "seed": 1234, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    body.update(extra)
    return body


def capture_mode(mode: str, out: Path, k: int) -> dict:
    mdir = out / mode
    (mdir / "errors").mkdir(parents=True, exist_ok=True)
    log_path = mdir / "server.log"
    srv = lane.Server(mode=mode, k=k, log_path=log_path)
    print(f"[{mode}] starting: {' '.join(srv.command())}", file=sys.stderr)
    figures: dict = {"mode": mode, "num_speculative_tokens": k if mode != "none" else None,
                     "speculative_config": lane.spec_config(mode, k)}
    srv.start()
    try:
        figures["startup_to_health_200_s"] = round(srv.wait_ready(), 1)
        (mdir / "startup.log").write_text(srv.log_text())
        figures["rss_bytes_idle"] = srv.rss()
        cmd = srv.command()
        cmd[cmd.index("--venv") + 1] = "$SPECFLEET_VLLM_CPU_VENV"
        cmd[cmd.index("--hf-home") + 1] = "$SPECFLEET_VLLM_CPU_HF_HOME"
        cmd[cmd.index("--port") + 1] = "$PORT"
        dump(mdir / "command.json", {"argv": cmd[1:], "env": {"HF_HUB_OFFLINE": "1",
             "VLLM_CPU_KVCACHE_SPACE": "1"}})
        base = srv.base_url

        st, hd, body = lane.request("GET", base + "/health")
        dump(mdir / "health.json", response_record(st, hd, body))
        st, hd, body = lane.request("GET", base + "/v1/models")
        dump(mdir / "models.json", json.loads(body))
        st, hd, body = lane.request("GET", base + "/version")
        dump(mdir / "version.json", json.loads(body))
        metrics_before = lane.request("GET", base + "/metrics")[2].decode()
        (mdir / "metrics_before.txt").write_text(metrics_before)

        # Warm-up (the first ngram request pays a one-time proposer warm-up).
        warm = lane.stream(base + "/v1/completions", completion_body(32))
        figures["warmup_ttft_s"] = round(warm.ttft_s or -1, 3)

        # Raw SSE captures.
        sse_c = lane.stream(base + "/v1/completions", completion_body(64))
        (mdir / "sse_completions.txt").write_bytes(sse_c.raw)
        sse_chat = lane.stream(base + "/v1/chat/completions", chat_body(64))
        (mdir / "sse_chat.txt").write_bytes(sse_chat.raw)
        figures["sse_completions"] = {"content_chunks": sse_c.content_chunks,
                                      "usage": sse_c.usage, "done": sse_c.done}
        figures["sse_chat"] = {"content_chunks": sse_chat.content_chunks,
                               "usage": sse_chat.usage, "done": sse_chat.done}

        # Timed single-stream runs, acceptance from the counter deltas around them.
        spec_before = lane.spec_counters(lane.request("GET", base + "/metrics")[2].decode())
        runs = []
        for _ in range(TIMED_RUNS):
            r = lane.stream(base + "/v1/completions",
                            completion_body(TIMED_MAX_TOKENS, ignore_eos=True))
            n = r.usage["completion_tokens"]
            runs.append({"completion_tokens": n, "ttft_s": r.ttft_s, "e2e_s": r.e2e_s,
                         "content_chunks": r.content_chunks,
                         "tok_per_s": n / r.e2e_s,
                         "tpot_ms": 1000 * (r.e2e_s - r.ttft_s) / (n - 1) if n > 1 else None})
        spec_after = lane.spec_counters(lane.request("GET", base + "/metrics")[2].decode())
        figures["timed_runs"] = runs
        figures["tok_per_s_median"] = round(statistics.median(x["tok_per_s"] for x in runs), 1)
        figures["tpot_ms_median"] = round(statistics.median(x["tpot_ms"] for x in runs), 2)
        figures["ttft_ms_median"] = round(1000 * statistics.median(x["ttft_s"] for x in runs), 1)
        figures["acceptance"] = lane.acceptance(spec_before, spec_after) if spec_after else None

        # Errors.
        errs = {
            "max_tokens_too_large_completions": ("/v1/completions",
                                                 completion_body(5000, stream=False)),
            "max_tokens_too_large_chat": ("/v1/chat/completions", chat_body(5000, stream=False)),
            "unknown_model": ("/v1/completions",
                              dict(completion_body(8, stream=False), model="no-such/model")),
            "min_p_completions": ("/v1/completions",
                                  completion_body(8, stream=False, temperature=0.7, min_p=0.1)),
            "min_p_chat": ("/v1/chat/completions",
                           chat_body(8, stream=False, temperature=0.7, min_p=0.1)),
            "logit_bias_completions": ("/v1/completions",
                                       completion_body(8, stream=False, logit_bias={"5": 1.0})),
        }
        figures["error_statuses"] = {}
        for name, (path, body) in errs.items():
            st, hd, raw = lane.request("POST", base + path, body)
            rec = response_record(st, hd, raw)
            rec["request"] = {"path": path, "body": body}
            dump(mdir / "errors" / f"{name}.json", rec)
            figures["error_statuses"][name] = st

        # Let the 10-second stats logger print its SpecDecoding line, then scrape again.
        time.sleep(12)
        (mdir / "metrics_after.txt").write_text(lane.request("GET", base + "/metrics")[2].decode())
        figures["rss_bytes_after_requests"] = srv.rss()
    finally:
        srv.stop()
    text = srv.log_text()
    figures["log_has_async_ngram_warning"] = lane.ASYNC_NGRAM_WARNING in text
    figures["log_spec_decoding_lines"] = [ln.split("] ", 1)[-1] for ln in text.splitlines()
                                          if "SpecDecoding metrics" in ln][:3]
    dump(mdir / "figures.json", figures)
    print(f"[{mode}] {json.dumps({k: v for k, v in figures.items() if k != 'timed_runs'})}",
          file=sys.stderr)
    return figures


# name -> (speculative config or None, extra `vllm serve` args)
REJECTED = {
    "ngram_lookup_min_gt_max": ({"method": "ngram", "num_speculative_tokens": 3,
                                 "prompt_lookup_min": 5, "prompt_lookup_max": 2}, []),
    "tensor_parallel_size_key": ({"method": "ngram", "num_speculative_tokens": 3,
                                  "tensor_parallel_size": 1}, []),
    "unknown_method": ({"method": "foo", "num_speculative_tokens": 3}, []),
    "draft_model_without_num_speculative_tokens": (
        {"method": "draft_model", "model": lane.DRAFT_COPY}, []),
    "missing_draft_model": ({"method": "draft_model", "model": "specfleet/no-such-draft",
                             "num_speculative_tokens": 3}, []),
    "missing_target_model": (None, ["--model", "specfleet/no-such-model"]),
    "invalid_json": ('{"method": "ngram", num_speculative_tokens: 3', []),
    "ngram_with_async_scheduling": ({"method": "ngram", "num_speculative_tokens": 3},
                                    ["--async-scheduling"]),
}


def capture_rejected(out: Path, names: list[str] | None = None) -> dict:
    res = {}
    summary_path = out / "rejected" / "summary.json"
    if summary_path.exists():
        res = json.loads(summary_path.read_text())
    for name, (cfg, extra) in REJECTED.items():
        if names and name not in names:
            continue
        log_path = out / "rejected" / f"{name}.log"
        srv = lane.Server(speculative_config=cfg, extra_args=extra, log_path=log_path)
        t0 = time.monotonic()
        srv.start()
        try:
            srv.wait_ready(timeout=300)
            rc = None  # it started: that is a finding too
        except RuntimeError:
            rc = srv.proc.returncode
        except TimeoutError:
            rc = "timeout"
        finally:
            srv.stop()
        secs = round(time.monotonic() - t0, 1)
        lines = [ln for ln in srv.log_text().splitlines()
                 if "Error" in ln or "error" in ln][-5:]
        res[name] = {"speculative_config": cfg, "extra_args": extra, "exit_code": rc,
                     "seconds_to_exit": secs, "error_lines": lines}
        print(f"[rejected {name}] rc={rc} after {secs} s: {lines[-2:]}", file=sys.stderr)
        dump(summary_path, res)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path,
                    default=lane.REPO / "tests" / "integration" / "vllm_cpu" / "fixtures")
    ap.add_argument("--modes", default="none,ngram,draft-copy")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--no-rejected", action="store_true")
    ap.add_argument("--rejected", default="", help="comma list of REJECTED names (default all)")
    args = ap.parse_args(argv)

    venv, install_s = lane.ensure_venv()
    lane.ensure_models(venv=venv)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    all_fig = {}
    figpath = out / "figures.json"
    if figpath.exists():
        all_fig = json.loads(figpath.read_text())
    all_fig.setdefault("machine", {})
    all_fig["machine"].update({"cpus": os.cpu_count(), "python": platform.python_version(),
                               "loadavg_at_start": os.getloadavg()})
    all_fig["ensure_venv_s_this_run"] = round(install_s, 1)
    stamp = (venv / ".specfleet-vllm-cpu.stamp").read_text()
    all_fig["venv_stamp"] = dict(line.split("=", 1) for line in stamp.split())
    all_fig.setdefault("modes", {})
    for mode in filter(None, args.modes.split(",")):
        all_fig["modes"][mode] = capture_mode(mode, out, args.k)
        dump(figpath, all_fig)
    if not args.no_rejected:
        all_fig["rejected"] = capture_rejected(out, list(filter(None, args.rejected.split(","))))
    all_fig["machine"]["loadavg_at_end"] = os.getloadavg()
    dump(figpath, all_fig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
