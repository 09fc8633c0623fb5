"""Startup failures rendered the way vLLM's processes print them.

A failure carries the exception line vLLM prints (the "decisive line" the toolkit's
failure classifier matches) plus a plausible traceback. Failures inside the engine core
(memory, KV cache, weights) are printed by the engine process and then re-raised by the
API server as "Engine core initialization failed", exactly like vLLM V1; failures in the
frontend (argument and config validation, model resolution) end the API server directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .logs import API_SERVER, ENGINE_CORE, VllmLogger

VLLM_SITE = "/usr/local/lib/python3.12/dist-packages"

Frame = tuple[str, int, str, str]  # file, line, function, source line

FRONTEND_FRAMES: list[Frame] = [
    ("/usr/local/bin/vllm", 10, "<module>", "sys.exit(main())"),
    (f"{VLLM_SITE}/vllm/entrypoints/cli/main.py", 73, "main", "args.dispatch_function(args)"),
    (f"{VLLM_SITE}/vllm/entrypoints/cli/serve.py", 111, "cmd", "uvloop.run(run_server(args))"),
    (
        f"{VLLM_SITE}/vllm/entrypoints/openai/api_server.py",
        1884,
        "run_server",
        "await run_server_worker(listen_address, sock, args, **uvicorn_kwargs)",
    ),
    (
        f"{VLLM_SITE}/vllm/entrypoints/openai/api_server.py",
        1902,
        "run_server_worker",
        "async with build_async_engine_client(",
    ),
    (
        f"{VLLM_SITE}/vllm/engine/arg_utils.py",
        1412,
        "create_engine_config",
        "model_config = self.create_model_config()",
    ),
]

ENGINE_FRAMES: list[Frame] = [
    (f"{VLLM_SITE}/vllm/v1/engine/core.py", 712, "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)"),
    (
        f"{VLLM_SITE}/vllm/v1/engine/core.py",
        502,
        "__init__",
        "super().__init__(vllm_config, executor_class, log_stats,",
    ),
    (f"{VLLM_SITE}/vllm/v1/engine/core.py", 82, "__init__", "self.model_executor = executor_class(vllm_config)"),
    (f"{VLLM_SITE}/vllm/v1/executor/abstract.py", 54, "__init__", "self._init_executor()"),
]

ENGINE_INIT_FAILED = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"


def render_traceback(frames: list[Frame], exception_text: str) -> str:
    lines = ["Traceback (most recent call last):"]
    for path, lineno, func, source in frames:
        lines.append(f'  File "{path}", line {lineno}, in {func}')
        lines.append(f"    {source}")
    lines.append(exception_text)
    return "\n".join(lines)


@dataclass
class StartupFailure(Exception):
    """A failure that ends `vllm serve` with a vLLM-shaped traceback and a non-zero exit."""

    exception_text: str
    frames: list[Frame] = field(default_factory=list)
    in_engine_core: bool = False
    exit_code: int = 1
    # Lines logged (at ERROR, by the failing process) before the traceback.
    error_lines: list[str] = field(default_factory=list)
    # An earlier exception printed first with "The above exception was the direct cause".
    cause_text: str | None = None

    def __str__(self) -> str:
        return self.exception_text

    @property
    def decisive_line(self) -> str:
        return self.exception_text.splitlines()[0]

    def emit_traceback(self, log: VllmLogger, frames: list[Frame], process: str = API_SERVER) -> None:
        """The cause (when there is one), then the exception, each with its traceback."""
        if self.cause_text is not None:
            log.traceback(render_traceback(frames, self.cause_text), process)
            log.traceback("\nThe above exception was the direct cause of the following exception:\n", process)
        log.traceback(render_traceback(frames, self.exception_text), process)

    def emit(self, log: VllmLogger) -> None:
        process = ENGINE_CORE if self.in_engine_core else API_SERVER
        for line in self.error_lines:
            log.error("core.py:721" if self.in_engine_core else "api_server.py:1911", line, process)
        self.emit_traceback(log, self.frames or (ENGINE_FRAMES if self.in_engine_core else FRONTEND_FRAMES), process)
        if self.in_engine_core:
            # vLLM V1: the API server only sees that the engine process died during init.
            log.traceback(render_traceback(FRONTEND_FRAMES, ENGINE_INIT_FAILED), API_SERVER)


def pydantic_value_error(model: str, message: str, input_repr: str) -> str:
    """Text of a pydantic ValidationError wrapping a ValueError raised in a config class."""
    return (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for "
        f"{model}\n  Value error, {message} [type=value_error, input_value={input_repr}, "
        "input_type=ArgsKwargs]\n"
        "    For further information visit https://errors.pydantic.dev/2.12/v/value_error"
    )
