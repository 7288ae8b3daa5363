"""The memory guard beside the engine: started by launch on every rank node, ended by stop, read by status.

On GB10 the GPU and the OS share one memory, and running it out hangs the whole Spark instead of ending one
process (docs/runbooks.md#memory-guard). launch starts `sparkpair/data/memguard.py` with the node's python3 in
~/.sparkpair/guard on each rank node, detached from the SSH session (`setsid`), before the engine starts; it
watches MemAvailable and the kernel's memory pressure and stops the engine's container under the floor
(the inventory's `memory_guard`), writing why. `stop` ends it (nothing is left), and it ends by itself when the
container is gone. `stops_since` is what status, `logs --diagnose` and a failed launch read: the stops of the
current launch, each as the guard's one line (signature `memory.guard`). `overshoot` is the launch watch's
own check, before the guard has to: a rank whose remaining load would take MemAvailable under the floor.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources

from sparkpair import paths, probes
from sparkpair.errors import SparkpairError, last_line
from sparkpair.inventory import Inventory
from sparkpair.probes import ProbeFailure, memory
from sparkpair.probes.memory import GuardState, GuardStop
from sparkpair.progress import Event, Progress
from sparkpair.transport import Node, Pair, Shell

PROGRAM = "memguard.py"
KIB_PER_GIB = 1024 * 1024
START_WAIT_S = 5.0   # the guard writes its pid file at once; a node that takes longer has it fail, with why
OVERSHOOT = "the load will overshoot the memory floor on "   # the launch watch's line (cause memory.overshoot)


def guard_dir(connection: Node) -> str:
    return paths.under_home(paths.GUARD_DIR, connection.home)


def program() -> str:
    """The guard's source, as packaged."""
    return resources.files("sparkpair.data").joinpath(PROGRAM).read_text(encoding="utf-8")


def settings(inventory: Inventory, node: str, directory: str) -> dict[str, object]:
    """The guard's configuration on one node: what it watches, its floor and pressure limit, where it writes."""
    guard = inventory.memory_guard
    return {"node": node, "container": inventory.container.name, "floor_kib": guard.floor_gib * KIB_PER_GIB,
            "pressure_pct": guard.pressure_full_pct, "dir": directory}


def start_command(directory: str, config: str) -> Shell:
    """The program (on stdin) into directory, then the guard started detached unless one already watches with this
    very configuration; prints `watching PID` or `started PID`."""
    kill = Shell('kill -TERM "$g"; i=0; while guard_alive "$g" && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); '
                 'done; guard_alive "$g" && kill -KILL "$g"; ')
    return Shell.compose([
        Shell('umask 077; mkdir -p {} && cat > {}.new && mv -f {}.new {} || exit 1; ', directory,
              f"{directory}/{PROGRAM}", f"{directory}/{PROGRAM}", f"{directory}/{PROGRAM}"),
        memory.alive_guard(directory),
        Shell('c={}; if [ -n "$g" ]; then if [ "$(cat "$p/memguard.json" 2>/dev/null)" = "$c" ]; then '
              'echo "watching $g"; exit 0; fi; ', config), kill,
        Shell('fi; rm -f "$p/stop.json" "$p/memguard.pid"; printf %s "$c" > "$p/memguard.json"; '
              'setsid python3 -S "$p/{}" "$c" </dev/null >>"$p/memguard.log" 2>&1 & '
              'i=0; while [ ! -s "$p/memguard.pid" ] && [ $i -lt {} ]; do sleep 0.1; i=$((i+1)); done; ', PROGRAM,
              int(START_WAIT_S * 10)),
        memory.alive_guard(directory),
        Shell('if [ -n "$g" ]; then echo "started $g"; else echo "the memory guard did not start: '
              '$(tail -n 1 "$p/memguard.log" 2>/dev/null)" >&2; exit 1; fi')], "")


def start(connection: Node, inventory: Inventory) -> str:
    """Start the node's guard (or keep the one watching with the same settings); what was done, in words."""
    directory = guard_dir(connection)
    config = json.dumps(settings(inventory, connection.name, directory), sort_keys=True)
    result = connection.run(start_command(directory, config), stdin=program(), timeout=60)
    if not result.ok:
        raise SparkpairError(f"cannot start the memory guard: {last_line(result.stderr, f'exit {result.exit_code}')}",
                             node=connection.name, hint="python3 must run on the node (DGX OS has it); "
                                                        "docs/runbooks.md#memory-guard")
    kind, _, pid = last_line(result.stdout, "").partition(" ")
    guard = inventory.memory_guard
    watch = (f"floor {guard.floor_gib} GiB of MemAvailable, pressure limit full avg10 {guard.pressure_full_pct}%, "
             f"pid {pid}")
    return f"memory guard {'already watching' if kind == 'watching' else 'watching'} {inventory.container.name} ({watch})"


def start_all(pair: Pair, inventory: Inventory, nodes: list[str], progress: Progress) -> None:
    """A guard on every rank node, before the engine starts there."""
    started = pair.each(lambda connection: start(connection, inventory), names=nodes).raise_failures()
    for name, text in started.values.items():
        progress(Event(name, text))


def stop_command(directory: str) -> Shell:
    """End the node's guard (SIGTERM, SIGKILL after 5 s) and forget its pid; prints what it ended."""
    return Shell.compose([memory.alive_guard(directory), Shell(
        'if [ -n "$g" ]; then kill -TERM "$g"; i=0; while guard_alive "$g" && [ $i -lt 50 ]; do sleep 0.1; '
        'i=$((i+1)); done; guard_alive "$g" && kill -KILL "$g"; echo "memory guard ended (pid $g)"; fi; '
        'rm -f "$p/memguard.pid"')], "")


def stop(connection: Node) -> str:
    """End the node's guard; "" when none watched."""
    return last_line(connection.run(stop_command(guard_dir(connection)), timeout=30).stdout, "")


def states(pair: Pair, names: list[str]) -> dict[str, GuardState | ProbeFailure | None]:
    """Each node's guard (its process and its stop record), one short round trip per node, all at once."""
    def ask(connection: Node) -> GuardState | ProbeFailure | None:
        probe = memory.guard(paths.GUARD_DIR)
        return probes.gather(connection, [probe], timeout=30).get(probe)

    found = pair.each(ask, names=names)
    return {name: found.values.get(name) for name in names}


def stops_since(found: Mapping[str, GuardState | ProbeFailure | None], since: float) -> list[GuardStop]:
    """The guard stops recorded at or after since (the launch's start), in node order."""
    return [state.stop for state in found.values()
            if isinstance(state, GuardState) and state.stop is not None and state.stop.time >= since]


def stop_lines(pair: Pair, names: list[str], since: float) -> list[str]:
    """Each guard stop of the launch started at since, as the guard's one line."""
    return [stop.line for stop in stops_since(states(pair, names), since)]


def status(pair: Pair, names: list[str], since: float) -> tuple[dict[str, str], list[str]]:
    """For `sparkpair status`: each node's guard in words, and the stops of the launch started at since."""
    found = states(pair, names)
    return {name: describe_state(state) for name, state in found.items()}, [stop.line for stop in
                                                                            stops_since(found, since)]


def describe_state(state: GuardState | ProbeFailure | None) -> str:
    """One node's guard in words, for status."""
    if isinstance(state, GuardState):
        if state.stop is not None and not state.watching:
            return "stopped the engine" if state.stop.stopped else "failed to stop the engine"
        return f"watching (pid {state.pid})" if state.watching else "not running"
    return f"unknown ({state})" if state is not None else "unknown"


@dataclass(frozen=True)
class Overshoot:
    """A load that would take a node's MemAvailable under the guard's floor: what is loaded, left, available."""

    node: str
    available: int      # bytes of MemAvailable now
    left: int           # bytes the rank still loads
    expected: int       # bytes the rank holds once loaded
    floor: int          # bytes: the memory guard's floor

    def detail(self) -> str:
        leaves = math.floor((self.available - self.left) / 2 ** 30 * 100) / 100  # down: never rounded up to the floor
        return (f"{OVERSHOOT}{self.node}: MemAvailable {size(self.available)} now and {size(self.left)} of its "
                f"{size(self.expected)} still to load leaves {leaves:.2f} GiB, under the {self.floor / 2 ** 30:g} GiB "
                "floor (memory_guard.floor_gib): stopped before the memory guard has to")


def own_lines(detail: str) -> list[str]:
    """The launch's own reason for stopping, when it is the overshoot (the diagnosis names it as memory.overshoot)."""
    return [detail] if detail.startswith(OVERSHOOT) else []


def size(value: int) -> str:
    """Bytes in GiB, or MiB under one GiB (a test model's shard)."""
    return f"{value / 2 ** 30:.1f} GiB" if value >= 2 ** 30 else f"{value / 2 ** 20:.1f} MiB"


def overshoot(loading: Mapping[str, tuple[int, int]], available: Mapping[str, int], floor: int) -> Overshoot | None:
    """The first node whose load would end under the floor. loading: node -> (bytes loaded so far, bytes it holds
    once loaded); available: node -> MemAvailable in bytes now (on unified memory what is still to load comes out of
    it). None when every node's load fits, or nothing is known."""
    for node, (loaded, expected) in loading.items():
        left = max(0, expected - loaded)
        if expected and left and node in available and available[node] - left < floor:
            return Overshoot(node, available[node], left, expected, floor)
    return None
