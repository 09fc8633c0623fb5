# Copyright: specfleet contributors
# SPDX-License-Identifier: Apache-2.0
"""The spec_bench module's procedure: warm-up, measured runs in their order, the output checks,
the failures it classifies, and the result it returns (each part in its own room: bench_http,
bench_stream, spec_metrics, bench_figures).

Unit-side code, stdlib only (Python 3.10+), shipped by Ansible with the spec_bench module;
the controller and the tests import the same file by its collection name.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Any

from ansible_collections.specfleet.fleet.plugins.module_utils.bench_figures import (
    aggregate,
    cell_key,
    text_digest,
)
from ansible_collections.specfleet.fleet.plugins.module_utils.bench_http import (
    CHAT_PATH,
    COMPLETIONS_PATH,
    CONNECTION_ERROR,
    DEADLINE,
    NOT_SENT,
    TIMEOUT,
    ClientError,
    Endpoint,
    build_request_body,
    http_get,
)
from ansible_collections.specfleet.fleet.plugins.module_utils.bench_stream import (
    BatchResult,
    RequestResult,
    run_batch,
)
from ansible_collections.specfleet.fleet.plugins.module_utils.spec_metrics import (
    counter_delta,
    scrape_spec_counters,
)

SERVER_DIED = "server_died"  # requests failed and /health no longer answers 200


STALLED = "stalled"  # requests time out while /health still answers (a wedged engine)


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
