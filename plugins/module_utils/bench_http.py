# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""HTTP to a serving: its address, the request bodies the benchmark sends, plain GETs, and
the failure classes every part of the benchmark reports in.

Unit-side code, stdlib only (Python 3.10+), shipped by Ansible with the spec_bench module;
the controller and the tests import the same file by its collection name.

Requests never carry ``min_p`` or ``logit_bias``: a speculative vLLM server rejects them
(HTTP 400) or ignores them, so ``build_request_body`` refuses them outright.
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

FORBIDDEN_PARAMS = ("min_p", "logit_bias")


CHAT_PATH = "/v1/chat/completions"


COMPLETIONS_PATH = "/v1/completions"


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
