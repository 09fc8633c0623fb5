"""`vllm serve` startup: checks in vLLM's order, vLLM's log lines, modelled durations.

Sequence (each phase sleeps its modelled duration x SPECFLEET_EMULATOR_TIME_SCALE):
bind the port (not listening) -> GPU -> target model -> speculative config -> engine config
(a quantization below the GPU's minimum capability; async scheduling) -> engine core:
dtype (bfloat16 below 8.0), free-memory check (the unit's EMULATED page cache counts as used),
weight loading (recorded in that page cache), torch.compile (cache hit or cold compile that
writes the cache), KV-cache sizing, CUDA-graph capture -> API server (gpt-oss tokenizer
files) -> listen -> "Application startup complete.".
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import os
import signal
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import EMULATOR_VERSION, emulated_vllm_version, labelled_version
from .cli import DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS, non_default_args
from .compile_cache import cache_root, compile_hash, is_cached, rank_dir, write_cache
from .engine import Engine, NoiseModel
from .errors import ENGINE_FRAMES, FRONTEND_FRAMES, VLLM_SITE, StartupFailure, pydantic_value_error
from .faults import Faults, for_server, load_faults
from .gpu import NO_DEVICE_MESSAGE, GpuSpec, load_gpu_spec
from .held import describe as describe_held
from .held import hold as hold_memory
from .held import others as held_by_others
from .held import total_gib as held_total_gib
from .hub import ModelInfo, harmony_failure, hub_cache_dir, load_model, tiktoken_files_present
from .logs import ENGINE_CORE, VllmLogger
from .memory import MemoryPlan, effective_precision, effective_weights_gib, plan_memory
from .metrics import VllmMetrics
from .pagecache import PageCache, load_page_cache, page_cache_dir
from .pagecache import describe as describe_page_cache
from .pagecache import info as page_cache_info
from .perfmodel import DEVICE_PROFILES, PIECEWISE_GAP_S, build_engine_perf, startup_phases
from .power import load_power_monitor
from .quantization import (
    auto_dtype_fallback_warning,
    bf16_refusal,
    capability_refusal,
    effective_quantization,
    resolve_dtype,
)
from .server import EmulatorHTTPServer, ServerState, emulator_label, make_server, route_lines
from .specconfig import (
    DynamicScheduleError,
    ResolvedSpeculation,
    SpecConfigError,
    dynamic_sd_lookup,
    validate_speculative_config,
)

BANNER = (
    "specfleet vLLM EMULATOR {version}: this process is NOT vLLM. It is the labelled "
    "stand-in for CUDA vLLM used by the specfleet lab (no GPU here); it emulates "
    "`vllm serve` {vllm} flags, API, metrics, logs and failures."
)


def print_banner() -> None:
    print(BANNER.format(version=EMULATOR_VERSION, vllm=emulated_vllm_version()), flush=True)


@dataclass(frozen=True)
class RuntimeSettings:
    time_scale: float
    noise: float
    unit_id: str
    log_interval_s: float
    cache_fill_bytes: int


def _env_float(env: Mapping[str, str], key: str, default: float) -> float:
    try:
        return float(env.get(key, default))
    except ValueError:
        return default


def runtime_settings(env: Mapping[str, str]) -> RuntimeSettings:
    return RuntimeSettings(
        time_scale=max(0.0, _env_float(env, "SPECFLEET_EMULATOR_TIME_SCALE", 1.0)),
        noise=max(0.0, _env_float(env, "SPECFLEET_EMULATOR_NOISE", 0.03)),
        unit_id=env.get("SPECFLEET_EMULATOR_UNIT_ID") or socket.gethostname(),
        log_interval_s=max(0.1, _env_float(env, "VLLM_LOG_STATS_INTERVAL", 10.0)),
        cache_fill_bytes=int(_env_float(env, "SPECFLEET_EMULATOR_CACHE_FILL_MIB", 0) * 2**20),
    )


@dataclass
class Startup:
    """State accumulated while starting; the pieces the running server needs."""

    args: argparse.Namespace
    env: Mapping[str, str]
    log: VllmLogger
    settings: RuntimeSettings
    faults: Faults
    gpu: GpuSpec | None = None
    target: ModelInfo | None = None
    speculative: ResolvedSpeculation | None = None
    max_model_len: int = 0
    dtype: str = "bfloat16"  # torch dtype name the model runs in, as ModelConfig resolves it
    memory: MemoryPlan | None = None
    compile_hash: str | None = None
    compile_cache_hit: bool | None = None
    async_scheduling: bool = True
    # The CUDA graph mode the model runner captures (_cudagraph_mode).
    cudagraph_mode: str = "FULL_AND_PIECEWISE"
    page_cache: PageCache | None = None  # the unit's EMULATED page cache (None: no state mounted)
    page_cache_record: Path | None = None  # this server's record of the weights it read

    def pause(self, emulated_seconds: float) -> None:
        if emulated_seconds > 0 and self.settings.time_scale > 0:
            time.sleep(emulated_seconds * self.settings.time_scale)


def _frontend_value_error(model: str, message: str) -> StartupFailure:
    return StartupFailure(
        exception_text=pydantic_value_error(model, message, "ArgsKwargs((), {...})"), frames=FRONTEND_FRAMES
    )


def _resolve_target(st: Startup) -> None:
    args, log = st.args, st.log
    target = load_model(args.model, st.env)
    st.target = target
    derived = target.max_position_embeddings
    if args.max_model_len is not None and args.max_model_len > derived:
        raise _frontend_value_error(
            "ModelConfig",
            f"User-specified max_model_len ({args.max_model_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={derived} or model_max_length=None in "
            "model's config.json). To allow overriding this maximum, set the env var "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with "
            "extreme caution. If the model uses relative position encoding (RoPE), positions "
            "exceeding derived_max_model_len lead to nan. If the model uses absolute position "
            "encoding, positions exceeding derived_max_model_len will cause a CUDA array "
            "out-of-bounds error.",
        )
    st.max_model_len = args.max_model_len or derived
    if args.quantization and target.quant_method:
        compatible = {args.quantization, args.quantization.replace("_fp4", "")}
        if target.quant_method not in compatible:
            raise _frontend_value_error(
                "ModelConfig",
                f"Quantization method specified in the model config ({target.quant_method}) "
                "does not match the quantization method specified in the `quantization` "
                f"argument ({args.quantization}).",
            )
    if args.tensor_parallel_size > 1:
        raise _frontend_value_error(
            "ParallelConfig",
            f"World size ({args.tensor_parallel_size}) is larger than the number of available "
            "GPUs (1) in this node. If this is intentional and you are using:\n"
            "- ray, set '--distributed-executor-backend ray'.\n"
            "- multiprocessing, set '--nnodes' appropriately.",
        )
    arch = target.architectures[0] if target.architectures else "LlamaForCausalLM"
    log.info("model.py:547", f"Resolved architecture: {arch}")
    assert st.gpu is not None
    st.dtype, fell_back = resolve_dtype(args.dtype, target.torch_dtype, st.gpu.capability)
    if fell_back:
        log.warning(
            "model.py:1880",
            auto_dtype_fallback_warning(st.gpu.gpu_name, st.gpu.capability_version, target.torch_dtype, st.dtype),
        )
    log.info("model.py:1510", f"Using max model len {st.max_model_len}")


def _resolve_speculation(st: Startup) -> None:
    args, log = st.args, st.log
    assert st.target is not None
    if args.speculative_config is not None:
        if st.faults.reject_speculative_config:
            raise SpecConfigError(
                "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig\n"
                f"method\n  Input should be 'ngram', 'eagle', 'medusa', 'mlp_speculator' or 'draft_model' "
                f"[type=literal_error, input_value={args.speculative_config.get('method')!r}, input_type=str]"
            ).to_failure()
        try:
            st.speculative = validate_speculative_config(
                args.speculative_config, st.target, args.tensor_parallel_size, lambda name: load_model(name, st.env)
            )
        except SpecConfigError as error:
            raise error.to_failure() from error
        raw_method = args.speculative_config.get("method") if isinstance(args.speculative_config, dict) else None
        if raw_method and raw_method.endswith("_mtp"):
            log.warning("speculative.py:389", f"method `{raw_method}` is deprecated and replaced with mtp.")


def _quantization(st: Startup) -> str | None:
    """model_config.quantization as vLLM resolves it (modelopt + NVFP4 -> modelopt_fp4)."""
    assert st.target is not None
    return effective_quantization(st.target.config.get("quantization_config"), st.args.quantization)


def _build_vllm_config(st: Startup) -> None:
    """VllmConfig.__post_init__, after create_engine_config built the SpeculativeConfig: the
    quantization config first (may the GPU run it?), then async scheduling."""
    args, log = st.args, st.log
    assert st.gpu is not None
    refusal = capability_refusal(_quantization(st), st.gpu.capability)
    if refusal is not None:
        raise _frontend_value_error("VllmConfig", refusal)
    spec = st.speculative
    capable = spec is None or spec.async_scheduling
    if args.async_scheduling is True and not capable:
        raise _frontend_value_error(
            "VllmConfig",
            "Currently, async scheduling is only supported with EAGLE/MTP/Draft "
            "Model/NGram GPU/DSpark kind of speculative decoding",
        )
    st.async_scheduling = capable if args.async_scheduling is None else bool(args.async_scheduling)
    if spec is not None and not capable and args.async_scheduling is None:
        log.warning(
            "vllm.py:507",
            f"Async scheduling not supported with {spec.method}-based speculative decoding and will be disabled.",
        )
    elif st.async_scheduling:
        log.info("vllm.py:531", "Asynchronous scheduling is enabled.")
    st.cudagraph_mode = _cudagraph_mode(st)


def _cudagraph_mode(st: Startup) -> str:
    """The CUDA graph mode the V1 model runner captures: NONE under --enforce-eager, else the
    compilation config's (FULL_AND_PIECEWISE by default), except that with a per-batch-size
    table (even an empty one: `uses_dynamic_speculative_decoding()` is `is not None`) a full
    mode falls back to PIECEWISE with a warning
    (VllmConfig._maybe_override_dynamic_sd_cudagraph_mode, vllm/config/vllm.py), which the V2
    model runner (VLLM_USE_V2_MODEL_RUNNER=1) does not need. The text is that of vLLM main
    (vllm-project/vllm, 2026-09; v0.27.1 logs it, vllm-project/vllm#48494); the first release
    with the feature may have worded it differently."""
    compilation = st.args.compilation_config if isinstance(st.args.compilation_config, dict) else {}
    mode = str(compilation.get("cudagraph_mode", "FULL_AND_PIECEWISE")).upper()
    if st.args.enforce_eager:
        return "NONE"
    spec = st.speculative
    if (spec is None or spec.num_speculative_tokens_per_batch_size is None or mode in ("PIECEWISE", "NONE")
            or st.env.get("VLLM_USE_V2_MODEL_RUNNER") == "1"):
        return mode
    st.log.warning(
        "vllm.py:855",
        "Dynamic speculative decoding changes the target verification length at runtime. "
        f"Overriding cudagraph_mode from {mode} to PIECEWISE for reliability. "
        "Use VLLM_USE_V2_MODEL_RUNNER=1 if you want to use full CUDA graphs.",
    )
    return "PIECEWISE"


def _compile_factors(st: Startup) -> dict[str, Any]:
    assert st.gpu is not None and st.target is not None
    spec = st.speculative
    return {
        "gpu_name": st.gpu.gpu_name,
        "device_class": st.gpu.device_class,
        "vllm_version": labelled_version(),
        "emulator_version": EMULATOR_VERSION,
        "model": st.target.name,
        "model_family": st.target.family,
        "precision": effective_precision(st.target, st.args.quantization),
        "dtype": st.args.dtype,
        "quantization": st.args.quantization,
        "kv_cache_dtype": st.args.kv_cache_dtype,
        "max_model_len": st.max_model_len,
        "speculative": None
        if spec is None
        else {"method": spec.method, "model": spec.model, "num_speculative_tokens": spec.num_speculative_tokens},
        "compilation_config": st.args.compilation_config,
    }


def _engine_config_line(st: Startup) -> str:
    args = st.args
    assert st.target is not None
    spec = "None" if st.speculative is None else st.speculative.vllm_repr()
    served = (args.served_model_name or [args.model])[0]
    return (
        f"Initializing a V1 LLM engine (v{labelled_version()}) with config: "
        f"model={args.model!r}, speculative_config={spec}, tokenizer={args.model!r}, "
        "skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
        f"tokenizer_revision=None, trust_remote_code={args.trust_remote_code}, "
        f"dtype=torch.{st.dtype}, max_seq_len={st.max_model_len}, download_dir=None, "
        "load_format=auto, tensor_parallel_size=1, pipeline_parallel_size=1, "
        "data_parallel_size=1, disable_custom_all_reduce=False, "
        f"quantization={_quantization(st)}, "
        f"enforce_eager={args.enforce_eager}, kv_cache_dtype={args.kv_cache_dtype}, "
        "device_config=cuda, structured_outputs_config=StructuredOutputsConfig("
        "backend='auto'), observability_config=ObservabilityConfig(), "
        f"seed={args.seed}, served_model_name={served}, enable_prefix_caching=True, "
        f"chunked_prefill_enabled=True, pooler_config=None, "
        f"async_scheduling={st.async_scheduling}, compilation_config="
        f"{{'level': {0 if args.enforce_eager else 3}, 'mode': "
        f"{0 if args.enforce_eager else 3}, 'cache_dir': ''}}"
    )


def _engine_core(st: Startup) -> Engine:
    """Everything vLLM's engine-core process does before it reports ready."""
    args, log, gpu, target = st.args, st.log, st.gpu, st.target
    assert gpu is not None and target is not None
    spec = st.speculative
    device = DEVICE_PROFILES[gpu.device_class]
    max_num_seqs = args.max_num_seqs or DEFAULT_MAX_NUM_SEQS
    batched = args.max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS
    log.info("core.py:77", _engine_config_line(st), ENGINE_CORE)
    if spec is not None:
        log.warning(
            "__init__.py:202", "min_p and logit_bias parameters won't work with speculative decoding.", ENGINE_CORE
        )
    st.pause(st.faults.startup_delay_s)
    # The worker's init_device checks the dtype before it joins the process group.
    refusal = bf16_refusal(st.dtype, gpu.capability, gpu.gpu_name, gpu.capability_version)
    if refusal is not None:
        raise _dtype_failure(refusal)
    log.info(
        "parallel_state.py:1208",
        "rank 0 in world size 1 is assigned as DP rank 0, PP rank 0, TP rank 0, EP rank 0",
        ENGINE_CORE,
    )

    # On unified memory the page cache counts as used at this check (vllm#48140): the lab's
    # EMULATED one, as it stands now (the toolkit drops it just before the start).
    st.page_cache = load_page_cache(st.env, hub_cache_dir(st.env))
    # Other servers running on the unit hold their shares (the candidate beside the baseline):
    # used memory at this check, as the real one sees it (EMULATED, held.py).
    others = [] if st.page_cache is None else held_by_others(page_cache_dir(st.env))
    if others:
        gpu = gpu.also_used(round(held_total_gib(others) * 1024))
        log.info("held.py:1", describe_held(others), ENGINE_CORE)
    memory = plan_memory(
        gpu,
        target,
        spec,
        args.gpu_memory_utilization,
        st.max_model_len,
        max_num_seqs,
        batched,
        args.kv_cache_dtype,
        args.enforce_eager,
        args.quantization,
        page_cache_gib=0.0 if st.page_cache is None else st.page_cache.gib,
    )
    st.memory = memory
    if st.page_cache is not None:
        log.info("pagecache.py:1", describe_page_cache(st.page_cache, memory.page_cache_gib), ENGINE_CORE)
    if memory.failure_kind == "free_memory":
        raise _engine_failure(memory.failure, "gpu_worker.py", "init_device")
    if st.page_cache is not None:
        # From here on this server holds its share, for as long as its process lives.
        hold_memory(page_cache_dir(st.env), memory.requested_gib, args.model, args.port)

    draft = spec.draft if spec is not None and spec.draft is not target else None
    has_drafter_graph = spec is not None and spec.method != "ngram"
    st.compile_hash = compile_hash(_compile_factors(st))
    root = cache_root(st.env)
    disabled = st.env.get("VLLM_DISABLE_COMPILE_CACHE", "") in ("1", "true", "True")
    st.compile_cache_hit = not args.enforce_eager and not disabled and is_cached(root, st.compile_hash)
    phases = startup_phases(
        device,
        effective_weights_gib(target, args.quantization),
        draft.weights_gib if draft else 0.0,
        has_drafter_graph,
        bool(st.compile_cache_hit),
        args.enforce_eager,
    )

    log.info("gpu_model_runner.py:2602", f"Starting to load model {args.model}...", ENGINE_CORE)
    if memory.failure_kind == "weights_oom":
        st.pause(phases["load_weights"] * 0.6)
        raise _engine_failure(memory.failure, "gpu_model_runner.py", "load_model")
    st.pause(phases["load_weights"])
    load_s = phases["load_weights"]
    log.info("default_loader.py:267", f"Loading weights took {load_s * 0.85:.2f} seconds", ENGINE_CORE)
    if spec is not None and draft is not None:
        log.info("gpu_model_runner.py:2633", f"Loading drafter model {draft.name}...", ENGINE_CORE)
    log.info(
        "gpu_model_runner.py:2654",
        f"Model loading took {memory.weights_gib:.4f} GiB and {load_s:.6f} seconds",
        ENGINE_CORE,
    )
    if st.page_cache is not None:
        _record_read(st, [target] if draft is None else [target, draft])

    if not args.enforce_eager:
        rank = rank_dir(root, st.compile_hash)
        log.info("backends.py:548", f"Using cache directory: {rank} for vLLM's torch.compile", ENGINE_CORE)
        log.info("backends.py:559", f"Dynamo bytecode transform time: {phases['compile'] * 0.12:.2f} s", ENGINE_CORE)
        st.pause(phases["compile"])
        if st.compile_cache_hit:
            log.info(
                "backends.py:197",
                "Directly load the compiled graph(s) for dynamic shape "
                f"from the cache, took {phases['compile'] * 0.8:.3f} s",
                ENGINE_CORE,
            )
        else:
            log.info(
                "backends.py:215",
                f"Compiling a graph for dynamic shape takes {phases['compile'] * 0.85:.2f} s",
                ENGINE_CORE,
            )
            if not disabled:
                write_cache(
                    root, st.compile_hash, _compile_factors(st), has_drafter_graph, st.settings.cache_fill_bytes
                )
        log.info("monitor.py:34", f"torch.compile takes {phases['compile']:.2f} s in total", ENGINE_CORE)

    st.pause(phases["profile"])
    log.info("gpu_worker.py:298", f"Available KV cache memory: {memory.kv_gib:.2f} GiB", ENGINE_CORE)
    if memory.failure_kind in ("no_kv", "kv_too_small"):
        raise _engine_failure(memory.failure, "kv_cache_utils.py", "check_enough_kv_cache_memory")
    log.info("kv_cache_utils.py:1087", f"GPU KV cache size: {memory.kv_tokens:,} tokens", ENGINE_CORE)
    log.info(
        "kv_cache_utils.py:1091",
        f"Maximum concurrency for {st.max_model_len:,} tokens per request: {memory.max_concurrency:.2f}x",
        ENGINE_CORE,
    )
    if st.faults.never_ready:
        log.info(
            "gpu_model_runner.py:3480",
            "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 0%|          | 0/67",
            ENGINE_CORE,
        )
        log.plain("specfleet vLLM EMULATOR fault switch: never_ready (the port will never listen)")
        threading.Event().wait()  # hangs here until the process is killed
    if not args.enforce_eager:
        st.pause(phases["graph_capture"])
        log.info(
            "gpu_model_runner.py:3553",
            f"Graph capturing finished in {phases['graph_capture']:.0f} secs, took {memory.graph_gib:.2f} GiB",
            ENGINE_CORE,
        )
    total = sum(phases.values()) - phases["init"] - phases["load_weights"]
    log.info(
        "core.py:210", f"init engine (profile, create kv cache, warmup model) took {total:.2f} seconds", ENGINE_CORE
    )

    perf = build_engine_perf(
        gpu, target, spec, args.quantization, args.kv_cache_dtype, st.async_scheduling, args.enforce_eager
    )
    if spec is not None:
        # EngineCore builds its Scheduler last; the Scheduler expands (and checks) the table.
        try:
            lookup = dynamic_sd_lookup(
                spec.num_speculative_tokens_per_batch_size, max_num_seqs, spec.num_speculative_tokens
            )
        except DynamicScheduleError as error:
            raise error.to_failure() from error
        perf = dataclasses.replace(perf, draft_lookup=lookup)
    if st.cudagraph_mode == "PIECEWISE":
        # A gap at each layer's graph boundary on every forward pass (perfmodel.PIECEWISE_GAP_S).
        gap = PIECEWISE_GAP_S if st.faults.piecewise_gap_us is None else st.faults.piecewise_gap_us * 1e-6
        perf = dataclasses.replace(perf, piecewise_gap_s=gap)
    served = (args.served_model_name or [args.model])[0]
    metrics = VllmMetrics(
        served,
        spec.num_speculative_tokens if spec else None,
        {
            "block_size": "16",
            "cache_dtype": args.kv_cache_dtype,
            "gpu_memory_utilization": str(args.gpu_memory_utilization),
            "num_gpu_blocks": str(memory.kv_tokens // 16),
            "enable_prefix_caching": "True",
        },
    )
    noise = NoiseModel.for_unit(st.settings.unit_id, st.settings.noise)
    return Engine(
        perf,
        metrics,
        memory.kv_tokens,
        max_num_seqs,
        st.settings.time_scale,
        noise,
        st.faults.hang_mid_stream_after_tokens,
        power=load_power_monitor(st.env, log.plain),
        loaded_draft_slowdown=st.faults.loaded_draft_slowdown,
        draft_acceptance=st.faults.acceptance_for,
    )


def _record_read(st: Startup, models: list[ModelInfo]) -> None:
    """The weights just read stay in the unit's page cache after this server stops: say so
    for the next start. Best effort: a read-only mount must not stop this one."""
    assert st.page_cache is not None
    try:
        st.page_cache_record = st.page_cache.record_read(models)
    except OSError as exc:
        st.log.plain(f"specfleet vLLM EMULATOR: could not record the weights read in the EMULATED page cache ({exc})")


def _engine_failure(message: str | None, module: str, func: str) -> StartupFailure:
    return StartupFailure(
        exception_text=message or "RuntimeError: engine failure",
        in_engine_core=True,
        error_lines=["EngineCore failed to start."],
        frames=[
            (
                f"{VLLM_SITE}/vllm/v1/engine/core.py",
                712,
                "run_engine_core",
                "engine_core = EngineCoreProc(*args, **kwargs)",
            ),
            (f"{VLLM_SITE}/vllm/v1/engine/core.py", 92, "__init__", "self._initialize_kv_caches(vllm_config)"),
            (f"{VLLM_SITE}/vllm/v1/worker/{module}", 240, func, "raise ValueError("),
        ],
    )


def _dtype_failure(message: str) -> StartupFailure:
    """CudaPlatform.check_if_supports_dtype's ValueError, raised in the engine core's worker."""
    return StartupFailure(
        exception_text=f"ValueError: {message}",
        in_engine_core=True,
        error_lines=["EngineCore failed to start."],
        frames=ENGINE_FRAMES
        + [
            (
                f"{VLLM_SITE}/vllm/v1/executor/uniproc_executor.py",
                48,
                "_init_executor",
                "self.driver_worker.init_device()",
            ),
            (
                f"{VLLM_SITE}/vllm/v1/worker/gpu_worker.py",
                205,
                "init_device",
                "current_platform.check_if_supports_dtype(self.model_config.dtype)",
            ),
            (f"{VLLM_SITE}/vllm/platforms/cuda.py", 491, "check_if_supports_dtype", "raise ValueError("),
        ],
    )


def _emulator_info(st: Startup, engine: Engine) -> dict[str, Any]:
    assert st.gpu is not None and st.target is not None and st.memory is not None
    return {
        **emulator_label(),
        "emulator_version": EMULATOR_VERSION,
        "time_scale": st.settings.time_scale,
        "time_scale_note": "durations the server reports (metrics, logs) are wall-clock; "
        "emulated seconds = wall seconds / time_scale, emulated tokens/s "
        "= wall tokens/s * time_scale",
        "noise": st.settings.noise,
        "unit_id": st.settings.unit_id,
        "unit_factor": engine.noise.unit_factor,
        "device_class": st.gpu.device_class,
        "gpu_name": st.gpu.gpu_name,
        "model": st.target.name,
        "served_model_names": st.args.served_model_name or [st.args.model],
        "precision": effective_precision(st.target, st.args.quantization),
        "weights_gib": st.memory.weights_gib,
        "kv_cache_tokens": st.memory.kv_tokens,
        "max_model_len": st.max_model_len,
        "speculative": None if st.speculative is None else st.speculative.as_dict(),
        "async_scheduling": st.async_scheduling,
        "compile_cache": {"hash": st.compile_hash, "hit": st.compile_cache_hit},
        "page_cache": page_cache_info(
            st.page_cache, page_cache_dir(st.env), st.memory.page_cache_gib, st.page_cache_record
        ),
        "faults": st.faults.as_dict(),
        "max_logprobs": st.args.max_logprobs,
        "workload_rule": "code_edit if the prompt holds code (``` or >=3 code-like lines, "
        ">=25% of lines); structured if it asks for lists/steps/tables/"
        "JSON/etc.; otherwise chat",
    }


def start(
    args: argparse.Namespace, env: Mapping[str, str], log: VllmLogger
) -> tuple[EmulatorHTTPServer, ServerState, Startup]:
    """Run startup up to (not including) listening. Raises StartupFailure."""
    settings = runtime_settings(env)
    try:
        faults = for_server(load_faults(env), args.speculative_config is not None)
    except ValueError as exc:
        raise StartupFailure(exception_text=f"RuntimeError: specfleet emulator: invalid faults file: {exc}") from exc
    st = Startup(args=args, env=env, log=log, settings=settings, faults=faults)
    if faults.any:
        log.plain(f"specfleet vLLM EMULATOR fault switches active: {faults.as_dict()}")

    gpu_failure: StartupFailure | None = None
    try:
        st.gpu = load_gpu_spec(env)
        if faults.drafter_unbudgeted_mib and args.speculative_config is not None:
            st.gpu = st.gpu.also_used(faults.drafter_unbudgeted_mib)
        log.info("__init__.py:216", "Automatically detected platform cuda.")
    except StartupFailure as failure:
        # vLLM only fails later, when the engine config asks for the device type.
        gpu_failure = failure
        if failure.exception_text == NO_DEVICE_MESSAGE:
            log.warning(
                "__init__.py:62", "Exception happens when checking CUDA platform: NVML Shared Library Not Found"
            )
            log.info("__init__.py:227", "No platform detected, vLLM is running on UnspecifiedPlatform")
    log.info("api_server.py:1839", f"vLLM API server version {labelled_version()}")
    log.info("utils.py:233", f"non-default args: {non_default_args(args)}")

    device = DEVICE_PROFILES[st.gpu.device_class] if st.gpu else DEVICE_PROFILES["thor"]
    st.pause(device.startup_init_s)
    server = make_server_or_fail(args.host or "0.0.0.0", args.port)
    try:
        if gpu_failure is not None:
            raise gpu_failure
        _resolve_target(st)
        _resolve_speculation(st)
        _build_vllm_config(st)
        engine = _engine_core(st)
        assert st.target is not None
        if st.target.needs_tiktoken and not tiktoken_files_present(env):
            raise harmony_failure()
    except BaseException:
        server.server_close()
        raise
    served = args.served_model_name or [args.model]
    defaults = {} if args.generation_config == "vllm" else st.target.generation_defaults()
    state = ServerState(
        served_model_names=list(served),
        model_root=args.model,
        max_model_len=st.max_model_len,
        engine=engine,
        metrics=engine.metrics,
        log=log,
        speculative=st.speculative,
        api_keys=args.api_key,
        force_include_usage=args.enable_force_include_usage,
        generation_defaults=defaults,
        crash_after_requests=faults.crash_after_requests,
        engine_seed=args.seed,
        max_logprobs=args.max_logprobs,
        vocab_size=st.target.vocab_size,
        faults=faults,
    )
    state.emulator_info = _emulator_info(st, engine)
    server.RequestHandlerClass.state = state  # type: ignore[attr-defined]
    log.info("api_server.py:1611", "Supported_tasks: ['generate']")
    if defaults:
        log.info("serving_responses.py:120", f"Using default chat sampling params from model: {defaults}")
    return server, state, st


def make_server_or_fail(host: str, port: int) -> EmulatorHTTPServer:
    # The real server binds before building the engine; a clash fails right away.
    try:
        return make_server(None, host, port)
    except OSError as exc:
        raise StartupFailure(exception_text=f"OSError: [Errno {exc.errno}] {exc.strerror}") from exc


def _stats_logger(state: ServerState, interval_s: float) -> None:
    """vLLM's periodic LoggingStatLogger lines (counts reset every interval)."""
    engine, log = state.engine, state.log
    while True:
        time.sleep(interval_s)
        stats, running, waiting, kv_usage = engine.take_interval()
        elapsed = max(1e-9, time.monotonic() - stats.started)
        if not (stats.prompt_tokens or stats.generation_tokens or running or waiting):
            continue
        log.info(
            "loggers.py:127",
            f"Engine 000: Avg prompt throughput: {stats.prompt_tokens / elapsed:.1f} "
            f"tokens/s, Avg generation throughput: "
            f"{stats.generation_tokens / elapsed:.1f} tokens/s, Running: {running} reqs, "
            f"Waiting: {waiting} reqs, GPU KV cache usage: {kv_usage * 100:.1f}%, "
            "Prefix cache hit rate: 0.0%",
        )
        if stats.drafts:
            per_position = ", ".join(f"{count / stats.drafts:.3f}" for count in stats.accepted_per_position)
            log.info(
                "metrics.py:96",
                "SpecDecoding metrics: Mean acceptance length: "
                f"{1 + stats.accepted / stats.drafts:.2f}, Accepted throughput: "
                f"{stats.accepted / elapsed:.2f} tokens/s, Drafted throughput: "
                f"{stats.draft_tokens / elapsed:.2f} tokens/s, Accepted: "
                f"{stats.accepted} tokens, Drafted: {stats.draft_tokens} tokens, "
                f"Per-position acceptance rate: {per_position}, Avg Draft acceptance "
                f"rate: {100.0 * stats.accepted / max(1, stats.draft_tokens):.1f}%",
            )


def _install_signal_handlers(log: VllmLogger) -> None:
    # SIGUSR1 dumps every thread's stack to stderr: how to see where a wedged unit hangs.
    faulthandler.register(signal.SIGUSR1, all_threads=True)

    def handle(signum: int, _frame: object) -> None:
        log.info("launcher.py:101", "Shutting down FastAPI HTTP server.")
        log.uvicorn("Shutting down")
        os._exit(0)

    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            signal.signal(signum, handle)
        except ValueError:
            pass  # not the main thread (tests drive start() directly)


def serve(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    log = VllmLogger()
    _install_signal_handlers(log)
    try:
        server, state, st = start(args, env, log)
    except StartupFailure as failure:
        failure.emit(log)
        return failure.exit_code
    host = args.host or "0.0.0.0"
    state.engine.start()
    log.info("api_server.py:1880", f"Starting vLLM API server 0 on http://{host}:{args.port}")
    log.info("launcher.py:29", "Available routes are:")
    for line in route_lines():
        log.info("launcher.py:37", line)
    log.uvicorn(f"Started server process [{os.getpid()}]")
    log.uvicorn("Waiting for application startup.")
    server.server_activate()  # listen() only now: until here connects are refused
    log.uvicorn("Application startup complete.")
    if not args.disable_log_stats:
        interval = max(0.05, st.settings.log_interval_s * st.settings.time_scale)
        threading.Thread(target=_stats_logger, args=(state, interval), daemon=True, name="stat-logger").start()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    return 0
