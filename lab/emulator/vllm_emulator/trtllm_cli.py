"""`trtllm-serve` command line, shaped like TensorRT-LLM's click CLI (specfleet EMULATOR).

The real entry point is a click group whose default command is `serve`
(tensorrt_llm/commands/serve.py, `DefaultGroup`): `trtllm-serve MODEL [OPTIONS]` runs
`serve`, so its usage errors name the subcommand (`Usage: trtllm-serve serve [OPTIONS]
MODEL`, `Try 'trtllm-serve serve --help' for help.`), while an option placed before MODEL
reaches the group, which knows none (`Usage: trtllm-serve [OPTIONS] COMMAND [ARGS]...`).
Errors go to stderr as `Error: ...` with exit status 2, as click prints them.

Options and defaults are those of the 1.2-era `serve` command (BuildConfig defaults:
max_batch_size 2048, max_num_tokens 8192, max_seq_len None = from the model config).
`--config` is the alias of `--extra_llm_api_options` (NVIDIA/TensorRT-LLM #9104).
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

PROG = "trtllm-serve"
SERVE_USAGE = f"Usage: {PROG} serve [OPTIONS] MODEL"
SERVE_HINT = f"Try '{PROG} serve --help' for help."
GROUP_USAGE = f"Usage: {PROG} [OPTIONS] COMMAND [ARGS]..."
GROUP_HINT = f"Try '{PROG} --help' for help."
SUBCOMMANDS = ("serve", "disaggregated", "disaggregated_mpi_worker", "mm_embedding_serve")
BACKENDS = ("pytorch", "tensorrt", "_autodeploy")
BACKEND_ALIASES = {"trt": "tensorrt"}
# tensorrt_llm.logger.severity_map
LOG_LEVELS = ("internal_error", "error", "warning", "info", "verbose")


@dataclass(frozen=True)
class OptionSpec:
    names: tuple[str, ...]
    dest: str
    kind: str  # "str" | "int" | "float" | "flag" | "choice"
    choices: tuple[str, ...] = ()
    aliases: dict[str, str] = field(default_factory=dict)

    @property
    def hint(self) -> str:
        """How click names the option in an error: every spelling, quoted, slash-separated."""
        return " / ".join(f"'{name}'" for name in self.names)


SERVE_OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(("--tokenizer",), "tokenizer", "str"),
    OptionSpec(("--host",), "host", "str"),
    OptionSpec(("--port",), "port", "int"),
    OptionSpec(("--backend",), "backend", "choice", BACKENDS, BACKEND_ALIASES),
    OptionSpec(("--log_level",), "log_level", "choice", LOG_LEVELS),
    OptionSpec(("--max_beam_width",), "max_beam_width", "int"),
    OptionSpec(("--max_batch_size",), "max_batch_size", "int"),
    OptionSpec(("--max_num_tokens",), "max_num_tokens", "int"),
    OptionSpec(("--max_seq_len",), "max_seq_len", "int"),
    OptionSpec(("--tp_size",), "tp_size", "int"),
    OptionSpec(("--pp_size",), "pp_size", "int"),
    OptionSpec(("--ep_size",), "ep_size", "int"),
    OptionSpec(("--cluster_size",), "cluster_size", "int"),
    OptionSpec(("--gpus_per_node",), "gpus_per_node", "int"),
    OptionSpec(("--kv_cache_free_gpu_memory_fraction",), "kv_cache_free_gpu_memory_fraction", "float"),
    OptionSpec(("--num_postprocess_workers",), "num_postprocess_workers", "int"),
    OptionSpec(("--trust_remote_code",), "trust_remote_code", "flag"),
    OptionSpec(("--config", "--extra_llm_api_options"), "extra_llm_api_options", "str"),
    OptionSpec(("--reasoning_parser",), "reasoning_parser", "str"),
    OptionSpec(("--metadata_server_config_file",), "metadata_server_config_file", "str"),
    OptionSpec(("--server_role",), "server_role", "str"),
    OptionSpec(("--fail_fast_on_attention_window_too_large",), "fail_fast_on_attention_window_too_large", "flag"),
    OptionSpec(("--disagg_cluster_uri",), "disagg_cluster_uri", "str"),
    OptionSpec(("--enable_chunked_prefill",), "enable_chunked_prefill", "flag"),
    OptionSpec(("--media_io_kwargs",), "media_io_kwargs", "str"),
)
_BY_NAME = {name: spec for spec in SERVE_OPTIONS for name in spec.names}


@dataclass(frozen=True)
class ServeArgs:
    """`trtllm-serve serve` after click: every option with the real CLI's default."""

    model: str
    tokenizer: str | None = None
    host: str = "localhost"
    port: int = 8000
    backend: str = "pytorch"
    log_level: str = "info"
    max_beam_width: int = 1
    max_batch_size: int = 2048
    max_num_tokens: int = 8192
    max_seq_len: int | None = None
    tp_size: int = 1
    pp_size: int = 1
    ep_size: int | None = None
    cluster_size: int | None = None
    gpus_per_node: int | None = None
    kv_cache_free_gpu_memory_fraction: float = 0.9
    num_postprocess_workers: int = 0
    trust_remote_code: bool = False
    extra_llm_api_options: str | None = None
    reasoning_parser: str | None = None
    metadata_server_config_file: str | None = None
    server_role: str | None = None
    fail_fast_on_attention_window_too_large: bool = False
    disagg_cluster_uri: str | None = None
    enable_chunked_prefill: bool = False
    media_io_kwargs: str | None = None


class ClickUsageError(Exception):
    """A click usage error: printed as usage, hint, blank line, `Error: ...`; exit status 2."""

    exit_code = 2

    def __init__(self, message: str, usage: str = SERVE_USAGE, hint: str = SERVE_HINT) -> None:
        super().__init__(message)
        self.message = message
        self.usage = usage
        self.hint = hint

    def render(self) -> str:
        return f"{self.usage}\n{self.hint}\n\nError: {self.message}\n"


class HelpRequested(Exception):
    """`--help` was given: print the help text and exit 0 (click's eager help option)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def no_such_option(name: str, known: Sequence[str]) -> str:
    """click's NoSuchOption message, with its difflib suggestions."""
    possibilities = difflib.get_close_matches(name, known)
    message = f"No such option: {name}"
    if len(possibilities) == 1:
        message += f" Did you mean {possibilities[0]}?"
    elif possibilities:
        message += f" (Possible options: {', '.join(sorted(possibilities))})"
    return message


def convert(spec: OptionSpec, raw: str) -> Any:
    """click's type conversion for one option value; raises ClickUsageError like click's `fail`."""
    if spec.kind == "int":
        try:
            return int(raw.strip())
        except ValueError:
            raise ClickUsageError(f"Invalid value for {spec.hint}: {raw!r} is not a valid integer.") from None
    if spec.kind == "float":
        try:
            return float(raw.strip())
        except ValueError:
            raise ClickUsageError(f"Invalid value for {spec.hint}: {raw!r} is not a valid float.") from None
    if spec.kind == "choice":
        value = spec.aliases.get(raw, raw)
        if value not in spec.choices:
            allowed = ", ".join(repr(choice) for choice in spec.choices)
            raise ClickUsageError(f"Invalid value for {spec.hint}: {raw!r} is not one of {allowed}.")
        return value
    return raw


def serve_help() -> str:
    lines = [
        SERVE_USAGE,
        "",
        "  Running an OpenAI API compatible server (specfleet TensorRT-LLM EMULATOR: a labelled",
        "  stand-in, not TensorRT-LLM; only the pytorch backend is emulated)",
        "",
        "  MODEL: model name | HF checkpoint path | TensorRT engine path",
        "",
        "Options:",
    ]
    lines += [f"  {', '.join(spec.names)}" for spec in SERVE_OPTIONS]
    lines.append("  --help  Show this message and exit.")
    return "\n".join(lines) + "\n"


def group_help() -> str:
    return (
        f"{GROUP_USAGE}\n\n"
        "  specfleet TensorRT-LLM EMULATOR: only `serve` (the default command) is emulated.\n\n"
        "Options:\n  --help  Show this message and exit.\n\n"
        "Commands:\n" + "".join(f"  {name}\n" for name in SUBCOMMANDS)
    )


def parse_serve_args(argv: Sequence[str]) -> ServeArgs:
    """`trtllm-serve ARGS` -> ServeArgs; raises ClickUsageError or HelpRequested.

    Like click: the group parses first (it only knows --help), an unknown first word is the
    default `serve` command; then unknown options and missing values fail while parsing,
    `--help` wins over conversion errors, values convert in command-line order, and a missing
    MODEL or leftover words fail last.
    """
    args = list(argv)
    if not args or args[0] == "--help":
        raise HelpRequested(group_help())
    if args[0].startswith("-"):
        name = args[0].split("=", 1)[0]
        raise ClickUsageError(no_such_option(name, ["--help"]), GROUP_USAGE, GROUP_HINT)
    if args[0] == "serve":
        args = args[1:]
    elif args[0] in SUBCOMMANDS:
        raise ClickUsageError(
            f"specfleet TensorRT-LLM EMULATOR: `{PROG} {args[0]}` is not emulated (only `serve`)",
            GROUP_USAGE,
            GROUP_HINT,
        )

    given: list[tuple[OptionSpec, str | None]] = []
    positional: list[str] = []
    help_requested = False
    options_ended = False  # after `--` every word is positional
    index = 0
    while index < len(args):
        token = args[index]
        index += 1
        if options_ended or token == "-" or not token.startswith("-"):
            positional.append(token)
            continue
        if token == "--":
            options_ended = True
            continue
        if not token.startswith("--"):  # `serve` declares no short options
            raise ClickUsageError(no_such_option(token, sorted(_BY_NAME) + ["--help"]))
        name, has_value, inline = token.partition("=")
        if name == "--help":
            help_requested = True
            continue
        spec = _BY_NAME.get(name)
        if spec is None:
            raise ClickUsageError(no_such_option(name, sorted(_BY_NAME) + ["--help"]))
        if spec.kind == "flag":
            if has_value:
                raise ClickUsageError(f"Option '{name}' does not take a value.")
            given.append((spec, None))
            continue
        if has_value:
            given.append((spec, inline))
        elif index < len(args):
            given.append((spec, args[index]))
            index += 1
        else:
            raise ClickUsageError(f"Option '{name}' requires an argument.")
    if help_requested:
        raise HelpRequested(serve_help())

    # click keeps the last value of a repeated option and converts it once, in the order the
    # options first appeared (a dict keeps a key where it was first inserted).
    last: dict[str, tuple[OptionSpec, str | None]] = {}
    for spec, raw in given:
        last[spec.dest] = (spec, raw)
    values: dict[str, Any] = {dest: True if raw is None else convert(spec, raw) for dest, (spec, raw) in last.items()}
    if not positional:
        raise ClickUsageError("Missing argument 'MODEL'.")
    if len(positional) > 1:
        extra = positional[1:]
        noun = "argument" if len(extra) == 1 else "arguments"
        raise ClickUsageError(f"Got unexpected extra {noun} ({' '.join(extra)})")
    return ServeArgs(model=positional[0], **values)


def main(argv: Sequence[str] | None = None) -> int:
    """`trtllm-serve ...`: label, version line, click parsing, then the emulated server."""
    import os

    from . import emulated_trtllm_version
    from .gpu import gpu_file_path
    from .trtllm_logs import TrtllmLogger
    from .trtllm_serve import no_gpu_failure, print_banner, run

    argv = list(sys.argv[1:] if argv is None else argv)
    # The label comes first, before anything TensorRT-LLM-shaped. Without a GPU the import
    # of tensorrt_llm already fails; otherwise it prints the version line, all before click
    # has looked at the arguments.
    print_banner()
    if not gpu_file_path(os.environ).is_file():
        no_gpu_failure().emit(TrtllmLogger())
        return 1
    print(f"[TensorRT-LLM] TensorRT-LLM version: {emulated_trtllm_version()}", flush=True)
    try:
        args = parse_serve_args(argv)
    except HelpRequested as help_text:
        print(help_text.text, end="")
        return 0
    except ClickUsageError as error:
        sys.stderr.write(error.render())
        return error.exit_code
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
