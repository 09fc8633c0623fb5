"""`vllm` command line: `vllm serve MODEL [flags]` with vLLM's flag names and argparse errors.

Only the flags the toolkit emits (plus a few harmless common ones) are accepted; anything
else is rejected exactly like vLLM's argparse does (`vllm serve: error: unrecognized
arguments: ...`, exit status 2). Like vLLM's FlexibleArgumentParser, `--flag_name` is
accepted as `--flag-name`.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from . import labelled_version
from .specconfig import json_loads_for_argparse

DTYPES = ["auto", "bfloat16", "float", "float16", "float32", "half"]
KV_CACHE_DTYPES = ["auto", "bfloat16", "fp8", "fp8_ds_mla", "fp8_e4m3", "fp8_e5m2", "fp8_inc"]
QUANTIZATIONS = [
    "awq",
    "awq_marlin",
    "bitsandbytes",
    "compressed-tensors",
    "experts_int8",
    "fbgemm_fp8",
    "fp8",
    "gguf",
    "gptq",
    "gptq_marlin",
    "inc",
    "modelopt",
    "modelopt_fp4",
    "moe_wna16",
    "mxfp4",
    "petit_nvfp4",
    "ptpc_fp8",
    "quark",
    "torchao",
]
DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192


class VllmArgumentParser(argparse.ArgumentParser):
    """argparse with vLLM's underscore-to-dash normalisation."""

    def parse_args(
        self,
        args: Sequence[str] | None = None,  # type: ignore[override]
        namespace: argparse.Namespace | None = None,
    ) -> argparse.Namespace:
        return super().parse_args(normalize_flags(list(sys.argv[1:] if args is None else args)), namespace)


def normalize_flags(argv: list[str]) -> list[str]:
    normalized = []
    for token in argv:
        if token.startswith("--") and len(token) > 2:
            key, sep, value = token.partition("=")
            token = key.replace("_", "-") + sep + value
        normalized.append(token)
    return normalized


def human_int(value: str) -> int:
    """vLLM accepts `32k`/`1m`-style sizes for lengths."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)\s*", value)
    if not match:
        raise argparse.ArgumentTypeError(f"Value {value} cannot be converted to {int}.")
    number, suffix = float(match.group(1)), match.group(2)
    factor = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3}[suffix.lower()]
    if suffix.isupper():
        factor = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[suffix]
    return int(number * factor)


def json_or_level(value: str) -> Any:
    if re.fullmatch(r"\d+", value.strip()):
        return {"level": int(value)}
    return json_loads_for_argparse(value)


def build_serve_parser() -> VllmArgumentParser:
    parser = VllmArgumentParser(
        prog="vllm serve",
        usage="vllm serve [model_tag] [options]",
        description="Launch a local OpenAI-compatible API server to serve LLM completions "
        "via HTTP. (specfleet vLLM EMULATOR)",
    )
    bool_flag = argparse.BooleanOptionalAction
    parser.add_argument(
        "model_tag", nargs="?", default=None, help="The model tag to serve (optional if specified in config)"
    )
    frontend = parser.add_argument_group("Frontend")
    frontend.add_argument("--host", type=str, default=None, help="Host name.")
    frontend.add_argument("--port", type=int, default=8000, help="Port number.")
    frontend.add_argument(
        "--api-key",
        type=str,
        nargs="+",
        default=None,
        help="If provided, the server will require one of these keys to be presented in the header.",
    )
    frontend.add_argument(
        "--enable-force-include-usage",
        action=bool_flag,
        default=False,
        help="If set to True, including usage on every request.",
    )
    frontend.add_argument("--disable-log-requests", action=bool_flag, default=False, help="Disable logging requests.")
    frontend.add_argument("--enable-log-requests", action=bool_flag, default=False, help="Enable logging requests.")
    frontend.add_argument(
        "--uvicorn-log-level",
        type=str,
        default="info",
        choices=["critical", "debug", "error", "info", "trace", "warning"],
    )
    frontend.add_argument("--disable-log-stats", action="store_true", default=False, help="Disable logging statistics.")
    model = parser.add_argument_group("ModelConfig")
    model.add_argument("--model", type=str, default=None, help="Name or path of the model.")
    model.add_argument(
        "--served-model-name", type=str, nargs="+", default=None, help="The model name(s) used in the API."
    )
    model.add_argument("--tokenizer", type=str, default=None)
    model.add_argument("--revision", type=str, default=None)
    model.add_argument("--dtype", type=str, default="auto", choices=DTYPES)
    model.add_argument("--quantization", "-q", type=str, default=None, choices=QUANTIZATIONS)
    model.add_argument("--max-model-len", type=human_int, default=None)
    model.add_argument("--seed", type=int, default=0)
    model.add_argument("--enforce-eager", action=bool_flag, default=False)
    model.add_argument("--trust-remote-code", action=bool_flag, default=False)
    model.add_argument("--generation-config", type=str, default="auto")
    # ModelConfig.max_logprobs: the most logprobs a request may ask for (-1: the vocabulary).
    model.add_argument("--max-logprobs", type=int, default=20)
    load = parser.add_argument_group("LoadConfig")
    load.add_argument("--download-dir", type=str, default=None)
    parallel = parser.add_argument_group("ParallelConfig")
    parallel.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    cache = parser.add_argument_group("CacheConfig")
    cache.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    cache.add_argument("--kv-cache-dtype", type=str, default="auto", choices=KV_CACHE_DTYPES)
    cache.add_argument("--block-size", type=int, default=None, choices=[1, 8, 16, 32, 64, 128])
    cache.add_argument("--enable-prefix-caching", action=bool_flag, default=None)
    scheduler = parser.add_argument_group("SchedulerConfig")
    scheduler.add_argument("--max-num-seqs", type=int, default=None)
    scheduler.add_argument("--max-num-batched-tokens", type=human_int, default=None)
    scheduler.add_argument("--async-scheduling", action=bool_flag, default=None)
    scheduler.add_argument("--enable-chunked-prefill", action=bool_flag, default=None)
    vllm = parser.add_argument_group("VllmConfig")
    vllm.add_argument(
        "--speculative-config",
        "-sc",  # vLLM 0.32 registers the short alias; argparse errors name both
        type=json_loads_for_argparse,
        default=None,
        help="Speculative decoding configuration. Should either be a valid "
        "JSON string or JSON keys passed individually.",
    )
    vllm.add_argument("--compilation-config", "-O", type=json_or_level, default=None)
    return parser


def parse_serve_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parse `vllm serve` arguments (argv without `serve`); exits 2 on bad input."""
    parser = build_serve_parser()
    args = parser.parse_args(list(argv))
    if args.model_tag is not None and args.model is not None and args.model_tag != args.model:
        parser.error(
            "With `vllm serve`, you should provide the model as a positional "
            "argument or in a config file instead of via the `--model` option. "
            "The --model option will be removed in a future version."
        )
    args.model = args.model_tag or args.model
    if args.model is None:
        parser.error("the following arguments are required: model_tag")
    if args.api_key is None:
        env_key = os.environ.get("VLLM_API_KEY")
        args.api_key = [env_key] if env_key else None
    if not 0.0 < args.gpu_memory_utilization <= 1.0:
        parser.error(
            f"argument --gpu-memory-utilization: GPU memory utilization must be "
            f"between 0 and 1.0, got {args.gpu_memory_utilization}"
        )
    return args


def non_default_args(args: argparse.Namespace) -> dict[str, Any]:
    """What vLLM logs as `non-default args: {...}` at startup."""
    defaults = vars(build_serve_parser().parse_args(["placeholder"]))
    defaults["model_tag"] = None
    defaults["model"] = None
    result: dict[str, Any] = {}
    for key, value in vars(args).items():
        if key == "api_key" and value:
            result[key] = ["***"]  # never log secrets
        elif defaults.get(key, object()) != value:
            result[key] = value
    return result


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: vllm [-h] [-v] {serve} ...\n\nspecfleet vLLM EMULATOR: only `vllm serve` is emulated.")
        return 0 if argv else 2
    if argv[0] in ("-v", "--version"):
        print(labelled_version())
        return 0
    if argv[0] != "serve":
        sys.stderr.write(
            "usage: vllm [-h] [-v] {serve} ...\n"
            f"vllm: error: argument subparser: invalid choice: {argv[0]!r} "
            "(choose from 'serve') [specfleet vLLM EMULATOR: only `vllm serve` is "
            "emulated]\n"
        )
        return 2
    from .startup import print_banner, serve

    # The label comes first, before anything vLLM-shaped (even argument errors).
    print_banner()
    args = parse_serve_args(argv[1:])
    return serve(args)
