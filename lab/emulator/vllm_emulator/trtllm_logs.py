"""TensorRT-LLM-shaped log lines for the `trtllm-serve` flavour.

TensorRT-LLM's Python logger writes `[01/15/2026-10:11:12] [TRT-LLM] [I] message` (logging
format `[%(asctime)s] %(message)s`, date `%m/%d/%Y-%H:%M:%S`, severities F/E/W/I/V) and its
C++ runtime `[TensorRT-LLM][INFO] message`; uvicorn adds its own `INFO:     ...` lines.
`--log_level` (internal_error|error|warning|info|verbose) filters the Python logger.
The logger keeps VllmLogger's interface so the shared HTTP server and failure rendering
write through it unchanged.
"""

from __future__ import annotations

import time
from typing import TextIO

from .logs import API_SERVER, VllmLogger

SEVERITY_LETTERS = {"critical": "F", "error": "E", "warning": "W", "info": "I", "verbose": "V"}
# tensorrt_llm.logger.severity_map, most severe first.
LEVEL_ORDER = ("internal_error", "error", "warning", "info", "verbose")
_MESSAGE_LEVEL = {
    "critical": "internal_error",
    "error": "error",
    "warning": "warning",
    "info": "info",
    "verbose": "verbose",
}


class TrtllmLogger(VllmLogger):
    """Writes `[date] [TRT-LLM] [X] ...` lines to stdout, tracebacks to stderr."""

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None, level: str = "info") -> None:
        super().__init__(out, err)
        self.level = level

    def enabled(self, severity: str) -> bool:
        return LEVEL_ORDER.index(_MESSAGE_LEVEL[severity]) <= LEVEL_ORDER.index(self.level)

    def log(self, level: str, source: str, message: str, process: str = API_SERVER) -> None:
        # `level` arrives as VllmLogger's INFO/WARNING/ERROR; `source` and `process` are
        # vLLM notions TensorRT-LLM's lines do not carry.
        severity = level.lower()
        if not self.enabled(severity):
            return
        stamp = time.strftime("%m/%d/%Y-%H:%M:%S")
        for index, line in enumerate(message.splitlines() or [""]):
            head = f"[{stamp}] [TRT-LLM] [{SEVERITY_LETTERS[severity]}] " if index == 0 else ""
            self._write(self._out, head + line)

    def trt_info(self, message: str) -> None:
        self.log("INFO", "", message)

    def trt_warning(self, message: str) -> None:
        self.log("WARNING", "", message)

    def trt_error(self, message: str) -> None:
        self.log("ERROR", "", message)

    def runtime_info(self, message: str) -> None:
        """A line of the C++ runtime's own logger (not filtered by --log_level in the emulator)."""
        self._write(self._out, f"[TensorRT-LLM][INFO] {message}")

    def uvicorn(self, message: str) -> None:
        self._write(self._out, f"INFO:     {message}")

    def traceback(self, text: str, process: str = API_SERVER) -> None:
        for line in text.splitlines():
            self._write(self._err, line)
