"""The startup-log classifier: its fallback (a failure it has no class for still says why), and
TensorRT-LLM's options errors, which pydantic spreads over several lines."""

from __future__ import annotations

import pytest
import yaml
from ansible_collections.specfleet.fleet.plugins.module_utils.vllm_logs import (
    FAILURE_PATTERNS,
    classify,
    compile_cache_state,
    trtllm_options_errors,
)

from tests.conftest import REPO
from tests.unit.plugins.test_plugin_docs import doc_blocks

# Captured from the real vLLM 0.32 (CPU) in a lab unit whose /dev/shm was Docker's 64 MB.
SHM_LOG = """\
(APIServer pid=1) WARNING 11-22 04:00:43 [system_utils.py:255] Found ulimit of 20000 and failed to automatically \
increase with error current limit exceeds maximum limit. This can cause fd limit errors like \
`OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n
(EngineCore pid=24) ERROR 11-22 04:01:58 [core.py:1510] EngineCore failed to start.
(EngineCore pid=24) ERROR 11-22 04:01:58 [core.py:1510] Traceback (most recent call last):
(EngineCore pid=24) ERROR 11-22 04:01:58 [core.py:1510] RuntimeError: Insufficient space in /dev/shm for \
shared-memory allocation: 160 MiB required, 64 MiB free. Increase /dev/shm (e.g. --shm-size or --ipc=host).
Traceback (most recent call last):
RuntimeError: Insufficient space in /dev/shm for shared-memory allocation: 160 MiB required, 64 MiB free. \
Increase /dev/shm (e.g. --shm-size or --ipc=host).
(APIServer pid=1) INFO 11-22 04:02:05 [utils.py:628] [shutdown] Process manager: send sigterm to process EngineCore
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""


def test_unknown_failure_names_its_root_cause_once():
    failure, decisive = classify(SHM_LOG)
    assert failure is None
    assert decisive == [
        "RuntimeError: Insufficient space in /dev/shm for shared-memory allocation: 160 MiB required, "
        "64 MiB free. Increase /dev/shm (e.g. --shm-size or --ipc=host)."
    ]


def test_known_class_wins_over_the_fallback():
    log = SHM_LOG + "ValueError: prompt_lookup_min=5 must be <= prompt_lookup_max=2\n"
    assert classify(log)[0] == "spec_config_rejected"


def test_clean_log_has_no_decisive_lines():
    assert classify("INFO Application startup complete.\n") == (None, [])


# The shape of TensorRT-LLM's refusal of an options YAML (pydantic 2): two errors, one of them
# in speculative_config, then the next log line.
TRTLLM_LOG = """\
[11/22/2026-16:30:00] [TRT-LLM] [I] Using LLM with PyTorch backend
pydantic_core._pydantic_core.ValidationError: 2 validation errors for TorchLlmArgs
enable_iter_perf_stat
  Extra inputs are not permitted [type=extra_forbidden, input_value=True, input_type=bool]
    For further information visit https://errors.pydantic.dev/2.12/v/extra_forbidden
speculative_config.NGram.prompt_lookup_max
  Extra inputs are not permitted [type=extra_forbidden, input_value=4, input_type=int]
    For further information visit https://errors.pydantic.dev/2.12/v/extra_forbidden
[11/22/2026-16:30:01] [TRT-LLM] [E] Failed to start
"""


def test_trtllm_options_errors_are_read_error_by_error():
    assert trtllm_options_errors(TRTLLM_LOG) == [
        ("TorchLlmArgs", "enable_iter_perf_stat",
         "Extra inputs are not permitted [type=extra_forbidden, input_value=True, input_type=bool]"),
        ("TorchLlmArgs", "speculative_config.NGram.prompt_lookup_max",
         "Extra inputs are not permitted [type=extra_forbidden, input_value=4, input_type=int]"),
    ]


def test_an_error_in_speculative_config_is_a_rejected_speculative_config():
    failure, decisive = classify(TRTLLM_LOG)
    assert failure == "spec_config_rejected"
    assert decisive == ["TorchLlmArgs: speculative_config.NGram.prompt_lookup_max: Extra inputs are not permitted "
                        "[type=extra_forbidden, input_value=4, input_type=int]"]


def test_other_options_errors_are_bad_arguments():
    without_speculation = TRTLLM_LOG.replace("speculative_config.NGram.prompt_lookup_max", "cuda_graph_config.batch")
    failure, decisive = classify(without_speculation)
    assert failure == "bad_arguments"
    assert decisive == ["pydantic_core._pydantic_core.ValidationError: 2 validation errors for TorchLlmArgs"]


# vLLM's capability refusals as users reported them (vllm-project/vllm issue #22422: mxfp4 on an
# RTX 3090; compressed-tensors' check passes three arguments to RuntimeError, so Python prints
# the tuple). Each after a line naming NVML, which alone would be nvml_runtime_error.
NVML_WARNING = ("(APIServer pid=1) WARNING 11-22 04:00:43 [__init__.py:62] Exception happens when checking CUDA "
                "platform: NVML Shared Library Not Found\n")
QUANT_REFUSAL = ("  Value error, The quantization method mxfp4 is not supported for the current GPU. Minimum "
                 "capability: 100. Current capability: 86. [type=value_error, input_value=ArgsKwargs((), "
                 "{'model_co...additional_config': {}}), input_type=ArgsKwargs]")
SCHEME_REFUSAL = ("(EngineCore_DP0 pid=60) RuntimeError: ('Quantization scheme is not supported for ', 'the "
                  "current GPU. Min capability: 80. ', 'Current capability: 75.')")
BF16_REFUSAL = ("(EngineCore_DP0 pid=60) ValueError: Bfloat16 is only supported on GPUs with compute capability "
                "of at least 8.0. Your Tesla T4 GPU has compute capability 7.5. You can use float16 instead by "
                "explicitly setting the `dtype` flag in CLI, for example: --dtype=half.")


@pytest.mark.parametrize("refusal", [QUANT_REFUSAL, SCHEME_REFUSAL, BF16_REFUSAL])
def test_what_the_gpu_cannot_run_is_gpu_unsupported(refusal):
    log = NVML_WARNING + "pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig\n" + refusal
    log += "\nRuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"
    assert classify(log) == ("gpu_unsupported", [refusal.strip()])


def test_every_failure_class_is_documented_where_the_launch_module_returns_it():
    path = REPO / "plugins" / "modules" / "vllm_container.py"
    described = " ".join(yaml.safe_load(doc_blocks(path)["RETURN"])["failure_class"]["description"])
    assert [name for name, _ in FAILURE_PATTERNS if f"C({name})" not in described] == []


# vLLM's own wording (vllm/compilation/backends.py): "compile range" since 0.1x, "dynamic shape" before.
@pytest.mark.parametrize(("log", "state"), [
    ("INFO [backends.py:296] Directly load the compiled graph(s) for compile range (1, 8192) from the cache, "
     "took 0.512 s", "hit"),
    ("INFO [backends.py:197] Directly load the compiled graph(s) for dynamic shape from the cache, took 4.0 s", "hit"),
    ("INFO [backends.py:399] Compiling a graph for compile range (1, 8192) takes 38.20 s", "miss"),
    # The target's graphs from the cache, the drafter's compiled: the start paid a compile.
    ("Directly load the compiled graph(s) for dynamic shape from the cache, took 4.0 s\n"
     "Compiling a graph for dynamic shape takes 12.75 s", "miss"),
    ("INFO [core.py:75] Initializing a V1 LLM engine with config: enforce_eager=True", None),
])
def test_the_compile_cache_state_is_read_from_the_start_log(log, state):
    assert compile_cache_state(log) == state
