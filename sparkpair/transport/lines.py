"""A command's output as it arrives: cut into lines (`LineSink`, `NodeConnection.stream`) or kept up to a byte cap
(`CappedOutput`, `NodeConnection.run`). Standard library only."""

from __future__ import annotations

import codecs
import threading
from collections.abc import Callable

MAX_LINE = 1024 * 1024  # characters kept of one line; the rest of a longer line is dropped


class LineSink:
    """Hands complete lines of one output stream (bytes as they come, UTF-8) to a callback.

    Linear in the output however it is cut into chunks: each chunk is split on its own and the start of
    an unfinished line is kept as pieces, joined once when the line ends. A line longer than MAX_LINE
    characters is handed on cut to MAX_LINE (a node printing without end holds at most that much)."""

    def __init__(self, on_line: Callable[[str], None]) -> None:
        self._on_line = on_line
        self._pieces: list[str] = []
        self._kept = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes) -> None:
        self._take(self._decoder.decode(data))

    def flush(self) -> None:
        """Hand on the last line, unfinished (and any UTF-8 sequence cut at the end, as U+FFFD)."""
        self._take(self._decoder.decode(b"", final=True))
        self._end_line()

    def _take(self, text: str) -> None:
        *finished, rest = text.replace("\r", "\n").split("\n")
        for piece in finished:
            self._keep(piece)
            self._end_line()
        self._keep(rest)

    def _keep(self, piece: str) -> None:
        room = MAX_LINE - self._kept
        if piece and room > 0:
            self._pieces.append(piece[:room])
            self._kept += len(self._pieces[-1])

    def _end_line(self) -> None:
        line = "".join(self._pieces)
        self._pieces.clear()
        self._kept = 0
        if line.strip():
            self._on_line(line)


class CappedOutput:
    """A command's stdout and stderr as they arrive, together at most cap bytes: beyond that `over` is set and the
    rest dropped (the reader stops reading)."""

    def __init__(self, cap: int) -> None:
        self.cap, self.out, self.err, self.over = cap, bytearray(), bytearray(), False
        self._lock = threading.Lock()

    def _take(self, into: bytearray, data: bytes) -> None:
        with self._lock:
            room = self.cap - len(self.out) - len(self.err)
            if len(data) > room:
                self.over, data = True, data[:max(room, 0)]
            into.extend(data)

    def stdout(self, data: bytes) -> None:
        self._take(self.out, data)

    def stderr(self, data: bytes) -> None:
        self._take(self.err, data)
