"""Cutting a command's output into lines as it arrives (`NodeConnection.stream`). Standard library only."""

from __future__ import annotations

import codecs
from collections.abc import Callable


class LineSink:
    """Hands complete lines of one output stream (bytes as they come, UTF-8) to a callback."""

    def __init__(self, on_line: Callable[[str], None]) -> None:
        self._on_line, self._pending = on_line, ""
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes) -> None:
        self._pending += self._decoder.decode(data).replace("\r", "\n")
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            if line.strip():
                self._on_line(line)

    def flush(self) -> None:
        if self._pending.strip():
            self._on_line(self._pending)
        self._pending = ""
