"""Performance model: how long engine steps take and how many draft tokens are accepted.

Pure functions over plain data, calibrated to the seeds (see README "Performance model").

Decode on a Jetson is memory-bandwidth bound: one target forward pass streams every
weight byte once, whatever the batch, so a step costs a fixed overhead plus
`weight bytes / effective bandwidth`, plus a compute term per token in the batch
(which is what batching and speculative verification pay for), plus the KV-cache read.
Speculative decoding adds, per step, the drafter (per proposed position: a launch
overhead plus streaming the draft weights) and a rejection-sampling cost, and emits
`1 + accepted` tokens instead of one. ngram pays a CPU proposer cost per sequence and
runs without async scheduling, so the host work the baseline hides becomes visible.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from .gpu import GpuSpec
from .hub import ModelInfo
from .memory import effective_precision, effective_weights_gib, kv_bytes_per_token
from .specconfig import ResolvedSpeculation

GIB = 1024**3
WORKLOADS = ("code_edit", "structured", "chat")


@dataclass(frozen=True)
class DeviceProfile:
    device_class: str
    # Per target forward pass: kernel launches, synchronisation, sampling (seconds).
    step_overhead_s: float
    # Fraction of the module's memory bandwidth that weight-streaming kernels reach, by
    # weight precision. Quantised kernels spend part of it on scales and dequantisation.
    bandwidth_efficiency: dict[str, float]
    # Effective TFLOPS for the per-token compute of decode/verify (16-bit) and the speedup
    # of quantised math where the GPU has native FP8/FP4 tensor cores (Thor, Spark).
    decode_tflops: float
    quantized_math_speedup: dict[str, float]
    prefill_tflops: float
    # Drafter: launch/sync overhead per proposed position (seconds).
    draft_position_overhead_s: float
    rejection_sampler_s: float
    # Host work per engine step (scheduling, input preparation, output processing) that
    # async scheduling overlaps with the GPU; visible when async scheduling is off.
    host_step_s: float
    host_per_sequence_s: float
    # ngram proposer (CPU, per sequence per step): fixed cost plus a scan of the context.
    ngram_cpu_base_s: float
    ngram_cpu_per_context_token_s: float
    # Startup phases (seconds before time scaling) and weight-load rate (GiB/s from disk).
    startup_init_s: float
    weight_load_gib_per_s: float
    compile_cold_s: float
    compile_warm_s: float
    draft_compile_cold_s: float
    draft_compile_warm_s: float
    graph_capture_s: float
    profile_s: float


_THOR_BW = {"fp16": 0.68, "bf16": 0.68, "fp8": 0.53, "fp4": 0.53, "mxfp4": 0.53}
# Orin (sm_87) has no FP8/FP4 tensor cores: quantised weights run through weight-only
# dequantising kernels, which stream less efficiently and compute at 16-bit speed.
_ORIN_BW = {"fp16": 0.66, "bf16": 0.66, "fp8": 0.47, "fp4": 0.42, "mxfp4": 0.42}
_NATIVE_QUANT = {"fp16": 1.0, "bf16": 1.0, "fp8": 1.6, "fp4": 2.2, "mxfp4": 2.2}
_NO_NATIVE_QUANT = {"fp16": 1.0, "bf16": 1.0, "fp8": 1.0, "fp4": 1.0, "mxfp4": 1.0}

DEVICE_PROFILES: dict[str, DeviceProfile] = {
    "thor": DeviceProfile(
        device_class="thor",
        step_overhead_s=0.00655,
        bandwidth_efficiency=_THOR_BW,
        decode_tflops=20.0,
        quantized_math_speedup=_NATIVE_QUANT,
        prefill_tflops=60.0,
        draft_position_overhead_s=0.0013,
        rejection_sampler_s=0.0003,
        host_step_s=0.0090,
        host_per_sequence_s=0.0004,
        ngram_cpu_base_s=0.0015,
        ngram_cpu_per_context_token_s=10e-6,
        startup_init_s=5.0,
        weight_load_gib_per_s=4.5,
        compile_cold_s=40.0,
        compile_warm_s=4.5,
        draft_compile_cold_s=15.0,
        draft_compile_warm_s=1.0,
        graph_capture_s=6.0,
        profile_s=2.0,
    ),
    "dgx_spark": DeviceProfile(
        device_class="dgx_spark",
        step_overhead_s=0.0055,
        bandwidth_efficiency=_THOR_BW,
        decode_tflops=30.0,
        quantized_math_speedup=_NATIVE_QUANT,
        prefill_tflops=90.0,
        draft_position_overhead_s=0.0011,
        rejection_sampler_s=0.0003,
        host_step_s=0.0060,
        host_per_sequence_s=0.0003,
        ngram_cpu_base_s=0.0010,
        ngram_cpu_per_context_token_s=6e-6,
        startup_init_s=4.0,
        weight_load_gib_per_s=5.0,
        compile_cold_s=35.0,
        compile_warm_s=4.0,
        draft_compile_cold_s=13.0,
        draft_compile_warm_s=1.0,
        graph_capture_s=5.0,
        profile_s=2.0,
    ),
    "agx_orin": DeviceProfile(
        device_class="agx_orin",
        step_overhead_s=0.0090,
        bandwidth_efficiency=_ORIN_BW,
        decode_tflops=10.0,
        quantized_math_speedup=_NO_NATIVE_QUANT,
        prefill_tflops=25.0,
        draft_position_overhead_s=0.0020,
        rejection_sampler_s=0.0005,
        host_step_s=0.0120,
        host_per_sequence_s=0.0006,
        ngram_cpu_base_s=0.0020,
        ngram_cpu_per_context_token_s=14e-6,
        startup_init_s=8.0,
        weight_load_gib_per_s=2.5,
        compile_cold_s=60.0,
        compile_warm_s=6.0,
        draft_compile_cold_s=22.0,
        draft_compile_warm_s=1.5,
        graph_capture_s=9.0,
        profile_s=3.0,
    ),
    "orin_nx": DeviceProfile(
        device_class="orin_nx",
        step_overhead_s=0.0100,
        bandwidth_efficiency=_ORIN_BW,
        decode_tflops=4.5,
        quantized_math_speedup=_NO_NATIVE_QUANT,
        prefill_tflops=10.0,
        draft_position_overhead_s=0.0022,
        rejection_sampler_s=0.0006,
        host_step_s=0.0140,
        host_per_sequence_s=0.0007,
        ngram_cpu_base_s=0.0025,
        ngram_cpu_per_context_token_s=16e-6,
        startup_init_s=9.0,
        weight_load_gib_per_s=2.0,
        compile_cold_s=70.0,
        compile_warm_s=7.0,
        draft_compile_cold_s=25.0,
        draft_compile_warm_s=1.5,
        graph_capture_s=10.0,
        profile_s=3.0,
    ),
    "orin_nano": DeviceProfile(
        device_class="orin_nano",
        step_overhead_s=0.0110,
        bandwidth_efficiency=_ORIN_BW,
        decode_tflops=3.0,
        quantized_math_speedup=_NO_NATIVE_QUANT,
        prefill_tflops=6.0,
        draft_position_overhead_s=0.0025,
        rejection_sampler_s=0.0007,
        host_step_s=0.0160,
        host_per_sequence_s=0.0008,
        ngram_cpu_base_s=0.0030,
        ngram_cpu_per_context_token_s=18e-6,
        startup_init_s=10.0,
        weight_load_gib_per_s=1.5,
        compile_cold_s=80.0,
        compile_warm_s=8.0,
        draft_compile_cold_s=28.0,
        draft_compile_warm_s=2.0,
        graph_capture_s=11.0,
        profile_s=3.5,
    ),
}

# --- acceptance -------------------------------------------------------------------------
# Per-position *unconditional* acceptance rates (probability that at least i+1 drafted
# tokens are accepted in a step), i.e. exactly what vLLM's "Per-position acceptance rate"
# reports; longer k continue each curve. The calibration table (sources, and the figures they
# fix) is in lab/emulator/README.md "Calibration":
# - eagle3 chat: the head yuhuili/EAGLE3-LLaMA3.1-Instruct-8B on MT-Bench in vLLM, greedy: mean
#   acceptance length 2.79 at k=3 and 3.32 at k=5 (vllm-project/vllm#20780), 3.53 at k=7
#   (vllm-project/vllm#26191). The positions are fitted to those three sums.
# - eagle3 code_edit: Alauda AI's "Speculative Decoding for vLLM Inference Services" (A30, code
#   edits, k=3): 0.50 / 0.40 / 0.33.
# - eagle3 structured: fitted so Thor FP4 + EAGLE-3 k=5 on long structured output runs at the
#   25.6 tok/s Jetson AI Lab's GTC DC 2025 Thor workshop measured (19.1 without: 1.34x).
# - eagle chat: an EAGLE-1 head for Llama 3 8B on MT-Bench in vLLM: mean acceptance length 1.89
#   at k=2, 2.08 at k=4 (vllm-project/vllm#16035).
# - Everything else: estimates (no published curve of these methods on these workloads).
# A head that drafts poorly on a workload (the chat slowdown of a head trained on other data) is
# a fault switch (faults.py `draft_acceptance`), not a default.
ACCEPTANCE_PROFILES: dict[str, dict[str, tuple[float, ...]]] = {
    "eagle3": {
        "code_edit": (0.50, 0.40, 0.33, 0.27, 0.22, 0.18, 0.15, 0.12),
        "structured": (0.46, 0.29, 0.19, 0.12, 0.08, 0.05, 0.03, 0.02),
        "chat": (0.75, 0.58, 0.46, 0.30, 0.23, 0.12, 0.09),
    },
    "eagle": {
        "code_edit": (0.45, 0.33, 0.25, 0.19, 0.14, 0.10, 0.08, 0.06),
        "structured": (0.40, 0.23, 0.14, 0.08, 0.05, 0.03, 0.02, 0.01),
        "chat": (0.62, 0.27, 0.12, 0.07, 0.04, 0.02, 0.01, 0.005),
    },
    # A separate small model: better on open chat than a head, worse than EAGLE-3 on
    # code, and it costs far more per drafted position (its weights are ~1-2 GiB).
    "draft_model": {
        "code_edit": (0.55, 0.44, 0.36, 0.29, 0.24, 0.19, 0.16, 0.13),
        "structured": (0.50, 0.33, 0.22, 0.15, 0.10, 0.07, 0.05, 0.03),
        "chat": (0.30, 0.12, 0.05, 0.02, 0.01, 0.005, 0.002, 0.001),
    },
    "mtp": {
        "code_edit": (0.70, 0.50, 0.36, 0.26, 0.19, 0.14, 0.10, 0.07),
        "structured": (0.62, 0.40, 0.26, 0.17, 0.11, 0.07, 0.05, 0.03),
        "chat": (0.45, 0.20, 0.09, 0.04, 0.02, 0.01, 0.005, 0.002),
    },
    # ngram: acceptance *when a match was found*; see NGRAM_MATCH_RATE for how often.
    "ngram": {
        "code_edit": (0.70, 0.50, 0.36, 0.26, 0.18, 0.13, 0.09, 0.06),
        "structured": (0.50, 0.30, 0.18, 0.11, 0.07, 0.04, 0.03, 0.02),
        "chat": (0.30, 0.12, 0.05, 0.02, 0.01, 0.005, 0.002, 0.001),
    },
}
# Fraction of steps in which the ngram proposer finds a match in the context (at the
# default prompt_lookup_min=5). Calibrated so ngram is a slight regression on code edits
# and about -15 % on chat (seed 002).
NGRAM_MATCH_RATE = {"code_edit": 0.085, "structured": 0.05, "chat": 0.02}

_CODE_LINE = re.compile(
    r"^\s*(def |class |import |from \S+ import |return\b|if .*:\s*$|elif |else:|for .*:\s*$|"
    r"while .*:\s*$|try:|except\b|with .*:\s*$|#include|public |private |function |"
    r"const |let |var |fn |func |package |@\w+)|[;{}]\s*$|^\s{4,}\S|^\t+\S|=\s*\S.*\)\s*$"
)
_STRUCTURED = re.compile(
    r"\b(list|lists|bullet(ed)?|bullets|steps?|step-by-step|table|outline|checklist|json|"
    r"yaml|csv|markdown|numbered|enumerate|itemi[sz]e|template|schema|agenda|"
    r"specification|report|documentation)\b",
    re.IGNORECASE,
)


def detect_workload(prompt: str) -> str:
    """Classify a prompt into an acceptance workload, deterministically.

    - code_edit: the prompt contains code (a ``` fence, or at least 3 code-like lines
      making up at least a quarter of its non-empty lines): output overlaps the prompt.
    - structured: otherwise, the prompt asks for structured or long-form output (lists,
      steps, tables, outlines, JSON/YAML/Markdown, templates, reports, documentation).
    - chat: everything else (open prose).
    """
    if "```" in prompt:
        return "code_edit"
    lines = [line for line in prompt.splitlines() if line.strip()]
    code_lines = sum(1 for line in lines if _CODE_LINE.search(line))
    if code_lines >= 3 and code_lines >= 0.25 * len(lines):
        return "code_edit"
    if _STRUCTURED.search(prompt):
        return "structured"
    return "chat"


def acceptance_rates(method: str, workload: str, k: int, temperature: float = 0.0,
                     profile: Sequence[float] | None = None) -> list[float]:
    """Unconditional per-position acceptance for k drafted tokens (non-increasing); ``profile``:
    the curve to draft by instead of the method's calibrated one (a fault switch's)."""
    profile = tuple(profile) if profile else ACCEPTANCE_PROFILES[method][workload]
    rates = list(profile[:k])
    while len(rates) < k:
        ratio = profile[-1] / profile[-2] if len(profile) > 1 and profile[-2] > 0 else 0.0
        rates.append(rates[-1] * ratio)
    # Drafts are argmax even when the request samples, so acceptance falls with
    # temperature (vLLM PR #16899); each conditional step is damped.
    damping = 1.0 / (1.0 + 0.6 * max(0.0, temperature))
    damped: list[float] = []
    reached = 1.0
    for conditional in conditional_rates(rates):
        reached *= conditional * damping
        damped.append(reached)
    return damped


def conditional_rates(unconditional: Sequence[float]) -> list[float]:
    """P(accept position i | accepted positions < i), for sampling step by step."""
    result: list[float] = []
    prior = 1.0
    for rate in unconditional:
        result.append(min(1.0, rate / prior) if prior > 0 else 0.0)
        prior = rate
    return result


def mean_acceptance_length(unconditional: Sequence[float]) -> float:
    """1 + expected accepted drafts per step (vLLM's "Mean acceptance length")."""
    return 1.0 + sum(unconditional)


def ngram_match_rate(workload: str, prompt_lookup_min: int | None) -> float:
    """Longer minimum n-grams match less often; shorter ones more (bounded)."""
    base = NGRAM_MATCH_RATE[workload]
    lookup = max(1, prompt_lookup_min or 5)
    return min(0.95, base * min(1.6, (5.0 / lookup) ** 0.5))


# --- engine step timing -------------------------------------------------------------------

EAGER_LAUNCH_FACTOR = 2.0
# cudagraph_mode PIECEWISE (what vLLM's V1 model runner falls back to with a per-batch-size
# table, vllm-project/vllm#48494): the graphs are split at each layer's attention, which runs
# outside them. The host enqueues the pieces well ahead of a memory-bound step, so what the GPU
# loses is the gap at each piece's boundary: a fixed time per decoder layer and forward pass,
# a larger share of a short step than of a long one. ESTIMATE: 12 us a layer, about 0.4 ms on a
# 32-layer 8B model: +7% of a 5-6 ms datacenter step, the k=0 band's published cost
# (vllm-project/vllm#49652; more at high concurrency and short context, #49986), and under 1%
# of a Thor FP4 8B step (52 ms). No Jetson measurement exists; the fault switch
# `piecewise_gap_us` sets a costlier host.
PIECEWISE_GAP_S = 12e-6
BYTES_PER_PARAM = {"fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "fp4": 0.5625, "mxfp4": 0.53}


def estimate_parameters(model: ModelInfo) -> float:
    """Parameter count from the architecture (attention + gated MLP + embeddings)."""
    block = model.config.get("specfleet_emulated", {})
    if isinstance(block, dict) and block.get("params_b"):
        return float(block["params_b"]) * 1e9
    hidden = model.hidden_size
    intermediate = int(model.config.get("intermediate_size", hidden * 3.5))
    kv_width = model.num_kv_heads * model.head_dim
    per_layer = hidden * (hidden + 2 * kv_width) + hidden * hidden + 3 * hidden * intermediate
    embeddings = 2 * hidden * int(model.config.get("draft_vocab_size", model.vocab_size))
    return per_layer * model.num_layers + embeddings


@dataclass(frozen=True)
class ModelPerf:
    weights_gib: float  # bytes one forward pass streams (active weights for MoE)
    precision: str
    flops_per_token: float
    kv_bytes_per_token: int
    layers: int = 0  # decoder layers a forward pass runs (PIECEWISE graphs pay a gap at each)


def model_perf(model: ModelInfo, precision: str, weights_gib: float, kv_bytes_per_token: int) -> ModelPerf:
    active_fraction = model.active_weights_gib / model.weights_gib
    return ModelPerf(
        weights_gib=weights_gib * active_fraction,
        precision=precision,
        flops_per_token=2.0 * estimate_parameters(model) * active_fraction,
        kv_bytes_per_token=kv_bytes_per_token,
        layers=model.num_layers,
    )


@dataclass(frozen=True)
class EnginePerf:
    """Everything the step-time model needs, fixed at startup."""

    device: DeviceProfile
    bandwidth_gbps: float
    target: ModelPerf
    method: str | None = None  # speculative method or None
    num_speculative_tokens: int = 0
    draft: ModelPerf | None = None
    async_scheduling: bool = True
    prompt_lookup_min: int | None = None
    # --enforce-eager: no CUDA graphs, so every kernel launch is paid on each step.
    enforce_eager: bool = False
    # cudagraph_mode PIECEWISE: the GPU's gap at each decoder layer's graph boundary, per forward
    # pass (PIECEWISE_GAP_S, or the fault switch's); 0 under full graphs.
    piecewise_gap_s: float = 0.0
    # Dynamic speculative decoding: draft length by batch size (index = requests scheduled in
    # the step, 0 unused), as the Scheduler's lookup; None: always num_speculative_tokens.
    draft_lookup: tuple[int, ...] | None = None

    def draft_length(self, batch_size: int) -> int:
        """Draft tokens per sequence in a step with `batch_size` requests (0: no drafting).

        vllm/v1/core/sched/scheduler.py: `dynamic_sd_lookup[len(num_scheduled_tokens)]`,
        the static k when nothing is scheduled."""
        if not self.method:
            return 0
        if self.draft_lookup is None or batch_size <= 0:
            return self.num_speculative_tokens
        return self.draft_lookup[min(batch_size, len(self.draft_lookup) - 1)]

    @property
    def launch_factor(self) -> float:
        return EAGER_LAUNCH_FACTOR if self.enforce_eager else 1.0

    def bandwidth_bytes_per_s(self, precision: str) -> float:
        return self.bandwidth_gbps * 1e9 * self.device.bandwidth_efficiency[precision]

    def seconds_per_token_compute(self, model: ModelPerf, tflops: float) -> float:
        speed = self.device.quantized_math_speedup.get(model.precision, 1.0)
        return model.flops_per_token / (tflops * 1e12 * speed)


def build_engine_perf(
    gpu: GpuSpec,
    target: ModelInfo,
    speculative: ResolvedSpeculation | None,
    quantization: str | None = None,
    kv_cache_dtype: str = "auto",
    async_scheduling: bool | None = None,
    enforce_eager: bool = False,
) -> EnginePerf:
    """The step-time model for a served configuration (what `vllm serve` would run)."""
    target_perf = model_perf(
        target,
        effective_precision(target, quantization),
        effective_weights_gib(target, quantization),
        kv_bytes_per_token(target, kv_cache_dtype),
    )
    draft_perf = None
    if speculative is not None and speculative.draft is not None and speculative.method != "ngram":
        source = speculative.draft
        # MTP drafts with the target's own extra layer: about one layer's weights.
        weights = source.weights_gib if source is not target else target.weights_gib / max(1, target.num_layers)
        draft_perf = model_perf(source, source.precision, weights, kv_bytes_per_token(source, kv_cache_dtype))
        if source is target:
            draft_perf = replace(draft_perf, layers=1)  # MTP's one extra layer
    if async_scheduling is None:
        async_scheduling = speculative is None or speculative.async_scheduling
    return EnginePerf(
        device=DEVICE_PROFILES[gpu.device_class],
        bandwidth_gbps=gpu.memory_bandwidth_gbps,
        target=target_perf,
        method=speculative.method if speculative else None,
        num_speculative_tokens=speculative.num_speculative_tokens if speculative else 0,
        draft=draft_perf,
        async_scheduling=async_scheduling,
        prompt_lookup_min=speculative.prompt_lookup_min if speculative else None,
        enforce_eager=enforce_eager,
    )


@dataclass(frozen=True)
class StepTiming:
    gpu_s: float
    draft_s: float
    host_visible_s: float
    proposer_cpu_s: float

    @property
    def total_s(self) -> float:
        return self.gpu_s + self.draft_s + self.host_visible_s + self.proposer_cpu_s


def step_timing(
    perf: EnginePerf,
    decode_contexts: Sequence[int],
    proposing: Sequence[bool],
    prefill_tokens: int = 0,
    new_sequences: int = 0,
    draft_tokens: int | None = None,
) -> StepTiming:
    """Duration of one engine step.

    decode_contexts: context length (prompt + generated) of each decoding sequence.
    proposing: per decoding sequence, whether it carries drafts this step (EAGLE/draft
    model always do; ngram only when a match was found).
    prefill_tokens/new_sequences: prompts prefilled in this step (chunked prefill).
    draft_tokens: this step's draft length (dynamic speculation; default the configured k).
    """
    device = perf.device
    if not perf.method:
        k = 0
    else:
        k = perf.num_speculative_tokens if draft_tokens is None else draft_tokens
    decoding = len(decode_contexts)
    drafted = sum(1 for flag in proposing if flag) if k else 0
    target_bytes = perf.target.weights_gib * GIB
    gpu = device.step_overhead_s * perf.launch_factor + target_bytes / perf.bandwidth_bytes_per_s(perf.target.precision)
    gpu += perf.piecewise_gap_s * perf.target.layers
    verify_tokens = decoding + drafted * k
    gpu += verify_tokens * perf.seconds_per_token_compute(perf.target, device.decode_tflops)
    gpu += prefill_tokens * perf.seconds_per_token_compute(perf.target, device.prefill_tflops)
    kv_bytes = sum(decode_contexts) * perf.target.kv_bytes_per_token
    gpu += kv_bytes / perf.bandwidth_bytes_per_s("fp16")
    if drafted:
        gpu += device.rejection_sampler_s

    draft = 0.0
    if drafted and perf.draft is not None and perf.method != "ngram":
        per_position = (
            device.draft_position_overhead_s * perf.launch_factor
            + perf.piecewise_gap_s * perf.draft.layers
            + perf.draft.weights_gib * GIB / perf.bandwidth_bytes_per_s(perf.draft.precision)
            + drafted * perf.seconds_per_token_compute(perf.draft, device.decode_tflops)
        )
        draft = k * per_position

    proposer = 0.0
    if perf.method == "ngram" and k:
        proposer = sum(
            device.ngram_cpu_base_s + context * device.ngram_cpu_per_context_token_s for context in decode_contexts
        )

    host = device.host_step_s + (decoding + new_sequences) * device.host_per_sequence_s
    host_visible = max(0.0, host - (gpu + draft)) if perf.async_scheduling else host
    return StepTiming(gpu_s=gpu, draft_s=draft, host_visible_s=host_visible, proposer_cpu_s=proposer)


def prefill_seconds(perf: EnginePerf, prompt_tokens: int) -> float:
    """A step that only prefills one prompt (TTFT of an idle server, before queueing)."""
    return step_timing(perf, [], [], prefill_tokens=prompt_tokens, new_sequences=1).total_s


@dataclass(frozen=True)
class ThroughputEstimate:
    tokens_per_step: float
    seconds_per_step: float
    acceptance: list[float] = field(default_factory=list)
    proposal_rate: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_per_step / self.seconds_per_step


def expected_decode_throughput(
    perf: EnginePerf, workload: str, context_tokens: int, concurrency: int = 1, temperature: float = 0.0
) -> ThroughputEstimate:
    """Long-run decode rate (all sequences decoding, context held at `context_tokens`).

    Per sequence tokens/s = tokens_per_step / seconds_per_step; the aggregate at
    concurrency c is c times that.
    """
    contexts = [context_tokens] * concurrency
    k = perf.draft_length(concurrency)
    if not perf.method or k == 0:
        step = step_timing(perf, contexts, [False] * concurrency, draft_tokens=0)
        return ThroughputEstimate(1.0, step.total_s)
    rates = acceptance_rates(perf.method, workload, k, temperature)
    if perf.method == "ngram":
        match = ngram_match_rate(workload, perf.prompt_lookup_min)
        # Expected step time over how many sequences found a match (binomial).
        from math import comb

        seconds = 0.0
        for matched in range(concurrency + 1):
            weight = comb(concurrency, matched) * match**matched * (1 - match) ** (concurrency - matched)
            flags = [True] * matched + [False] * (concurrency - matched)
            seconds += weight * step_timing(perf, contexts, flags, draft_tokens=k).total_s
        tokens = 1.0 + match * sum(rates)
        return ThroughputEstimate(tokens, seconds, rates, match)
    step = step_timing(perf, contexts, [True] * concurrency, draft_tokens=k)
    return ThroughputEstimate(mean_acceptance_length(rates), step.total_s, rates, 1.0)


def startup_phases(
    device: DeviceProfile,
    weights_gib: float,
    draft_weights_gib: float,
    has_drafter_graph: bool,
    compile_cache_hit: bool,
    enforce_eager: bool,
) -> dict[str, float]:
    """Seconds per startup phase before time scaling (seed 003: compile ~45 s cold, ~5 s warm)."""
    phases = {
        "init": device.startup_init_s,
        "load_weights": 1.0 + (weights_gib + draft_weights_gib) / device.weight_load_gib_per_s,
        "compile": 0.0,
        "graph_capture": 0.0,
        "profile": device.profile_s,
    }
    if not enforce_eager:
        if compile_cache_hit:
            phases["compile"] = device.compile_warm_s + (device.draft_compile_warm_s if has_drafter_graph else 0.0)
        else:
            phases["compile"] = device.compile_cold_s + (device.draft_compile_cold_s if has_drafter_graph else 0.0)
        phases["graph_capture"] = device.graph_capture_s * (1.3 if has_drafter_graph else 1.0)
    return phases
