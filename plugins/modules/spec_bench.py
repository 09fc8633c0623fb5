#!/usr/bin/python
# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

DOCUMENTATION = r"""
---
module: spec_bench
short_description: Benchmark the unit's local vLLM endpoint (baseline or speculative)
description:
  - Measures an OpenAI-compatible vLLM endpoint from the unit itself with streaming
    requests at temperature 0, C(top_p=1.0) and a fixed seed, over fixed prompt sets
    (C(code_edit), high prompt/output overlap; C(chat), low overlap), at each concurrency.
  - Per workload, O(warmups) discarded passes over the prompts its runs will send (answers of
    at most 32 tokens, enough decode steps to warm every batch shape); then per
    concurrency N, O(repetitions) measured runs, each keeping N requests in flight over
    max(4N, O(requests)) requests (by default max(4N, the set's size)) that cycle the set (as
    C(vllm bench serve --max-concurrency) with many more prompts than N). Every prompt opens
    with a nonce line, the same on both servers of a comparison, so prefill is never served
    from the prefix cache of an earlier request. C(/metrics) is scraped before and after every
    measured run; acceptance comes from the C(vllm:spec_decode_*_total) counter deltas (null
    when the server has none).
  - Every request is kept (prompt id, tokens, TTFT, TPOT, E2E, chunks, a digest of its text),
    so two servers can be compared prompt by prompt. A request whose stream arrived in bursts
    (most of its time in its two longest gaps, over 16 chunks or more; chunks held back and
    delivered at once, not the engine's steps) makes its run be measured again, up to twice;
    bursty requests that remain are left out of every figure and counted.
  - The output check then sends the first O(output_check) prompts of each workload once more
    at concurrency 1, with the first concurrency-1 run's nonces, asking for each token's
    logprob and O(top_logprobs) alternatives, twice each (the repeat says whether the server
    answers the same request the same way), reading C(/metrics) around each answer (whether
    the server drafted while answering); then all of them at once at the highest concurrency
    (the answers of a batch). With O(cache_salt) each carries its own prefix-cache salt, so
    no answer is served from a prefill another request filled. C(bench.outputs) keeps per
    prompt the tokens and each token's lead over its best alternative, for a token-level
    comparison of two servers.
  - TTFT is the first token chunk (any chunk with a choice, even with empty text, as the
    detokenizer may hold a token's text back), ITL the gaps between token chunks, E2E the
    last token chunk, TPOT (E2E - TTFT) / (tokens - 1) with tokens from the final usage
    chunk (as C(vllm bench serve)); throughput is output tokens / run wall time.
  - Never sends C(min_p) or C(logit_bias) (a speculative vLLM rejects them).
  - A server that dies, stalls or errors mid-run ends the benchmark with C(bench.ok=false)
    and C(bench.failure) set; the module still returns normally so the playbook decides.
    Only an endpoint that does not answer at the start (or lacks the model) fails the task.
version_added: "0.1.0"
author: specfleet contributors (@specfleet)
options:
  url:
    description: Base URL of the vLLM server.
    type: str
    default: http://127.0.0.1:8000
  model:
    description: Served model name; default the first entry of C(/v1/models).
    type: str
  api_key:
    description: Bearer token for C(/v1/*) (vLLM C(--api-key)).
    type: str
  workloads:
    description: Prompt sets to run, in order.
    type: list
    elements: str
    choices: [code_edit, chat]
    default: [code_edit, chat]
  concurrency:
    description: Concurrency levels (requests in flight), in order.
    type: list
    elements: int
    default: [1, 8]
  warmups:
    description: Discarded passes over the prompts each workload's measured runs will send, before them.
    type: int
    default: 1
  repetitions:
    description:
      - Measured runs per workload and concurrency. A comparison repeats whole blocks instead
        (baseline, speculative, baseline, ... in the rollout), so one run per block is the default.
    type: int
    default: 1
  requests:
    description:
      - Requests per measured run, never fewer than 4 x the concurrency (so the concurrency is held);
        0 sends max(4 x concurrency, the prompt set's size).
    type: int
    default: 0
  output_check:
    description: Prompts per workload sent once more with logprobs for the output check; 0 skips it.
    type: int
    default: 8
  nonce_salt:
    description:
      - Enters every request's nonce, so a server that serves several benchmarks (the rollout's
        baseline and candidate side by side, each measured in several blocks) never meets a prompt
        its prefix cache has seen in an earlier one. The same salt gives the same requests.
    type: str
    default: ""
  top_logprobs:
    description: Alternatives per token the output check asks for (the lead over the best one tells a tie).
    type: int
    default: 2
  cache_salt:
    description:
      - Give every output-check request its own C(cache_salt) (vLLM's prefix-cache salt, from
        0.9.0), so a repeat is not served from the prefill of the answer it repeats. False for a
        server that refuses the field (an OpenAI-compatible server that forbids fields it does
        not know).
    type: bool
    default: true
  max_tokens:
    description:
      - C(max_tokens) of every request. 128 by default, the output length Jetson AI Lab's benchmark
        table measures with; each request's TPOT is then the mean of over 100 decode steps.
    type: int
    default: 128
  seed:
    description: Request C(seed) (the same on both sides of a comparison).
    type: int
    default: 42
  request_timeout:
    description: Seconds one request may take from connect to the end of its stream.
    type: float
    default: 300
  deadline:
    description: Seconds the whole benchmark may take; when reached it stops with C(failure.class=deadline).
    type: float
    default: 3600
  label:
    description: What this measurement is, e.g. C(baseline) or C(speculative); copied to the result.
    type: str
    default: ""
  endpoint_kind:
    description: C(chat) uses C(/v1/chat/completions) (the chat template applies), C(completion) C(/v1/completions).
    type: str
    choices: [chat, completion]
    default: chat
  context:
    description:
      - The context Alauda AI's guide "Speculative Decoding for vLLM Inference Services" asks
        every result to carry. The module fills C(request_parameters) and C(workload) itself;
        C(hardware), C(model) and C(runtime) (and any other key) come from here, and the served
        model name and the server's C(/version) are added to C(model) and C(runtime) when absent.
    type: dict
    default: {}
extends_documentation_fragment:
  - specfleet.fleet.attributes
attributes:
  check_mode:
    support: full
    details: In check mode only C(/health) and C(/v1/models) are probed; no benchmark runs.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: Read-only; it loads the server but changes nothing (C(changed) is always false).
notes:
  - Run it on the unit against its local endpoint so network jitter stays out of the figures.
  - Figures are only comparable between runs with the same prompts, C(max_tokens), seed and
    concurrency; C(bench.context) records them.
"""

EXAMPLES = r"""
- name: Measure the baseline server
  specfleet.fleet.spec_bench:
    label: baseline
    context:
      hardware: "{{ ansible_facts.specfleet_unit }}"
      model: {name: "{{ specfleet_model }}"}
      runtime: {image: "{{ specfleet_serving_image }}", args: "{{ specfleet_serving_args }}"}
  register: specfleet_baseline_bench

- name: Quick check of one workload at concurrency 1
  specfleet.fleet.spec_bench:
    url: http://127.0.0.1:8000
    workloads: [code_edit]
    concurrency: [1]
    warmups: 1
    repetitions: 2
    deadline: 600
    label: speculative
  register: specfleet_candidate_bench

- name: Stop here when the benchmark could not finish
  ansible.builtin.fail:
    msg: "{{ specfleet_candidate_bench.bench.failure.message }}"
  when: not specfleet_candidate_bench.bench.ok
"""

RETURN = r"""
bench:
  description: The measurement; null in check mode.
  returned: always
  type: dict
  contains:
    label: {description: The O(label) option., type: str, sample: speculative}
    model: {description: Served model name measured., type: str}
    endpoint: {description: Endpoint measured., type: str, sample: "http://127.0.0.1:8000"}
    ok: {description: Every request of every run succeeded., type: bool}
    failure:
      description: Why the benchmark stopped (null when ok).
      type: dict
      contains:
        class:
          description: >-
            server_died, stalled, deadline, http_error, stream_error, connection_error,
            timeout or protocol_error.
          type: str
        message: {description: "What happened, where (workload, concurrency, run).", type: str}
    results:
      description: >-
        Per workload, per concurrency key (C(c1), C(c8)): C(runs) (per run throughput_tok_s,
        tpot_p50_ms, wall_s, output_tokens, C(requests) (per request prompt, tokens, ttft_ms,
        tpot_ms, e2e_ms, chunks, text digest, and bursty or failed when so), failed_requests,
        bursty_requests, spec_decode counts), C(ttft_ms)/C(tpot_ms)/C(itl_ms)/C(e2e_ms) each
        {p50, p90, mean}, C(throughput_tok_s) {median, runs, spread=(max-min)/median},
        C(acceptance) {rate, mean_length, per_position, drafts, draft_tokens, accepted} or null,
        C(output_tokens), C(requests), C(failed_requests), C(bursts) {remeasured_runs,
        bursty_requests_left_out}.
      type: dict
      sample:
        code_edit:
          c1:
            throughput_tok_s: {median: 30.2, runs: [30.1, 30.2, 30.5], spread: 0.013}
            tpot_ms: {p50: 30.6, p90: 35.3, mean: 30.7}
            acceptance: {rate: 0.357, mean_length: 2.78, per_position: [0.5, 0.42, 0.35, 0.29, 0.23],
                         drafts: 744, draft_tokens: 3720, accepted: 1328}
    outputs:
      description: >-
        The output check: per workload, per prompt id, C(text) (digest of the answer),
        C(tokens) (the generated tokens) and C(margins) (per token, its logprob minus the best
        alternative's; null where the server sent none), C(drafts) (speculative drafts the
        server counted while answering; null without counters) and C(repeat) (the same request
        answered again, the same fields).
      type: dict
    outputs_batched:
      description: >-
        The output check at the highest concurrency: per workload C(concurrency), C(drafts) and
        C(answers) (per prompt id: C(text), C(tokens), C(margins)).
      type: dict
    output_check:
      description: How the output check repeated its requests (C(repeats)); null without a check.
      type: dict
    context:
      description: The five context fields (hardware, model, runtime, request_parameters, workload).
      type: dict
    duration_s: {description: Seconds the benchmark took., type: float}
probe:
  description: What the start-up probe saw.
  returned: always
  type: dict
  contains:
    health: {description: HTTP status of C(/health)., type: int, sample: 200}
    models: {description: Model ids from C(/v1/models)., type: list, elements: str}
    version: {description: "C(/version) of the server, if it answered.", type: str}
"""

import json
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specfleet.fleet.plugins.module_utils.bench_http import (
    ClientError,
    Endpoint,
    error_message,
    http_get,
)
from ansible_collections.specfleet.fleet.plugins.module_utils.spec_bench_client import run_benchmark
from ansible_collections.specfleet.fleet.plugins.module_utils.spec_bench_prompts import (
    PROMPT_SET_VERSION,
    WORKLOAD_DESCRIPTIONS,
    WORKLOADS,
    prompt_ids,
    prompt_set_digest,
    prompts,
)

CONTEXT_FIELDS = ("hardware", "model", "runtime", "request_parameters", "workload")


def probe(endpoint: Endpoint, timeout: float) -> tuple[dict, str | None]:
    """(probe facts, error message or None) from /health, /v1/models and /version."""
    facts: dict = {"health": None, "models": [], "version": None}
    try:
        status, _ = http_get(endpoint, "/health", timeout)
    except ClientError as exc:
        return facts, f"vLLM endpoint {endpoint} is unreachable: {exc.message}"
    facts["health"] = status
    if status != 200:
        return facts, f"vLLM endpoint {endpoint} is not healthy: /health answered HTTP {status}"
    try:
        status, body = http_get(endpoint, "/v1/models", timeout)
    except ClientError as exc:
        return facts, f"vLLM endpoint {endpoint}: /v1/models did not answer: {exc.message}"
    if status != 200:
        return facts, f"vLLM endpoint {endpoint}: /v1/models: {error_message(status, body)}"
    try:
        facts["models"] = [entry["id"] for entry in json.loads(body)["data"]]
    except (ValueError, KeyError, TypeError):
        return facts, f"vLLM endpoint {endpoint}: /v1/models answered something that is not a model list"
    try:
        status, body = http_get(endpoint, "/version", timeout)
        if status == 200:
            facts["version"] = json.loads(body).get("version")
    except (ClientError, ValueError, AttributeError):
        pass
    return facts, None


def build_context(params: dict, model: str, version: str | None, endpoint: Endpoint) -> dict:
    """The five context fields: request parameters and workload from the module, the rest
    from the `context` option (with the served model and server version added if absent)."""
    given = dict(params["context"] or {})
    context = {key: value for key, value in given.items() if key not in ("request_parameters", "workload")}
    model_field = given.get("model")
    if isinstance(model_field, dict):
        context["model"] = {"served_model_name": model, **model_field}
    else:
        context["model"] = {"served_model_name": model, **({"name": model_field} if model_field else {})}
    runtime = given.get("runtime")
    runtime = dict(runtime) if isinstance(runtime, dict) else ({"description": runtime} if runtime else {})
    runtime.setdefault("server_version", version)  # vLLM or TensorRT-LLM
    runtime.setdefault("endpoint", str(endpoint))
    context["runtime"] = runtime
    context.setdefault("hardware", None)
    context["request_parameters"] = {
        "endpoint": "/v1/chat/completions" if params["endpoint_kind"] == "chat" else "/v1/completions",
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
        "top_p": 1.0,
        "seed": params["seed"],
        "max_tokens": params["max_tokens"],
        "min_p": "never sent",
        "logit_bias": "never sent",
    }
    context["workload"] = {
        "names": list(params["workloads"]),
        "prompt_set_version": PROMPT_SET_VERSION,
        "prompts": {name: len(prompts(name)) for name in params["workloads"]},
        "prompt_digests": {name: prompt_set_digest(name) for name in params["workloads"]},
        "descriptions": {name: WORKLOAD_DESCRIPTIONS[name] for name in params["workloads"]},
        "concurrency": list(params["concurrency"]),
        "warmups": params["warmups"],
        "repetitions": params["repetitions"],
        "requests": params["requests"] or "max(4 x concurrency, prompts)",
        "warmup_round": "every prompt the runs send, once, discarded",
        "prefix": "a nonce line opens every prompt (uncached prefill)",
        "output_check": params["output_check"],
    }
    return {key: context.get(key) for key in CONTEXT_FIELDS} | {
        key: value for key, value in context.items() if key not in CONTEXT_FIELDS
    }


def validate(params: dict) -> list[str]:
    problems = []
    if not params["workloads"]:
        problems.append("workloads: must name at least one of " + ", ".join(WORKLOADS))
    if len(set(params["workloads"])) != len(params["workloads"]):
        problems.append(f"workloads: lists a workload twice: {params['workloads']}")
    if not params["concurrency"] or any(level < 1 for level in params["concurrency"]):
        problems.append(f"concurrency: must be a non-empty list of integers >= 1, got {params['concurrency']}")
    if params["warmups"] < 0:
        problems.append(f"warmups: must be >= 0, got {params['warmups']}")
    if params["repetitions"] < 1:
        problems.append(f"repetitions: must be >= 1, got {params['repetitions']}")
    if params["requests"] < 0 or params["output_check"] < 0 or params["top_logprobs"] < 0:
        problems.append("requests, output_check and top_logprobs: must be >= 0")
    if params["max_tokens"] < 2:
        problems.append(f"max_tokens: must be >= 2 (TPOT needs two tokens), got {params['max_tokens']}")
    if params["request_timeout"] <= 0 or params["deadline"] <= 0:
        problems.append("request_timeout and deadline: must be positive")
    return problems


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "default": "http://127.0.0.1:8000"},
            "model": {"type": "str"},
            "api_key": {"type": "str", "no_log": True},
            "workloads": {"type": "list", "elements": "str", "choices": list(WORKLOADS), "default": list(WORKLOADS)},
            "concurrency": {"type": "list", "elements": "int", "default": [1, 8]},
            "warmups": {"type": "int", "default": 1},
            "repetitions": {"type": "int", "default": 1},
            "requests": {"type": "int", "default": 0},
            "output_check": {"type": "int", "default": 8},
            "nonce_salt": {"type": "str", "default": ""},
            "top_logprobs": {"type": "int", "default": 2},
            "cache_salt": {"type": "bool", "default": True},
            # A token count, not a token: said outright so it is logged (validate-modules asks).
            "max_tokens": {"type": "int", "default": 128, "no_log": False},
            "seed": {"type": "int", "default": 42},
            "request_timeout": {"type": "float", "default": 300.0},
            "deadline": {"type": "float", "default": 3600.0},
            "label": {"type": "str", "default": ""},
            "endpoint_kind": {"type": "str", "choices": ["chat", "completion"], "default": "chat"},
            "context": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    params = module.params
    problems = validate(params)
    if problems:
        module.fail_json(msg="spec_bench: " + "; ".join(problems))
    try:
        endpoint = Endpoint.parse(params["url"], params["api_key"])
    except ValueError as exc:
        module.fail_json(msg=f"spec_bench: url: {exc}")

    started = time.monotonic()
    facts, error = probe(endpoint, min(10.0, params["request_timeout"]))
    if error:
        module.fail_json(msg=f"spec_bench: {error}", probe=facts, bench=None)
    model = params["model"] or (facts["models"][0] if facts["models"] else None)
    if not model:
        module.fail_json(msg=f"spec_bench: {endpoint} serves no model (/v1/models is empty)", probe=facts, bench=None)
    if params["model"] and params["model"] not in facts["models"]:
        module.fail_json(
            msg=f"spec_bench: {endpoint} does not serve {params['model']!r} (it serves: {', '.join(facts['models'])})",
            probe=facts,
            bench=None,
        )
    if module.check_mode:
        module.exit_json(changed=False, probe=facts, bench=None)

    bench = run_benchmark(
        endpoint,
        model,
        {name: list(zip(prompt_ids(name), prompts(name), strict=True)) for name in params["workloads"]},
        list(params["concurrency"]),
        warmups=params["warmups"],
        repetitions=params["repetitions"],
        requests=params["requests"],
        output_check=params["output_check"],
        nonce_salt=params["nonce_salt"],
        top_logprobs=params["top_logprobs"],
        cache_salt=params["cache_salt"],
        max_tokens=params["max_tokens"],
        seed=params["seed"],
        request_timeout=params["request_timeout"],
        deadline_s=max(0.1, params["deadline"] - (time.monotonic() - started)),
        kind=params["endpoint_kind"],
    )
    bench["label"] = params["label"]
    bench["context"] = build_context(params, model, facts["version"], endpoint)
    module.exit_json(changed=False, probe=facts, bench=bench)


if __name__ == "__main__":
    main()
