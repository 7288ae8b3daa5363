"""Memory facts beside /proc/meminfo (`host.MEMINFO`): the kernel's memory pressure, and the memory guard.

`PRESSURE` is /proc/pressure/memory (PSI: the share of time tasks stalled on memory, over 10, 60 and 300
seconds). `guard(dir)` asks what the memory guard left in its directory (`sparkpair/data/memguard.py`, started
by launch beside the engine): whether its process still watches, and its record once it stopped the engine.
The record is hostile input like any byte from a node: read capped, every field checked; `GuardStop.line` is
the guard's sentence rebuilt from the checked figures, never its text passed through.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sparkpair import boundedjson
from sparkpair.probes import Probe, expanded_path, parse_sections, printable, section
from sparkpair.transport import Shell

KIB_PER_GIB = 1024 * 1024
RECORD_CAP = 8192             # bytes of stop.json read
PSI_LINE = re.compile(r"^(some|full) avg10=([0-9]{1,3}\.[0-9]{2}) avg60=([0-9]{1,3}\.[0-9]{2}) "
                      r"avg300=([0-9]{1,3}\.[0-9]{2}) total=[0-9]{1,20}$")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
TRIGGERS = ("floor", "pressure")


@dataclass(frozen=True)
class Pressure:
    """The kernel's memory pressure: the avg10 percentages of `some` (a task stalled) and `full` (every task)."""

    some_avg10: float
    full_avg10: float | None      # None: a kernel that prints no `full` line


def parse_pressure(text: str) -> Pressure:
    """Parse /proc/pressure/memory (`some avg10=0.00 avg60=0.00 avg300=0.00 total=0`, then the `full` line).

    Samples: tests/fixtures/memory (public sources in its SOURCES.md). Raises ValueError without a `some` line."""
    found = {match.group(1): float(match.group(2)) for match in
             (PSI_LINE.match(line.strip()) for line in text.splitlines()[:4]) if match}
    if "some" not in found:
        raise ValueError("no `some avg10=...` line")
    return Pressure(found["some"], found.get("full"))


PRESSURE = Probe("memory pressure", (), Shell("cat /proc/pressure/memory"), parse_pressure)


def gib(kib: int) -> str:
    return f"{kib / KIB_PER_GIB:.1f}"


def floor_gib(kib: int) -> str:
    return f"{round(kib / KIB_PER_GIB, 2):g}"


def describe(node: str, trigger: str, mem_available_kib: int, floor_kib: int, pressure_full: float | None,
             pressure_pct: int) -> str:
    """Why the guard stopped the engine, in the guard's own words (data/memguard.py `describe` says the same)."""
    pressure = (f"pressure full avg10 {pressure_full:.0f}%" if pressure_full is not None
                else "pressure not reported (no /proc/pressure/memory)")
    if trigger == "pressure":
        return (f"stopped by the memory guard on {node}: {pressure} >= {pressure_pct}% limit, "
                f"MemAvailable {gib(mem_available_kib)} GiB ({floor_gib(floor_kib)} GiB floor)")
    return (f"stopped by the memory guard on {node}: MemAvailable {gib(mem_available_kib)} GiB < "
            f"{floor_gib(floor_kib)} GiB floor, {pressure}")


@dataclass(frozen=True)
class GuardStop:
    """The guard's record of stopping the engine: when, why, the figures, and whether the stop worked."""

    node: str
    container: str
    time: float
    trigger: str
    mem_available_kib: int
    floor_kib: int
    pressure_full_avg10: float | None
    pressure_pct: int
    stopped: bool
    error: str

    @property
    def line(self) -> str:
        text = describe(self.node, self.trigger, self.mem_available_kib, self.floor_kib, self.pressure_full_avg10,
                        self.pressure_pct)
        return text if self.stopped else f"{text}; stopping {self.container} failed: {self.error}"


def _field(data: dict[str, Any], key: str, kinds: type | tuple[type, ...]) -> Any:
    value = data.get(key)
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise ValueError(f"stop.json: {key} is not a number")
    if not isinstance(value, kinds):
        raise ValueError(f"stop.json: {key} missing or of the wrong type")
    return value


def parse_stop(text: str) -> GuardStop:
    """The guard's stop.json, every field checked (names, figures in range, one printable line of error).
    Raises ValueError naming the first field that is wrong."""
    if len(text) > RECORD_CAP:
        raise ValueError("stop.json is larger than a guard writes")
    data = boundedjson.loads(text, cap=RECORD_CAP)
    if not isinstance(data, dict):
        raise ValueError("stop.json is not an object")
    node, container = _field(data, "node", str), _field(data, "container", str)
    if not NAME.fullmatch(node) or not NAME.fullmatch(container):
        raise ValueError("stop.json: node or container is not a plain name")
    trigger = _field(data, "trigger", str)
    if trigger not in TRIGGERS:
        raise ValueError(f"stop.json: trigger is not one of {', '.join(TRIGGERS)}")
    available, floor, pct = (_field(data, key, int) for key in ("mem_available_kib", "floor_kib", "pressure_pct"))
    pressure = data.get("pressure_full_avg10")
    if pressure is not None and (isinstance(pressure, bool) or not isinstance(pressure, (int, float))
                                 or not 0 <= pressure <= 100):
        raise ValueError("stop.json: pressure_full_avg10 is not a percentage")
    if not (0 <= available < 1 << 40 and 0 < floor < 1 << 40 and 0 < pct <= 100):
        raise ValueError("stop.json: a figure is out of range")
    error = _field(data, "error", str)
    if len(error) > 300 or not printable(error):
        raise ValueError("stop.json: error is not one printable line")
    return GuardStop(node, container, float(_field(data, "time", (int, float))), trigger, available, floor,
                     None if pressure is None else float(pressure), pct, _field(data, "stopped", bool), error)


@dataclass(frozen=True)
class GuardState:
    """The memory guard on one node: its process (pid, None when none watches) and its stop record, if any."""

    pid: int | None
    stop: GuardStop | None

    @property
    def watching(self) -> bool:
        return self.pid is not None


def parse_guard(text: str) -> GuardState:
    """What `guard` printed: a `watching` section holding the live guard's pid (empty when none runs) and a
    `stop.json` section when the guard stopped the engine."""
    sections = parse_sections(text)
    if "watching" not in sections:
        raise ValueError("no `watching` section")
    pid = sections["watching"].strip()
    if pid and not (pid.isdigit() and len(pid) < 10):
        raise ValueError("the guard's pid is not a number")
    record = sections.get("stop.json", "")
    return GuardState(int(pid) if pid else None, parse_stop(record) if record.strip() else None)


# `guard_alive PID`: the process runs memguard.py (a reused pid is not mistaken for it; a zombie has no command line)
ALIVE = Shell('guard_alive() { kill -0 "$1" 2>/dev/null && tr "\\0" " " < "/proc/$1/cmdline" 2>/dev/null '
              '| grep -q memguard.py; }; ')


def alive_guard(directory: str) -> Shell:
    """Shell that sets $p to directory, defines `guard_alive PID` and sets $g to the pid of the guard watching from
    directory (empty when none): its pid file names a live process whose command line runs memguard.py."""
    return Shell.compose([expanded_path(directory), ALIVE, Shell(
        'g=$(head -c 20 "$p/memguard.pid" 2>/dev/null | tr -cd 0-9); [ -n "$g" ] && guard_alive "$g" || g=; ')], "")


def guard(directory: str) -> Probe[GuardState]:
    """The memory guard of the node: whether it watches, and its stop record (capped)."""
    command = Shell.compose([alive_guard(directory), Shell(
        section("watching", 'echo "$g"') + "; "
        'if [ -f "$p/stop.json" ]; then ' + section("stop.json", f'head -c {RECORD_CAP + 1} "$p/stop.json"')
        + "; fi")], "")
    return Probe("memory guard", (directory,), command, parse_guard)
