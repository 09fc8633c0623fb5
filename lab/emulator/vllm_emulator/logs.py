"""vLLM-shaped log lines.

vLLM V1 prefixes every line with the process it comes from, e.g.
`(APIServer pid=92) INFO 09-24 10:11:12 [api_server.py:1839] vLLM API server version ...`
and `(EngineCore_DP0 pid=180) INFO ...`; uvicorn's own lines look like
`(APIServer pid=92) INFO:     Application startup complete.`. Client code parses these, so
the emulator writes the same shapes (source file names and line numbers are plausible,
not meaningful).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO

API_SERVER = "APIServer"
ENGINE_CORE = "EngineCore_DP0"


class VllmLogger:
    """Writes vLLM-style lines to stdout (vLLM logs to stdout; tracebacks go to stderr)."""

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self._out = out if out is not None else sys.stdout
        self._err = err if err is not None else sys.stderr
        # Re-entrant: the SIGTERM handler logs from the main thread, possibly while that
        # same thread is in the middle of writing a line.
        self._lock = threading.RLock()
        self.api_pid = os.getpid()
        # The real engine core is a child process; the emulator runs it in-process, so it
        # reports a neighbouring pid to keep the two prefixes distinguishable.
        self.engine_pid = self.api_pid + 1

    def _prefix(self, process: str) -> str:
        pid = self.engine_pid if process == ENGINE_CORE else self.api_pid
        return f"({process} pid={pid})"

    def _write(self, stream: TextIO, text: str) -> None:
        with self._lock:
            try:
                stream.write(text if text.endswith("\n") else text + "\n")
                stream.flush()
            except (BrokenPipeError, ValueError):
                pass  # a closed log pipe must never take the server down

    def plain(self, text: str) -> None:
        self._write(self._out, text)

    def log(self, level: str, source: str, message: str, process: str = API_SERVER) -> None:
        stamp = time.strftime("%m-%d %H:%M:%S")
        for index, line in enumerate(message.splitlines() or [""]):
            head = f"{self._prefix(process)} {level} {stamp} [{source}] " if index == 0 else ""
            self._write(self._out, head + line)

    def info(self, source: str, message: str, process: str = API_SERVER) -> None:
        self.log("INFO", source, message, process)

    def warning(self, source: str, message: str, process: str = API_SERVER) -> None:
        self.log("WARNING", source, message, process)

    def error(self, source: str, message: str, process: str = API_SERVER) -> None:
        self.log("ERROR", source, message, process)

    def uvicorn(self, message: str) -> None:
        """uvicorn's own format: level, colon, padding to column 10."""
        self._write(self._out, f"{self._prefix(API_SERVER)} INFO:     {message}")

    def traceback(self, text: str, process: str = API_SERVER) -> None:
        prefix = self._prefix(process)
        for line in text.splitlines():
            self._write(self._err, f"{prefix} {line}")
