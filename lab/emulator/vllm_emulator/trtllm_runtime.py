"""TensorRT-LLM's memory rule and iteration statistics, as pure functions.

Memory (PyTorch backend; specfleet/plan_trtllm.py `memory_problem` plans with the same rule):
the executor creates its components in order, each measured against the memory still free:
the target model's weights, the draft model's weights (EAGLE-3 head or draft model), then
the KV cache, which gets `free_gpu_memory_fraction` of the memory free after the weights.
There is no up-front budget check as in vLLM: a component that does not fit fails with torch's
CUDA OOM, which TensorRT-LLM re-raises as "Executor creation failed due to insufficient GPU
memory." naming the component (py_executor_creator.py `_ExecutorMemoryMonitor`).

Iteration statistics: with `enable_iter_perf_stats: true`, each executor iteration leaves one
IterationStats record in a bounded queue (`max_stats_len`, default 1000) that `/metrics` drains
("removed once retrieved"). The emulator fills the fields it can stand behind and leaves out
speculative-decoding counts: acceptance is not something `trtllm-serve` reports here.
"""

from __future__ import annotations

import datetime
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from .engine import StepRecord
from .gpu import GpuSpec
from .memory import GIB, NON_TORCH_GIB, free_memory_gib, weights_oom_message

TOKENS_PER_BLOCK = 32  # KvCacheConfig.tokens_per_block default

MODEL = "Model"
DRAFT_MODEL = "Draft model for speculative decoding"
KV_CACHE = "KV cache"
# What TensorRT-LLM suggests per component when it runs out.
TUNING = {
    MODEL: "reduce max_num_tokens and/or shard the model weights across GPUs by enabling pipeline and/or tensor "
    "parallelism",
    DRAFT_MODEL: "reduce max_num_tokens and/or shard the model weights across GPUs by enabling pipeline and/or tensor "
    "parallelism",
    KV_CACHE: "reduce free_gpu_memory_fraction",
}


@dataclass(frozen=True)
class TrtllmMemoryPlan:
    total_gib: float
    free_at_start_gib: float  # what the process finds free (others and the OS already hold the rest)
    target_weights_gib: float
    draft_weights_gib: float
    free_after_weights_gib: float
    free_gpu_memory_fraction: float
    kv_gib: float
    kv_bytes_per_token: int
    kv_tokens: int
    failed_component: str | None = None  # MODEL | DRAFT_MODEL | KV_CACHE

    @property
    def kv_blocks(self) -> int:
        return self.kv_tokens // TOKENS_PER_BLOCK

    @property
    def used_gib(self) -> float:
        """GPU memory the process holds once started: context, weights, KV cache."""
        return NON_TORCH_GIB + self.target_weights_gib + self.draft_weights_gib + self.kv_gib


def plan_trtllm_memory(
    gpu: GpuSpec, target_weights_gib: float, draft_weights_gib: float, fraction: float, kv_bytes_per_token: int
) -> TrtllmMemoryPlan:
    """TensorRT-LLM's rule: weights (target, then draft) first; the KV cache gets ``fraction``
    of what is still free. The CUDA context is held before anything loads."""
    free = free_memory_gib(gpu)
    usable = free - NON_TORCH_GIB
    failed: str | None = None
    if target_weights_gib > usable:
        failed = MODEL
    elif target_weights_gib + draft_weights_gib > usable:
        failed = DRAFT_MODEL
    free_after = max(0.0, usable - target_weights_gib - draft_weights_gib)
    kv_gib = fraction * free_after if failed is None else 0.0
    kv_tokens = int(kv_gib * GIB / kv_bytes_per_token) // TOKENS_PER_BLOCK * TOKENS_PER_BLOCK
    if failed is None and kv_tokens < TOKENS_PER_BLOCK:
        failed = KV_CACHE  # not one block fits (fraction 0, or nothing left after the weights)
    return TrtllmMemoryPlan(
        total_gib=gpu.total_gib,
        free_at_start_gib=free,
        target_weights_gib=target_weights_gib,
        draft_weights_gib=draft_weights_gib,
        free_after_weights_gib=free_after,
        free_gpu_memory_fraction=fraction,
        kv_gib=kv_tokens * kv_bytes_per_token / GIB,
        kv_bytes_per_token=kv_bytes_per_token,
        kv_tokens=kv_tokens,
        failed_component=failed,
    )


@dataclass(frozen=True)
class ExecutorOom:
    """How an executor-creation OOM reads: torch's error, then TensorRT-LLM's explanation."""

    torch_error: str
    explanation: str


def executor_oom(plan: TrtllmMemoryPlan) -> ExecutorOom:
    """The failure of ``plan.failed_component`` (None when nothing failed is an error)."""
    component = plan.failed_component
    assert component is not None
    free_before = plan.free_at_start_gib - NON_TORCH_GIB
    created: list[str] = []
    if component == MODEL:
        torch_error = weights_oom_message(plan.total_gib, free_before, plan.target_weights_gib)
    elif component == DRAFT_MODEL:
        after_target = free_before - plan.target_weights_gib
        created.append(f"{MODEL}: {free_before:.2f} / {after_target:.2f}")
        free_before = after_target
        torch_error = weights_oom_message(plan.total_gib, free_before, plan.draft_weights_gib)
    else:
        after_target = free_before - plan.target_weights_gib
        created.append(f"{MODEL}: {free_before:.2f} / {after_target:.2f}")
        if plan.draft_weights_gib:
            created.append(f"{DRAFT_MODEL}: {after_target:.2f} / {plan.free_after_weights_gib:.2f}")
        free_before = plan.free_after_weights_gib
        # The KV pool is sized from the fraction; what it may take cannot hold one block.
        block_mib = plan.kv_bytes_per_token * TOKENS_PER_BLOCK / 2**20
        budget_mib = plan.free_gpu_memory_fraction * plan.free_after_weights_gib * 1024
        torch_error = (
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {block_mib:.2f} MiB. GPU 0 has a total "
            f"capacity of {plan.total_gib:.2f} GiB of which {budget_mib:.2f} MiB is free."
        )
    lines = [
        "Executor creation failed due to insufficient GPU memory.",
        "",
        f"The following component could not be created: {component}",
        f"Total GPU memory (GiB): {plan.total_gib:.2f}",
        f"Free GPU memory before component creation attempt (GiB): {free_before:.2f}",
        "",
        "Previously created components and free GPU memory before/after creation (GiB):",
        *created,
        "",
        "Please refer to the TensorRT LLM documentation for information on how to control the memory usage "
        "through TensorRT LLM configuration options. Possible options include:",
        f"  {component}: {TUNING[component]}",
    ]
    return ExecutorOom(torch_error=torch_error, explanation="\n".join(lines))


# --- iteration statistics -------------------------------------------------------------------


def iteration_stats(
    step: StepRecord,
    plan: TrtllmMemoryPlan,
    max_num_active: int,
    wall: datetime.datetime,
    queue_latency_ms: float = 0.0,
) -> dict[str, Any]:
    """One IterationStats record as `/metrics` serialises it (camelCase JSON keys).

    Durations are wall-clock, like everything else the emulator serves (see the time scale).
    CPU and pinned memory are 0: the PyTorch backend does not report them.
    """
    used_blocks = -(-step.kv_tokens_used // TOKENS_PER_BLOCK)
    return {
        "cpuMemUsage": 0,
        "gpuMemUsage": int(plan.used_gib * GIB),
        "inflightBatchingStats": {
            "microBatchId": 0,
            "numContextRequests": step.new_requests,
            "numCtxTokens": step.context_tokens,
            "numGenRequests": step.generation_requests,
            "numPausedRequests": 0,
            "numScheduledRequests": step.new_requests + step.generation_requests,
        },
        "iter": step.iteration,
        "iterLatencyMS": (step.finished - step.started) * 1000.0,
        "kvCacheStats": {
            "allocNewBlocks": 0,
            "allocTotalBlocks": used_blocks,
            "cacheHitRate": 0.0,
            "freeNumBlocks": max(0, plan.kv_blocks - used_blocks),
            "maxNumBlocks": plan.kv_blocks,
            "missedBlocks": 0,
            "reusedBlocks": 0,
            "tokensPerBlock": TOKENS_PER_BLOCK,
            "usedNumBlocks": used_blocks,
        },
        "maxNumActiveRequests": max_num_active,
        "newActiveRequestsQueueLatencyMS": queue_latency_ms,
        "numActiveRequests": step.active_requests,
        "numCompletedRequests": step.completed_requests,
        "numNewActiveRequests": step.new_requests,
        "numQueuedRequests": step.queued_requests,
        "pinnedMemUsage": 0,
        "staticBatchingStats": {},
        "timestamp": wall.strftime("%m-%d-%Y %H:%M:%S.%f"),
    }


class IterationStatsQueue:
    """The executor's stats queue: bounded, drained by each `/metrics` read."""

    def __init__(self, plan: TrtllmMemoryPlan, max_num_active: int, max_len: int) -> None:
        self._plan = plan
        self._max_num_active = max_num_active
        self._records: deque[dict[str, Any]] = deque(maxlen=max(1, max_len))
        self._lock = threading.Lock()

    def record(self, step: StepRecord) -> None:
        entry = iteration_stats(step, self._plan, self._max_num_active, datetime.datetime.now())
        with self._lock:
            self._records.append(entry)

    def drain(self) -> list[dict[str, Any]]:
        with self._lock:
            records = list(self._records)
            self._records.clear()
        return records


def iteration_log_line(step: StepRecord, max_num_active: int) -> str:
    """`print_iter_log: true`: one short line per executor iteration."""
    return (
        f"iter = {step.iteration}, global_rank = 0, rank = 0, "
        f"currank_total_requests = {step.active_requests}/{max_num_active}, "
        f"host_step_time = {(step.finished - step.started) * 1000.0:.3f}ms, "
        f"num_scheduled_requests: {step.new_requests + step.generation_requests}, "
        f"states = {{'num_ctx_requests': {step.new_requests}, 'num_ctx_tokens': {step.context_tokens}, "
        f"'num_generation_tokens': {step.generation_tokens}}}"
    )
