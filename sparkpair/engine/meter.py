"""Bytes moved over time (a download, a copy, a verification) as keyed progress `Event`s: done/total
in bytes, the rate over the last seconds and the time left, one evolving line per key."""

from __future__ import annotations

import time
from collections import deque

from sparkpair.progress import Event, Progress

WINDOW_S = 5.0  # the rate is measured over this much recent history


def size(count: float) -> str:
    """Bytes in binary units, as the line shows them: `512 KiB`, `1.25 GiB`."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(count) >= scale:
            return f"{count / scale:.2f} {unit}"
    return f"{count:.0f} B"


def duration(seconds: float) -> str:
    """`42 s`, `3 min 05 s`, `1 h 02 min`."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class Meter:
    """One evolving thing measured in bytes: `update(done)` emits `label: 1.20/2.00 GiB, 830 MB/s, 1 s left`."""

    def __init__(self, progress: Progress, node: str, key: str, label: str, total: float | None) -> None:
        self.progress, self.node, self.key, self.label, self.total = progress, node, key, label, total
        self.start = time.monotonic()
        self.samples: deque[tuple[float, float]] = deque([(self.start, 0.0)])
        self.done = 0.0

    def rate(self) -> float:
        """Bytes per second over the last WINDOW_S seconds (since the start when younger)."""
        (first_time, first_done), (last_time, last_done) = self.samples[0], self.samples[-1]
        return (last_done - first_done) / (last_time - first_time) if last_time > first_time else 0.0

    def text(self, done: float) -> str:
        total = f"/{size(self.total)}" if self.total else ""
        parts = [f"{size(done)}{total}"]
        rate = self.rate()
        if rate > 0:
            parts.append(f"{rate / 1e6:.{1 if rate < 10e6 else 0}f} MB/s")   # 0.4 MB/s, not 0
            if self.total and done < self.total:
                parts.append(f"{duration((self.total - done) / rate)} left")
        return f"{self.label}: {', '.join(parts)}"

    def update(self, done: float) -> None:
        now = time.monotonic()
        self.done = done
        self.samples.append((now, done))
        while len(self.samples) > 2 and now - self.samples[0][0] > WINDOW_S:
            self.samples.popleft()
        total = self.total if self.total and self.total >= done else None
        self.progress(Event(self.node, self.text(done), key=self.key, done=done, total=total, unit="B"))

    def finish(self, text: str, label: str | None = None) -> None:
        """Close the live line with a last one (`label: text`, another label when the work's name changes with
        its end: `downloading` -> `downloaded`), done = total."""
        final = max(self.done, self.total or 0.0, 1.0)
        self.progress(Event(self.node, f"{label or self.label}: {text}", key=self.key, done=final, total=final,
                            unit="B"))

    def seconds(self) -> float:
        return time.monotonic() - self.start
