"""When a log line was written, by its own timestamp: how diagnose tells a stall from a log that merely ends.

Pure. A log that stops in the middle of a start proves nothing by itself: it may be an excerpt, or a start
still running. Only elapsed time shows a stall, and offline the only clock is the log's own timestamps.
`stamp` reads the formats the engines and their tools print (all real, tests/fixtures/logs):

- full dates: `2025-06-23 15:06:10` (SGLang, Ray, Python logging, ISO 8601 with `T`) and TensorRT-LLM's
  `[11/20/2025-23:56:51]`;
- month and day without a year: vLLM's `INFO 11-25 22:23:31`, glog's as PyTorch's c10d prints it
  (`[W1125 22:27:05.481112310`, `[W926 18:06:34.229932146`) and syslog's `Aug 17 18:42:18`.

Times of the two kinds are never compared with each other (a year is missing from one). Every pattern is
anchored on digits and bounded, so a hostile line costs one linear scan.
"""

from __future__ import annotations

import calendar
import datetime
import re
from dataclasses import dataclass

_MONTHS = {name.lower(): number for number, name in enumerate(calendar.month_abbr) if name}
_FULL = (
    (re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?!\d)"), (0, 1, 2)),
    (re.compile(r"\[(\d{2})/(\d{2})/(\d{4})-(\d{2}):(\d{2}):(\d{2})\]"), (2, 0, 1)),
)
_VLLM = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})\b")
_GLOG = re.compile(r"(?:^|[\s\[\]])[IWEF](\d{3,4}) (\d{2}):(\d{2}):(\d{2})\.\d{1,9}\b")
_SYSLOG = re.compile(r"^([A-Z][a-z]{2}) {1,2}(\d{1,2}) (\d{2}):(\d{2}):(\d{2})\b")
_NOMINAL_YEAR = 2000   # a leap year, for a month-and-day time without one


@dataclass(frozen=True)
class Stamp:
    """A line's time: its kind ("date" or "month-day", comparable only within a kind), seconds on that
    kind's scale, and the text as the log wrote it."""

    kind: str
    seconds: float
    text: str


def stamp(line: str) -> Stamp | None:
    """The time line was written, when it carries a timestamp of a known format (None otherwise)."""
    for pattern, order in _FULL:
        found = pattern.search(line, 0, 64)
        if found:
            parts = [int(part) for part in found.groups()]
            year, month, day = (parts[index] for index in order)
            return _stamp("date", year, month, day, parts[3:], found.group(0))
    found = _VLLM.search(line, 0, 160)
    if found:
        month, day, *clock = (int(part) for part in found.groups())
        return _stamp("month-day", _NOMINAL_YEAR, month, day, clock, found.group(0).split(" ", 1)[1])
    found = _GLOG.search(line, 0, 64)
    if found:
        date, hour, minute, second = found.groups()
        return _stamp("month-day", _NOMINAL_YEAR, int(date[:-2]), int(date[-2:]), [int(hour), int(minute), int(second)],
                      found.group(0).strip(" []"))
    found = _SYSLOG.search(line)
    if found and found.group(1).lower() in _MONTHS:
        clock = [int(part) for part in found.groups()[2:]]
        return _stamp("month-day", _NOMINAL_YEAR, _MONTHS[found.group(1).lower()], int(found.group(2)), clock,
                      found.group(0))
    return None


def _stamp(kind: str, year: int, month: int, day: int, clock: list[int], text: str) -> Stamp | None:
    hour, minute, second = clock
    try:
        days = datetime.date(year, month, day).toordinal()
    except ValueError:
        return None
    if hour > 23 or minute > 59 or second > 60:
        return None
    return Stamp(kind, ((days * 24 + hour) * 60 + minute) * 60 + second, text)
