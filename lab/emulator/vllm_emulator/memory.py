"""vLLM's memory budget on a unified-memory (UMA) Jetson, as pure functions.

vLLM requests `gpu_memory_utilization x total` for itself and, on Orin/Thor/Spark,
measures "free" as Linux MemAvailable (total minus what other processes hold minus the OS)
minus the page cache, which on unified memory counts as used (the lab's EMULATED page
cache, pagecache.py; 0 without its state).
Target weights, draft weights, the activation peak, CUDA-graph memory and the KV cache
(target and draft) all come out of that single budget. The checks run in vLLM's order:
startup free-memory check, weight loading (physical OOM), KV sizing.
"""

from __future__ import annotations

from dataclasses import dataclass

from .gpu import GpuSpec
from .hub import ModelInfo
from .specconfig import ResolvedSpeculation

GIB = 1024**3
BLOCK_SIZE = 16
# CUDA context, cuBLAS workspaces, NCCL buffers: memory vLLM sees as "non-torch".
NON_TORCH_GIB = 0.45
CUDA_GRAPH_GIB = 0.35
CUDA_GRAPH_SPEC_EXTRA_GIB = 0.12


@dataclass(frozen=True)
class MemoryPlan:
    total_gib: float
    free_gib: float
    requested_gib: float
    weights_gib: float
    activation_gib: float
    graph_gib: float
    kv_gib: float
    kv_bytes_per_token: int
    kv_tokens: int
    max_model_len: int
    max_concurrency: float
    failure: str | None = None  # the exception line when startup must fail
    failure_kind: str | None = None  # free_memory | weights_oom | no_kv | kv_too_small
    page_cache_gib: float = 0.0  # the emulated page cache counted as used (capped)


def os_baseline_gib(total_gib: float) -> float:
    """Memory the OS and desktop-less services hold on a unit (jtop shows 3-6 GB on Thor)."""
    return min(3.0, max(0.5, 0.06 * total_gib))


def counted_page_cache_gib(gpu: GpuSpec, page_cache_gib: float) -> float:
    """The part of a page cache that counts as used: at most what other processes and the OS
    leave (a real cache cannot grow past the memory there is), so free never goes below 0."""
    room = max(0.0, gpu.total_gib - gpu.used_by_others_gib - os_baseline_gib(gpu.total_gib))
    return min(max(0.0, page_cache_gib), room)


def free_memory_gib(gpu: GpuSpec, page_cache_gib: float = 0.0) -> float:
    """What vLLM's start-up check sees as free; a page cache (emulated) counts as used."""
    # Subtracted last: without a page cache the figure is bit for bit what it always was.
    free = gpu.total_gib - gpu.used_by_others_gib - os_baseline_gib(gpu.total_gib)
    return max(0.0, free - counted_page_cache_gib(gpu, page_cache_gib))


def kv_bytes_per_token(model: ModelInfo, kv_cache_dtype: str) -> int:
    element = 1 if kv_cache_dtype.startswith("fp8") else 2
    return 2 * model.num_layers * model.num_kv_heads * model.head_dim * element


def activation_peak_gib(
    target: ModelInfo, max_num_batched_tokens: int, max_num_seqs: int, speculative: ResolvedSpeculation | None
) -> float:
    """Peak activation of the profiling run: hidden states for the token budget + logits."""
    hidden = target.hidden_size * max_num_batched_tokens * 2 * 8 / GIB
    logits = target.vocab_size * min(max_num_seqs, 256) * 4 / GIB
    spec = 0.0
    if speculative is not None:
        spec = 0.15 + logits * speculative.num_speculative_tokens * 0.25
    return 0.25 + hidden + logits + spec


def weights_in_budget_gib(
    target: ModelInfo, speculative: ResolvedSpeculation | None, quantization: str | None
) -> float:
    weights = effective_weights_gib(target, quantization)
    if speculative is not None and speculative.draft is not None and speculative.draft is not target:
        weights += speculative.draft.weights_gib
    return weights


def effective_weights_gib(target: ModelInfo, quantization: str | None) -> float:
    """Online FP8 quantisation (`--quantization fp8` on a 16-bit checkpoint) halves weights."""
    if quantization == "fp8" and target.precision in ("fp16", "bf16"):
        return target.weights_gib / 2
    return target.weights_gib


def effective_precision(target: ModelInfo, quantization: str | None) -> str:
    if quantization == "fp8" and target.precision in ("fp16", "bf16"):
        return "fp8"
    return target.precision


def plan_memory(
    gpu: GpuSpec,
    target: ModelInfo,
    speculative: ResolvedSpeculation | None,
    gpu_memory_utilization: float,
    max_model_len: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    kv_cache_dtype: str,
    enforce_eager: bool,
    quantization: str | None = None,
    page_cache_gib: float = 0.0,
) -> MemoryPlan:
    total = gpu.total_gib
    free = free_memory_gib(gpu, page_cache_gib)
    requested = gpu_memory_utilization * total
    weights = weights_in_budget_gib(target, speculative, quantization)
    activation = activation_peak_gib(target, max_num_batched_tokens, max_num_seqs, speculative)
    graphs = 0.0 if enforce_eager else CUDA_GRAPH_GIB + (CUDA_GRAPH_SPEC_EXTRA_GIB if speculative is not None else 0.0)
    per_token = kv_bytes_per_token(target, kv_cache_dtype)
    if speculative is not None and speculative.uses_draft_kv_cache and speculative.draft is not None:
        per_token += kv_bytes_per_token(speculative.draft, kv_cache_dtype)
    kv = requested - weights - activation - graphs - NON_TORCH_GIB
    kv_tokens = max(0, int(kv * GIB / per_token) // BLOCK_SIZE * BLOCK_SIZE) if kv > 0 else 0
    plan = MemoryPlan(
        total_gib=total,
        free_gib=free,
        requested_gib=requested,
        weights_gib=weights,
        activation_gib=activation,
        graph_gib=graphs,
        kv_gib=kv,
        kv_bytes_per_token=per_token,
        kv_tokens=kv_tokens,
        max_model_len=max_model_len,
        max_concurrency=kv_tokens / max_model_len if max_model_len else 0.0,
        page_cache_gib=counted_page_cache_gib(gpu, page_cache_gib),
    )

    if free < requested:
        message = (
            f"ValueError: Free memory on device cuda:0 ({free:.2f}/{total:.2f} GiB) on "
            f"startup is less than desired GPU memory utilization "
            f"({gpu_memory_utilization}, {requested:.2f} GiB). Decrease GPU memory "
            "utilization or reduce GPU memory used by other processes."
        )
        return _failed(plan, "free_memory", message)
    if weights + NON_TORCH_GIB > free:
        return _failed(plan, "weights_oom", weights_oom_message(total, free, weights))
    if kv_tokens <= 0:
        message = (
            "ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine."
        )
        return _failed(plan, "no_kv", message)
    if kv_tokens < max_model_len:
        needed = max_model_len * per_token / GIB
        message = (
            f"ValueError: To serve at least one request with the model's max seq len "
            f"({max_model_len}), ({needed:.2f} GiB KV cache is needed, which is larger than "
            f"the available KV cache memory ({kv:.2f} GiB). Based on the available memory, "
            f"the estimated maximum model length is {kv_tokens}. Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
            "engine."
        )
        return _failed(plan, "kv_too_small", message)
    return plan


def weights_oom_message(total_gib: float, free_gib: float, weights_gib: float) -> str:
    """torch's CUDA OOM line when weights of ``weights_gib`` do not fit in ``free_gib``.

    Shared by every emulated engine: whichever serves the model, it is torch's caching
    allocator that runs out while the weights load.
    """
    short_mib = (weights_gib + NON_TORCH_GIB - free_gib) * 1024
    in_use = min(weights_gib, free_gib)
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        f"{min(short_mib + 256, 2048):.2f} MiB. GPU 0 has a total capacity of "
        f"{total_gib:.2f} GiB of which {max(free_gib - weights_gib, 0) * 1024:.2f} MiB is free. "
        f"Including non-PyTorch memory, this process has {in_use:.2f} GiB "
        "memory in use. Of the allocated memory "
        f"{in_use - 0.1:.2f} GiB is allocated by PyTorch, and 64.00 MiB is "
        "reserved by PyTorch but unallocated. If reserved but unallocated memory is "
        "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
        "fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def _failed(plan: MemoryPlan, kind: str, message: str) -> MemoryPlan:
    from dataclasses import replace

    return replace(plan, failure=message, failure_kind=kind)


def kv_tokens_for(sequence_tokens: int) -> int:
    """KV slots one sequence holds: whole blocks, like vLLM's paged allocator."""
    return -(-sequence_tokens // BLOCK_SIZE) * BLOCK_SIZE
