"""OpenAI-compatible HTTP API with vLLM's routes, response shapes and errors.

stdlib ThreadingHTTPServer, HTTP/1.1 with keep-alive; streams use chunked transfer
encoding and SSE events (`data: {json}\\n\\n`, then `data: [DONE]\\n\\n`). The socket is bound
early (so a port clash fails at startup like uvicorn) but only listens once the engine
is ready: until then TCP connects are refused, exactly what readiness probes expect.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from . import EMULATOR_NAME, emulated_trtllm_version, emulated_vllm_version, server_header, version_tuple
from .engine import ENGINE_DEAD, Engine, GenerationRequest, StepOutput
from .faults import UNSTABLE_TIE, Faults
from .logprobs import AnswerPlan, chat_logprobs, completion_logprobs
from .logs import VllmLogger
from .metrics import VllmMetrics
from .perfmodel import detect_workload
from .specconfig import ResolvedSpeculation
from .tokens import count_tokens, generate, natural_length, render_chat_prompt, user_text

if TYPE_CHECKING:
    from .trtllm_runtime import IterationStatsQueue

# Which engine's API the server speaks: `vllm serve`, or `trtllm-serve` (TensorRT-LLM:
# `/version` reports its version, `/metrics` is its JSON list of iteration statistics).
VLLM = "vllm"
TRTLLM = "trtllm"

SPEC_SAMPLING_ERROR = "The min_p and logit_bias sampling parameters are not yet supported with speculative decoding."
ROUTES = [
    ("/openapi.json", "GET, HEAD"),
    ("/docs", "GET, HEAD"),
    ("/health", "GET"),
    ("/load", "GET"),
    ("/ping", "GET, POST"),
    ("/tokenize", "POST"),
    ("/detokenize", "POST"),
    ("/v1/models", "GET"),
    ("/version", "GET"),
    ("/v1/chat/completions", "POST"),
    ("/v1/completions", "POST"),
    ("/metrics", "GET"),
    ("/specfleet/emulator", "GET"),
]


class ApiError(Exception):
    def __init__(
        self, status: int, message: str, error_type: str = "BadRequestError", param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.param = param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.error_type, "param": self.param, "code": self.status}}


@dataclass
class ServerState:
    served_model_names: list[str]
    model_root: str
    max_model_len: int
    engine: Engine
    metrics: VllmMetrics
    log: VllmLogger
    speculative: ResolvedSpeculation | None
    api_keys: list[str] | None = None
    force_include_usage: bool = False
    generation_defaults: dict[str, Any] = field(default_factory=dict)
    crash_after_requests: int | None = None
    engine_seed: int = 0
    emulator_info: dict[str, Any] = field(default_factory=dict)
    flavour: str = VLLM
    label: str = "specfleet vLLM EMULATOR"
    # trtllm-serve: the executor's stats queue, present only with enable_iter_perf_stats.
    iteration_stats: IterationStatsQueue | None = None
    # --max-logprobs (ModelConfig.max_logprobs, default 20; -1: the vocabulary size).
    max_logprobs: int = 20
    vocab_size: int = 128256
    # The fault switches that shape answers (output divergence, unstable outputs).
    faults: Faults = field(default_factory=Faults)
    created: int = field(default_factory=lambda: int(time.time()))
    completed_requests: int = 0
    received_requests: int = 0  # answers planned so far (unstable_outputs keys on it)
    in_flight: int = 0  # generation requests received and not yet answered (batched_divergence)
    # The prefix cache as far as answers go: digests of (cache_salt, rendered prompt) prefilled
    # before (cache_hit_flips keys on it), at most PREFIX_CACHE_ENTRIES, the oldest forgotten.
    prefix_cache: dict[bytes, None] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class PreparedRequest:
    """A validated generation request, ready for the engine."""

    kind: str  # "chat" | "completion"
    acceptance_seed: int  # greedy: a function of the prompt, so acceptance repeats too
    model_name: str
    prompt_tokens: int
    output: list[str]
    finish_reason: str
    workload: str
    temperature: float
    stream: bool
    include_usage: bool
    continuous_usage: bool
    max_tokens: int
    plan: AnswerPlan
    # Logprobs asked for: chat `top_logprobs` (with `logprobs: true`) or completions
    # `logprobs`; None: not asked for.
    logprobs: int | None = None
    # False: the engine decodes it without speculation (logprobs_without_drafting).
    drafting: bool = True


def _number(body: dict[str, Any], key: str, default: float | None) -> float | None:
    value = body.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ApiError(400, f"{key} must be a number")
    return float(value)


class _Repr:
    """An object whose repr is given (an exception inside a printed pydantic error)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def request_validation_error(body: dict[str, Any], message: str, parameter: str, value: Any = None) -> ApiError:
    """A VLLMValidationError raised by a request model's `mode="before"` validator.

    FastAPI turns it into a RequestValidationError, which vLLM's handler answers with 400,
    type "Bad Request", `param` from the VLLMValidationError and the message
    `str(exc)` (+ `str(exc.errors())` when they differ): the printed pydantic errors,
    whose `msg` is "Value error, " + str(VLLMValidationError) (the message, then
    "(parameter=..., value=...)"). vllm/entrypoints/openai/api_server.py
    `validation_exception_handler`, vllm/exceptions.py `VLLMValidationError.__str__`.
    """
    extras = [f"parameter={parameter}"] + ([] if value is None else [f"value={value}"])
    error = {
        "type": "value_error",
        "loc": ("body",),
        "msg": f"Value error, {message} ({', '.join(extras)})",
        "input": body,
        "ctx": {"error": _Repr(f"VLLMValidationError({message!r})")},
    }
    return ApiError(400, str([error]), "Bad Request", parameter)


def _integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False  # stricter than pydantic's lax int (which takes a bool as 0/1)
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def requested_logprobs(kind: str, body: dict[str, Any]) -> int | None:
    """The protocol checks of the logprobs fields (pydantic `check_logprobs` validators of
    ChatCompletionRequest and CompletionRequest, vllm/entrypoints/openai/chat_completion/
    protocol.py and completion/protocol.py) and the count of top logprobs asked for."""
    if kind == "chat":
        flag = body.get("logprobs")
        if flag is not None and not isinstance(flag, bool):
            raise ApiError(
                400,
                str([{"type": "bool_type", "loc": ("body", "logprobs"), "msg": "Input should be a valid boolean",
                      "input": flag}]),
                "Bad Request",
            )
        top = body.get("top_logprobs")
        if top is not None:
            if not _integer(top):
                raise request_validation_error(body, "`top_logprobs` must be an integer.", "top_logprobs", top)
            top = int(top)
            if top < 0 and top != -1:
                raise request_validation_error(
                    body, "`top_logprobs` must be a positive value or -1.", "top_logprobs", top
                )
            if (top == -1 or top > 0) and not flag:
                raise request_validation_error(
                    body, "when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs"
                )
        # ChatCompletionRequest.to_sampling_params: logprobs=self.top_logprobs if self.logprobs
        return (top or 0) if flag else None
    count = body.get("logprobs")
    if count is None:
        return None
    if not _integer(count):
        raise request_validation_error(body, "`logprobs` must be an integer.", "logprobs", count)
    if int(count) < 0:
        raise request_validation_error(body, "`logprobs` must be a positive value.", "logprobs", int(count))
    return int(count)


def _asks_logprobs(body: dict[str, Any]) -> bool:
    """Whether a chat or completions body asks for log probabilities in any form."""
    return bool(body.get("logprobs")) or bool(body.get("top_logprobs")) or bool(body.get("prompt_logprobs"))


def check_max_logprobs(state: ServerState, count: int | None) -> None:
    """SamplingParams._validate_logprobs (vllm/sampling_params.py; before that the V1 input
    processor): -1 means the whole vocabulary, and --max-logprobs (-1: the vocabulary)
    caps it. A VLLMValidationError, so the message carries "(parameter=..., value=...)"."""
    if count is None:
        return
    cap = state.vocab_size if state.max_logprobs == -1 else state.max_logprobs
    wanted = state.vocab_size if count == -1 else count
    if wanted > cap:
        raise ApiError(
            400,
            f"Requested sample logprobs of {wanted}, which is greater than max allowed: {cap} "
            f"(parameter=logprobs, value={wanted})",
            param="logprobs",
        )


PREFIX_CACHE_ENTRIES = 65536
# vLLM decodes a request asking for logprobs without speculation until about 0.14.0 (its
# is_spec_decode_unsupported named logprobs through 0.12.0: vllm-project/vllm#34497).
LOGPROBS_DRAFTED_SINCE = (0, 14, 0)
# vLLM reads `cache_salt` from 0.9.0 on (vllm-project/vllm#17045, merged 2025-05); an older
# one ignores the field as it ignores any it does not know, and its prefix cache is shared.
CACHE_SALT_SINCE = (0, 9, 0)
CACHE_SALT_ERROR = "Parameter 'cache_salt' must be a non-empty string if provided."


def cache_salt_of(state: ServerState, body: dict[str, Any]) -> str | None:
    """The request's prefix-cache salt, validated as its vLLM validates it (the request model's
    check_cache_salt_support: a string, not empty), and as TensorRT-LLM's OpenAI server does
    (the same check since NVIDIA/TensorRT-LLM#7106, merged 2025-09, before the 1.2 releases)."""
    salt = body.get("cache_salt")
    if salt is None:
        return None
    if state.flavour == VLLM and version_tuple(emulated_vllm_version()) < CACHE_SALT_SINCE:
        return None
    if not isinstance(salt, str) or not salt:
        raise request_validation_error(body, CACHE_SALT_ERROR, "cache_salt", salt)
    return salt


def prefix_cache_hit(state: ServerState, salt: str | None, rendered: str) -> bool:
    """Whether this prefill finds its prompt cached (seen before under the same salt); it is
    cached from now on."""
    key = hashlib.blake2b(f"{salt}\x00{rendered}".encode("utf-8", "surrogatepass"), digest_size=16).digest()
    with state.lock:
        hit = key in state.prefix_cache
        state.prefix_cache.pop(key, None)
        state.prefix_cache[key] = None
        while len(state.prefix_cache) > PREFIX_CACHE_ENTRIES:
            state.prefix_cache.pop(next(iter(state.prefix_cache)))
    return hit


# How long a request waits, before its answer is planned, for others sent with it to arrive.
BATCH_WINDOW_S = 0.05


def batched_now(state: ServerState) -> bool:
    """Whether another request shares this one's decode (batched_divergence only: it waits
    BATCH_WINDOW_S for requests sent together to arrive, so the first of a batch counts too)."""
    if not (state.faults.batched_divergence and state.speculative is not None):
        return False
    deadline = time.monotonic() + BATCH_WINDOW_S
    while True:
        with state.lock:
            if state.in_flight > 1:
                return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)


def apply_output_faults(state: ServerState, plan: AnswerPlan, request_number: int, *, batched: bool = False,
                        cache_hit: bool = False) -> None:
    """The output-divergence fault switches (faults.py; the model in logprobs.py). ``batched``:
    another request was in flight when this one arrived; ``cache_hit``: its prefill was cached."""
    faults = state.faults
    start = faults.divergence_after_tokens

    def flip_first_near_tie(why: str) -> None:
        position = plan.first_near_tie(start)
        if position is not None:
            plan.diverge(position, "second", why)

    if faults.output_divergence == "tie":
        flip_first_near_tie("tie")
    elif faults.output_divergence == "confident" or (
            faults.batched_divergence and batched and state.speculative is not None):
        position = plan.first_confident(start)
        if position is not None:
            plan.diverge(position, "far", "confident")
    if faults.cache_hit_flips and cache_hit:
        flip_first_near_tie("cache hit")
    if faults.unstable_outputs == UNSTABLE_TIE:
        if request_number % 2:
            flip_first_near_tie("unstable")
    elif faults.unstable_outputs and len(plan.tokens) > start:
        plan.diverge(start + request_number % (len(plan.tokens) - start), "second", "unstable")


def prepare_request(state: ServerState, kind: str, body: Any) -> PreparedRequest:
    """Validate a completions/chat body the way vLLM's OpenAI frontend does."""
    if not isinstance(body, dict):
        raise ApiError(400, "Request body must be a JSON object")
    # The request model's validators run first (FastAPI parses the body before the handler).
    logprobs = requested_logprobs(kind, body) if state.flavour == VLLM else None
    if state.flavour == TRTLLM and state.speculative is not None and _asks_logprobs(body):
        # TensorRT-LLM's speculative samplers support no log probabilities: its releases before
        # NVIDIA/TensorRT-LLM#18401 (2026-08) assert in the sampler and can leave the server hung
        # (#12546); from it, the request is refused at admission. Refused here, never served.
        raise ApiError(400, "Speculative decoding does not support the requested output options: "
                            "log probabilities", param="logprobs")
    salt = cache_salt_of(state, body)
    model_name = body.get("model") or state.served_model_names[0]
    if model_name not in state.served_model_names:
        raise ApiError(404, f"The model `{model_name}` does not exist.", "NotFoundError", "model")
    if kind == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise ApiError(400, "messages must be a non-empty list of message objects")
        rendered = render_chat_prompt(messages)
        prompt_tokens = count_tokens(rendered)
        workload_text = user_text(messages)
        requested = body.get("max_completion_tokens", body.get("max_tokens"))
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(p, int) for p in prompt):
            rendered = " ".join(f"<{p}>" for p in prompt)  # token ids: one token each
            prompt_tokens = len(prompt)
        elif isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            rendered = prompt[0]  # batched prompts: the emulator serves the first
            prompt_tokens = count_tokens(rendered)
        elif isinstance(prompt, str):
            rendered = prompt
            prompt_tokens = count_tokens(rendered)
        else:
            raise ApiError(400, "prompt must be a string, a list of strings or token ids")
        workload_text = rendered
        requested = body.get("max_tokens", 16)

    if prompt_tokens >= state.max_model_len:
        raise ApiError(
            400,
            f"This model's maximum context length is {state.max_model_len} "
            f"tokens. However, your request has {prompt_tokens} input tokens. "
            "Please reduce the length of the input messages.",
        )
    if requested is None:
        max_tokens = state.max_model_len - prompt_tokens
    elif isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
        raise ApiError(400, f"max_tokens must be at least 1, got {requested}.", param="max_tokens")
    else:
        max_tokens = requested
    if prompt_tokens + max_tokens > state.max_model_len:
        raise ApiError(
            400,
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This "
            f"model's maximum context length is {state.max_model_len} tokens and your "
            f"request has {prompt_tokens} input tokens ({max_tokens} > "
            f"{state.max_model_len} - {prompt_tokens}).",
            param="max_tokens",
        )

    check_max_logprobs(state, logprobs)
    if logprobs == -1:
        logprobs = state.vocab_size  # the whole vocabulary (the emulated one has ~400 tokens)
    defaults = state.generation_defaults
    min_p = _number(body, "min_p", defaults.get("min_p", 0.0)) or 0.0
    logit_bias = body.get("logit_bias")
    if state.flavour == VLLM and state.speculative is not None and (min_p > 1e-5 or logit_bias):
        raise ApiError(400, SPEC_SAMPLING_ERROR)
    temperature = _number(body, "temperature", defaults.get("temperature", 1.0))
    temperature = 1.0 if temperature is None else temperature
    stream = bool(body.get("stream", False))
    stream_options = body.get("stream_options")
    if stream_options is not None and not stream:
        raise ApiError(400, "Stream options can only be defined when `stream=True`.")
    # vLLM's StreamOptions defaults include_usage to True, so `{}` already enables it.
    include_usage = state.force_include_usage or (
        isinstance(stream_options, dict) and stream_options.get("include_usage", True) is not False
    )
    continuous = isinstance(stream_options, dict) and bool(stream_options.get("continuous_usage_stats", False))

    seed = body.get("seed")
    sampling_seed: int | None
    if temperature <= 1e-5:
        sampling_seed = None  # greedy: a pure function of the prompt
    elif isinstance(seed, int) and not isinstance(seed, bool):
        sampling_seed = seed
    else:
        sampling_seed = random.getrandbits(48)
    workload = detect_workload(workload_text)
    natural = natural_length(rendered, sampling_seed)
    ignore_eos = bool(body.get("ignore_eos", False))
    length = max_tokens if ignore_eos else min(max_tokens, natural)
    finish = "length" if ignore_eos or natural > max_tokens else "stop"
    code_like = workload == "code_edit"
    output = generate(rendered, length, code_like, sampling_seed)
    plan = AnswerPlan(state.model_root, rendered, sampling_seed, code_like, output)
    with state.lock:
        number = state.received_requests
        state.received_requests += 1
    apply_output_faults(state, plan, number, batched=batched_now(state),
                        cache_hit=prefix_cache_hit(state, salt, rendered))
    output = plan.tokens
    digest = hashlib.sha256(
        f"{state.engine_seed}\x00{sampling_seed}\x00{rendered}".encode("utf-8", "surrogatepass")
    ).digest()
    return PreparedRequest(
        kind=kind,
        acceptance_seed=int.from_bytes(digest[:8], "big"),
        model_name=model_name,
        prompt_tokens=prompt_tokens,
        output=output,
        finish_reason=finish,
        workload=workload,
        temperature=temperature,
        stream=stream,
        include_usage=include_usage,
        continuous_usage=continuous,
        max_tokens=max_tokens,
        plan=plan,
        logprobs=logprobs,
        drafting=not (logprobs is not None and (
            state.faults.logprobs_without_drafting or version_tuple(emulated_vllm_version()) < LOGPROBS_DRAFTED_SINCE)),
    )


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }


class EmulatorHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = server_header()
    sys_version = ""
    state: ServerState  # set on the subclass built by make_server

    # --- plumbing ----------------------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        pass  # access lines are written in uvicorn's format by _access_log

    def _access_log(self, status: int) -> None:
        phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
        client = f"{self.client_address[0]}:{self.client_address[1]}"
        self.state.log.uvicorn(f'{client} - "{self.command} {self.path} {self.request_version}" {status} {phrase}')

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.send_header("x-specfleet-emulator", "true")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self._access_log(status)

    def _json(self, status: int, payload: Any) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _read_body(self) -> bytes:
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _authorized(self) -> bool:
        keys = self.state.api_keys
        if not keys:
            return True
        header = self.headers.get("authorization", "")
        return header.startswith("Bearer ") and header[len("Bearer ") :] in keys

    def _route(self) -> str:
        return self.path.split("?", 1)[0]

    # --- GET ---------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        path = self._route()
        state = self.state
        if path.startswith("/v1/") and not self._authorized():
            self._json(401, {"error": "Unauthorized"})
            return
        if path == "/health":
            self._send(200, b"", "application/json")
        elif path == "/ping":
            self._send(200, b"", "application/json")
        elif path == "/load":
            self._json(200, {"server_load": state.engine.running_count + state.engine.waiting_count})
        elif path == "/version":
            version = emulated_trtllm_version() if state.flavour == TRTLLM else emulated_vllm_version()
            self._json(200, {"version": version})
        elif path == "/v1/models":
            self._json(200, self._trtllm_models() if state.flavour == TRTLLM else self._models())
        elif path == "/metrics" and state.flavour == TRTLLM:
            # Not Prometheus: the iteration stats queued since the last read (none unless
            # enable_iter_perf_stats), and no speculative-decoding counters.
            stats = state.iteration_stats.drain() if state.iteration_stats is not None else []
            self._json(200, stats)
        elif path == "/metrics":
            self._send(200, state.metrics.render().encode(), "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/specfleet/emulator":
            info = state.emulator_info
            if state.engine.power is not None:
                # Live: the power state the engine paces by now (it follows nvpmodel changes).
                info = {**info, "power": state.engine.power.info()}
            self._json(200, info)
        elif path in ("/v1/completions", "/v1/chat/completions"):
            self._json(405, {"detail": "Method Not Allowed"})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_HEAD(self) -> None:  # noqa: N802 - stdlib name
        self.do_GET()

    def _models(self) -> dict[str, Any]:
        state = self.state
        data = []
        for name in state.served_model_names:
            data.append(
                {
                    "id": name,
                    "object": "model",
                    "created": state.created,
                    "owned_by": "vllm",
                    "root": state.model_root,
                    "parent": None,
                    "max_model_len": state.max_model_len,
                    "permission": [
                        {
                            "id": f"modelperm-{uuid.uuid4().hex}",
                            "object": "model_permission",
                            "created": state.created,
                            "allow_create_engine": False,
                            "allow_sampling": True,
                            "allow_logprobs": True,
                            "allow_search_indices": False,
                            "allow_view": True,
                            "allow_fine_tuning": False,
                            "organization": "*",
                            "group": None,
                            "is_blocking": False,
                        }
                    ],
                }
            )
        return {"object": "list", "data": data}

    def _trtllm_models(self) -> dict[str, Any]:
        """TensorRT-LLM's ModelList: one ModelCard, owned by tensorrt_llm."""
        state = self.state
        cards = [
            {"id": name, "object": "model", "created": state.created, "owned_by": "tensorrt_llm"}
            for name in state.served_model_names
        ]
        return {"object": "list", "data": cards}

    # --- POST --------------------------------------------------------------------------

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        path = self._route()
        raw = self._read_body()
        if path.startswith("/v1/") and not self._authorized():
            self._json(401, {"error": "Unauthorized"})
            return
        if path == "/ping":
            self._send(200, b"", "application/json")
            return
        if path not in ("/v1/completions", "/v1/chat/completions"):
            if path in ("/health", "/metrics", "/version", "/v1/models", "/load"):
                self._json(405, {"detail": "Method Not Allowed"})  # FastAPI's answers
            else:
                self._json(404, {"detail": "Not Found"})
            return
        kind = "chat" if path.endswith("chat/completions") else "completion"
        # In flight from here until answered: requests sent together all count (the first one
        # too, once the others arrive: as real batching, it shares its steps with them).
        with self.state.lock:
            self.state.in_flight += 1
        try:
            self._generate(kind, raw)
        finally:
            with self.state.lock:
                self.state.in_flight -= 1

    def _generate(self, kind: str, raw: bytes) -> None:
        try:
            try:
                body = json.loads(raw or b"null")
            except ValueError as exc:
                raise ApiError(400, f"JSON decode error: {exc}") from exc
            prepared = prepare_request(self.state, kind, body)
        except ApiError as error:
            self._json(error.status, error.body())
            return
        request = GenerationRequest(
            request_id=("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex,
            prompt_tokens=prepared.prompt_tokens,
            output=prepared.output,
            final_finish_reason=prepared.finish_reason,
            workload=prepared.workload,
            temperature=prepared.temperature,
            rng=random.Random(prepared.acceptance_seed),
            drafting=prepared.drafting,
        )
        self.state.engine.submit(request)
        try:
            if prepared.stream:
                finished = self._stream(request, prepared)
            else:
                finished = self._collect(request, prepared)
        except (BrokenPipeError, ConnectionResetError):
            self.state.engine.abort(request)
            self.close_connection = True
            return
        if finished:
            self._count_completed()

    def _count_completed(self) -> None:
        state = self.state
        with state.lock:
            state.completed_requests += 1
            crash = state.crash_after_requests is not None and state.completed_requests >= state.crash_after_requests
        if crash:
            fatal = (
                "Executor worker returned error" if state.flavour == TRTLLM else "EngineCore encountered a fatal error."
            )
            state.log.error("core.py:735", fatal, "EngineCore_DP0")
            state.log.plain(
                f"{state.label} fault switch: crash_after_requests={state.crash_after_requests} reached, exiting hard"
            )
            os._exit(1)

    def _next_output(self, request: GenerationRequest) -> StepOutput:
        item = request.outbox.get()
        if item is ENGINE_DEAD:
            raise BrokenPipeError("engine dead")
        assert isinstance(item, StepOutput)
        return item

    def _collect(self, request: GenerationRequest, prepared: PreparedRequest) -> bool:
        pieces: list[str] = []
        finish: str | None = None
        while finish is None:
            output = self._next_output(request)
            pieces.extend(output.tokens)
            finish = output.finish_reason
        text = "".join(pieces)
        created = int(time.time())
        usage = _usage(prepared.prompt_tokens, len(pieces))
        logprobs = self._logprobs(prepared, 0, pieces, 0)
        if prepared.kind == "chat":
            choice = {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": text,
                    "refusal": None,
                    "annotations": None,
                    "audio": None,
                    "function_call": None,
                    "tool_calls": [],
                    "reasoning_content": None,
                },
                "logprobs": logprobs,
                "finish_reason": finish,
                "stop_reason": None,
            }
            payload = {
                "id": request.request_id,
                "object": "chat.completion",
                "created": created,
                "model": prepared.model_name,
                "choices": [choice],
                "service_tier": None,
                "system_fingerprint": None,
                "usage": usage,
                "prompt_logprobs": None,
                "kv_transfer_params": None,
            }
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": logprobs,
                "finish_reason": finish,
                "stop_reason": None,
                "prompt_logprobs": None,
            }
            payload = {
                "id": request.request_id,
                "object": "text_completion",
                "created": created,
                "model": prepared.model_name,
                "choices": [choice],
                "service_tier": None,
                "system_fingerprint": None,
                "usage": usage,
                "kv_transfer_params": None,
            }
        self._json(200, payload)
        return True

    @staticmethod
    def _logprobs(
        prepared: PreparedRequest, first: int, tokens: list[str], text_offset: int
    ) -> dict[str, Any] | None:
        """The `logprobs` of a choice holding `tokens` (the first at position `first`)."""
        if prepared.logprobs is None:
            return None
        if prepared.kind == "chat":
            return chat_logprobs(prepared.plan, first, tokens, prepared.logprobs)
        return completion_logprobs(prepared.plan, first, tokens, prepared.logprobs, text_offset)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _event(self, payload: Any) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        self._chunk(f"data: {text}\n\n".encode())

    def _stream(self, request: GenerationRequest, prepared: PreparedRequest) -> bool:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("x-specfleet-emulator", "true")
        self.end_headers()
        self._access_log(200)
        created = int(time.time())
        is_chat = prepared.kind == "chat"
        obj = "chat.completion.chunk" if is_chat else "text_completion"
        head = {"id": request.request_id, "object": obj, "created": created, "model": prepared.model_name}
        emitted = 0
        text_length = 0
        finish: str | None = None
        first = True
        while finish is None:
            output = self._next_output(request)
            finish = output.finish_reason
            logprobs = self._logprobs(prepared, emitted, output.tokens, text_length)
            emitted += len(output.tokens)
            text = "".join(output.tokens)
            text_length += len(text)
            if is_chat:
                if first:
                    role = {
                        **head,
                        "choices": [
                            {
                                "index": 0,
                                "delta": {"role": "assistant", "content": ""},
                                "logprobs": None,
                                "finish_reason": None,
                            }
                        ],
                    }
                    if prepared.continuous_usage:
                        role["usage"] = _usage(prepared.prompt_tokens, 0)
                    self._event(role)
                choice: dict[str, Any] = {
                    "index": 0,
                    "delta": {"content": text},
                    "logprobs": logprobs,
                    "finish_reason": finish,
                }
            else:
                choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}
            if finish is not None:
                choice["stop_reason"] = None
            chunk: dict[str, Any] = {**head, "choices": [choice]}
            if prepared.continuous_usage:
                chunk["usage"] = _usage(prepared.prompt_tokens, emitted)
            self._event(chunk)
            first = False
        if prepared.include_usage:
            self._event({**head, "choices": [], "usage": _usage(prepared.prompt_tokens, emitted)})
        self._event("[DONE]")
        self._chunk(b"")
        return True


class EmulatorHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def make_server(
    state: ServerState | None, host: str, port: int, server_version: str | None = None
) -> EmulatorHTTPServer:
    """Bind now, listen later (call `server_activate()` when the engine is ready).

    `state` may be attached later (the socket is bound before the engine exists);
    `server_version` replaces the `server` header (the trtllm-serve flavour's label).
    """
    attributes: dict[str, Any] = {"state": state}
    if server_version is not None:
        attributes["server_version"] = server_version
    handler = type("BoundEmulatorHandler", (EmulatorHandler,), attributes)
    server = EmulatorHTTPServer((host, port), handler, bind_and_activate=False)
    server.server_bind()
    return server


def route_lines() -> list[str]:
    return [f"Route: {path}, Methods: {methods}" for path, methods in ROUTES]


def emulator_label() -> dict[str, Any]:
    return {"emulator": True, "name": EMULATOR_NAME, "vllm_version_emulated": emulated_vllm_version()}
