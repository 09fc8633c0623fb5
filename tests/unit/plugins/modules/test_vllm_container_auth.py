"""vllm_container's readiness probe against a server that requires an API key (VLLM_API_KEY)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.conftest import load_module

vllm_container = load_module("vllm_container")
KEY = "sk-unit-test-key"


class KeyedVllm(BaseHTTPRequestHandler):
    """What vLLM does with --api-key: /health open, /v1/* 401 without the bearer token."""

    seen: list[str | None] = []

    def do_GET(self):  # noqa: N802 - stdlib name
        type(self).seen.append(self.headers.get("authorization"))
        if self.path.startswith("/v1/") and self.headers.get("authorization") != f"Bearer {KEY}":
            status, body = 401, {"error": "Unauthorized"}
        elif self.path == "/v1/models":
            status, body = 200, {"object": "list", "data": [{"id": "m"}]}
        else:
            status, body = 200, {}
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def keyed_server():
    KeyedVllm.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), KeyedVllm)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_a_keyed_server_is_ready_only_when_probed_with_its_key(keyed_server):
    assert not vllm_container.serves(keyed_server)
    assert vllm_container.serves(keyed_server, KEY)
    # /health never carries the key; only /v1/* does, as vLLM guards only /v1.
    assert KeyedVllm.seen[-2:] == [None, f"Bearer {KEY}"]


@pytest.mark.parametrize(
    ("env", "secret_env", "expected"),
    [
        ({}, {}, None),
        ({}, {"VLLM_API_KEY": KEY, "HF_TOKEN": "hf_x"}, KEY),
        ({"VLLM_API_KEY": "plain"}, {}, "plain"),
        ({"VLLM_API_KEY": "plain"}, {"VLLM_API_KEY": KEY}, KEY),  # the container gets the secret one
        ({}, {"VLLM_API_KEY": ""}, None),
    ],
)
def test_api_key_is_the_one_the_container_gets(env, secret_env, expected):
    assert vllm_container.api_key({"env": env, "secret_env": secret_env}) == expected


def test_the_key_enters_the_config_hash_only_as_a_digest():
    params = {"image": "i", "args": ["vllm", "serve", "m"], "env": {}, "secret_env": {"VLLM_API_KEY": KEY},
              "mounts": [], "port": 8000, "runtime": "nvidia", "shm_size": "16g", "ulimits": {}, "labels": {},
              "files": {}}
    config = vllm_container.desired_config(params)
    assert KEY not in json.dumps(config)
    other = vllm_container.desired_config({**params, "secret_env": {"VLLM_API_KEY": KEY + "2"}})
    assert vllm_container.config_hash(config) != vllm_container.config_hash(other)
