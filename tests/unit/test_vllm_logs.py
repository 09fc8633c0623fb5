"""The startup-log classifier's fallback: a failure it has no class for still says why."""

from __future__ import annotations

from specfleet_unit.vllm_logs import classify

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
