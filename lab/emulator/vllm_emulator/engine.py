"""The emulated engine core: continuous batching paced by the performance model.

One thread runs engine steps like vLLM's scheduler loop: admit waiting requests (bounded
by --max-num-seqs and KV-cache capacity), prefill new prompts, decode (and, when
speculating, draft and verify) every running sequence, then sleep for the modelled step
duration times the time scale. Each step hands every sequence its new tokens as one
output, so with speculation one SSE chunk carries all tokens accepted in that step.
With dynamic speculative decoding (`num_speculative_tokens_per_batch_size`) the number of
requests in the step picks its draft length (EnginePerf.draft_length); a step with k = 0
drafts nothing and counts nothing in the spec-decode metrics.

Sleeping follows a deadline timeline (deadline += step) rather than sleeping the step
length after the bookkeeping, so Python overhead does not accumulate and the emulated
rate holds even at a 100x time scale-down.
"""

from __future__ import annotations

import hashlib
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .memory import kv_tokens_for
from .metrics import VllmMetrics
from .perfmodel import (
    EnginePerf,
    acceptance_rates,
    conditional_rates,
    ngram_match_rate,
    step_timing,
)
from .power import PowerMonitor


@dataclass
class StepOutput:
    tokens: list[str]
    finish_reason: str | None


ENGINE_DEAD = object()  # put into an outbox when the engine will never answer again


@dataclass
class GenerationRequest:
    request_id: str
    prompt_tokens: int
    output: list[str]
    final_finish_reason: str  # "stop" (emulated EOS) or "length" (max_tokens reached)
    workload: str
    temperature: float
    rng: random.Random
    outbox: queue.Queue[object] = field(default_factory=queue.Queue)
    arrival: float = field(default_factory=time.monotonic)
    noise_factor: float = 1.0
    emitted: int = 0
    first_token_at: float | None = None
    last_token_at: float | None = None
    aborted: bool = False
    done: bool = False
    # False: decoded without speculation (a logprobs request on an image that serves those
    # without drafting: faults.py `logprobs_without_drafting`).
    drafting: bool = True

    @property
    def context_tokens(self) -> int:
        return self.prompt_tokens + self.emitted

    @property
    def kv_reservation(self) -> int:
        return kv_tokens_for(self.prompt_tokens + len(self.output))


@dataclass(frozen=True)
class StepRecord:
    """What one engine step did, for engines that report per-iteration statistics."""

    iteration: int
    started: float  # time.monotonic() when the step was planned
    finished: float  # ... and when its outputs were handed out
    new_requests: int  # admitted this step (their prompts were prefilled)
    context_tokens: int
    generation_requests: int
    generation_tokens: int  # tokens the target verified for decoding sequences (1 + drafts)
    completed_requests: int
    active_requests: int  # running after the step
    queued_requests: int
    kv_tokens_used: int
    draft_tokens: int = 0  # draft length of the step (0: no speculation in it)
    modelled_s: float = 0.0  # the step's modelled duration before the time scale


@dataclass(frozen=True)
class NoiseModel:
    """Run-to-run spread: a fixed per-unit factor and a per-request factor, both seeded."""

    request_sigma: float = 0.0
    unit_factor: float = 1.0
    seed: int = 0

    @staticmethod
    def for_unit(unit_id: str, sigma: float) -> NoiseModel:
        seed = int.from_bytes(hashlib.sha256(unit_id.encode()).digest()[:8], "big")
        unit_rng = random.Random(seed)
        unit = min(1.25, max(0.8, unit_rng.gauss(1.0, sigma * 0.67))) if sigma > 0 else 1.0
        return NoiseModel(request_sigma=sigma, unit_factor=unit, seed=seed)

    def request_factor(self, index: int) -> float:
        if self.request_sigma <= 0:
            return 1.0
        rng = random.Random(self.seed * 1_000_003 + index)
        return min(1.5, max(0.7, rng.gauss(1.0, self.request_sigma)))


@dataclass
class IntervalStats:
    """Counts since the last periodic log line (vLLM resets them every interval)."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)


class Engine:
    def __init__(
        self,
        perf: EnginePerf,
        metrics: VllmMetrics,
        kv_tokens: int,
        max_num_seqs: int,
        time_scale: float,
        noise: NoiseModel,
        hang_after_tokens: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
        step_observer: Callable[[StepRecord], None] | None = None,
        power: PowerMonitor | None = None,
        loaded_draft_slowdown: float = 1.0,
        draft_acceptance: Callable[[str], Sequence[float] | None] = lambda workload: None,
    ) -> None:
        self.perf = perf
        # An emulated Jetson's nvpmodel mode and clock pinning (power.py); None: full speed.
        self.power = power
        self.metrics = metrics
        self.kv_tokens = kv_tokens
        self.max_num_seqs = max_num_seqs
        self.time_scale = time_scale
        self.noise = noise
        self.hang_after_tokens = hang_after_tokens
        # Fault switch (faults.py): a step drafting for more than one sequence takes this many times as long.
        self.loaded_draft_slowdown = loaded_draft_slowdown
        # Fault switch (faults.py): per workload, the acceptance a poorly matched head drafts with.
        self.draft_acceptance = draft_acceptance
        self._sleep = sleep
        self._step_observer = step_observer
        self._iteration = 0
        self._cond = threading.Condition()
        self._waiting: deque[GenerationRequest] = deque()
        self._running: list[GenerationRequest] = []
        self._request_counter = 0
        self._deadline = time.monotonic()
        self._acceptance_cache: dict[tuple[str, float], list[float]] = {}
        self.hung = False
        k = perf.num_speculative_tokens if perf.method else 0
        self.interval = IntervalStats(accepted_per_position=[0] * k)
        self._thread = threading.Thread(target=self._loop, name="EngineCore", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # --- requests ----------------------------------------------------------------------

    def submit(self, request: GenerationRequest) -> None:
        with self._cond:
            request.noise_factor = self.noise.request_factor(self._request_counter)
            self._request_counter += 1
            self._waiting.append(request)
            self._update_queue_gauges()
            self._cond.notify_all()

    def abort(self, request: GenerationRequest) -> None:
        with self._cond:
            request.aborted = True
            self._cond.notify_all()

    @property
    def running_count(self) -> int:
        return len(self._running)

    @property
    def waiting_count(self) -> int:
        return len(self._waiting)

    def kv_usage(self) -> float:
        used = sum(kv_tokens_for(r.context_tokens) for r in self._running)
        return min(1.0, used / self.kv_tokens) if self.kv_tokens else 0.0

    def take_interval(self) -> tuple[IntervalStats, int, int, float]:
        """Swap out the interval counters for the periodic log line."""
        with self._cond:
            stats = self.interval
            k = len(stats.accepted_per_position)
            self.interval = IntervalStats(accepted_per_position=[0] * k)
            return stats, len(self._running), len(self._waiting), self.kv_usage()

    def power_factor(self) -> float:
        """Step-time factor of the unit's power mode and clock pinning (1.0 at MAXN, pinned)."""
        return 1.0 if self.power is None else self.power.step_time_factor()

    # --- the loop ----------------------------------------------------------------------

    def _update_queue_gauges(self) -> None:
        base = self.metrics.base
        self.metrics.num_requests_running.set(len(self._running), **base)
        self.metrics.num_requests_waiting.set(len(self._waiting), **base)
        self.metrics.kv_cache_usage_perc.set(self.kv_usage(), **base)

    def _admit(self) -> list[GenerationRequest]:
        admitted: list[GenerationRequest] = []
        reserved = sum(r.kv_reservation for r in self._running)
        while self._waiting and len(self._running) < self.max_num_seqs:
            candidate = self._waiting[0]
            if candidate.aborted:
                self._waiting.popleft()
                self._finish(candidate, "abort", time.monotonic())
                continue
            if self._running and reserved + candidate.kv_reservation > self.kv_tokens:
                break  # wait for KV blocks to free up
            self._waiting.popleft()
            self._running.append(candidate)
            reserved += candidate.kv_reservation
            admitted.append(candidate)
        return admitted

    def _conditional(self, request: GenerationRequest) -> list[float]:
        key = (request.workload, request.temperature)
        if key not in self._acceptance_cache:
            assert self.perf.method is not None
            rates = acceptance_rates(
                self.perf.method, request.workload, self.perf.num_speculative_tokens, request.temperature,
                self.draft_acceptance(request.workload),
            )
            self._acceptance_cache[key] = conditional_rates(rates)
        return self._acceptance_cache[key]

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._running and not self._waiting:
                    self._cond.wait()
                    self._deadline = time.monotonic()  # idle: restart the timeline
                for request in [r for r in self._running if r.aborted]:
                    self._running.remove(request)
                    self._finish(request, "abort", time.monotonic())
                new = self._admit()
                decoding = [r for r in self._running if r not in new]
                self._update_queue_gauges()
            if not new and not decoding:
                continue
            step_started = time.monotonic()
            k = self.perf.draft_length(len(decoding) + len(new))
            plan = self._plan_step(decoding, k)
            duration = step_timing(
                self.perf,
                [r.context_tokens for r in decoding],
                [p[0] for p in plan],
                prefill_tokens=sum(r.prompt_tokens for r in new),
                new_sequences=len(new),
                draft_tokens=k,
            ).total_s
            factors = [r.noise_factor for r in decoding + new]
            duration *= self.noise.unit_factor * (sum(factors) / len(factors))
            duration *= self.power_factor()
            if k and sum(1 for proposing, *_ in plan if proposing) > 1:
                duration *= self.loaded_draft_slowdown
            self._deadline = max(self._deadline, time.monotonic() - 1.0) + duration * self.time_scale
            delay = self._deadline - time.monotonic()
            if delay > 0:
                self._sleep(delay)
            now = time.monotonic()
            with self._cond:
                deliveries = self._apply_step(new, decoding, plan, now, k)
                self._update_queue_gauges()
                record = None
                if self._step_observer is not None:
                    record = self._step_record(step_started, now, new, decoding, plan, deliveries, k, duration)
            for request, output in deliveries:
                request.outbox.put(output)
            if record is not None and self._step_observer is not None:
                self._step_observer(record)  # outside the lock: it may log or queue
            if self.hung:
                # Fault switch: the engine never steps again. Streams stay open and
                # silent, like a wedged GPU; /health keeps answering.
                threading.Event().wait()

    def _step_record(
        self,
        started: float,
        finished: float,
        new: list[GenerationRequest],
        decoding: list[GenerationRequest],
        plan: list[tuple[bool, int]],
        deliveries: list[tuple[GenerationRequest, object]],
        k: int,
        modelled_s: float,
    ) -> StepRecord:
        """Counts of the step just applied (call with the lock held)."""
        self._iteration += 1
        completed = sum(1 for _, output in deliveries if isinstance(output, StepOutput) and output.finish_reason)
        return StepRecord(
            iteration=self._iteration,
            started=started,
            finished=finished,
            new_requests=len(new),
            context_tokens=sum(r.prompt_tokens for r in new),
            generation_requests=len(decoding),
            generation_tokens=sum(1 + (k if proposed else 0) for proposed, _ in plan),
            completed_requests=completed,
            active_requests=len(self._running),
            queued_requests=len(self._waiting),
            kv_tokens_used=sum(kv_tokens_for(r.context_tokens) for r in self._running),
            draft_tokens=k,
            modelled_s=modelled_s,
        )

    def _plan_step(self, decoding: list[GenerationRequest], k: int) -> list[tuple[bool, int]]:
        """Per decoding sequence: (proposed drafts?, accepted draft tokens), k drafts each."""
        perf = self.perf
        if not perf.method or k == 0:
            return [(False, 0)] * len(decoding)
        plan: list[tuple[bool, int]] = []
        for request in decoding:
            if not request.drafting:
                plan.append((False, 0))
                continue
            if perf.method == "ngram":
                match = ngram_match_rate(request.workload, perf.prompt_lookup_min)
                if request.rng.random() >= match:
                    plan.append((False, 0))
                    continue
            accepted = 0
            for probability in self._conditional(request)[:k]:
                if request.rng.random() < probability:
                    accepted += 1
                else:
                    break
            plan.append((True, accepted))
        return plan

    def _apply_step(
        self,
        new: list[GenerationRequest],
        decoding: list[GenerationRequest],
        plan: list[tuple[bool, int]],
        now: float,
        k: int,
    ) -> list[tuple[GenerationRequest, object]]:
        deliveries: list[tuple[GenerationRequest, object]] = []
        base = self.metrics.base
        for request in new:
            self.metrics.prompt_tokens.inc(request.prompt_tokens, **base)
            self.interval.prompt_tokens += request.prompt_tokens
        work = [(r, (False, 0)) for r in new] + list(zip(decoding, plan, strict=True))
        for request, (proposed, accepted) in work:
            if request.aborted:
                continue
            if proposed:
                self.metrics.spec_num_drafts.inc(1, **base)
                self.metrics.spec_num_draft_tokens.inc(k, **base)
                self.metrics.spec_num_accepted_tokens.inc(accepted, **base)
                for position in range(accepted):
                    self.metrics.spec_accepted_per_pos.inc(1, **base, position=str(position))
                    self.interval.accepted_per_position[position] += 1
                self.interval.drafts += 1
                self.interval.draft_tokens += k
                self.interval.accepted += accepted
            count = min(1 + accepted, len(request.output) - request.emitted)
            if self.hang_after_tokens is not None:
                count = min(count, max(0, self.hang_after_tokens - request.emitted))
            tokens = request.output[request.emitted : request.emitted + count]
            request.emitted += count
            self.metrics.generation_tokens.inc(count, **base)
            self.interval.generation_tokens += count
            if request.first_token_at is None:
                request.first_token_at = now
                self.metrics.time_to_first_token.observe(now - request.arrival, **base)
            else:
                assert request.last_token_at is not None
                self.metrics.inter_token_latency.observe(now - request.last_token_at, **base)
            request.last_token_at = now
            finish = None
            if request.emitted >= len(request.output):
                finish = request.final_finish_reason
            elif self.hang_after_tokens is not None and request.emitted >= self.hang_after_tokens:
                self.hung = True
            if tokens or finish:
                deliveries.append((request, StepOutput(tokens, finish)))
            if finish:
                self._running.remove(request)
                self._finish(request, finish, now)
        return deliveries

    def _finish(self, request: GenerationRequest, reason: str, now: float) -> None:
        request.done = True
        base = self.metrics.base
        self.metrics.request_success.inc(1, **base, finished_reason=reason)
        if reason != "abort":
            self.metrics.e2e_request_latency.observe(now - request.arrival, **base)
