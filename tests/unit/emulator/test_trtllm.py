"""The `trtllm-serve` flavour: click-shaped CLI, options YAML validation, mapping, memory rule, HTTP."""

from __future__ import annotations

import datetime
import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    DRAFT_1B,
    EAGLE3,
    TARGET,
    TARGET_FP4,
    EmulatorProcess,
    free_port,
    port_listening,
)
from vllm_emulator.engine import StepRecord
from vllm_emulator.gpu import parse_gpu_spec
from vllm_emulator.memory import GIB, NON_TORCH_GIB, free_memory_gib
from vllm_emulator.trtllm_cli import ClickUsageError, HelpRequested, ServeArgs, main, parse_serve_args
from vllm_emulator.trtllm_options import LlmArgsError, engine_namespace, resolve_llm_args
from vllm_emulator.trtllm_runtime import (
    DRAFT_MODEL,
    KV_CACHE,
    MODEL,
    TOKENS_PER_BLOCK,
    IterationStatsQueue,
    executor_oom,
    iteration_stats,
    plan_trtllm_memory,
)
from vllm_emulator.trtllm_serve import concurrency_lookup, resolve_model, served_name
from vllm_emulator.trtllm_yaml import YamlError, load_yaml

from specfleet import plan_trtllm, serving

SPARK_GPU = {
    "device_class": "dgx_spark",
    "gpu_name": "NVIDIA GB10",
    "memory_total_mib": 122502,
    "memory_bandwidth_gbps": 273,
    "compute_capability": "12.1",
}
POLICY = {
    "specfleet_port": 8000,
    "specfleet_trtllm_max_batch_size": 1,
    "specfleet_max_model_len": {"dgx_spark": 8192},
    "specfleet_ngram_prompt_lookup_max": 4,
}
SERVE_USAGE = "Usage: trtllm-serve serve [OPTIONS] MODEL\nTry 'trtllm-serve serve --help' for help.\n\n"
GROUP_USAGE = "Usage: trtllm-serve [OPTIONS] COMMAND [ARGS]...\nTry 'trtllm-serve --help' for help.\n\n"


def repo_cache_snapshot(lab_root: Path, repo: str) -> Path:
    """The stand-in's snapshot directory: a local checkpoint directory with config.json."""
    snapshots = lab_root / "hf" / "hub" / ("models--" + repo.replace("/", "--")) / "snapshots"
    return next(snapshots.iterdir())


def toolkit_argv(kind: str = "speculative") -> list[str]:
    """What specfleet sends, without the program name."""
    return serving.argv(plan_trtllm.serving(kind, "img", TARGET, POLICY, "dgx_spark", {}, 1))[1:]


def toolkit_options(method: str | None, artifact: str | None, tokens: int = 3, eagle3_name: str = "Eagle3") -> dict:
    """The options YAML specfleet writes for a method, as a dict."""
    spec = plan_trtllm.speculative_config(method, artifact, tokens, POLICY, eagle3_name) if method else None
    return plan_trtllm.extra_llm_api_options(method, spec, 0.85, 1)


def cli() -> ServeArgs:
    return parse_serve_args(toolkit_argv())


def rejected(options: Any, args: ServeArgs | None = None) -> str:
    with pytest.raises(LlmArgsError) as raised:
        resolve_llm_args(args or cli(), options)
    return raised.value.text


def eagle3(**extra: Any) -> dict[str, Any]:
    return {"speculative_config": {"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model": "/d", **extra}}


# --- CLI ------------------------------------------------------------------------------------


def test_toolkit_argv_parses_with_the_real_defaults_elsewhere() -> None:
    args = cli()
    assert (args.model, args.host, args.port, args.backend, args.tp_size) == (TARGET, "0.0.0.0", 8000, "pytorch", 1)
    assert (args.max_batch_size, args.max_seq_len) == (1, 8192)
    assert args.extra_llm_api_options == "/etc/specfleet/trtllm/speculative.yml"
    defaults = parse_serve_args([TARGET])
    assert (defaults.host, defaults.port, defaults.backend, defaults.log_level) == (
        "localhost",
        8000,
        "pytorch",
        "info",
    )
    assert (defaults.max_batch_size, defaults.max_num_tokens, defaults.max_seq_len) == (2048, 8192, None)
    assert (defaults.kv_cache_free_gpu_memory_fraction, defaults.pp_size, defaults.trust_remote_code) == (0.9, 1, False)


def test_config_is_an_alias_and_the_explicit_serve_subcommand_works() -> None:
    via_config = parse_serve_args(["serve", TARGET, "--config", "a.yml", "--trust_remote_code", "--pp_size", "1"])
    assert via_config.extra_llm_api_options == "a.yml" and via_config.trust_remote_code
    last_wins = parse_serve_args(
        [TARGET, "--config=a.yml", "--port", "http", "--extra_llm_api_options", "b.yml", "--backend", "trt", "--port=1"]
    )
    assert (last_wins.extra_llm_api_options, last_wins.backend, last_wins.port) == ("b.yml", "tensorrt", 1)
    tuned = parse_serve_args(
        [TARGET, "--max_num_tokens", "4096", "--kv_cache_free_gpu_memory_fraction", "0.5", "--log_level", "warning"]
    )
    assert (tuned.max_num_tokens, tuned.kv_cache_free_gpu_memory_fraction, tuned.log_level) == (4096, 0.5, "warning")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            [TARGET, "--max_model_len", "8"],
            SERVE_USAGE + "Error: No such option: --max_model_len (Possible options: --max_num_tokens, --max_seq_len)",
        ),
        ([TARGET, "--bogus"], SERVE_USAGE + "Error: No such option: --bogus Did you mean --host?"),
        (
            [TARGET, "--max_seq_lenn", "8"],
            SERVE_USAGE + "Error: No such option: --max_seq_lenn (Possible options: --max_num_tokens, --max_seq_len)",
        ),
        ([TARGET, "-x"], SERVE_USAGE + "Error: No such option: -x"),
        (["--host", "0.0.0.0", TARGET], GROUP_USAGE + "Error: No such option: --host"),
        ([TARGET, "--port", "http"], SERVE_USAGE + "Error: Invalid value for '--port': 'http' is not a valid integer."),
        (
            [TARGET, "--kv_cache_free_gpu_memory_fraction", "most"],
            SERVE_USAGE
            + "Error: Invalid value for '--kv_cache_free_gpu_memory_fraction': 'most' is not a valid float.",
        ),
        (
            [TARGET, "--backend", "vllm"],
            SERVE_USAGE
            + "Error: Invalid value for '--backend': 'vllm' is not one of 'pytorch', 'tensorrt', '_autodeploy'.",
        ),
        (
            [TARGET, "--log_level", "debug"],
            SERVE_USAGE + "Error: Invalid value for '--log_level': 'debug' is not one of "
            "'internal_error', 'error', 'warning', 'info', 'verbose'.",
        ),
        ([TARGET, "--config"], SERVE_USAGE + "Error: Option '--config' requires an argument."),
        (
            [TARGET, "--trust_remote_code=true"],
            SERVE_USAGE + "Error: Option '--trust_remote_code' does not take a value.",
        ),
        (["--port=1"], GROUP_USAGE + "Error: No such option: --port"),
        (["serve", "--port", "1"], SERVE_USAGE + "Error: Missing argument 'MODEL'."),
        ([TARGET, "other"], SERVE_USAGE + "Error: Got unexpected extra argument (other)"),
        ([TARGET, "a", "b"], SERVE_USAGE + "Error: Got unexpected extra arguments (a b)"),
    ],
)
def test_click_usage_errors(argv: list[str], expected: str) -> None:
    with pytest.raises(ClickUsageError) as raised:
        parse_serve_args(argv)
    assert raised.value.render() == expected + "\n"
    assert raised.value.exit_code == 2


def test_help_wins_over_value_errors_but_not_over_unknown_options() -> None:
    with pytest.raises(HelpRequested) as shown:
        parse_serve_args([TARGET, "--port", "http", "--help"])
    assert shown.value.text.startswith("Usage: trtllm-serve serve [OPTIONS] MODEL")
    with pytest.raises(HelpRequested) as group:
        parse_serve_args([])
    assert "Commands:" in group.value.text
    with pytest.raises(ClickUsageError):
        parse_serve_args([TARGET, "--bogus", "--help"])


def test_main_prints_the_label_first_and_exits_2_on_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gpu = tmp_path / "gpu.json"
    gpu.write_text(json.dumps(SPARK_GPU))
    monkeypatch.setenv("SPECFLEET_EMULATOR_GPU_FILE", str(gpu))
    assert main([TARGET, "--enforce-eager"]) == 2
    out, err = capsys.readouterr()
    assert out.splitlines()[0].startswith("specfleet TensorRT-LLM EMULATOR ")
    assert out.splitlines()[1] == "[TensorRT-LLM] TensorRT-LLM version: 1.2.0rc6"
    assert err == SERVE_USAGE + "Error: No such option: --enforce-eager\n"


def test_main_without_a_gpu_fails_at_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPECFLEET_EMULATOR_GPU_FILE", str(tmp_path / "absent.json"))
    assert main([TARGET]) == 1
    out, err = capsys.readouterr()
    assert "TensorRT-LLM version" not in out
    assert (
        err.splitlines()[-1] == "ImportError: libcuda.so.1: cannot open shared object file: No such file or directory"
    )


# --- the options YAML -----------------------------------------------------------------------


def test_yaml_reader_follows_pyyaml_scalar_rules() -> None:
    text = (
        "# written by specfleet\nspeculative_config:\n  decoding_type: Eagle  # EAGLE-3 head\n"
        "  max_draft_len: 3\nkv_cache_config: {free_gpu_memory_fraction: 0.85, enable_block_reuse: no}\n"
        "layers: [1, '2', 0x10]\nexp: 1e-3\ndot: 1.0e-3\nnothing: ~\nlist:\n- on\n- 'it''s'\n"
    )
    assert load_yaml(text) == {
        "speculative_config": {"decoding_type": "Eagle", "max_draft_len": 3},
        "kv_cache_config": {"free_gpu_memory_fraction": 0.85, "enable_block_reuse": False},
        "layers": [1, "2", 16],
        "exp": "1e-3",  # YAML 1.1: no dot, no float
        "dot": 0.001,
        "nothing": None,
        "list": [True, "it's"],
    }
    assert load_yaml("") is None
    assert load_yaml("- 1\n- 2\n") == [1, 2]


@pytest.mark.parametrize(
    ("text", "start"),
    [
        ("a: 1\n  b: 2\n", "yaml.scanner.ScannerError: mapping values are not allowed here"),
        ("a: |\n  text\n", "NotImplementedError: specfleet TensorRT-LLM EMULATOR: a block scalar"),
        ("a: &anchor 1\n", "NotImplementedError: specfleet TensorRT-LLM EMULATOR: the YAML indicator '&'"),
        ("a: [1, 2\n", "yaml.scanner.ScannerError: while parsing a flow sequence"),
    ],
)
def test_yaml_reader_refuses_what_it_cannot_read(text: str, start: str) -> None:
    with pytest.raises(YamlError) as raised:
        load_yaml(text, "/etc/specfleet/trtllm/speculative.yml")
    assert raised.value.text.startswith(start)
    assert "speculative.yml" in raised.value.text


def test_unknown_top_level_key_is_extra_forbidden() -> None:
    assert rejected({**toolkit_options("eagle3", EAGLE3), "enable_iter_perf_stat": True}) == (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for TorchLlmArgs\n"
        "enable_iter_perf_stat\n"
        "  Extra inputs are not permitted [type=extra_forbidden, input_value=True, input_type=bool]\n"
        "    For further information visit https://errors.pydantic.dev/2.12/v/extra_forbidden"
    )


@pytest.mark.parametrize(
    ("options", "model", "loc", "line"),
    [
        (
            eagle3(max_draft_lenn=4),
            "TorchLlmArgs",
            "speculative_config.Eagle3.max_draft_lenn",
            "  Extra inputs are not permitted [type=extra_forbidden, input_value=4, input_type=int]",
        ),
        (
            {"cuda_graph_config": {"max_batch": 1}},
            "TorchLlmArgs",
            "cuda_graph_config.max_batch",
            "  Extra inputs are not permitted [type=extra_forbidden, input_value=1, input_type=int]",
        ),
        (
            {"kv_cache_config": {"free_gpu_memory_fraction": 0.8, "block_reuse": False}},
            "KvCacheConfig",
            "block_reuse",
            "  Extra inputs are not permitted [type=extra_forbidden, input_value=False, input_type=bool]",
        ),
        (
            {"speculative_config": {"decoding_type": "NGram", "max_draft_len": 3, "prompt_lookup_max": 4}},
            "TorchLlmArgs",
            "speculative_config.NGram.prompt_lookup_max",
            "  Extra inputs are not permitted [type=extra_forbidden, input_value=4, input_type=int]",
        ),
    ],
)
def test_unknown_nested_keys_are_extra_forbidden(options: dict, model: str, loc: str, line: str) -> None:
    text = rejected(options).splitlines()
    assert text[0] == f"pydantic_core._pydantic_core.ValidationError: 1 validation error for {model}"
    assert text[1:3] == [loc, line]


def test_bad_or_missing_decoding_type_is_a_union_tag_error() -> None:
    bad = rejected({"speculative_config": {"decoding_type": "Eagle9", "max_draft_len": 3}}).splitlines()
    assert bad[1] == "speculative_config"
    assert bad[2].startswith(
        "  Input tag 'Eagle9' found using 'decoding_type' does not match any of the expected tags: 'DraftTarget', "
    )
    assert "[type=union_tag_invalid," in bad[2]
    missing = rejected({"speculative_config": {"max_draft_len": 3}}).splitlines()
    assert missing[2].startswith(
        "  Unable to extract tag using discriminator 'decoding_type' [type=union_tag_not_found"
    )


@pytest.mark.parametrize(
    ("spec", "loc", "message"),
    [
        (
            {"decoding_type": "Eagle3", "speculative_model_dir": "/d"},
            "speculative_config.Eagle3",
            "  Value error, max_draft_len must be > 0 for Eagle [type=value_error,",
        ),
        (
            {"decoding_type": "Eagle", "max_draft_len": 0, "speculative_model_dir": "/d"},
            "speculative_config.Eagle",
            "  Value error, max_draft_len must be > 0 for Eagle [type=value_error,",
        ),
        (
            {"decoding_type": "DraftTarget", "speculative_model": "/d"},
            "speculative_config.DraftTarget",
            "  Value error, max_draft_len must be > 0 for DraftTarget [type=value_error,",
        ),
        (
            {"decoding_type": "NGram"},
            "speculative_config.NGram",
            "  Value error, max_draft_len must be > 0 for NGram [type=value_error,",
        ),
        (
            {"decoding_type": "Eagle3", "max_draft_len": -1, "speculative_model": "/d"},
            "speculative_config.Eagle3.max_draft_len",
            "  Input should be greater than or equal to 0 [type=greater_than_equal, input_value=-1, input_type=int]",
        ),
        (
            {"decoding_type": "Eagle3", "max_draft_len": "three", "speculative_model": "/d"},
            "speculative_config.Eagle3.max_draft_len",
            "  Input should be a valid integer, unable to parse string as an integer [type=int_parsing, "
            "input_value='three', input_type=str]",
        ),
        (
            {"decoding_type": "DraftTarget", "max_draft_len": 2.5, "speculative_model": "/d"},
            "speculative_config.DraftTarget.max_draft_len",
            "  Input should be a valid integer, got a number with a fractional part [type=int_from_float, "
            "input_value=2.5, input_type=float]",
        ),
        (
            {"decoding_type": "MTP", "max_draft_len": 1, "num_nextn_predict_layers": 0},
            "speculative_config.MTP.num_nextn_predict_layers",
            "  Input should be greater than 0 [type=greater_than, input_value=0, input_type=int]",
        ),
    ],
)
def test_max_draft_len_missing_or_not_a_positive_int(spec: dict, loc: str, message: str) -> None:
    text = rejected({"speculative_config": spec}).splitlines()
    assert text[0] == "pydantic_core._pydantic_core.ValidationError: 1 validation error for TorchLlmArgs"
    assert text[1] == loc
    assert text[2].startswith(message)


@pytest.mark.parametrize(
    ("decoding_type", "message"),
    [
        ("Eagle3", "Value error, Draft model must be provided for EAGLE"),
        ("Eagle", "Value error, Draft model must be provided for EAGLE"),
        ("DraftTarget", "Value error, speculative_model must be specified for DraftTarget"),
    ],
)
def test_eagle3_and_draft_target_need_a_speculative_model(decoding_type: str, message: str) -> None:
    text = rejected({"speculative_config": {"decoding_type": decoding_type, "max_draft_len": 3}}).splitlines()
    assert text[1] == f"speculative_config.{decoding_type}"
    assert text[2].startswith(f"  {message} [type=value_error, input_value={{'decoding_type': ")


def test_max_concurrency_is_refused_before_1_3_and_turns_a_separate_drafter_off_above_it_after() -> None:
    """Whether 1.2.0rc6 takes the drafter's switches is unconfirmed: the emulated 1.2.0rc6 (and
    1.3.0rc1) refuse them as unknown keys, never kinder than the real one; 1.3.0rc27 documents
    them, positive. Only a separate drafter asks it: one-model EAGLE-3 (the default) and MTP
    draft in the target's step and keep drafting."""
    spec = {"decoding_type": "NGram", "max_draft_len": 3, "max_concurrency": 1}
    for older in ("1.2.0rc6", "1.3.0rc1"):
        message = rejected_at({"speculative_config": spec}, older)
        assert "speculative_config.NGram.max_concurrency\n  Extra inputs are not permitted" in message
    newer = resolve_llm_args(cli(), {"speculative_config": spec}, "1.3.0rc27")
    assert newer.speculative is not None and newer.speculative.max_concurrency == 1
    assert engine_namespace(newer, cli()).speculative_max_concurrency == 1
    eagle = {"decoding_type": "Eagle3", "max_draft_len": 3, "speculative_model": EAGLE3, "max_concurrency": 1}
    one_model = resolve_llm_args(cli(), {"speculative_config": eagle}, "1.3.0")
    assert engine_namespace(one_model, cli()).speculative_max_concurrency is None
    two_model = resolve_llm_args(cli(), {"speculative_config": {**eagle, "eagle3_one_model": False}}, "1.3.0")
    assert engine_namespace(two_model, cli()).speculative_max_concurrency == 1
    with pytest.raises(LlmArgsError, match="Input should be greater than 0"):
        resolve_llm_args(cli(), {"speculative_config": {**spec, "max_concurrency": 0}}, "1.3.0rc27")
    # Drafting at batch 1 only, up to the server's max_batch_size.
    assert concurrency_lookup(1, 3, 8) == (3, 3, 0, 0, 0, 0, 0, 0, 0)
    assert concurrency_lookup(4, 5, 4) == (5, 5, 5, 5, 5)


def rejected_at(options: Any, version: str) -> str:
    with pytest.raises(LlmArgsError) as raised:
        resolve_llm_args(cli(), options, version)
    return str(raised.value)


@pytest.mark.parametrize(
    ("fraction", "line"),
    [
        (1.5, "  Input should be less than or equal to 1 [type=less_than_equal, input_value=1.5, input_type=float]"),
        (
            -0.1,
            "  Input should be greater than or equal to 0 [type=greater_than_equal, input_value=-0.1, "
            "input_type=float]",
        ),
        (
            "most",
            "  Input should be a valid number, unable to parse string as a number [type=float_parsing, "
            "input_value='most', input_type=str]",
        ),
    ],
)
def test_free_gpu_memory_fraction_outside_the_unit_interval(fraction: Any, line: str) -> None:
    text = rejected({"kv_cache_config": {"free_gpu_memory_fraction": fraction}}).splitlines()
    assert text[:3] == [
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for KvCacheConfig",
        "free_gpu_memory_fraction",
        line,
    ]
    from_cli = rejected({}, parse_serve_args([TARGET, "--kv_cache_free_gpu_memory_fraction", "1.5"]))
    assert from_cli.splitlines()[1] == "free_gpu_memory_fraction"


def test_fraction_zero_passes_validation_as_in_the_source() -> None:
    # KvCacheConfig declares ge=0, le=1: 0 is valid there and fails later, when the KV cache
    # cannot hold one block (see test_memory_rule_failures).
    llm = resolve_llm_args(cli(), {"kv_cache_config": {"free_gpu_memory_fraction": 0}})
    assert llm.free_gpu_memory_fraction == 0.0


def test_mtp_takes_its_draft_length_from_num_nextn_predict_layers() -> None:
    # MTPDecodingConfig overwrites max_draft_len with num_nextn_predict_layers (no error).
    llm = resolve_llm_args(
        cli(), {"speculative_config": {"decoding_type": "MTP", "max_draft_len": 5, "num_nextn_predict_layers": 2}}
    )
    assert llm.speculative is not None and llm.speculative.max_draft_len == 2


def test_other_failures_several_errors_and_types_that_are_not_emulated() -> None:
    two = rejected({"max_batch_size": "many", "foo": 1}).splitlines()
    assert two[0] == "pydantic_core._pydantic_core.ValidationError: 2 validation errors for TorchLlmArgs"
    assert [two[1], two[4]] == ["max_batch_size", "foo"]
    medusa = rejected({"speculative_config": {"decoding_type": "Medusa", "max_draft_len": 3}}).splitlines()
    assert medusa[1].startswith("  Value error, Speculation type Medusa does not support backend pytorch")
    assert rejected({"speculative_config": {"decoding_type": "PARD", "max_draft_len": 3}}).startswith(
        "NotImplementedError: specfleet TensorRT-LLM EMULATOR: decoding_type 'PARD'"
    )
    assert rejected(None) == "TypeError: argument of type 'NoneType' is not iterable"
    assert rejected([1]) == "TypeError: unsupported operand type(s) for |: 'dict' and 'list'"
    assert rejected({"kv_cache_config": 0.8}) == "TypeError: unsupported operand type(s) for |: 'dict' and 'float'"


# --- mapping onto the emulator engine -------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "artifact", "eagle3_name", "expected"),
    [
        (
            "eagle3",
            EAGLE3,
            "Eagle3",
            {"method": "eagle3", "num_speculative_tokens": 3, "model": f"{plan_trtllm.CHECKPOINT_ROOT}/{EAGLE3}"},
        ),
        (
            "eagle3",
            EAGLE3,
            "Eagle",
            {"method": "eagle3", "num_speculative_tokens": 3, "model": f"{plan_trtllm.CHECKPOINT_ROOT}/{EAGLE3}"},
        ),
        (
            "draft_model",
            DRAFT_1B,
            "Eagle3",
            {"method": "draft_model", "num_speculative_tokens": 3,
             "model": f"{plan_trtllm.CHECKPOINT_ROOT}/{DRAFT_1B}"},
        ),
        (
            "ngram",
            None,
            "Eagle3",
            {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 1},
        ),
        ("mtp", None, "Eagle3", {"method": "mtp", "num_speculative_tokens": 3}),
    ],
)
def test_toolkit_options_map_onto_the_engine(
    method: str, artifact: str | None, eagle3_name: str, expected: dict
) -> None:
    # The options file as the unit gets it: the serving's rendering, read by the engine's YAML reader.
    spec = plan_trtllm.serving(
        "speculative", "img", TARGET, POLICY, "dgx_spark", toolkit_options(method, artifact, eagle3_name=eagle3_name), 1
    )
    (text,) = serving.files(spec).values()
    options = load_yaml(text)
    assert options == spec["engine_options"]
    llm = resolve_llm_args(cli(), options)
    args = engine_namespace(llm, cli())
    assert args.flavour == "trtllm"
    assert args.speculative_config == expected
    assert (args.model, args.host, args.port) == (TARGET, "0.0.0.0", 8000)
    assert (args.max_model_len, args.max_num_seqs, args.max_num_batched_tokens) == (8192, 1, 8192)
    assert args.kv_cache_free_gpu_memory_fraction == 0.85
    # Seed 004: the two-model methods run without the overlap scheduler (vLLM's async
    # scheduling), and draft_model without a cuda_graph_config (CUDA graphs on, 128).
    assert args.async_scheduling is (method not in ("draft_model", "ngram"))
    assert args.enforce_eager is False
    assert args.cuda_graph_max_batch_size == (128 if method == "draft_model" else 1)
    warned = [message for _, message in llm.log_lines if "'Eagle' is treated as 'Eagle3'" in message]
    assert len(warned) == (1 if eagle3_name == "Eagle" else 0)


def test_speculative_model_and_its_dir_alias_and_the_yaml_over_the_cli() -> None:
    for key in ("speculative_model", "speculative_model_dir"):
        llm = resolve_llm_args(
            cli(), {"speculative_config": {"decoding_type": "Eagle3", "max_draft_len": 4, key: "/opt/eagle"}}
        )
        assert engine_namespace(llm, cli()).speculative_config["model"] == "/opt/eagle"
    # serve.py merges the YAML over the CLI arguments: the YAML wins.
    llm = resolve_llm_args(cli(), {"max_batch_size": 4, "max_seq_len": 4096, "cuda_graph_config": None})
    args = engine_namespace(llm, cli())
    assert (args.max_num_seqs, args.max_model_len, args.enforce_eager) == (4, 4096, True)
    baseline = engine_namespace(resolve_llm_args(cli(), toolkit_options(None, None)), cli())
    assert baseline.speculative_config is None and baseline.async_scheduling is True


def test_speculator_resolution_local_dir_hub_id_and_missing(lab_root: Path, lab_env: dict[str, str]) -> None:
    local = repo_cache_snapshot(lab_root, EAGLE3)
    assert resolve_model(str(local), lab_env).weights_gib == 0.79
    assert resolve_model(EAGLE3, lab_env).weights_gib == 0.79  # through the hub cache
    assert served_name(str(local)) == local.name and served_name(TARGET) == TARGET
    with pytest.raises(Exception) as missing:
        resolve_model(f"{plan_trtllm.CHECKPOINT_ROOT}/nobody/none", lab_env)
    assert str(missing.value).startswith("huggingface_hub.errors.HFValidationError: Repo id must be in the form")
    with pytest.raises(Exception) as offline:
        resolve_model("nobody/none", lab_env)
    assert "LocalEntryNotFoundError" in str(offline.value)


# --- memory rule ----------------------------------------------------------------------------


def test_memory_rule_weights_first_then_the_fraction_of_what_is_free() -> None:
    gpu = parse_gpu_spec(SPARK_GPU)
    per_token = 131072  # Llama-3.1-8B: 2 x 32 layers x 8 kv heads x 128 x 2 bytes
    plan = plan_trtllm_memory(gpu, 14.99, 0.79, 0.85, per_token)
    free_after_weights = free_memory_gib(gpu) - NON_TORCH_GIB - 14.99 - 0.79
    assert plan.failed_component is None
    assert plan.free_after_weights_gib == pytest.approx(free_after_weights)
    expected_tokens = int(0.85 * free_after_weights * GIB / per_token) // TOKENS_PER_BLOCK * TOKENS_PER_BLOCK
    assert plan.kv_tokens == expected_tokens and plan.kv_tokens % TOKENS_PER_BLOCK == 0
    # The same rule as the planner's (which counts the whole unit as free): a smaller
    # fraction or a larger draft leaves a smaller KV cache.
    assert plan.kv_gib <= plan_trtllm.kv_cache_gib(14.99 + 0.79, 0.85, gpu.total_gib)
    assert plan_trtllm_memory(gpu, 14.99, 0.79, 0.5, per_token).kv_tokens < plan.kv_tokens
    assert plan_trtllm_memory(gpu, 14.99, 2.3, 0.85, per_token).kv_tokens < plan.kv_tokens


def test_memory_rule_failures() -> None:
    nano = parse_gpu_spec({**SPARK_GPU, "memory_total_mib": 7620})
    target = plan_trtllm_memory(nano, 14.99, 0.0, 0.85, 131072)
    assert target.failed_component == MODEL
    oom = executor_oom(target)
    assert oom.torch_error.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ")
    assert oom.explanation.splitlines()[:3] == [
        "Executor creation failed due to insufficient GPU memory.",
        "",
        "The following component could not be created: Model",
    ]
    tight = parse_gpu_spec({**SPARK_GPU, "memory_total_mib": 17 * 1024})
    draft = plan_trtllm_memory(tight, 14.99, 2.3, 0.85, 131072)
    assert draft.failed_component == DRAFT_MODEL
    assert "The following component could not be created: Draft model for speculative decoding" in (
        executor_oom(draft).explanation
    )
    zero = plan_trtllm_memory(parse_gpu_spec(SPARK_GPU), 14.99, 0.0, 0.0, 131072)
    assert zero.failed_component == KV_CACHE and zero.kv_tokens == 0
    assert "reduce free_gpu_memory_fraction" in executor_oom(zero).explanation


# --- iteration statistics -------------------------------------------------------------------


def step(iteration: int) -> StepRecord:
    return StepRecord(iteration, 10.0, 10.02, 1, 37, 2, 12, 1, 2, 0, 300)


def test_iteration_stats_are_json_records_without_speculative_counts() -> None:
    plan = plan_trtllm_memory(parse_gpu_spec(SPARK_GPU), 14.99, 0.79, 0.85, 131072)
    record = iteration_stats(step(7), plan, 1, datetime.datetime(2026, 1, 15, 10, 11, 12, 345678))
    assert record["iter"] == 7 and record["iterLatencyMS"] == pytest.approx(20.0)
    assert record["timestamp"] == "01-15-2026 10:11:12.345678"
    assert record["kvCacheStats"]["usedNumBlocks"] == 10 and record["kvCacheStats"]["tokensPerBlock"] == 32
    assert record["inflightBatchingStats"]["numScheduledRequests"] == 3
    assert not [key for key in json.dumps(record).lower().split('"') if "spec" in key or "accept" in key]
    queue = IterationStatsQueue(plan, 1, max_len=2)
    for index in range(1, 4):
        queue.record(step(index))
    assert [entry["iter"] for entry in queue.drain()] == [2, 3]  # bounded, oldest dropped
    assert queue.drain() == []  # removed once retrieved


# --- the server on loopback -----------------------------------------------------------------


class TrtllmProcess(EmulatorProcess):
    """`python3 -m vllm_emulator.trtllm_cli MODEL ...` on 127.0.0.1 and an ephemeral port."""

    def __init__(self, model: str, options: dict | None, extra: list[str], env: dict[str, str], work: Path) -> None:
        self.port = free_port()
        self.started = time.monotonic()
        argv = [
            model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--backend",
            "pytorch",
            "--tp_size",
            "1",
            *extra,
        ]
        if options is not None:
            path = work / f"options-{self.port}.yml"
            path.write_text(json.dumps(options))
            argv += ["--extra_llm_api_options", str(path)]
        self._spawn(argv, env, module="vllm_emulator.trtllm_cli")


@pytest.fixture()
def spark_env(lab_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    gpu = tmp_path / "spark-gpu.json"
    gpu.write_text(json.dumps(SPARK_GPU))
    return {**lab_env, "SPECFLEET_EMULATOR_GPU_FILE": str(gpu)}


@pytest.fixture()
def trtllm(spark_env: dict[str, str], tmp_path: Path) -> Iterator[Any]:
    started: list[TrtllmProcess] = []

    def launch(
        options: dict | None,
        model: str = TARGET,
        extra: list[str] | None = None,
        ready: bool = True,
        env: dict[str, str] | None = None,
    ) -> TrtllmProcess:
        process = TrtllmProcess(
            model, options, extra or ["--max_batch_size", "2", "--max_seq_len", "4096"], env or spark_env, tmp_path
        )
        started.append(process)
        if ready:
            process.wait_ready()
        return process

    yield launch
    for process in started:
        process.stop()


def completion(server: EmulatorProcess, max_tokens: int = 12) -> dict[str, Any]:
    status, body = server.post(
        "/v1/completions", {"prompt": "List three steps to tune a server.", "max_tokens": max_tokens, "temperature": 0}
    )
    assert status == 200, body
    return body


def test_http_speculative_server_with_iteration_stats(trtllm: Any, lab_root: Path) -> None:
    options = toolkit_options("eagle3", EAGLE3, eagle3_name="Eagle")
    options["speculative_config"]["speculative_model_dir"] = str(repo_cache_snapshot(lab_root, EAGLE3))
    server = trtllm({**options, "enable_iter_perf_stats": True}, model=TARGET_FP4)
    status, headers, body = server.get("/health")
    assert (status, body) == (200, b"")
    assert "tensorrt-llm 1.2.0rc6 emulated" in headers["Server"]
    assert json.loads(server.get("/version")[2]) == {"version": "1.2.0rc6"}
    models = json.loads(server.get("/v1/models")[2])
    assert [(card["id"], card["owned_by"]) for card in models["data"]] == [(TARGET_FP4, "tensorrt_llm")]
    status, headers, body = server.get("/metrics")
    assert status == 200 and headers["content-type"] == "application/json" and json.loads(body) == []
    assert completion(server)["usage"]["completion_tokens"] == 12
    status, chat = server.post(
        "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "temperature": 0}
    )
    assert status == 200 and chat["choices"][0]["message"]["role"] == "assistant"
    stats = json.loads(server.get("/metrics")[2])
    assert isinstance(stats, list) and stats and all("iterLatencyMS" in entry for entry in stats)
    assert sum(entry["numCompletedRequests"] for entry in stats) == 2
    assert json.loads(server.get("/metrics")[2]) == []  # drained by the previous read
    text = server.get("/metrics")[2].decode() + server.output
    assert "spec_decode" not in text and "vllm:" not in text and "SpecDecoding" not in text
    info = json.loads(server.get("/specfleet/emulator")[2])
    assert info["engine"] == "trtllm-serve" and info["speculative"]["decoding_type"] == "Eagle"
    assert info["speculative"]["method"] == "eagle3" and info["speculative"]["max_draft_len"] == 3
    lines = server.output.splitlines()
    assert lines[0].startswith("specfleet TensorRT-LLM EMULATOR ")
    assert "[TensorRT-LLM] TensorRT-LLM version: 1.2.0rc6" in lines
    assert any("[TRT-LLM] [W] speculative_config.decoding_type 'Eagle'" in line for line in lines)
    assert any("[TRT-LLM] [I] [MemUsageChange] Allocated" in line for line in lines)


def test_http_baseline_without_iteration_stats_answers_an_empty_list(trtllm: Any) -> None:
    server = trtllm(toolkit_options(None, None))
    completion(server)
    status, _, body = server.get("/metrics")
    assert status == 200 and json.loads(body) == []


def test_startup_failures_validation_and_out_of_memory(trtllm: Any, spark_env: dict[str, str], tmp_path: Path) -> None:
    bad = trtllm({"speculative_config": {"decoding_type": "Eagle3", "max_draft_len": 3}}, ready=False)
    assert bad.wait_exit() == 1
    assert "1 validation error for TorchLlmArgs" in bad.output
    assert "Draft model must be provided for EAGLE" in bad.output
    assert not port_listening(bad.port)
    small = tmp_path / "small-gpu.json"
    small.write_text(json.dumps({**SPARK_GPU, "memory_total_mib": 12 * 1024}))
    oom = trtllm(toolkit_options(None, None), ready=False, env={**spark_env, "SPECFLEET_EMULATOR_GPU_FILE": str(small)})
    assert oom.wait_exit() == 1
    assert (
        "[TRT-LLM] [E] Failed to initialize executor on rank 0: Executor creation failed due to insufficient "
        "GPU memory." in oom.output
    )
    assert "torch.OutOfMemoryError: CUDA out of memory." in oom.output
    assert oom.stderr[-1] == "RuntimeError: Executor worker returned error"


def test_fault_switches_apply_to_this_flavour(trtllm: Any, spark_env: dict[str, str]) -> None:
    Path(spark_env["SPECFLEET_EMULATOR_FAULTS_FILE"]).write_text(json.dumps({"crash_after_requests": 1}))
    server = trtllm(toolkit_options(None, None))
    completion(server)
    assert server.wait_exit(10) == 1
    assert "specfleet TensorRT-LLM EMULATOR fault switch: crash_after_requests=1" in server.output
    Path(spark_env["SPECFLEET_EMULATOR_FAULTS_FILE"]).write_text(json.dumps({"reject_speculative_config": True}))
    rejected_run = trtllm(toolkit_options("ngram", None), ready=False)
    assert rejected_run.wait_exit() == 1
    assert "Input tag 'NGram' found using 'decoding_type' does not match" in rejected_run.output


def test_connection_is_refused_until_ready(trtllm: Any, spark_env: dict[str, str]) -> None:
    Path(spark_env["SPECFLEET_EMULATOR_FAULTS_FILE"]).write_text(json.dumps({"never_ready": True}))
    server = trtllm(toolkit_options(None, None), ready=False)
    deadline = time.monotonic() + 10
    while "fault switch: never_ready" not in server.output and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.proc.poll() is None and "never_ready" in server.output
    with pytest.raises(ConnectionRefusedError):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=1)
        conn.request("GET", "/health")


# --- the unit-side classifier (vllm_container) on this flavour's failures ------------------


def test_classifier_reads_trtllm_startup_failures(trtllm: Any, spark_env: dict[str, str], tmp_path: Path) -> None:
    from ansible_collections.specfleet.fleet.plugins.module_utils.vllm_logs import classify

    def failure_of(process: TrtllmProcess) -> tuple[str | None, list[str]]:
        assert process.wait_exit() != 0
        return classify(process.output)

    failure, decisive = failure_of(trtllm({"speculative_config": {"decoding_type": "Eagle3", "max_draft_len": 3}},
                                          ready=False))
    assert failure == "spec_config_rejected"
    assert decisive[0].startswith("TorchLlmArgs: speculative_config"), decisive
    assert "Draft model must be provided for EAGLE" in decisive[0]
    failure, decisive = failure_of(trtllm({**toolkit_options(None, None), "enable_iter_perf_stat": True}, ready=False))
    assert failure == "bad_arguments"
    assert "1 validation error for TorchLlmArgs" in decisive[0]
    failure, _ = failure_of(trtllm(toolkit_options(None, None), extra=["--max_batch_sizes", "2"], ready=False))
    assert failure == "bad_arguments"
    small = tmp_path / "small-gpu.json"
    small.write_text(json.dumps({**SPARK_GPU, "memory_total_mib": 12 * 1024}))
    failure, decisive = failure_of(trtllm(toolkit_options(None, None), ready=False,
                                          env={**spark_env, "SPECFLEET_EMULATOR_GPU_FILE": str(small)}))
    assert failure == "oom_at_start"
    assert any("Executor creation failed due to insufficient GPU memory" in line for line in decisive)


def test_a_speculative_server_refuses_a_logprobs_request_a_baseline_serves(trtllm: Any, lab_root: Path) -> None:
    """TensorRT-LLM's speculative samplers support no log probabilities (they asserted and could
    hang the server before NVIDIA/TensorRT-LLM#18401 refused them at admission): refused."""
    options = toolkit_options("eagle3", EAGLE3, eagle3_name="Eagle")
    options["speculative_config"]["speculative_model_dir"] = str(repo_cache_snapshot(lab_root, EAGLE3))
    server = trtllm(options, model=TARGET_FP4)
    asks = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "temperature": 0,
            "logprobs": True, "top_logprobs": 2}
    status, body = server.post("/v1/chat/completions", asks)
    assert status == 400 and "log probabilities" in json.dumps(body)
    baseline = trtllm(toolkit_options(None, None), model=TARGET_FP4)
    status, body = baseline.post("/v1/chat/completions", asks)
    assert status == 200, body
    # A prefix-cache salt is validated as vLLM validates it (NVIDIA/TensorRT-LLM#7106).
    status, body = baseline.post("/v1/chat/completions", {**asks, "logprobs": False, "top_logprobs": None,
                                                          "cache_salt": ""})
    assert status == 400 and "cache_salt" in json.dumps(body)
