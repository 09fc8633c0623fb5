"""`trtllm-serve` startup and serving: the emulator's engine and HTTP server, TensorRT-LLM-shaped.

Sequence (each phase sleeps its modelled duration x SPECFLEET_EMULATOR_TIME_SCALE), in the
order the real server runs it: no GPU fails at `import tensorrt_llm`; the CLI's KvCacheConfig,
the options file and TorchLlmArgs validate; the port is bound (not listening); the target and
draft models resolve through the Hugging Face cache; the executor loads the weights and sizes
the KV cache by TensorRT-LLM's rule (trtllm_runtime.py); CUDA graphs and the autotuner warm
up; uvicorn starts and the port listens after "Application startup complete.".

What differs from the `vllm serve` path is only what TensorRT-LLM does differently: its logs,
its memory rule, `/version`, `/v1/models` cards and `/metrics` (JSON iteration statistics,
never speculative-decoding counters). Engine, token pacing, OpenAI endpoints and fault
switches are the emulator's shared ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import EMULATOR_VERSION, emulated_trtllm_version, trtllm_server_header
from .engine import Engine, NoiseModel, StepRecord
from .errors import Frame, StartupFailure, render_traceback
from .faults import Faults, for_server, load_faults
from .gpu import GpuSpec, load_gpu_spec
from .hub import ModelInfo, load_model
from .memory import kv_bytes_per_token
from .metrics import VllmMetrics
from .perfmodel import DEVICE_PROFILES, build_engine_perf, startup_phases
from .server import TRTLLM, EmulatorHTTPServer, ServerState, make_server
from .specconfig import ResolvedSpeculation
from .startup import RuntimeSettings, runtime_settings
from .trtllm_cli import ServeArgs
from .trtllm_logs import TrtllmLogger
from .trtllm_options import (
    DECODING_TYPES,
    FieldError,
    LlmArgsError,
    engine_namespace,
    resolve_llm_args,
    validate_cli_kv_fraction,
    validation_error_text,
)
from .trtllm_runtime import IterationStatsQueue, TrtllmMemoryPlan, executor_oom, iteration_log_line, plan_trtllm_memory
from .trtllm_yaml import YamlError, load_yaml

LABEL = "specfleet TensorRT-LLM EMULATOR"
BANNER = (
    "{label} {version}: this process is NOT TensorRT-LLM. It is the labelled stand-in for "
    "`trtllm-serve` (TensorRT-LLM {trtllm}, pytorch backend) used by the specfleet lab (no GPU "
    "here); it emulates its CLI, options YAML, API, logs and failures."
)

SITE = "/usr/local/lib/python3.12/dist-packages"
SERVE_FRAMES: list[Frame] = [
    ("/usr/local/bin/trtllm-serve", 8, "<module>", "sys.exit(main())"),
    (f"{SITE}/click/core.py", 1161, "__call__", "return self.main(*args, **kwargs)"),
    (f"{SITE}/click/core.py", 788, "invoke", "return __callback(*args, **kwargs)"),
    (
        f"{SITE}/tensorrt_llm/commands/serve.py",
        367,
        "serve",
        "launch_server(host, port, llm_args, metadata_server_cfg,",
    ),
]
OPTIONS_FRAMES: list[Frame] = SERVE_FRAMES[:3] + [
    (f"{SITE}/tensorrt_llm/commands/serve.py", 356, "serve", "llm_args = update_llm_args_with_extra_dict(llm_args,"),
]
LLM_ARGS_FRAMES: list[Frame] = SERVE_FRAMES + [
    (f"{SITE}/tensorrt_llm/commands/serve.py", 158, "launch_server", "llm = PyTorchLLM(**llm_args)"),
    (f"{SITE}/tensorrt_llm/llmapi/llm.py", 1085, "__init__", "super().__init__(model, tokenizer, tokenizer_mode,"),
    (f"{SITE}/tensorrt_llm/llmapi/llm.py", 126, "__init__", "self.args = llm_args_cls.from_kwargs("),
]
MODEL_FRAMES: list[Frame] = LLM_ARGS_FRAMES[:-1] + [
    (f"{SITE}/tensorrt_llm/llmapi/llm.py", 181, "__init__", "self._build_model()"),
    (f"{SITE}/tensorrt_llm/llmapi/llm_utils.py", 640, "_download_hf_model", "hf_model_dir = download_hf_model("),
]
EXECUTOR_FRAMES: list[Frame] = [
    (f"{SITE}/tensorrt_llm/executor/worker.py", 254, "worker_main", "worker: GenerationExecutorWorker = worker_cls("),
    (
        f"{SITE}/tensorrt_llm/_torch/pyexecutor/py_executor_creator.py",
        412,
        "create_py_executor",
        "with mem_monitor.observe_creation_stage(",
    ),
    (
        f"{SITE}/tensorrt_llm/_torch/pyexecutor/py_executor_creator.py",
        198,
        "observe_creation_stage",
        "raise RuntimeError(explanation) from e",
    ),
]
PROXY_FRAMES: list[Frame] = LLM_ARGS_FRAMES[:-1] + [
    (f"{SITE}/tensorrt_llm/llmapi/llm.py", 1090, "_build_model", "self._executor = self._executor_cls.create("),
    (
        f"{SITE}/tensorrt_llm/executor/proxy.py",
        330,
        "_start_executor_workers",
        'raise RuntimeError("Executor worker returned error") from ready_signal',
    ),
]


def print_banner() -> None:
    print(BANNER.format(label=LABEL, version=EMULATOR_VERSION, trtllm=emulated_trtllm_version()), flush=True)


@dataclass
class TrtllmFailure(StartupFailure):
    """A startup failure printed the TensorRT-LLM way: errors logged by the executor worker,
    its traceback, then (for executor failures) the proxy's "Executor worker returned error"."""

    from_executor_worker: bool = False

    def emit(self, log: Any) -> None:
        for line in self.error_lines:
            log.error("", line)
        self.emit_traceback(log, self.frames or SERVE_FRAMES)
        if self.from_executor_worker:
            log.traceback(render_traceback(PROXY_FRAMES, "RuntimeError: Executor worker returned error"))


def as_trtllm(failure: StartupFailure, frames: list[Frame]) -> TrtllmFailure:
    """A failure of the shared helpers (hub resolution, ...) with TensorRT-LLM's stack."""
    return TrtllmFailure(exception_text=failure.exception_text, frames=frames, cause_text=failure.cause_text)


def no_gpu_failure() -> TrtllmFailure:
    """A container without the NVIDIA runtime: TensorRT-LLM's bindings cannot load libcuda."""
    return TrtllmFailure(
        exception_text="ImportError: libcuda.so.1: cannot open shared object file: No such file or directory",
        frames=[
            ("/usr/local/bin/trtllm-serve", 5, "<module>", "from tensorrt_llm.commands.serve import main"),
            (f"{SITE}/tensorrt_llm/__init__.py", 66, "<module>", "import tensorrt_llm.bindings  # noqa"),
        ],
    )


def read_options(path: str | None) -> Any:
    """The options file as `yaml.safe_load` returns it; {} without `--extra_llm_api_options`."""
    if path is None:
        return {}
    try:
        text = Path(path).read_text()
    except FileNotFoundError as exc:
        raise TrtllmFailure(
            exception_text=f"FileNotFoundError: [Errno 2] No such file or directory: {path!r}",
            frames=SERVE_FRAMES[:3]
            + [(f"{SITE}/tensorrt_llm/commands/serve.py", 353, "serve", "with open(extra_llm_api_options, 'r') as f:")],
        ) from exc
    except OSError as exc:
        raise TrtllmFailure(exception_text=f"{type(exc).__name__}: {exc}", frames=SERVE_FRAMES) from exc
    try:
        return load_yaml(text, path)
    except YamlError as error:
        raise TrtllmFailure(exception_text=error.text, frames=SERVE_FRAMES) from error


def reject_as_unknown_decoding_type(options: Any) -> None:
    """Fault switch `reject_speculative_config`: the runtime does not know the decoding type,
    as an older TensorRT-LLM rejects a name it predates."""
    spec = options.get("speculative_config") if isinstance(options, dict) else None
    if not isinstance(spec, dict):
        return
    tag = spec.get("decoding_type")
    expected = ", ".join(f"'{name}'" for name in DECODING_TYPES if name != tag)
    error = FieldError(
        ("speculative_config",),
        f"Input tag {str(tag)!r} found using 'decoding_type' does not match any of the expected tags: {expected}",
        "union_tag_invalid",
        spec,
    )
    raise LlmArgsError(validation_error_text("TorchLlmArgs", [error]))


def resolve_model(name: str, env: Mapping[str, str]) -> ModelInfo:
    """A checkpoint directory or a Hugging Face repo id, as the LLM API resolves it.

    A path that is no directory is taken for a repo id, which huggingface_hub refuses; a
    directory without config.json fails in transformers. Repo ids go through the emulator's
    hub cache (LocalEntryNotFoundError offline, GatedRepoError, ...).
    """
    looks_like_path = name.startswith(("/", "./", "../"))
    path = Path(name)
    if looks_like_path and not path.is_dir():
        raise TrtllmFailure(
            exception_text=(
                "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
                f"'namespace/repo_name': '{name}'. Use `repo_type` argument if needed."
            ),
            frames=MODEL_FRAMES,
        )
    if path.is_dir() and not (path / "config.json").is_file():
        raise TrtllmFailure(
            exception_text=(
                f"OSError: {name} does not appear to have a file named config.json. Checkout "
                f"'https://huggingface.co/{name}/tree/None' for available files."
            ),
            frames=MODEL_FRAMES,
        )
    try:
        return load_model(name, env)
    except TrtllmFailure:
        raise
    except StartupFailure as failure:
        raise as_trtllm(failure, MODEL_FRAMES) from failure


def served_name(model: str) -> str:
    """OpenAIServer serves a local checkpoint under its directory name, a repo under its id."""
    path = Path(model)
    return path.name if path.is_dir() else model


def resolve_speculation(
    args: argparse.Namespace, target: ModelInfo, env: Mapping[str, str]
) -> ResolvedSpeculation | None:
    """The engine's view of the options' speculative_config (already validated)."""
    spec = args.speculative_config
    if spec is None:
        return None
    method = spec["method"]
    draft: ModelInfo | None = None
    model: str | None = spec.get("model")
    if method in ("eagle3", "draft_model"):
        assert model is not None
        draft = resolve_model(model, env)
    elif method == "mtp":
        draft, model = target, target.name  # the MTP layers are the target's own
    return ResolvedSpeculation(
        method=method,
        model=model,
        num_speculative_tokens=spec["num_speculative_tokens"],
        prompt_lookup_min=spec.get("prompt_lookup_min"),
        prompt_lookup_max=spec.get("prompt_lookup_max"),
        draft=draft,
        draft_tensor_parallel_size=1,
    )


def memory_failure(plan: TrtllmMemoryPlan) -> TrtllmFailure:
    oom = executor_oom(plan)
    return TrtllmFailure(
        cause_text=oom.torch_error,
        exception_text=f"RuntimeError: {oom.explanation}",
        frames=EXECUTOR_FRAMES,
        # One log record: Python's logging prefixes only its first line.
        error_lines=[f"Failed to initialize executor on rank 0: {oom.explanation}"],
        from_executor_worker=True,
    )


def emulator_limit(message: str) -> TrtllmFailure:
    """Something real TensorRT-LLM may do that the emulator does not model: said plainly."""
    return TrtllmFailure(exception_text=f"NotImplementedError: {LABEL}: {message}", frames=LLM_ARGS_FRAMES)


@dataclass
class TrtllmStartup:
    args: argparse.Namespace
    env: Mapping[str, str]
    log: TrtllmLogger
    settings: RuntimeSettings
    faults: Faults
    gpu: GpuSpec
    target: ModelInfo | None = None
    speculative: ResolvedSpeculation | None = None
    max_seq_len: int = 0
    memory: TrtllmMemoryPlan | None = None
    async_scheduling: bool = True

    def pause(self, emulated_seconds: float) -> None:
        if emulated_seconds > 0 and self.settings.time_scale > 0:
            time.sleep(emulated_seconds * self.settings.time_scale)


def step_observer(
    log: TrtllmLogger, stats: IterationStatsQueue | None, print_iter_log: bool, max_batch_size: int
) -> Callable[[StepRecord], None] | None:
    """What each executor iteration leaves behind: a stats record, an iteration log line."""
    if stats is None and not print_iter_log:
        return None

    def observe(step: StepRecord) -> None:
        if stats is not None:
            stats.record(step)
        if print_iter_log:
            log.trt_info(iteration_log_line(step, max_batch_size))

    return observe


def concurrency_lookup(max_concurrency: int, tokens: int, max_batch_size: int) -> tuple[int, ...]:
    """The draft length by batch size (index = requests in the step, as the engine's
    ``draft_lookup``): Drafter.should_use_spec_decode drafts for a step of at most
    ``max_concurrency`` requests and none above (tensorrt_llm/_torch/speculative/drafter.py)."""
    return tuple(tokens if size <= max_concurrency else 0 for size in range(max_batch_size + 1))


def build_engine(st: TrtllmStartup) -> tuple[Engine, IterationStatsQueue | None]:
    """The executor: weights, KV cache by TensorRT-LLM's rule, CUDA graphs, autotuner."""
    args, log, gpu, target, spec = st.args, st.log, st.gpu, st.target, st.speculative
    assert target is not None
    draft = spec.draft if spec is not None and spec.draft is not target else None
    per_token = kv_bytes_per_token(target, args.kv_cache_dtype)
    if spec is not None and spec.uses_draft_kv_cache and draft is not None:
        per_token += kv_bytes_per_token(draft, args.kv_cache_dtype)
    plan = plan_trtllm_memory(
        gpu, target.weights_gib, draft.weights_gib if draft else 0.0, args.kv_cache_free_gpu_memory_fraction, per_token
    )
    st.memory = plan
    phases = startup_phases(
        DEVICE_PROFILES[gpu.device_class],
        target.weights_gib,
        draft.weights_gib if draft else 0.0,
        spec is not None and spec.method != "ngram",
        compile_cache_hit=True,  # no torch.compile: the warm figure stands in for autotuning
        enforce_eager=args.enforce_eager,
    )
    st.pause(st.faults.startup_delay_s)
    if plan.failed_component == "Model":
        st.pause(phases["load_weights"] * 0.6)
        raise memory_failure(plan)
    st.pause(phases["load_weights"])
    log.trt_info(f"Use {target.weights_gib:.2f} GB for model weights.")
    if draft is not None:
        if plan.failed_component is not None and plan.failed_component != "KV cache":
            raise memory_failure(plan)
        log.trt_info(f"Loaded draft model weights from {spec.model if spec else draft.name}.")
    weights = target.weights_gib + (draft.weights_gib if draft else 0.0)
    log.trt_info(f"Memory used after loading model weights (inside torch) in memory usage profiling: {weights:.2f} GiB")
    st.pause(phases["profile"])
    if plan.failed_component is not None:
        raise memory_failure(plan)
    log.trt_info(
        f"[MemUsageChange] Allocated {plan.kv_gib:.2f} GiB for max tokens in paged KV cache ({plan.kv_tokens})."
    )
    if plan.kv_tokens < st.max_seq_len:
        log.trt_warning(
            f"max_seq_len [{st.max_seq_len}] exceeds the KV cache capacity [{plan.kv_tokens}] tokens; "
            "a single sequence cannot use its whole length."
        )
    log.trt_info(
        f"max_seq_len={st.max_seq_len}, max_num_requests={args.max_num_seqs}, "
        f"max_num_tokens={args.max_num_batched_tokens}, max_batch_size={args.max_num_seqs}"
    )
    if st.faults.never_ready:
        log.plain(f"{LABEL} fault switch: never_ready (the port will never listen)")
        threading.Event().wait()  # hangs here until the process is killed
    if not args.enforce_eager:
        st.pause(phases["graph_capture"])
        log.trt_info(f"Run generation only CUDA graph warmup for batch size={args.cuda_graph_max_batch_size}")
    if args.enable_autotuner:
        log.trt_info("[Autotuner] Autotuning process starts ...")
        st.pause(phases["compile"])
        log.trt_info("[Autotuner] Autotuning process ends")

    perf = build_engine_perf(gpu, target, spec, None, args.kv_cache_dtype, st.async_scheduling, args.enforce_eager)
    if spec is not None and args.speculative_max_concurrency is not None:
        lookup = concurrency_lookup(args.speculative_max_concurrency, spec.num_speculative_tokens, args.max_num_seqs)
        perf = dataclasses.replace(perf, draft_lookup=lookup)
    # The shared engine keeps vLLM-named counters internally; this flavour never serves them.
    metrics = VllmMetrics(served_name(args.model), spec.num_speculative_tokens if spec else None, {})
    stats = IterationStatsQueue(plan, args.max_num_seqs, args.max_stats_len) if args.enable_iter_perf_stats else None
    engine = Engine(
        perf,
        metrics,
        plan.kv_tokens,
        args.max_num_seqs,
        st.settings.time_scale,
        NoiseModel.for_unit(st.settings.unit_id, st.settings.noise),
        st.faults.hang_mid_stream_after_tokens,
        step_observer=step_observer(log, stats, args.print_iter_log, args.max_num_seqs),
        draft_acceptance=st.faults.acceptance_for,
    )
    return engine, stats


def emulator_info(st: TrtllmStartup, engine: Engine) -> dict[str, Any]:
    assert st.target is not None and st.memory is not None
    spec = st.speculative
    return {
        "emulator": True,
        "name": "specfleet-vllm-emulator",
        "engine": "trtllm-serve",
        "trtllm_version_emulated": emulated_trtllm_version(),
        "emulator_version": EMULATOR_VERSION,
        "time_scale": st.settings.time_scale,
        "time_scale_note": "durations the server reports (iteration stats, logs) are wall-clock; "
        "emulated seconds = wall seconds / time_scale",
        "noise": st.settings.noise,
        "unit_id": st.settings.unit_id,
        "unit_factor": engine.noise.unit_factor,
        "device_class": st.gpu.device_class,
        "gpu_name": st.gpu.gpu_name,
        "model": st.target.name,
        "served_model_names": [served_name(st.args.model)],
        "precision": st.target.precision,
        "weights_gib": round(st.memory.target_weights_gib + st.memory.draft_weights_gib, 3),
        "free_gpu_memory_fraction": st.memory.free_gpu_memory_fraction,
        "kv_cache_gib": round(st.memory.kv_gib, 3),
        "kv_cache_tokens": st.memory.kv_tokens,
        "max_seq_len": st.max_seq_len,
        "max_batch_size": st.args.max_num_seqs,
        "speculative": None
        if spec is None
        else {
            "decoding_type": st.args.speculative_decoding_type,
            "method": spec.method,
            "model": spec.model,
            "max_draft_len": spec.num_speculative_tokens,
            "max_matching_ngram_size": spec.prompt_lookup_max,
        },
        "overlap_scheduler": st.async_scheduling,
        "iteration_stats": st.args.enable_iter_perf_stats,
        "faults": st.faults.as_dict(),
    }


def start(
    args: argparse.Namespace,
    env: Mapping[str, str],
    log: TrtllmLogger,
    faults: Faults,
    log_lines: tuple[tuple[str, str], ...] = (),
) -> tuple[EmulatorHTTPServer, ServerState, TrtllmStartup]:
    """Run startup up to (not including) listening. Raises TrtllmFailure."""
    settings = runtime_settings(env)
    gpu = load_gpu_spec(env)
    if faults.drafter_unbudgeted_mib and args.speculative_config is not None:
        gpu = gpu.also_used(faults.drafter_unbudgeted_mib)
    st = TrtllmStartup(args=args, env=env, log=log, settings=settings, faults=faults, gpu=gpu)
    if faults.any:
        log.plain(f"{LABEL} fault switches active: {faults.as_dict()}")
    log.trt_info("Using LLM with PyTorch backend")
    for level, message in log_lines:
        log.log(level.upper(), "", message)
    if args.backend != "pytorch":
        raise emulator_limit(f"the {args.backend} backend is not emulated (only pytorch)")
    if args.tensor_parallel_size * args.pipeline_parallel_size > 1:
        raise emulator_limit(
            f"tensor/pipeline parallelism is not emulated on one GPU (tp_size={args.tensor_parallel_size}, "
            f"pp_size={args.pipeline_parallel_size})"
        )
    st.pause(DEVICE_PROFILES[gpu.device_class].startup_init_s)
    server = bind_or_fail(args.host, args.port)
    try:
        st.target = resolve_model(args.model, env)
        st.max_seq_len = args.max_model_len or st.target.max_position_embeddings
        st.speculative = resolve_speculation(args, st.target, env)
        st.async_scheduling = bool(args.async_scheduling)
        if st.speculative is not None and st.speculative.method == "ngram" and st.async_scheduling:
            log.trt_warning("Disable overlap scheduler for speculation mode NGRAM")
            st.async_scheduling = False
        engine, stats = build_engine(st)
    except BaseException as exc:
        server.server_close()
        if isinstance(exc, StartupFailure) and not isinstance(exc, TrtllmFailure):
            raise as_trtllm(exc, SERVE_FRAMES) from exc
        raise
    state = ServerState(
        served_model_names=[served_name(args.model)],
        model_root=args.model,
        max_model_len=st.max_seq_len,
        engine=engine,
        metrics=engine.metrics,
        log=log,
        speculative=st.speculative,
        crash_after_requests=faults.crash_after_requests,
        faults=faults,
        flavour=TRTLLM,
        label=LABEL,
        iteration_stats=stats,
    )
    state.emulator_info = emulator_info(st, engine)
    server.RequestHandlerClass.state = state  # type: ignore[attr-defined]
    return server, state, st


def bind_or_fail(host: str, port: int) -> EmulatorHTTPServer:
    """launch_server binds the socket before building the LLM; a clash fails right away."""
    try:
        return make_server(None, host, port, trtllm_server_header())
    except OSError as exc:
        raise TrtllmFailure(
            exception_text=f"RuntimeError: Failed to bind socket to {host}:{port}: [Errno {exc.errno}] {exc.strerror}",
            frames=SERVE_FRAMES
            + [
                (
                    f"{SITE}/tensorrt_llm/commands/serve.py",
                    147,
                    "launch_server",
                    'raise RuntimeError(f"Failed to bind socket to {host}:{port}: {e}")',
                )
            ],
        ) from exc


def _install_signal_handlers(log: TrtllmLogger) -> None:
    faulthandler.register(signal.SIGUSR1, all_threads=True)

    def handle(signum: int, _frame: object) -> None:
        log.uvicorn("Shutting down")
        log.uvicorn("Waiting for application shutdown.")
        log.uvicorn("Application shutdown complete.")
        log.uvicorn(f"Finished server process [{os.getpid()}]")
        os._exit(0)

    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            signal.signal(signum, handle)
        except ValueError:
            pass  # not the main thread (tests drive start() directly)


def prepare(cli: ServeArgs, env: Mapping[str, str]) -> tuple[argparse.Namespace, Faults, tuple[tuple[str, str], ...]]:
    """Everything before the engine: faults, the CLI's KV config, the options file, TorchLlmArgs."""
    try:
        faults_all = load_faults(env)
    except ValueError as exc:
        raise TrtllmFailure(exception_text=f"RuntimeError: {LABEL}: invalid faults file: {exc}") from exc
    try:
        validate_cli_kv_fraction(cli.kv_cache_free_gpu_memory_fraction)
    except LlmArgsError as error:
        raise TrtllmFailure(exception_text=error.text, frames=SERVE_FRAMES[:3]) from error
    options = read_options(cli.extra_llm_api_options)
    speculating = isinstance(options, dict) and options.get("speculative_config") is not None
    faults = for_server(faults_all, speculating)
    try:
        if faults.reject_speculative_config:
            reject_as_unknown_decoding_type(options)
        llm = resolve_llm_args(cli, options, emulated_trtllm_version())
    except LlmArgsError as error:
        frames = LLM_ARGS_FRAMES if "TorchLlmArgs" in error.text else OPTIONS_FRAMES
        raise TrtllmFailure(exception_text=error.text, frames=frames) from error
    return engine_namespace(llm, cli), faults, llm.log_lines


def run(cli: ServeArgs, env: Mapping[str, str] | None = None) -> int:
    """`trtllm-serve` after click: start, then serve until killed; 1 on a startup failure."""
    env = os.environ if env is None else env
    log = TrtllmLogger(level=cli.log_level)
    _install_signal_handlers(log)
    try:
        args, faults, log_lines = prepare(cli, env)
        server, state, _st = start(args, env, log, faults, log_lines)
    except TrtllmFailure as failure:
        failure.emit(log)
        return failure.exit_code
    except StartupFailure as failure:
        as_trtllm(failure, SERVE_FRAMES).emit(log)
        return failure.exit_code
    state.engine.start()
    log.uvicorn(f"Started server process [{os.getpid()}]")
    log.uvicorn("Waiting for application startup.")
    server.server_activate()  # listen() only now: until here connects are refused
    log.uvicorn("Application startup complete.")
    log.uvicorn(f"Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
    return 0
