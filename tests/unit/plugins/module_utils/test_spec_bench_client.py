"""The spec_bench client's rooms (bench_http, bench_stream, spec_metrics, bench_figures, spec_bench_client): SSE
parsing, timings, usage tokens, metrics deltas, request bodies."""

from __future__ import annotations

import contextlib
import json
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from ansible_collections.specfleet.fleet.plugins.module_utils import (
    bench_figures,
    bench_http,
    bench_stream,
    spec_metrics,
)
from ansible_collections.specfleet.fleet.plugins.module_utils import spec_bench_prompts as prompts


def sse(*payloads) -> bytes:
    return b"".join(
        f"data: {p if isinstance(p, str) else json.dumps(p)}\n\n".encode() for p in payloads
    )


def chat_chunk(content=None, role=None, finish=None):
    delta = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


USAGE = {"object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 9,
                                                                     "total_tokens": 21}}


# --- SSE --------------------------------------------------------------------------------------


def test_sse_parser_handles_split_reads_crlf_comments_and_multiline_data():
    parser = bench_stream.SSEParser()
    stream = b": keep-alive\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\nevent: x\ndata: [DONE]\n\n"
    events = []
    for i in range(0, len(stream), 3):  # three bytes at a time
        events += parser.feed(stream[i : i + 3])
    assert events == ['{"a":\n1}', "[DONE]"]
    assert json.loads(events[0]) == {"a": 1}


def test_sse_parser_flushes_an_unterminated_event_on_close():
    parser = bench_stream.SSEParser()
    assert parser.feed(b"data: [DONE]") == []
    assert parser.close() == ["[DONE]"]


# --- one stream ------------------------------------------------------------------------------


def feed(state: bench_stream.StreamState, timed_payloads):
    parser = bench_stream.SSEParser()
    for at, payload in timed_payloads:
        for data in parser.feed(sse(payload)):
            state.on_event(data, at)


def test_ttft_is_first_content_chunk_and_tokens_come_from_usage_not_chunks():
    state = bench_stream.StreamState(sent_at=10.0)
    feed(
        state,
        [
            (10.050, chat_chunk("", role="assistant")),  # role chunk: no content, not TTFT
            (10.100, chat_chunk("Hello")),  # first content: TTFT 100 ms
            (10.130, chat_chunk(" big multi-token")),  # one chunk, several tokens (a spec step)
            (10.200, chat_chunk(" world", finish="length")),
            (10.210, USAGE),  # usage-only chunk does not extend E2E
            (10.220, "[DONE]"),
        ],
    )
    result = bench_stream.RequestResult(0, state.sent_at, state.chunk_times, state.completion_tokens,
                                        state.prompt_tokens, state.text, state.finish_reason)
    assert state.done and state.error is None
    assert result.text == "Hello big multi-token world"
    assert result.ttft_s == pytest.approx(0.100)
    assert result.e2e_s == pytest.approx(0.200)
    assert result.itl_s == pytest.approx([0.030, 0.070])  # per chunk gaps
    assert result.completion_tokens == 9  # 3 content chunks, 9 tokens
    assert result.tpot_s == pytest.approx((0.200 - 0.100) / (9 - 1))
    assert result.finish_reason == "length"


def test_empty_text_chunks_are_tokens_so_tpot_spans_every_usage_token():
    # vLLM streams one chunk per engine output; a token whose text the detokenizer holds
    # back (half a UTF-8 character) or skips (special token) arrives as content "". Usage
    # counts it, so TTFT and E2E must be timed on it: timing only non-empty chunks made
    # TPOT = (E2E - TTFT) / (tokens - 1) span fewer tokens than it divides by (issue 5).
    state = bench_stream.StreamState(sent_at=10.0)
    feed(
        state,
        [
            (10.050, chat_chunk("", role="assistant")),  # role announcement: not a token
            (10.100, chat_chunk("")),  # first token, text held back: TTFT 100 ms
            (10.110, chat_chunk("\u00e9")),
            (10.120, chat_chunk("a")),
            (10.130, chat_chunk("")),  # skipped special token
            (10.140, {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}),  # last token
            (10.150, {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}}),
            (10.160, "[DONE]"),
        ],
    )
    result = bench_stream.RequestResult(0, state.sent_at, state.chunk_times, state.completion_tokens,
                                        state.prompt_tokens, state.text, state.finish_reason)
    assert result.text == "\u00e9a"
    assert result.ttft_s == pytest.approx(0.100)
    assert result.e2e_s == pytest.approx(0.140)
    assert result.itl_s == pytest.approx([0.010, 0.010, 0.010, 0.010])
    assert result.tpot_s == pytest.approx(0.040 / 4)  # content chunks only would give 0.010 / 4
    assert result.finish_reason == "length"
    # A role chunk that already carries text is the first token chunk.
    state = bench_stream.StreamState(sent_at=0.0)
    feed(state, [(0.2, chat_chunk("Hi", role="assistant")), (0.3, chat_chunk("!"))])
    assert state.chunk_times == [0.2, 0.3]


def test_completions_stream_uses_text_field():
    state = bench_stream.StreamState(sent_at=0.0)
    feed(
        state,
        [
            (0.1, {"object": "text_completion", "choices": [{"index": 0, "text": "ab"}]}),
            (0.2, {"object": "text_completion", "choices": [{"index": 0, "text": "cd", "finish_reason": "stop"}]}),
            (0.3, {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}),
            (0.3, "[DONE]"),
        ],
    )
    assert state.text == "abcd" and state.completion_tokens == 4 and len(state.chunk_times) == 2


def test_tpot_needs_more_than_one_token():
    assert bench_stream.tpot(0.1, 0.1, 1) is None
    assert bench_stream.tpot(0.1, 0.5, None) is None
    assert bench_stream.tpot(None, 0.5, 10) is None
    assert bench_stream.tpot(0.1, 0.5, 5) == pytest.approx(0.1)


def test_error_event_mid_stream_is_recorded():
    state = bench_stream.StreamState(sent_at=0.0)
    feed(state, [(0.1, chat_chunk("x")), (0.2, {"error": {"message": "engine dead", "type": "InternalServerError"}})])
    assert state.error is not None
    assert state.error.error_class == bench_http.STREAM_ERROR
    assert "engine dead" in state.error.message


# --- request bodies --------------------------------------------------------------------------


def test_request_body_is_greedy_streaming_with_usage_and_never_min_p_or_logit_bias():
    body = bench_http.build_request_body("chat", "m", "hi", 64, 42)
    assert body["temperature"] == 0.0 and body["top_p"] == 1.0 and body["seed"] == 42
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 64 and body["messages"] == [{"role": "user", "content": "hi"}]
    assert "min_p" not in body and "logit_bias" not in body
    completion = bench_http.build_request_body("completion", "m", "hi", 8, 1)
    assert completion["prompt"] == "hi" and "min_p" not in completion and "logit_bias" not in completion


@pytest.mark.parametrize("param", ["min_p", "logit_bias"])
def test_forbidden_parameters_are_refused(param):
    body = {**bench_http.build_request_body("chat", "m", "hi", 8, 1), param: 0.1 if param == "min_p" else {"1": 5}}
    with pytest.raises(ValueError, match=param):
        bench_http.check_body(body)
    endpoint = bench_http.Endpoint.parse("http://127.0.0.1:9")
    with pytest.raises(ValueError, match=param):
        bench_stream.stream_request(endpoint, bench_http.CHAT_PATH, body, timeout=1)
    with pytest.raises(ValueError, match=param):
        bench_stream.run_batch(endpoint, bench_http.CHAT_PATH, [body], 1, timeout=1)


# --- against a scripted HTTP server ------------------------------------------------------------


class Scripted(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    bodies: list = []
    mode = "ok"

    def log_message(self, *args):
        pass

    def do_POST(self):  # noqa: N802
        raw = self.rfile.read(int(self.headers["content-length"]))
        type(self).bodies.append(json.loads(raw))
        if self.mode == "http400":
            body = json.dumps({"error": {"message": "bad max_tokens", "type": "BadRequestError", "code": 400}})
            self.send_response(400)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(sse(chat_chunk("", role="assistant"), chat_chunk("one two")))
        self.wfile.flush()
        if self.mode == "reset":
            return  # close before [DONE]: the server went away
        if self.mode == "stall":
            time.sleep(3)
            return
        time.sleep(0.02)
        usage = {**USAGE, "usage": {"completion_tokens": 3}}
        self.wfile.write(sse(chat_chunk(" three", finish="stop"), usage, "[DONE]"))


@pytest.fixture
def scripted():
    Scripted.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def call(server, mode, timeout=2.0, deadline=None):
    Scripted.mode = mode
    endpoint = bench_http.Endpoint.parse(f"http://127.0.0.1:{server.server_address[1]}", api_key="k")
    body = bench_http.build_request_body("chat", "m", "hi", 16, 7)
    return bench_stream.stream_request(endpoint, bench_http.CHAT_PATH, body, timeout, deadline)


def test_wire_request_and_good_stream(scripted):
    result = call(scripted, "ok")
    assert result.ok, result.error
    assert result.text == "one two three" and result.completion_tokens == 3
    assert result.ttft_s is not None and result.e2e_s >= result.ttft_s + 0.015
    sent = Scripted.bodies[-1]
    assert "min_p" not in sent and "logit_bias" not in sent
    assert sent["temperature"] == 0.0 and sent["top_p"] == 1.0 and sent["stream_options"]["include_usage"] is True


def test_http_error_json_is_reported(scripted):
    result = call(scripted, "http400")
    assert result.error_class == bench_http.HTTP_ERROR
    assert result.error == "HTTP 400 BadRequestError: bad max_tokens"


def test_stream_closed_before_done_is_a_connection_error(scripted):
    result = call(scripted, "reset")
    assert result.error_class == bench_http.CONNECTION_ERROR
    assert result.text == "one two"  # what arrived is kept


def test_stalled_stream_times_out_in_bounded_time(scripted):
    started = time.monotonic()
    result = call(scripted, "stall", timeout=0.4)
    assert result.error_class == bench_http.TIMEOUT
    assert "after 1 token chunks" in result.error
    assert time.monotonic() - started < 1.5
    started = time.monotonic()
    result = call(scripted, "stall", timeout=5.0, deadline=time.monotonic() + 0.3)
    assert result.error_class == bench_http.DEADLINE and time.monotonic() - started < 1.5


def test_connection_refused():
    endpoint = bench_http.Endpoint.parse("http://127.0.0.1:9")
    body = bench_http.build_request_body("chat", "m", "x", 4, 1)
    result = bench_stream.stream_request(endpoint, bench_http.CHAT_PATH, body, 1)
    assert result.error_class == bench_http.CONNECTION_ERROR


def test_batch_stops_after_the_first_failure(scripted):
    Scripted.mode = "http400"
    endpoint = bench_http.Endpoint.parse(f"http://127.0.0.1:{scripted.server_address[1]}")
    bodies = [bench_http.build_request_body("chat", "m", str(i), 4, 1) for i in range(6)]
    batch = bench_stream.run_batch(endpoint, bench_http.CHAT_PATH, bodies, 1, timeout=2)
    assert [r.error_class for r in batch.results] == [bench_http.HTTP_ERROR] + [bench_http.NOT_SENT] * 5
    assert len(Scripted.bodies) == 1


class Paced(BaseHTTPRequestHandler):
    """A chunked SSE stream of 4 token chunks 25 ms apart; records when each request arrived,
    when each stream sent its last token, and the most requests it held at once."""

    protocol_version = "HTTP/1.1"
    arrivals: list[float] = []
    last_tokens: list[float] = []
    end_delay = 0.0  # seconds between [DONE] and the chunked body's closing chunk
    open_now = 0
    most_open = 0
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def do_POST(self):  # noqa: N802
        cls = type(self)
        with cls.lock:
            cls.arrivals.append(time.monotonic())
            cls.open_now += 1
            cls.most_open = max(cls.most_open, cls.open_now)
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

        def chunk(data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        chunk(sse(chat_chunk("", role="assistant")))
        for number in range(4):
            time.sleep(0.025)
            chunk(sse(chat_chunk(f" t{number}")))
        with cls.lock:
            cls.open_now -= 1
            cls.last_tokens.append(time.monotonic())
        chunk(sse({**USAGE, "usage": {"completion_tokens": 4}}, "[DONE]"))
        time.sleep(cls.end_delay)
        chunk(b"")


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]):
    """A threaded HTTP server with `handler` on 127.0.0.1; yields its endpoint, shuts it down after."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield bench_http.Endpoint.parse(f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()


def test_batch_holds_concurrency_in_flight_from_one_thread_and_sends_its_first_requests_together():
    """At c=4, 8 chunked streams of ~100 ms: the first 4 reach the server before any stream
    ends (one loop sends them, as `vllm bench serve` does), never more than 4 are open, the
    fifth leaves only once one has ended (two rounds), and the client starts no thread. Order,
    not wall-clock bounds: a loaded 2-core runner delays a thread by tens of milliseconds."""
    Paced.arrivals, Paced.last_tokens, Paced.open_now, Paced.most_open = [], [], 0, 0
    with serving(Paced) as endpoint:
        bodies = [bench_http.build_request_body("chat", "m", str(i), 4, 1) for i in range(8)]
        threads_before = threading.active_count()
        batch = bench_stream.run_batch(endpoint, bench_http.CHAT_PATH, bodies, 4, timeout=5)
    assert all(r.ok for r in batch.results), [r.error for r in batch.results]
    assert [r.text for r in batch.results] == [" t0 t1 t2 t3"] * 8
    assert [len(r.chunk_times) for r in batch.results] == [4] * 8 and all(r.tpot_s > 0.015 for r in batch.results)
    arrivals, first_end = sorted(Paced.arrivals), min(Paced.last_tokens)
    assert arrivals[3] < first_end <= arrivals[4], (arrivals, first_end)
    assert Paced.most_open == 4
    assert batch.wall_s >= 0.2  # two rounds of ~100 ms
    assert threading.active_count() <= threads_before + 1  # the server's handler threads end on their own


def test_a_tls_endpoint_streams_through_the_same_loop(tmp_path, monkeypatch):
    """https: the loop reads TLS records too (decrypted data the SSL object holds is read
    before waiting again); the certificate is checked as http.client checks it, here against
    the test's own CA."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    Paced.arrivals, Paced.last_tokens, Paced.open_now, Paced.most_open = [], [], 0, 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), Paced)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    server.socket = server_context.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    trusting = ssl.create_default_context(cafile=str(cert))
    monkeypatch.setattr(bench_stream.ssl, "create_default_context", lambda: trusting)
    try:
        endpoint = bench_http.Endpoint.parse(f"https://127.0.0.1:{server.server_address[1]}")
        bodies = [bench_http.build_request_body("chat", "m", str(i), 4, 1) for i in range(3)]
        batch = bench_stream.run_batch(endpoint, bench_http.CHAT_PATH, bodies, 3, timeout=5)
    finally:
        server.shutdown()
        server.server_close()
    assert [(r.error, r.text, r.completion_tokens) for r in batch.results] == [(None, " t0 t1 t2 t3", 4)] * 3


class KeepAlive(Paced):
    """Paced streams, recording each request's client port (its connection). ``drop_second``:
    the second request on every connection is read and the connection closed unanswered, as a
    server whose keep-alive timeout ran out just as the request arrived."""

    ports: list[int] = []
    dropped = 0
    drop_second = False

    def do_POST(self):  # noqa: N802
        cls = type(self)
        served = getattr(self, "served", 0)
        self.served = served + 1
        if cls.drop_second and served == 1:
            self.rfile.read(int(self.headers["content-length"]))
            cls.dropped += 1
            self.close_connection = True
            return
        cls.ports.append(self.client_address[1])
        super().do_POST()


def keep_alive_batch(requests: int, concurrency: int, drop_second: bool,
                     end_delay: float = 0.0) -> bench_stream.BatchResult:
    KeepAlive.ports, KeepAlive.dropped, KeepAlive.drop_second, KeepAlive.end_delay = [], 0, drop_second, end_delay
    KeepAlive.arrivals, KeepAlive.open_now, KeepAlive.most_open = [], 0, 0
    with serving(KeepAlive) as endpoint:
        bodies = [bench_http.build_request_body("chat", "m", str(i), 4, 1) for i in range(requests)]
        return bench_stream.run_batch(endpoint, bench_http.CHAT_PATH, bodies, concurrency, timeout=5)


def test_a_batch_reuses_its_connections_as_vllm_bench_serves_pool_does():
    """8 requests at c=2 on an HTTP/1.1 server that keeps connections: 2 connections carry them
    all (one per request before: the server accepted and tore down 8)."""
    batch = keep_alive_batch(8, 2, drop_second=False)
    assert [(r.error, r.text) for r in batch.results] == [(None, " t0 t1 t2 t3")] * 8
    assert len(KeepAlive.ports) == 8 and len(set(KeepAlive.ports)) == 2, KeepAlive.ports


def test_a_stream_ends_at_done_and_its_connection_waits_for_the_bodys_end_to_be_reused():
    """The closing chunk comes 400 ms after [DONE]: each request's figures end at its last token
    (not 400 ms later), and the next request waits for the connection (its slot is held until
    the response ended, as vllm bench serve's request function returns only then). The margins
    are wide for a loaded CI machine: 100 ms of stream, 300 ms of slack, 400 ms of delay."""
    batch = keep_alive_batch(3, 1, drop_second=False, end_delay=0.4)
    assert [(r.error, r.text) for r in batch.results] == [(None, " t0 t1 t2 t3")] * 3
    assert len(set(KeepAlive.ports)) == 1, KeepAlive.ports
    assert all(r.e2e_s < 0.1 + 0.3 for r in batch.results), [r.e2e_s for r in batch.results]
    later = sorted(KeepAlive.arrivals)
    assert all(b - a >= 0.1 + 0.4 for a, b in zip(later, later[1:], strict=False)), later


def test_a_kept_connection_the_server_closed_unanswered_is_retried_once_on_a_new_one():
    batch = keep_alive_batch(6, 1, drop_second=True)
    assert [(r.error, r.text) for r in batch.results] == [(None, " t0 t1 t2 t3")] * 6
    assert KeepAlive.dropped == 5 and len(KeepAlive.ports) == 6 and len(set(KeepAlive.ports)) == 6
    assert all(r.ttft_s < 0.5 for r in batch.results)  # timed from the send that was answered


def test_a_connection_is_kept_only_at_a_clean_http11_response_boundary():
    framed = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    assert reader_body(framed, 1000)[0].reusable
    assert not reader_body(framed.replace(b"2\r\n", b"2\r\nConnection: close\r\n"), 1000)[0].reusable
    assert not reader_body(framed.replace(b"HTTP/1.1", b"HTTP/1.0"), 1000)[0].reusable
    assert not reader_body(framed + b"HTTP/1.1 200", 1000)[0].reusable  # bytes nobody asked for
    assert not reader_body(CHUNKED[:-5], 1000)[0].reusable and reader_body(CHUNKED, 3)[0].reusable
    to_close = reader_body(b"HTTP/1.1 200 OK\r\n\r\ndata", 1000)[0]
    to_close.close()
    assert to_close.complete and not to_close.reusable


def reader_body(raw: bytes, step: int) -> tuple[bench_stream.ResponseReader, bytes]:
    reader = bench_stream.ResponseReader()
    body = b"".join(reader.feed(raw[at:at + step]) for at in range(0, len(raw), step))
    return reader, body


CHUNKED = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"6\r\ndata: \r\n3;ext=1\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\n")


@pytest.mark.parametrize("step", [1, 2, 3, 7, 1000])
def test_response_reader_decodes_chunked_bodies_split_anywhere(step):
    reader, body = reader_body(CHUNKED, step)
    assert (reader.status, body, reader.complete) == (200, b"data: abc", True)


def test_response_reader_sized_and_to_close_bodies():
    reader, body = reader_body(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 5\r\n\r\nhello+extra", 4)
    assert (reader.status, body, reader.complete) == (400, b"hello", True)
    reader, body = reader_body(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: x\n\n", 5)
    assert (body, reader.complete) == (b"data: x\n\n", False)
    reader.close()
    assert reader.complete


@pytest.mark.parametrize(("raw", "message"), [
    (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP response"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size line"),
])
def test_response_reader_refuses_what_is_not_http(raw, message):
    with pytest.raises(bench_http.ClientError, match=message) as caught:
        bench_stream.ResponseReader().feed(raw)
    assert caught.value.error_class == bench_http.PROTOCOL_ERROR


def test_the_request_is_what_http_client_sends():
    endpoint = bench_http.Endpoint.parse("http://unit.lan:8000/base", api_key="k")
    raw = bench_http.request_bytes(endpoint, bench_http.CHAT_PATH, b'{"a": 1}')
    head, body = raw.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /base/v1/chat/completions HTTP/1.1" and body == b'{"a": 1}'
    assert {"Host: unit.lan:8000", "Content-Length: 8", "authorization: Bearer k",
            "content-type: application/json"} <= set(lines)
    assert not [line for line in lines if line.lower().startswith("connection:")]  # HTTP/1.1: kept open
    assert "Host: [::1]" in bench_http.request_bytes(bench_http.Endpoint.parse("http://[::1]:80"), "/x", b"").decode()


# --- metrics ----------------------------------------------------------------------------------

METRICS_BEFORE = """# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="llama"} 100.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="llama"} 1.7e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="llama"} 500.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="llama"} 150.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="llama",position="0"} 60.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="llama",position="1"} 40.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="llama",position="2"} 25.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="llama",position="3"} 15.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="llama",position="4"} 10.0
vllm:generation_tokens_total{engine="0",model_name="llama"} 900.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="llama"} 0.0
"""


def after_metrics(drafts, draft_tokens, accepted, per_pos):
    lines = [
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="llama"}} {100 + drafts}',
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="llama"}} {500 + draft_tokens}',
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="llama"}} {150 + accepted}',
    ]
    base = [60, 40, 25, 15, 10]
    for i, value in enumerate(per_pos):
        lines.append(
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="llama",position="{i}"}} '
            f"{base[i] + value}"
        )
    return "\n".join(lines) + "\n"


def test_prometheus_parser_reads_labels_and_skips_comments():
    samples = spec_metrics.parse_prometheus(METRICS_BEFORE + 'x{a="q\\"uote",b="c"} 3 1700000000\n')
    names = [s[0] for s in samples]
    assert "vllm:spec_decode_num_drafts_total" in names and not any(n.startswith("#") for n in names)
    assert samples[-1] == ("x", {"a": 'q"uote', "b": "c"}, 3.0)


def test_acceptance_from_counter_deltas():
    before = spec_metrics.spec_decode_counters(METRICS_BEFORE)
    after = spec_metrics.spec_decode_counters(after_metrics(200, 1000, 357, [100, 84, 70, 57, 46]))
    assert before["drafts"] == 100 and before["per_position"][4] == 10
    acceptance = spec_metrics.acceptance(spec_metrics.counter_delta(before, after))
    assert acceptance["drafts"] == 200 and acceptance["draft_tokens"] == 1000 and acceptance["accepted"] == 357
    assert acceptance["rate"] == pytest.approx(357 / 1000)
    assert acceptance["mean_length"] == pytest.approx(1 + 357 / 200)
    assert acceptance["per_position"] == pytest.approx([0.5, 0.42, 0.35, 0.285, 0.23])


def test_no_spec_counters_means_null_not_zero():
    baseline = 'vllm:generation_tokens_total{engine="0",model_name="llama"} 10.0\n'
    assert spec_metrics.spec_decode_counters(baseline) is None
    assert spec_metrics.counter_delta(None, None) is None
    assert spec_metrics.acceptance(None) is None
    assert spec_metrics.add_deltas([None, None]) is None


def test_counters_sum_engines_and_filter_by_model():
    text = (
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="a"} 4\n'
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="a"} 6\n'
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="b"} 100\n'
    )
    assert spec_metrics.spec_decode_counters(text)["drafts"] == 110
    assert spec_metrics.spec_decode_counters(text, "a")["drafts"] == 10
    assert spec_metrics.spec_decode_counters(text, "unknown")["drafts"] == 110  # label not served: all


def test_zero_drafts_gives_null_ratios():
    counters = spec_metrics.spec_decode_counters(METRICS_BEFORE)
    acceptance = spec_metrics.acceptance(spec_metrics.counter_delta(counters, counters))
    assert acceptance["rate"] is None and acceptance["mean_length"] is None and acceptance["drafts"] == 0


# --- statistics and aggregation ----------------------------------------------------------------


def test_percentiles_match_numpy_linear():
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert bench_figures.percentile(values, 50) == 3.0
    assert bench_figures.percentile(values, 90) == pytest.approx(7.6)
    assert bench_figures.summarize(values, 1000.0) == {"p50": 3000.0, "p90": 7600.0, "mean": 4000.0}
    assert bench_figures.summarize([]) == {"p50": None, "p90": None, "mean": None}
    assert bench_figures.spread([90.0, 100.0, 110.0]) == pytest.approx(0.2)


def request(index, sent, times, tokens, text="t"):
    return bench_stream.RequestResult(index, sent, times, tokens, 5, text, "length")


def test_aggregate_per_run_throughput_and_pooled_latencies():
    run1 = bench_stream.BatchResult([request(0, 0.0, [0.1, 0.2, 0.3], 5), request(1, 0.3, [0.4, 0.6], 5)], 1.0, 1)
    run2 = bench_stream.BatchResult([request(0, 0.0, [0.1, 0.3, 0.5], 5), request(1, 0.5, [0.6, 0.8], 5)], 2.0, 1)
    delta = {"drafts": 10.0, "draft_tokens": 50.0, "accepted": 20.0, "per_position": {0: 8.0, 1: 6.0}}
    cell = bench_figures.aggregate([run1, run2], [delta, delta])
    assert cell["throughput_tok_s"] == {"median": 7.5, "runs": [10.0, 5.0], "spread": pytest.approx(5 / 7.5, abs=1e-4)}
    assert cell["runs"][0]["tpot_p50_ms"] == pytest.approx(50.0)  # (0.2/4, 0.2/4)
    assert cell["ttft_ms"]["p50"] == pytest.approx(100.0)
    assert cell["output_tokens"] == 20 and cell["requests"] == 4 and cell["failed_requests"] == 0
    assert cell["acceptance"] == {"rate": 0.4, "mean_length": 3.0, "per_position": [0.8, 0.6], "drafts": 20,
                                  "draft_tokens": 100, "accepted": 40}
    first = cell["runs"][0]["requests"][0]
    assert first == {"prompt": None, "tokens": 5, "ttft_ms": 100.0, "tpot_ms": 50.0, "e2e_ms": 300.0, "chunks": 3,
                     "text": bench_figures.text_digest("t")}
    assert cell["bursts"] == {"remeasured_runs": 0, "bursty_requests_left_out": 0}


# --- prompts ------------------------------------------------------------------------------------


def test_prompt_sets_are_fixed_and_named():
    assert prompts.WORKLOADS == ("code_edit", "chat")
    code = prompts.prompts("code_edit")
    chat = prompts.prompts("chat")
    assert len(code) >= 32 and len(chat) >= 32  # more in test_spec_bench_prompts.py
    assert all("type hints" in p and "```python" in p and p.count("\n") >= 15 for p in code)
    assert all("300 words" in p for p in chat)
    assert len(set(code)) == len(code) and len(set(chat)) == len(chat)
    with pytest.raises(KeyError, match="known"):
        prompts.prompts("poetry")
