"""The startup-log classifier: its fallback (a failure it has no class for still says why), and
TensorRT-LLM's options errors, which pydantic spreads over several lines."""

from __future__ import annotations

from ansible_collections.specfleet.fleet.plugins.module_utils.vllm_logs import classify, trtllm_options_errors

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
