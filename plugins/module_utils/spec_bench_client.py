# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""Streaming OpenAI client, /metrics scraper and statistics for the spec_bench module.

Unit-side code, stdlib only (Python 3.10+), shipped by Ansible with the spec_bench module;
the controller and the tests import the same file by its collection name.

Definitions follow ``vllm bench serve`` (vllm-project/vllm ``vllm/benchmarks/serve.py``):
- Token chunk: an SSE chunk with a choice, whatever its text. vLLM sends one per engine
  output, and its delta text can be empty: the detokenizer holds back an incomplete UTF-8
  byte sequence, a special token is skipped. Such a chunk still marks when its tokens were
  made and is counted in usage, so it counts here too (as in `vllm bench serve`). Only a
  role announcement without content (``delta: {"role": ..., "content": ""}``) and the
  usage-only chunk (``choices: []``) are not token chunks.
- TTFT: send time -> first token chunk (vLLM sends the role chunk at the same moment,
  `vllm bench serve` times that one; a server that announces the role early cannot
  shorten TTFT here).
- ITL: gaps between successive token chunks (per chunk, not per token: with
  speculative decoding one chunk carries every token accepted in a step).
- E2E: send time -> last token chunk (the usage-only chunk does not extend it).
- Output tokens: ``usage.completion_tokens`` from the final usage chunk; chunks are never
  counted as tokens.
- TPOT: (E2E - TTFT) / (output tokens - 1), only for requests with more than one token.

Requests never carry ``min_p`` or ``logit_bias``: a speculative vLLM server rejects them
(HTTP 400) or ignores them, so ``build_request_body`` refuses them outright.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import math
import re
import secrets
import select
import selectors
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

FORBIDDEN_PARAMS = ("min_p", "logit_bias")
CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
SPEC_PREFIX = "vllm:spec_decode_"
SPEC_COUNTERS = {
    "vllm:spec_decode_num_drafts_total": "drafts",
    "vllm:spec_decode_num_draft_tokens_total": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens_total": "accepted",
}
SPEC_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"

# Error classes a request can end with.
HTTP_ERROR = "http_error"  # non-200 status (body carries vLLM's error JSON)
STREAM_ERROR = "stream_error"  # `data: {"error": ...}` after HTTP 200
CONNECTION_ERROR = "connection_error"  # refused, reset, stream closed before [DONE]
TIMEOUT = "timeout"  # the request did not finish within its timeout
DEADLINE = "deadline"  # the whole-run deadline passed (request cut or never sent)
PROTOCOL_ERROR = "protocol_error"  # unparseable event, no usage chunk
NOT_SENT = "not_sent"  # skipped: the batch stopped after an earlier failure


class ClientError(Exception):
    """A request-level failure with a class from the constants above."""

    def __init__(self, error_class: str, message: str) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.message = message


# --- endpoint ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    scheme: str
    host: str
    port: int
    base_path: str = ""
    api_key: str | None = None

    @staticmethod
    def parse(url: str, api_key: str | None = None) -> Endpoint:
        parts = urlsplit(url if "://" in url else "http://" + url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme {parts.scheme!r} in {url!r} (http or https)")
        if not parts.hostname:
            raise ValueError(f"no host in URL {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return Endpoint(parts.scheme, parts.hostname, port, parts.path.rstrip("/"), api_key or None)

    def connection(self, timeout: float) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=max(0.01, timeout))

    def headers(self, path: str, json_body: bool = False) -> dict[str, str]:
        headers = {"accept": "application/json, text/event-stream"}
        if json_body:
            headers["content-type"] = "application/json"
        # vLLM's --api-key guards /v1 only; /health and /metrics stay open.
        if self.api_key and path.startswith("/v1/"):
            headers["authorization"] = f"Bearer {self.api_key}"
        return headers

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}{self.base_path}"


def http_get(endpoint: Endpoint, path: str, timeout: float) -> tuple[int, bytes]:
    """GET a path; raises ClientError (connection_error/timeout) when nothing answers."""
    conn = endpoint.connection(timeout)
    try:
        conn.request("GET", endpoint.base_path + path, headers=endpoint.headers(path))
        response = conn.getresponse()
        return response.status, response.read()
    except TimeoutError as exc:
        raise ClientError(TIMEOUT, f"GET {path}: no answer within {timeout:.1f} s") from exc
    except (OSError, http.client.HTTPException) as exc:
        raise ClientError(CONNECTION_ERROR, f"GET {path}: {_describe(exc)}") from exc
    finally:
        conn.close()


def _describe(exc: BaseException) -> str:
    text = str(exc) or exc.__class__.__name__
    return f"{exc.__class__.__name__}: {text}" if exc.__class__.__name__ not in text else text


def error_message(status: int, body: bytes) -> str:
    """vLLM's error JSON ({"error": {"message", "type"}}) or the start of the body."""
    try:
        payload = json.loads(body)
    except ValueError:
        text = body.decode("utf-8", "replace").strip()
        return f"HTTP {status}: {text[:300]}" if text else f"HTTP {status}"
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        kind = error.get("type")
        message = error.get("message")
        return f"HTTP {status} {kind}: {message}" if kind else f"HTTP {status}: {message}"
    if error is not None:
        return f"HTTP {status}: {error}"
    if isinstance(payload, dict) and "detail" in payload:
        return f"HTTP {status}: {payload['detail']}"
    return f"HTTP {status}: {json.dumps(payload)[:300]}"


# --- request bodies --------------------------------------------------------------------------


def check_body(body: dict[str, Any]) -> None:
    """Refuse sampling parameters a speculative vLLM server rejects or silently ignores."""
    present = [name for name in FORBIDDEN_PARAMS if name in body]
    if present:
        raise ValueError(
            f"refusing to send {', '.join(present)}: not supported with speculative decoding "
            "(vLLM answers HTTP 400 or ignores it), so it would skew a baseline/speculative comparison"
        )


def build_request_body(
    kind: str, model: str, prompt: str, max_tokens: int, seed: int, ignore_eos: bool = False,
    top_logprobs: int = 0, cache_salt: str | None = None,
) -> dict[str, Any]:
    """Streaming greedy request: temperature 0, explicit top_p, fixed seed, usage chunk; with
    ``top_logprobs``, each token's logprob and that many best alternatives (the output check);
    with ``cache_salt``, vLLM's prefix-cache salt (vllm#17045): the request shares no cached
    prefill with one salted otherwise, and its prompt, so its answer, is unchanged."""
    body: dict[str, Any] = {"model": model}
    if kind == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    elif kind == "completion":
        body["prompt"] = prompt
    else:
        raise ValueError(f"unknown request kind {kind!r} (chat or completion)")
    body.update(
        {
            "max_tokens": max_tokens,
            "temperature": 0.0,
            # Explicit: otherwise the model's generation_config (e.g. top_p 0.9) applies.
            "top_p": 1.0,
            "seed": seed,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    if ignore_eos:
        body["ignore_eos"] = True  # vLLM extension: generate exactly max_tokens
    if top_logprobs:
        if kind == "chat":
            body.update({"logprobs": True, "top_logprobs": top_logprobs})
        else:
            body["logprobs"] = top_logprobs
    if cache_salt is not None:
        body["cache_salt"] = cache_salt
    check_body(body)
    return body


# --- SSE parsing -----------------------------------------------------------------------------


class SSEParser:
    """Incremental Server-Sent Events parser: feed bytes, get the `data` of each event.

    Handles \\n and \\r\\n line ends, multi-line data fields (joined with \\n), comment lines
    and other fields (ignored), and events split across reads.
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        self._buffer += chunk
        events: list[str] = []
        while True:
            end = self._buffer.find(b"\n")
            if end < 0:
                break
            line = self._buffer[:end].rstrip(b"\r").decode("utf-8", "replace")
            self._buffer = self._buffer[end + 1 :]
            if not line:
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            if name == "data":
                self._data.append(value[1:] if value.startswith(" ") else value)
        return events

    def close(self) -> list[str]:
        """Flush an event not terminated by a blank line (a server closing early)."""
        events = self.feed(b"\n\n") if self._buffer else []
        if self._data:
            events.append("\n".join(self._data))
            self._data = []
        return events


@dataclass
class StreamState:
    """What one streamed response delivered, fed event by event (pure; times are inputs)."""

    sent_at: float
    chunk_times: list[float] = field(default_factory=list)  # arrival of each token chunk
    pieces: list[str] = field(default_factory=list)
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    done: bool = False
    error: ClientError | None = None
    # Per generated token, when logprobs were asked for: (token, its logprob, the best
    # alternative's logprob or None).
    token_logprobs: list[tuple[str, float, float | None]] = field(default_factory=list)

    def on_event(self, data: str, now: float) -> None:
        if data.strip() == "[DONE]":
            self.done = True
            return
        try:
            event = json.loads(data)
        except ValueError as exc:
            raise ClientError(PROTOCOL_ERROR, f"unparseable stream event: {data[:200]!r}") from exc
        if not isinstance(event, dict):
            raise ClientError(PROTOCOL_ERROR, f"stream event is not an object: {data[:200]!r}")
        if "error" in event:
            error = event["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            self.error = ClientError(STREAM_ERROR, f"error event mid-stream: {message}")
            return
        usage = event.get("usage")
        if isinstance(usage, dict) and usage.get("completion_tokens") is not None:
            # The final usage chunk (continuous_usage_stats would repeat it per chunk; the
            # last value wins either way).
            self.completion_tokens = int(usage["completion_tokens"])
            if usage.get("prompt_tokens") is not None:
                self.prompt_tokens = int(usage["prompt_tokens"])
        carries_tokens = False
        for choice in event.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict):
                content = delta.get("content")
                # Empty text still counts (tokens the detokenizer holds back or skips);
                # a role announcement without content does not.
                carries_tokens = carries_tokens or bool(content) or "role" not in delta
            else:
                content = choice.get("text")
                carries_tokens = carries_tokens or content is not None
            if content:
                self.pieces.append(content)
            self.token_logprobs.extend(chosen_logprobs(choice.get("logprobs")))
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        if carries_tokens:
            self.chunk_times.append(now)

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def _alternative(chosen: str, candidates: list[tuple[str, float]]) -> float | None:
    """The best logprob among the alternatives that are not the chosen token."""
    others = [logprob for token, logprob in candidates if token != chosen]
    return max(others) if others else None


def chosen_logprobs(logprobs: Any) -> list[tuple[str, float, float | None]]:
    """(token, logprob, best alternative's logprob) per token of one chunk's ``logprobs``:
    the chat shape (``content``: [{token, logprob, top_logprobs: [{token, logprob}]}]) or
    the completions shape (``tokens``, ``token_logprobs``, ``top_logprobs``: [{token: lp}])."""
    if not isinstance(logprobs, dict):
        return []
    found: list[tuple[str, float, float | None]] = []
    content = logprobs.get("content")
    if isinstance(content, list):
        for entry in content:
            if not isinstance(entry, dict) or entry.get("logprob") is None:
                continue
            top = [(str(alt.get("token")), float(alt["logprob"])) for alt in entry.get("top_logprobs") or []
                   if isinstance(alt, dict) and alt.get("logprob") is not None]
            token = str(entry.get("token"))
            found.append((token, float(entry["logprob"]), _alternative(token, top)))
        return found
    tokens, values = logprobs.get("tokens") or [], logprobs.get("token_logprobs") or []
    tops = logprobs.get("top_logprobs") or [None] * len(tokens)
    for token, value, top in zip(tokens, values, tops, strict=False):
        if value is None:
            continue
        alternatives = [(str(t), float(v)) for t, v in (top or {}).items() if v is not None]
        found.append((str(token), float(value), _alternative(str(token), alternatives)))
    return found


@dataclass
class RequestResult:
    """One request: raw timings (seconds, monotonic) plus derived metrics."""

    index: int
    sent_at: float
    chunk_times: list[float]
    completion_tokens: int | None
    prompt_tokens: int | None
    text: str
    finish_reason: str | None
    error_class: str | None = None
    error: str | None = None
    prompt_id: str | None = None
    token_logprobs: list[tuple[str, float, float | None]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error_class is None

    @property
    def bursty(self) -> bool:
        return stream_arrived_in_bursts(self.sent_at, self.chunk_times)

    @property
    def ttft_s(self) -> float | None:
        return self.chunk_times[0] - self.sent_at if self.chunk_times else None

    @property
    def e2e_s(self) -> float | None:
        return self.chunk_times[-1] - self.sent_at if self.chunk_times else None

    @property
    def itl_s(self) -> list[float]:
        times = self.chunk_times
        return [b - a for a, b in zip(times, times[1:], strict=False)]

    @property
    def tpot_s(self) -> float | None:
        return tpot(self.ttft_s, self.e2e_s, self.completion_tokens)

    def summary(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "ok": self.ok,
            "ttft_ms": _ms(self.ttft_s),
            "e2e_ms": _ms(self.e2e_s),
            "tpot_ms": _ms(self.tpot_s),
            "chunks": len(self.chunk_times),
            "completion_tokens": self.completion_tokens,
            "finish_reason": self.finish_reason,
            "error_class": self.error_class,
            "error": self.error,
        }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


def tpot(ttft_s: float | None, e2e_s: float | None, completion_tokens: int | None) -> float | None:
    """vLLM bench TPOT: (E2E - TTFT) / (tokens - 1); None unless more than one token."""
    if ttft_s is None or e2e_s is None or completion_tokens is None or completion_tokens <= 1:
        return None
    return (e2e_s - ttft_s) / (completion_tokens - 1)


# A stream that arrived in bursts: its chunks were held back somewhere (a starved server
# process, a client that could not read) and then delivered at once, so its timings say
# nothing about the engine's steps. Seen on the real vLLM CPU server: all 130 chunks of a
# request within 1 ms after 270 ms, TTFT = E2E and TPOT 0.01 ms. A healthy stream spends its
# time in many steps of similar length; a bursty one spends most of it in one or two gaps.
BURST_MIN_CHUNKS = 16  # too few chunks say nothing about how they were spread
BURST_GAPS = 2
BURST_SHARE = 0.8


def stream_arrived_in_bursts(sent_at: float, chunk_times: list[float]) -> bool:
    """Most of the request's time (send to last chunk) in its ``BURST_GAPS`` longest intervals
    (the wait for the first chunk counts as one), over at least ``BURST_MIN_CHUNKS`` chunks."""
    if len(chunk_times) < BURST_MIN_CHUNKS:
        return False
    marks = [sent_at, *chunk_times]
    total = marks[-1] - marks[0]
    gaps = sorted((later - earlier for earlier, later in zip(marks, marks[1:], strict=False)), reverse=True)
    return total > 0 and sum(gaps[:BURST_GAPS]) >= BURST_SHARE * total


def stream_request(
    endpoint: Endpoint,
    path: str,
    body: dict[str, Any],
    timeout: float,
    deadline: float | None = None,
    index: int = 0,
    clock: Any = time.monotonic,
    prompt_id: str | None = None,
) -> RequestResult:
    """POST one streaming request and record its timings; never raises for request errors.

    `timeout` bounds the whole request (connect to [DONE]); `deadline` (a `clock()` value)
    bounds it further, so a stalled stream ends as `timeout`/`deadline`, not a hang. The
    batch's loop with one request in it (run_batch).
    """
    check_body(body)
    return _exchange(endpoint, path, [_Job(index, body, prompt_id)], 1, timeout, deadline, False, clock)[index]


class ResponseReader:
    """An HTTP/1.1 response read incrementally from a socket's bytes (pure): the status line and
    headers, then the body, chunked, sized by Content-Length, or running to the connection's close.
    ``feed`` returns the body bytes the new data completed; ``complete`` says the body ended,
    ``reusable`` that the connection can carry the next request."""

    def __init__(self) -> None:
        self._buffer = b""
        self.status: int | None = None
        self.complete = False
        self.keep_alive = False  # HTTP/1.1, framed (chunked or sized), no "Connection: close"
        self._length: int | None = None  # bytes of body left (sized), or of the current chunk
        self._phase = "head"  # head, body, size, data, data_end, trailer

    def feed(self, data: bytes) -> bytes:
        self._buffer += data
        out = bytearray()
        while not self.complete:
            if self._phase == "head":
                end = self._buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(self._buffer) > 65536:
                        raise ClientError(PROTOCOL_ERROR, "response headers longer than 64 KiB")
                    break
                self._start(self._buffer[:end].decode("iso-8859-1"))
                self._buffer = self._buffer[end + 4 :]
            elif self._phase == "body":
                if self._length is None:  # to the connection's close
                    out += self._buffer
                    self._buffer = b""
                    break
                taken = self._buffer[: self._length]
                out += taken
                self._buffer = self._buffer[len(taken) :]
                self._length -= len(taken)
                self.complete = self._length == 0
                break
            elif self._phase in ("size", "trailer"):
                end = self._buffer.find(b"\r\n")
                if end < 0:
                    break
                line = self._buffer[:end]
                self._buffer = self._buffer[end + 2 :]
                if self._phase == "trailer":
                    self.complete = not line
                    continue
                try:
                    self._length = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError as exc:
                    raise ClientError(PROTOCOL_ERROR, f"bad chunk size line {line[:40]!r}") from exc
                self._phase = "data" if self._length else "trailer"
            elif self._phase == "data":
                if not self._buffer:
                    break
                taken = self._buffer[: self._length]
                out += taken
                self._buffer = self._buffer[len(taken) :]
                self._length = (self._length or 0) - len(taken)
                if self._length == 0:
                    self._phase = "data_end"
            else:  # data_end: the CRLF after a chunk's data
                if len(self._buffer) < 2:
                    break
                self._buffer = self._buffer[2:]
                self._phase = "size"
        return bytes(out)

    def close(self) -> None:
        """The connection closed: a body that runs to the close is complete."""
        if self._phase == "body" and self._length is None:
            self.complete = True

    @property
    def reusable(self) -> bool:
        """The response ended where its framing says and nothing followed it: the connection is
        at a request boundary and the server keeps it open."""
        return self.complete and self.keep_alive and not self._buffer

    def _start(self, head: str) -> None:
        status_line, *header_lines = head.split("\r\n")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise ClientError(PROTOCOL_ERROR, f"not an HTTP response: {status_line[:80]!r}")
        self.status = int(parts[1])
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        framed = True
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._phase = "size"
        elif headers.get("content-length", "").isdigit():
            self._length = int(headers["content-length"])
            self._phase = "body"
            self.complete = self._length == 0
        else:
            self._phase = "body"
            framed = False
        self.keep_alive = framed and parts[0] == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()


def request_bytes(endpoint: Endpoint, path: str, payload: bytes) -> bytes:
    """The POST of one streaming request, as http.client would send it. HTTP/1.1 keeps the
    connection open, so the batch's next request can reuse it (_exchange)."""
    host = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host
    default_port = 443 if endpoint.scheme == "https" else 80
    lines = [
        f"POST {endpoint.base_path + path} HTTP/1.1",
        f"Host: {host}" if endpoint.port == default_port else f"Host: {host}:{endpoint.port}",
        "Accept-Encoding: identity",
        f"Content-Length: {len(payload)}",
        *(f"{name}: {value}" for name, value in endpoint.headers(path, json_body=True).items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload


@dataclass
class _Job:
    index: int
    body: dict[str, Any]
    prompt_id: str | None = None


@dataclass
class _Stream:
    """One request in flight on the batch's loop."""

    job: _Job
    state: StreamState
    limit: float
    cut_class: str
    sock: socket.socket
    reused: bool  # the connection carried an earlier request of the batch
    reader: ResponseReader = field(default_factory=ResponseReader)
    events: SSEParser = field(default_factory=SSEParser)
    error_body: bytearray = field(default_factory=bytearray)
    draining: bool = False  # the result is in; the response's last bytes are still to come


def _result(job: _Job, state: StreamState, error: ClientError | None = None) -> RequestResult:
    error = error or state.error
    return RequestResult(
        index=job.index,
        sent_at=state.sent_at,
        chunk_times=state.chunk_times,
        completion_tokens=state.completion_tokens,
        prompt_tokens=state.prompt_tokens,
        text=state.text,
        finish_reason=state.finish_reason,
        error_class=error.error_class if error else None,
        error=error.message if error else None,
        prompt_id=job.prompt_id,
        token_logprobs=state.token_logprobs,
    )


def _outcome(stream: _Stream, closed: bool) -> RequestResult | None:
    """The request's result once its stream ended (None while it goes on)."""
    state = stream.state
    if state.error is not None:
        return _result(stream.job, state)
    if state.done:
        if state.completion_tokens is None:
            return _result(stream.job, state, ClientError(
                PROTOCOL_ERROR, "no usage chunk in the stream (stream_options.include_usage ignored?)"))
        return _result(stream.job, state)
    if closed or stream.reader.complete:
        return _result(stream.job, state, ClientError(CONNECTION_ERROR,
                                                      "stream closed before [DONE] (server went away?)"))
    return None


def _received(stream: _Stream, data: bytes, now: float) -> RequestResult | None:
    """Feed what arrived at `now` (b"": the connection closed); the result once the stream ended."""
    closed = not data
    reader = stream.reader
    body = reader.feed(data)
    if closed:
        reader.close()
    if reader.status is None:
        if closed:
            return _result(stream.job, stream.state,
                           ClientError(CONNECTION_ERROR, "connection closed before a response"))
        return None
    if reader.status != 200:
        stream.error_body += body
        if closed or reader.complete:
            return _result(stream.job, stream.state,
                           ClientError(HTTP_ERROR, error_message(reader.status, bytes(stream.error_body))))
        return None
    events = stream.events.feed(body) if body else []
    if closed or reader.complete:
        events += stream.events.close()
    for data_field in events:
        stream.state.on_event(data_field, now)
        if stream.state.done or stream.state.error is not None:
            break
    return _outcome(stream, closed)


def _timed_out(job: _Job, state: StreamState, limit: float, cut_class: str) -> RequestResult:
    """The request's timeout or the run's deadline (`cut_class`) reached at `limit`."""
    what = "run deadline" if cut_class == DEADLINE else f"request timeout ({limit - state.sent_at:.1f} s)"
    phase = f"after {len(state.chunk_times)} token chunks" if state.chunk_times else "before the first token"
    return _result(job, state, ClientError(cut_class, f"{what} reached {phase}"))


DRAIN_S = 1.0  # how long a finished stream's last bytes ([DONE] came, the closing chunk not yet) are awaited


def _idle_connection(idle: list[socket.socket]) -> socket.socket | None:
    """A kept connection the server has not closed: one that turned readable while idle holds
    the server's close (or bytes nobody asked for) and is dropped, as urllib3 checks its pool.
    poll, not select: a run with many connections may hold descriptors above select's 1024; TLS
    may hold decrypted bytes already read off the socket (pending), which no poll sees."""
    while idle:
        sock = idle.pop()
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        buffered = sock.pending() if isinstance(sock, ssl.SSLSocket) else 0
        if not buffered and not poller.poll(0):
            return sock
        sock.close()
    return None


def _exchange(
    endpoint: Endpoint, path: str, jobs: list[_Job], concurrency: int, timeout: float, deadline: float | None,
    stop_on_error: bool, clock: Any,
) -> dict[int, RequestResult]:
    """Send `jobs` in order, `concurrency` in flight, on one thread: a selector waits on every
    stream at once and reads whichever has data, as `vllm bench serve`'s event loop does. One
    thread per request instead woke the host four times as often per token (1.7 voluntary and
    0.3 forced context switches per token at c=8, against 0.4 and 0.06 for aiohttp), and on a
    unit the server shares the cores with the client.

    A connection whose response ended cleanly carries a later request (HTTP/1.1 keep-alive, as
    aiohttp's pool does for `vllm bench serve`), so the server accepts `concurrency`
    connections per batch rather than one per request. A request on a kept connection that
    the server closed before answering is sent again once on a new one.
    Returns the results by job index (a job not sent after a failure has none)."""
    results: dict[int, RequestResult] = {}
    flying: dict[socket.socket, _Stream] = {}  # requests in flight, and finished ones draining
    idle: list[socket.socket] = []
    context = ssl.create_default_context() if endpoint.scheme == "https" else None
    selector = selectors.DefaultSelector()
    sent = 0
    stopped = False

    def drop(stream: _Stream) -> None:
        selector.unregister(stream.sock)
        del flying[stream.sock]

    def close(stream: _Stream) -> None:
        drop(stream)
        stream.sock.close()

    def keep_or_close(stream: _Stream) -> None:
        if stream.reader.reusable and len(idle) < concurrency:
            drop(stream)
            idle.append(stream.sock)
        else:
            close(stream)

    def finish(stream: _Stream, result: RequestResult) -> None:
        nonlocal stopped
        results[stream.job.index] = result
        stopped = stopped or (stop_on_error and not result.ok)
        if result.ok and stream.reader.keep_alive and not stream.reader.complete:
            stream.draining, stream.limit = True, clock() + DRAIN_S
        elif result.ok:
            keep_or_close(stream)
        else:
            close(stream)

    def launch(job: _Job, fresh: bool = False) -> None:
        nonlocal stopped
        payload = json.dumps(job.body).encode()
        sent_at = clock()
        state = StreamState(sent_at=sent_at)
        limit, cut_class = sent_at + timeout, TIMEOUT
        if deadline is not None and deadline < limit:
            limit, cut_class = deadline, DEADLINE
        if limit - sent_at <= 0:
            result = _result(job, state, ClientError(DEADLINE, "run deadline reached before the request was sent"))
        else:
            sock = None if fresh else _idle_connection(idle)
            reused = sock is not None
            try:
                if sock is None:
                    sock = socket.create_connection((endpoint.host, endpoint.port), timeout=max(0.01, limit - clock()))
                    if context is not None:
                        sock = context.wrap_socket(sock, server_hostname=endpoint.host)
                else:
                    sock.settimeout(max(0.01, limit - clock()))
                sock.sendall(request_bytes(endpoint, path, payload))
                sock.setblocking(False)
                stream = _Stream(job, state, limit, cut_class, sock, reused)
                flying[sock] = stream
                selector.register(sock, selectors.EVENT_READ, stream)
                return
            except TimeoutError:
                result = _timed_out(job, state, limit, cut_class)
            except OSError as exc:
                if reused:  # the server closed the kept connection as the request left
                    sock.close()
                    launch(job, fresh=True)
                    return
                result = _result(job, state, ClientError(CONNECTION_ERROR, _describe(exc)))
            if sock is not None:
                sock.close()
        results[job.index] = result
        stopped = stopped or stop_on_error

    def read(stream: _Stream) -> None:
        try:
            data = stream.sock.recv(65536)
            # TLS: records already decrypted wait in the SSL object, where select cannot see them.
            while data and context is not None and stream.sock.pending():
                data += stream.sock.recv(65536)
        except (BlockingIOError, ssl.SSLWantReadError):
            return
        except OSError as exc:
            data, failure = b"", exc
        else:
            failure = None
        if stream.draining:  # kept only if the response now ends cleanly (ResponseReader.reusable)
            try:
                stream.reader.feed(data)
            except ClientError:
                data = b""  # a malformed tail: closed, as at the server's close
            if not data or stream.reader.complete:
                keep_or_close(stream)
            return
        if stream.reused and not data and stream.reader.status is None:
            close(stream)  # closed before answering: the server had already let the connection go
            launch(stream.job, fresh=True)
            return
        if failure is not None:
            finish(stream, _result(stream.job, stream.state, ClientError(CONNECTION_ERROR, _describe(failure))))
            return
        try:
            result = _received(stream, data, clock())
        except ClientError as exc:
            result = _result(stream.job, stream.state, exc)
        if result is not None:
            finish(stream, result)

    try:
        while True:
            # A draining stream holds its slot until its response has ended, as the request function of
            # `vllm bench serve` returns (and frees its semaphore) only then: the next request reuses it.
            while len(flying) < concurrency and sent < len(jobs) and not stopped:
                launch(jobs[sent])
                sent += 1
            if (sent == len(jobs) or stopped) and all(stream.draining for stream in flying.values()):
                return results
            wait = min(stream.limit for stream in flying.values()) - clock()
            for key, _ in selector.select(max(0.0, wait)) if wait > 0 else []:
                if key.fileobj in flying:  # not dropped by an earlier stream's handling in this round
                    read(key.data)
            now = clock()
            for stream in [s for s in flying.values() if now >= s.limit]:
                if stream.draining:
                    close(stream)
                else:
                    finish(stream, _timed_out(stream.job, stream.state, stream.limit, stream.cut_class))
    finally:
        for sock in [*flying, *idle]:
            sock.close()
        selector.close()


# --- batches ---------------------------------------------------------------------------------


@dataclass
class BatchResult:
    """Every prompt of a set sent once, `concurrency` in flight."""

    results: list[RequestResult]
    wall_s: float
    concurrency: int

    @property
    def failed(self) -> list[RequestResult]:
        return [r for r in self.results if not r.ok]

    @property
    def output_tokens(self) -> int:
        return sum(r.completion_tokens or 0 for r in self.results if r.ok)

    @property
    def bursty(self) -> bool:
        """Some stream of the run arrived in bursts (stream_arrived_in_bursts)."""
        return any(r.ok and r.bursty for r in self.results)

    @property
    def throughput_tok_s(self) -> float | None:
        return self.output_tokens / self.wall_s if self.wall_s > 0 else None

    def texts(self) -> list[str]:
        return [r.text for r in sorted(self.results, key=lambda r: r.index)]


def run_batch(
    endpoint: Endpoint,
    path: str,
    bodies: list[dict[str, Any]],
    concurrency: int,
    timeout: float,
    deadline: float | None = None,
    stop_on_error: bool = True,
    clock: Any = time.monotonic,
    prompt_ids: list[str] | None = None,
) -> BatchResult:
    """Send every body once with `concurrency` requests in flight (like --max-concurrency),
    a new one as soon as one ends; ``prompt_ids`` name each body's prompt in the results.

    One thread serves every stream (``_exchange``): the first `concurrency` requests leave
    together, as `vllm bench serve` sends them from one event loop, and the wall time runs
    from the first dispatch to the last completion. With `stop_on_error`, no new request is
    sent once one failed (the rest are marked as not sent), so a dead server ends the batch
    within one request timeout.
    """
    for body in bodies:
        check_body(body)
    jobs = [_Job(index, body, prompt_ids[index] if prompt_ids else None) for index, body in enumerate(bodies)]
    start = clock()
    results = _exchange(endpoint, path, jobs, max(1, concurrency), timeout, deadline, stop_on_error, clock)
    wall = clock() - start
    not_sent = ClientError(NOT_SENT, "not sent: the batch stopped after an earlier failure")
    final = [results[job.index] if job.index in results else _result(job, StreamState(sent_at=start), not_sent)
             for job in jobs]
    return BatchResult(final, wall, concurrency)


# --- Prometheus metrics ----------------------------------------------------------------------

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


# --- statistics ------------------------------------------------------------------------------


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



# --- the benchmark procedure -----------------------------------------------------------------

SERVER_DIED = "server_died"  # requests failed and /health no longer answers 200
STALLED = "stalled"  # requests time out while /health still answers (a wedged engine)


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
        "ttft_ms": _round(_ms(result.ttft_s)),
        "tpot_ms": _round(_ms(result.tpot_s)),
        "e2e_ms": _round(_ms(result.e2e_s)),
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


def classify_failure(
    endpoint: Endpoint, batch: BatchResult, where: str, probe_timeout: float = 5.0
) -> dict[str, str]:
    """{class, message} for a batch with failed requests; probes /health to tell a dead
    server (connection refused/reset, no answer) from a stalled engine or a bad request."""
    failed = sorted(batch.failed, key=lambda r: (r.error_class == NOT_SENT, r.index))
    first = failed[0]
    detail = f"{where}: request {first.index} failed ({first.error_class}): {first.error}"
    if len(failed) > 1:
        detail += f" [{len(failed)} of {len(batch.results)} requests failed]"
    if first.error_class in (CONNECTION_ERROR, TIMEOUT):
        try:
            status, _ = http_get(endpoint, "/health", probe_timeout)
        except ClientError as exc:
            return {"class": SERVER_DIED, "message": f"server stopped answering: {detail}; /health: {exc.message}"}
        if status != 200:
            return {"class": SERVER_DIED, "message": f"engine unhealthy: {detail}; /health answered HTTP {status}"}
        if first.error_class == TIMEOUT:
            return {"class": STALLED, "message": f"requests time out while /health answers 200: {detail}"}
    return {"class": first.error_class or "unknown", "message": detail}


# A warm-up request's answer length: enough decode steps to warm every batch shape the runs use
# (the prompts' prefill is what differs between requests), at a fraction of a full answer's time.
WARMUP_TOKENS = 32


def request_tag(workload: str, phase: str, position: int) -> str:
    """The nonce opening a request's prompt: the same on both servers and in every block for
    the same (workload, phase, position), different between positions, runs and the warm-up,
    so every measured prefill is one the server's prefix cache has not seen in this block."""
    return hashlib.sha256(f"{workload}/{phase}/{position}".encode()).hexdigest()[:10]


def tagged(text: str, tag: str) -> str:
    return f"Request {tag}.\n\n{text}"


def check_salt(bench_token: str, workload: str, position: int, which: str) -> str:
    """The prefix-cache salt of one output-check request (``which``: first, repeat, batched) of
    the benchmark ``bench_token`` names (random: a server that served an earlier benchmark has
    not seen these salts either): another for each, so no check answer is served from a cache
    its repeat, the measured run or an earlier check filled; hex, as vLLM takes any non-empty
    string. The salts need not match between servers: they change no answer."""
    return hashlib.sha256(f"check/{bench_token}/{workload}/{position}/{which}".encode()).hexdigest()[:16]


# What a repeat of the output check shares with its first answer, as the bench records it.
REPEATS_SALTED = "each request with its own prefix-cache salt (cache_salt)"
REPEATS_SHARED = "the same request (the prefix cache may serve its prefill)"


def run_sequence(count: int, run: int, prompts: int) -> list[int]:
    """Prompt indexes a run sends, in order: the set cycled from where the previous run of
    the cell stopped, so runs of a cell cover the set in turn."""
    return [(run * count + position) % prompts for position in range(count)]


def run_benchmark(
    endpoint: Endpoint,
    model: str,
    prompt_sets: dict[str, list[tuple[str, str]]],
    concurrency: list[int],
    warmups: int = 1,
    repetitions: int = 1,
    requests: int = 0,
    max_tokens: int = 128,
    seed: int = 42,
    request_timeout: float = 300.0,
    deadline_s: float = 3600.0,
    kind: str = "chat",
    output_check: int = 8,
    nonce_salt: str = "",
    top_logprobs: int = 2,
    burst_retries: int = 2,
    clock: Any = time.monotonic,
    cache_salt: bool = True,
) -> dict[str, Any]:
    """Per workload: ``warmups`` passes over the prompts its runs will send (discarded, at the
    highest concurrency), then ``repetitions`` measured runs per concurrency N, each keeping N requests
    in flight over ``requests`` requests (0: max(4N, the set's size)) that cycle the set; after
    every workload's runs, per workload the output check: the first ``output_check`` prompts once
    more at concurrency 1 with their tokens' logprobs and ``top_logprobs`` alternatives, each
    sent twice (``repeat``: whether the server answers the same request the same way), /metrics
    read around each (``drafts``: whether it drafted while answering), then all of them at
    once at the highest concurrency (``outputs_batched``: the answers of a batch). With
    ``cache_salt`` every check request carries its own prefix-cache salt, so none is served
    from a prefill another filled (a server that cannot take one, TensorRT-LLM's, gets none:
    ``output_check.repeats`` says which).

    ``prompt_sets``: workload -> [(prompt id, text)]. Every request's prompt opens with a nonce
    (``request_tag``, salted by ``nonce_salt``: a benchmark of a server that already served one
    gives another salt), so prefill is never served from the prefix cache of an earlier request;
    the output check sends the first concurrency-1 run's prompts, nonces included. /metrics is scraped
    around every measured run, so acceptance counts measured traffic only. A run in which a
    stream arrived in bursts is measured again (up to ``burst_retries`` times); bursty requests
    that remain are left out of every figure. The first failure ends the benchmark (ok=False,
    failure={class, message}) with the figures so far; the call returns within ``deadline_s``
    plus one probe.
    """
    started = clock()
    deadline = started + deadline_s
    path = CHAT_PATH if kind == "chat" else COMPLETIONS_PATH
    results: dict[str, dict[str, Any]] = {}
    outputs: dict[str, dict[str, Any]] = {}
    failure: dict[str, str] | None = None
    metrics_notes: list[str] = []
    scrape_timeout = min(10.0, request_timeout)
    first_level = min(concurrency)

    def scrape() -> tuple[bool, dict[str, Any] | None]:
        try:
            return True, scrape_spec_counters(endpoint, min(scrape_timeout, max(0.1, deadline - clock())), model)
        except ClientError as exc:
            metrics_notes.append(exc.message)
            return False, None

    def batch_of(workload: str, phase: str, picks: list[int], level: int, entries: list[tuple[str, str]],
                 logprobs: int = 0, tokens: int = max_tokens, positions: list[int] | None = None,
                 salts: list[str | None] | None = None) -> BatchResult:
        salted = f"{nonce_salt}/{phase}" if nonce_salt else phase
        places = positions if positions is not None else list(range(len(picks)))
        bodies = [build_request_body(kind, model, tagged(entries[index][1], request_tag(workload, salted, position)),
                                     tokens, seed, top_logprobs=logprobs,
                                     cache_salt=salts[number] if salts else None)
                  for number, (position, index) in enumerate(zip(places, picks, strict=True))]
        return run_batch(endpoint, path, bodies, level, request_timeout, deadline, True, clock,
                         [entries[index][0] for index in picks])

    def out_of_time(where: str) -> dict[str, str] | None:
        if clock() >= deadline:
            return {"class": DEADLINE, "message": f"run deadline ({deadline_s:.0f} s) reached at {where}"}
        return None

    def run_size(level: int, entries: list[tuple[str, str]]) -> int:
        return max(4 * level, requests or len(entries))

    for workload, entries in prompt_sets.items():
        results[workload] = {}
        # Every prompt the measured runs will send, once each.
        used = sorted({index for level in concurrency for run in range(repetitions)
                       for index in run_sequence(run_size(level, entries), run, len(entries))})
        for number in range(warmups):
            failure = out_of_time(f"{workload} warm-up")
            if failure is None:
                warm = batch_of(workload, f"warmup{number}", used, max(concurrency), entries,
                                tokens=min(max_tokens, WARMUP_TOKENS))
                if warm.failed:
                    failure = classify_failure(endpoint, warm, f"{workload} warm-up {number + 1}")
            if failure is not None:
                break
        for level in concurrency if failure is None else []:
            where = f"{workload} c={level}"
            count = run_size(level, entries)
            batches: list[BatchResult] = []
            deltas: list[dict[str, Any] | None] = []
            metrics_ok = True
            remeasured = 0
            for run in range(repetitions):
                picks = run_sequence(count, run, len(entries))
                for attempt in range(burst_retries + 1):
                    failure = out_of_time(where)
                    if failure is not None:
                        break
                    ok_before, before = scrape()
                    batch = batch_of(workload, f"c{level}/run{run}", picks, level, entries)
                    if batch.failed:
                        batches.append(batch)
                        deltas.append(None)
                        failure = classify_failure(endpoint, batch, f"{where} run {run + 1}")
                        break
                    ok_after, after = scrape()
                    if batch.bursty and attempt < burst_retries:
                        remeasured += 1  # never averaged in: measured again
                        continue
                    metrics_ok = metrics_ok and ok_before and ok_after
                    batches.append(batch)
                    deltas.append(counter_delta(before, after))
                    break
                if failure is not None:
                    break
            if batches:
                cell = aggregate(batches, deltas, with_acceptance=metrics_ok, remeasured=remeasured)
                if not metrics_ok:
                    cell["acceptance_note"] = "unavailable: /metrics did not answer during the runs"
                results[workload][cell_key(level)] = cell
            if failure is not None:
                break
        if failure is not None:
            break
    # After every workload's measured runs: a block with the check and one without measure the
    # same traffic in the same order (the rollout checks a serving's first block only).
    batched: dict[str, dict[str, Any]] = {}
    batch_level = max(concurrency)
    phase = f"c{first_level}/run0"  # the measured run's nonces: both sides answer the same requests
    bench_token = secrets.token_hex(8)
    counting = [True]  # /metrics answered: a server whose /metrics failed once is not asked again

    def checked(workload: str, picks: list[int], positions: list[int], level: int, which: str,
                entries: list[tuple[str, str]]) -> tuple[BatchResult, int | None]:
        """One check batch and the drafts the server counted while it ran (None: no counters)."""
        salts = [check_salt(bench_token, workload, position, which) if cache_salt else None for position in positions]
        ok_before, before = scrape() if counting[0] else (False, None)
        batch = batch_of(workload, phase, picks, level, entries, top_logprobs, positions=positions, salts=salts)
        ok_after, after = scrape() if counting[0] and ok_before and not batch.failed else (False, None)
        counting[0] = counting[0] and ok_before and (ok_after or batch.failed)
        delta = counter_delta(before, after) if ok_before and ok_after else None
        return batch, None if delta is None else int(delta["drafts"])

    for workload, entries in prompt_sets.items() if failure is None and output_check else ():
        picks = list(range(min(output_check, len(entries))))
        answers: dict[str, Any] = {}
        for index in picks:
            failure = out_of_time(f"{workload} output check")
            if failure is not None:
                break
            pair = []
            for which in ("first", "repeat"):
                check, drafts = checked(workload, [index], [index], 1, which, entries)
                if check.failed:
                    failure = classify_failure(endpoint, check, f"{workload} output check")
                    break
                pair.append({**output_record(check.results[0]), "drafts": drafts})
            if failure is not None:
                break
            answers[check.results[0].prompt_id] = {**pair[0], "repeat": pair[1]}
        if failure is not None:
            break
        outputs[workload] = answers
        if batch_level > 1:
            failure = out_of_time(f"{workload} output check at c={batch_level}")
            if failure is not None:
                break
            check, drafts = checked(workload, picks, picks, batch_level, "batched", entries)
            if check.failed:
                failure = classify_failure(endpoint, check, f"{workload} output check at c={batch_level}")
                break
            batched[workload] = {"concurrency": batch_level, "drafts": drafts,
                                 "answers": {result.prompt_id: output_record(result) for result in check.results}}
    return {
        "model": model,
        "endpoint": str(endpoint),
        "results": results,
        "outputs": outputs,
        "outputs_batched": batched,
        "output_check": {"repeats": REPEATS_SALTED if cache_salt else REPEATS_SHARED} if outputs else None,
        "ok": failure is None,
        "failure": failure,
        "duration_s": round(clock() - started, 3),
        "metrics_notes": metrics_notes[:5],
    }


def output_record(result: RequestResult) -> dict[str, Any]:
    """What the output check keeps of one answer: its text's digest, and per token the token,
    its logprob's lead over the best alternative (None: the server sent no alternative)."""
    return {
        "text": text_digest(result.text),
        "tokens": [token for token, _, _ in result.token_logprobs],
        "margins": [None if alternative is None else round(logprob - alternative, 4)
                    for _, logprob, alternative in result.token_logprobs],
    }
