"""The memory guard (sparkpair/data/memguard.py and engine.memguard): its floor and pressure arithmetic on real
/proc/meminfo and /proc/pressure/memory samples (tests/fixtures/memory, sources in SOURCES.md), the program run as a
node runs it against a Docker Engine API on a unix socket, its record read back as hostile input, its start and
stop through launch's own shell lines, and the launch watch's check that a load fits above the floor.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import signal
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from fakenode import FakeNode, fake_pair, in_local_shell

from sparkpair.engine import memguard
from sparkpair.inventory import read_inventory
from sparkpair.probes import ProbeFailure, format_sections, host, memory

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "memory"
PROGRAM = ROOT / "sparkpair" / "data" / "memguard.py"
SIM = read_inventory(ROOT / "tests" / "fixtures" / "inventory" / "sim.yaml")
GIB_KIB = 1024 * 1024
HTOP = (FIXTURES / "meminfo__htop447.txt").read_text()          # MemAvailable 34258672 kB (32.7 GiB)
THRASHING = (FIXTURES / "pressure-memory__thrashprotect28.txt").read_text()   # full avg10 57.59
IDLE = (FIXTURES / "pressure-memory__simplifiedguide.txt").read_text()


def node_program() -> Any:
    """The guard's source loaded as a module (sparkpair never imports it; the tests may)."""
    spec = importlib.util.spec_from_file_location("memguard_under_test", PROGRAM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GUARD = node_program()


def wait_for(condition: Callable[[], Any], seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"not within {seconds} s: {what}")


# --- the arithmetic, on real samples ----------------------------------------------------------------------------

def test_both_readers_take_memavailable_and_full_avg10_from_real_samples() -> None:
    assert GUARD.parse_meminfo(HTOP)["MemAvailable"] == host.parse_meminfo(HTOP)["MemAvailable"] == 34258672
    assert GUARD.full_avg10(GUARD.parse_pressure(THRASHING)) == memory.parse_pressure(THRASHING).full_avg10 == 57.59
    assert memory.parse_pressure(THRASHING).some_avg10 == 70.24
    assert GUARD.full_avg10(GUARD.parse_pressure(IDLE)) == memory.parse_pressure(IDLE).full_avg10 == 0.0
    assert GUARD.full_avg10(GUARD.parse_pressure("some avg10=1.00 avg60=0.00 avg300=0.00 total=9\n")) is None


@pytest.mark.parametrize(("pressure", "floor_gib", "pct", "expected"), [
    (IDLE, 4, 60, None),            # 32.7 GiB left: far above a few GiB
    (IDLE, 40, 60, "floor"),        # under a 40 GiB floor
    (THRASHING, 4, 60, None),       # 57.59 % stalled: under systemd-oomd's 60 % default
    (THRASHING, 4, 50, "pressure"),
    (THRASHING, 40, 50, "floor"),   # the floor is named first
])
def test_the_trigger_is_the_floor_first_then_the_pressure(pressure: str, floor_gib: int, pct: int,
                                                          expected: str | None) -> None:
    available = GUARD.parse_meminfo(HTOP)["MemAvailable"]
    full = GUARD.full_avg10(GUARD.parse_pressure(pressure))
    assert GUARD.trigger(available, floor_gib * GIB_KIB, full, pct) == expected


def test_the_guard_and_sparkpair_say_the_same_sentence() -> None:
    available = GUARD.parse_meminfo(HTOP)["MemAvailable"]
    for args in (("spark-b", "floor", available, 40 * GIB_KIB, 57.59, 60), ("spark-b", "pressure", available,
                                                                            4 * GIB_KIB, 57.59, 50),
                 ("spark-a", "floor", 2936013, 4 * GIB_KIB, None, 60)):
        assert GUARD.describe(*args) == memory.describe(*args)
    assert GUARD.describe("spark-b", "floor", 2936013, 4 * GIB_KIB, 41.0, 60) == (
        "stopped by the memory guard on spark-b: MemAvailable 2.8 GiB < 4 GiB floor, pressure full avg10 41%")
    assert memory.describe("spark-b", "pressure", available, 4 * GIB_KIB, 57.59, 50) == (
        "stopped by the memory guard on spark-b: pressure full avg10 58% >= 50% limit, MemAvailable 32.7 GiB "
        "(4 GiB floor)")


# --- the program, as a node runs it --------------------------------------------------------------------------

class FakeDocker(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The Docker Engine API's two calls the guard makes, on a unix socket: what it was asked, the container's state."""

    daemon_threads = True

    def __init__(self, path: Path, container: str) -> None:
        self.container, self.running, self.gone, self.asked = container, True, False, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def answer(self, status: int, body: bytes = b"") -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                outer.asked.append(("GET", self.path))
                if outer.gone or self.path != f"/containers/{outer.container}/json":
                    self.answer(404, b'{"message": "No such container"}')
                else:
                    self.answer(200, json.dumps({"State": {"Running": outer.running}}).encode())

            def do_POST(self) -> None:  # noqa: N802
                outer.asked.append(("POST", self.path))
                was, outer.running = outer.running, False
                self.answer(204 if was else 304)

        super().__init__(str(path), Handler)


@pytest.fixture
def docker(tmp_path: Path) -> Iterator[FakeDocker]:
    server = FakeDocker(tmp_path / "docker.sock", SIM.container.name)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def run_guard(tmp_path: Path, docker: FakeDocker, meminfo: str, pressure: str | None,
              **config: object) -> subprocess.Popen[str]:
    (tmp_path / "meminfo").write_text(meminfo)
    if pressure is not None:
        (tmp_path / "pressure").write_text(pressure)
    settings = {"node": "spark-b", "container": SIM.container.name, "floor_kib": 4 * GIB_KIB, "pressure_pct": 60,
                "dir": str(tmp_path), "interval_s": 0.05, "meminfo": str(tmp_path / "meminfo"),
                "pressure": str(tmp_path / "pressure"), "docker_socket": docker.server_address, **config}
    process = subprocess.Popen([sys.executable, "-S", str(PROGRAM), json.dumps(settings)], text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(lambda: (tmp_path / "memguard.pid").is_file() or process.poll() is not None, 10, "the guard's pid file")
    return process


def falls(meminfo: str, available_gib: float) -> str:
    """A real /proc/meminfo as it reads after MemAvailable fell to available_gib (only that line changes)."""
    return "".join(f"MemAvailable:   {int(available_gib * GIB_KIB)} kB\n" if line.startswith("MemAvailable:")
                   else line + "\n" for line in meminfo.splitlines())


def test_the_program_stops_the_container_when_memavailable_falls_and_writes_why(tmp_path: Path,
                                                                                docker: FakeDocker) -> None:
    process = run_guard(tmp_path, docker, HTOP, THRASHING.replace("57.59", "41.00"))
    wait_for(lambda: ("GET", f"/containers/{SIM.container.name}/json") in docker.asked, 10, "the container check")
    assert process.poll() is None and ("POST", f"/containers/{SIM.container.name}/stop?t=3") not in docker.asked
    (tmp_path / "meminfo").write_text(falls(HTOP, 2.8))
    assert process.wait(timeout=20) == 0, process.stderr.read() if process.stderr else ""
    assert ("POST", f"/containers/{SIM.container.name}/stop?t=3") in docker.asked and not docker.running
    line = "stopped by the memory guard on spark-b: MemAvailable 2.8 GiB < 4 GiB floor, pressure full avg10 41%"
    log = (tmp_path / "memguard.log").read_text()
    assert f"{line}; the engine container {SIM.container.name} is stopped" in log
    record = memory.parse_stop((tmp_path / "stop.json").read_text())
    assert record.line == line and record.stopped and record.trigger == "floor"
    assert not (tmp_path / "memguard.pid").exists()


def test_the_program_stops_at_the_pressure_limit_without_psi_it_says_so(tmp_path: Path, docker: FakeDocker) -> None:
    process = run_guard(tmp_path, docker, HTOP, THRASHING, pressure_pct=50)
    assert process.wait(timeout=20) == 0
    record = memory.parse_stop((tmp_path / "stop.json").read_text())
    assert record.trigger == "pressure" and "pressure full avg10 58% >= 50% limit" in record.line
    docker.running = True
    (tmp_path / "pressure").unlink()
    (tmp_path / "stop.json").unlink()
    process = run_guard(tmp_path, docker, falls(HTOP, 1.5), None)
    assert process.wait(timeout=20) == 0
    assert memory.parse_stop((tmp_path / "stop.json").read_text()).line.endswith(
        "MemAvailable 1.5 GiB < 4 GiB floor, pressure not reported (no /proc/pressure/memory)")


def test_one_low_reading_is_not_enough(tmp_path: Path, docker: FakeDocker) -> None:
    """Two readings in a row under the floor stop the engine; a single dip between good ones does not."""
    process = run_guard(tmp_path, docker, HTOP, IDLE, interval_s=0.3)
    for _ in range(2):  # a 0.05 s dip, then 1 s of plenty: readings 0.3 s apart never see two dips in a row
        (tmp_path / "meminfo").write_text(falls(HTOP, 2.0))
        time.sleep(0.05)
        (tmp_path / "meminfo").write_text(HTOP)
        time.sleep(1.0)
    assert process.poll() is None and not any(method == "POST" for method, _ in docker.asked)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0


def test_the_program_ends_by_itself_when_the_container_is_gone_and_on_sigterm(tmp_path: Path,
                                                                              docker: FakeDocker) -> None:
    docker.gone = True
    process = run_guard(tmp_path, docker, HTOP, IDLE)
    assert process.wait(timeout=20) == 0
    assert "is not running: the memory guard ends" in (tmp_path / "memguard.log").read_text()
    assert not any(method == "POST" for method, _ in docker.asked) and not (tmp_path / "stop.json").exists()
    docker.gone = False
    process = run_guard(tmp_path, docker, HTOP, IDLE)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0
    assert "ended by sparkpair stop (signal 15)" in (tmp_path / "memguard.log").read_text()
    assert not (tmp_path / "memguard.pid").exists()


def test_a_stop_docker_refuses_is_recorded_and_tried_again(tmp_path: Path, docker: FakeDocker) -> None:
    process = run_guard(tmp_path, docker, falls(HTOP, 1.0), IDLE, docker_socket=str(tmp_path / "no.sock"))
    record = wait_for(lambda: (tmp_path / "stop.json").is_file() and memory.parse_stop(
        (tmp_path / "stop.json").read_text()), 20, "the failed stop's record")
    assert not record.stopped and "docker did not answer" in record.error and "failed" in record.line
    assert process.poll() is None  # it keeps trying
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0


# --- the record, as sparkpair reads it --------------------------------------------------------------------------

GOOD = {"node": "spark-b", "container": "vllm-multinode", "time": 1.0, "trigger": "floor",
        "mem_available_kib": 2936013, "floor_kib": 4 * GIB_KIB, "pressure_full_avg10": 41.0, "pressure_pct": 60,
        "stopped": True, "error": ""}


@pytest.mark.parametrize("change", [
    {"node": "spark-b\x1b[2J"}, {"container": "../x"}, {"trigger": "boom"}, {"mem_available_kib": -1},
    {"floor_kib": True}, {"pressure_full_avg10": 250}, {"pressure_pct": 0}, {"error": "a\nb"},
    {"error": "x" * 400}, {"stopped": "yes"}, {"time": "now"},
])
def test_a_record_that_is_not_what_a_guard_writes_is_refused(change: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        memory.parse_stop(json.dumps({**GOOD, **change}))


def test_a_huge_or_odd_record_is_refused() -> None:
    for text in ("[]", "{" * 5000, json.dumps({**GOOD, "padding": "x" * 9000})):
        with pytest.raises(ValueError):
            memory.parse_stop(text)


def test_the_guard_probe_reads_its_process_and_record() -> None:
    state = memory.parse_guard(format_sections({"watching": "4242\n", "stop.json": json.dumps(GOOD)}))
    assert state.watching and state.pid == 4242 and state.stop is not None and state.stop.node == "spark-b"
    assert memory.parse_guard(format_sections({"watching": "\n"})) == memory.GuardState(None, None)
    with pytest.raises(ValueError):
        memory.parse_guard(format_sections({"watching": "42; rm -rf /\n"}))
    stops = memguard.stops_since({"spark-a": state, "spark-b": ProbeFailure("memory guard", 1, "x"), "c": None}, 0.5)
    assert [stop.node for stop in stops] == ["spark-b"] and memguard.stops_since({"spark-a": state}, 2.0) == []
    assert memguard.describe_state(memory.GuardState(None, state.stop)) == "stopped the engine"
    assert memguard.describe_state(memory.GuardState(7, None)) == "watching (pid 7)"


# --- launch's start and stop, through their own shell lines, on this machine -----------------------------------

def test_start_keeps_one_guard_and_stop_leaves_nothing(tmp_path: Path, docker: FakeDocker) -> None:
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "DOCKER_HOST": f"unix://{docker.server_address}"}
    node = FakeNode("spark-b", home=str(tmp_path)).on(lambda text: True, in_local_shell(env))
    # it reads this machine's own /proc: the lowest floor, so that only a machine about to run out trips it here
    low = dataclasses.replace(SIM, memory_guard=dataclasses.replace(SIM.memory_guard, floor_gib=1, pressure_full_pct=100))
    first = memguard.start(node, low)
    assert first.startswith(f"memory guard watching {SIM.container.name} (floor 1 GiB of MemAvailable")
    pid = int(first.rsplit("pid ", 1)[1].rstrip(")"))
    assert memguard.start(node, low).startswith("memory guard already watching") and f"pid {pid})" in first
    assert memguard.start(node, SIM).startswith("memory guard watching")   # other settings: a new guard
    pid = int(memguard.start(node, SIM).rsplit("pid ", 1)[1].rstrip(")"))
    found = memguard.states(fake_pair(FakeNode("spark-a").on(lambda text: True, in_local_shell(env)), node),
                            ["spark-b"])
    assert found["spark-b"] == memory.GuardState(pid, None)
    assert memguard.stop(node) == f"memory guard ended (pid {pid})"
    wait_for(lambda: not Path(f"/proc/{pid}").exists() or "memguard" not in Path(f"/proc/{pid}/cmdline").read_text(
        errors="replace"), 10, "the guard to be gone")
    assert memguard.stop(node) == ""
    assert "ended by sparkpair stop" in (tmp_path / ".sparkpair" / "guard" / "memguard.log").read_text()


# --- the launch watch: a load that would end under the floor ---------------------------------------------------

def test_a_load_that_would_end_under_the_floor_stops_before_the_guard_has_to() -> None:
    gib = 1 << 30
    loading = {"spark-a": (10 * gib, 60 * gib), "spark-b": (30 * gib, 60 * gib)}
    assert memguard.overshoot(loading, {"spark-a": 60 * gib, "spark-b": 40 * gib}, 4 * gib) is None
    over = memguard.overshoot(loading, {"spark-a": 60 * gib, "spark-b": 32 * gib}, 4 * gib)
    assert over is not None and over.node == "spark-b" and over.left == 30 * gib
    assert over.detail() == ("the load will overshoot the memory floor on spark-b: MemAvailable 32.0 GiB now and "
                             "30.0 GiB of its 60.0 GiB still to load leaves 2.00 GiB, under the 4 GiB floor "
                             "(memory_guard.floor_gib): stopped before the memory guard has to")
    tiny = memguard.overshoot({"spark-b": (0, 4509715)}, {"spark-b": 9 * gib}, 9 * gib)   # the simulated pair's
    assert tiny is not None and "9.0 GiB now and 4.3 MiB of its 4.3 MiB still to load leaves 8.99 GiB" in tiny.detail()
    assert memguard.own_lines(over.detail()) == [over.detail()] and memguard.own_lines("stalled") == []
    assert memguard.overshoot({"spark-a": (61 * gib, 60 * gib)}, {"spark-a": 1 * gib}, 4 * gib) is None  # loaded
    assert memguard.overshoot({"spark-a": (0, 0)}, {"spark-a": 1 * gib}, 4 * gib) is None  # size unknown
