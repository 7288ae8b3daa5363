"""Log lines in TensorRT-LLM's and uvicorn's formats.

TensorRT-LLM's Python logger (``logging.basicConfig``) writes
``[MM/DD/YYYY-HH:MM:SS] [TRT-LLM] [I] message`` (with ``[RANK n]`` on ranks > 0) to stderr and
respects ``--log_level``; uvicorn's lifecycle lines (``INFO:     Application startup complete.``)
also go to stderr, so the ready sequence keeps its order; access lines go to stdout.
Every line is flushed at once so mpirun forwards it immediately.
"""

import sys
import time

LEVEL_ORDER = ("trace", "debug", "verbose", "info", "warning", "error", "internal_error")
SEVERITY_LETTER = {"info": "I", "warning": "W", "error": "E", "debug": "D", "verbose": "V"}


class TrtLogger:
    """TensorRT-LLM's logger for one rank."""

    def __init__(self, level="info", rank=0, stream=None):
        self.threshold = LEVEL_ORDER.index(level)
        self.rank = rank
        self.stream = stream

    def _emit(self, severity, message):
        if LEVEL_ORDER.index(severity) < self.threshold:
            return
        stamp = time.strftime("%m/%d/%Y-%H:%M:%S")
        rank = f" [RANK {self.rank}]" if self.rank else ""
        print(f"[{stamp}] [TRT-LLM]{rank} [{SEVERITY_LETTER[severity]}] {message}",
              file=self.stream or sys.stderr, flush=True)

    def info(self, message):
        """An [I] line."""
        self._emit("info", message)

    def warning(self, message):
        """A [W] line."""
        self._emit("warning", message)

    def error(self, message):
        """An [E] line (always shown unless the level is internal_error)."""
        self._emit("error", message)


def uvicorn(message):
    """A uvicorn lifecycle line, e.g. ``INFO:     Application startup complete.``."""
    print(f"INFO:     {message}", file=sys.stderr, flush=True)


def fatal(text):
    """What an uncaught exception leaves on stderr (last lines of the traceback)."""
    print("Traceback (most recent call last):", file=sys.stderr)
    print('  File "/usr/local/bin/trtllm-serve", line 8, in <module>', file=sys.stderr)
    print(text, file=sys.stderr, flush=True)
