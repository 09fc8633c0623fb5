"""`vllm serve` argument parsing and argparse-style rejection."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import EMULATOR_DIR, TARGET
from vllm_emulator.cli import non_default_args, normalize_flags, parse_serve_args


def run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vllm_emulator", *args],
        cwd=EMULATOR_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=20,
    )


def test_toolkit_flags_parse() -> None:
    args = parse_serve_args(
        [
            TARGET,
            "--host",
            "0.0.0.0",
            "--port",
            "8001",
            "--served-model-name",
            "llama",
            "alias",
            "--gpu-memory-utilization",
            "0.75",
            "--max-model-len",
            "8k",
            "--max-num-seqs",
            "8",
            "--speculative-config",
            '{"method": "ngram", "num_speculative_tokens": 3}',
            "--seed",
            "42",
            "--dtype",
            "bfloat16",
            "--quantization",
            "fp8",
            "--enforce-eager",
            "--tensor-parallel-size",
            "1",
            "--api-key",
            "secret",
            "--generation-config",
            "vllm",
            "--enable-force-include-usage",
            "--disable-log-requests",
            "--kv-cache-dtype",
            "fp8",
            "--trust-remote-code",
        ]
    )
    assert args.model == TARGET
    assert args.port == 8001
    assert args.served_model_name == ["llama", "alias"]
    assert args.gpu_memory_utilization == 0.75
    assert args.max_model_len == 8000
    assert args.speculative_config == {"method": "ngram", "num_speculative_tokens": 3}
    assert args.enforce_eager and args.trust_remote_code and args.enable_force_include_usage
    assert args.api_key == ["secret"]
    assert args.kv_cache_dtype == "fp8" and args.quantization == "fp8"


def test_defaults_match_vllm() -> None:
    args = parse_serve_args([TARGET])
    assert args.port == 8000
    assert args.host is None
    assert args.gpu_memory_utilization == 0.9
    assert args.enforce_eager is False
    assert args.speculative_config is None


def test_underscore_flags_are_accepted_like_vllm() -> None:
    # seed 003 launches with `--trust_remote_code`
    assert normalize_flags(["--trust_remote_code", "--max_model_len=4096", "x_y"]) == [
        "--trust-remote-code",
        "--max-model-len=4096",
        "x_y",
    ]
    assert parse_serve_args([TARGET, "--trust_remote_code"]).trust_remote_code


def test_api_key_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "from-env")
    assert parse_serve_args([TARGET]).api_key == ["from-env"]


def test_non_default_args_hide_the_api_key() -> None:
    shown = non_default_args(parse_serve_args([TARGET, "--api-key", "secret", "--port", "9"]))
    assert shown["api_key"] == ["***"] and shown["port"] == 9
    assert "secret" not in repr(shown)


def test_unknown_flag_rejected_like_vllm_argparse(lab_env: dict[str, str]) -> None:
    result = run_cli(["serve", TARGET, "--speculative-model", "x", "--frobnicate"], lab_env)
    assert result.returncode == 2
    assert "usage: vllm serve" in result.stderr
    assert "vllm serve: error: unrecognized arguments: --speculative-model x --frobnicate" in result.stderr
    assert "specfleet vLLM EMULATOR" in result.stdout.splitlines()[0]


def test_invalid_choice_rejected(lab_env: dict[str, str]) -> None:
    result = run_cli(["serve", TARGET, "--dtype", "fp13"], lab_env)
    assert result.returncode == 2
    assert "vllm serve: error: argument --dtype: invalid choice: 'fp13'" in result.stderr


def test_invalid_speculative_json_is_an_argparse_error(lab_env: dict[str, str]) -> None:
    result = run_cli(["serve", TARGET, "--speculative-config", "{method: ngram}"], lab_env)
    assert result.returncode == 2
    assert (
        "vllm serve: error: argument --speculative-config/-sc: Value {method: ngram} "
        "cannot be converted to <function loads"
    ) in result.stderr


def test_version_and_unknown_subcommand(lab_env: dict[str, str]) -> None:
    version = run_cli(["--version"], lab_env)
    assert version.returncode == 0 and version.stdout.strip() == "0.20.2-emulated"
    other = run_cli(["bench", "serve"], lab_env)
    assert other.returncode == 2 and "invalid choice: 'bench'" in other.stderr


def test_wrapper_script_runs(lab_env: dict[str, str]) -> None:
    result = subprocess.run(
        [str(EMULATOR_DIR / "bin" / "vllm"), "--version"], env=lab_env, capture_output=True, text=True, timeout=20
    )
    assert result.returncode == 0 and "emulated" in result.stdout
