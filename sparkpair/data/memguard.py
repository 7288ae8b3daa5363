"""sparkpair's memory guard: stops the engine's container before the node's unified memory runs out.

On a DGX Spark the GPU and the OS share one memory; when a model, its KV cache or CUDA graphs push it
over, the whole box can hang instead of the OOM killer ending one process (NVIDIA/open-gpu-kernel-modules
#1358, NVIDIA/dgx-spark-playbooks#102). `sparkpair launch` starts this program on every rank node beside
the engine, detached from the SSH session (`setsid`), with the node's own python3 (standard library
only, Python 3.8+); `sparkpair stop` ends it. It does one thing: every INTERVAL it reads MemAvailable
(/proc/meminfo) and the kernel's memory pressure (`full avg10` of /proc/pressure/memory, when the kernel
has PSI); when MemAvailable is under the floor, or the pressure at or over its limit, for STRIKES readings
in a row, it stops the engine's container through the Docker Engine API (the node's socket) and writes
why, with the figures, to `stop.json` and a line to `memguard.log` in its directory. It ends by itself
when the container is gone or stopped, and on SIGTERM; every end is a line in its log. Never imported by
sparkpair (it reads the record: `sparkpair.probes.memory`).

    python3 -S memguard.py CONFIG_JSON

CONFIG_JSON: node, container, floor_kib, pressure_pct, dir, and optionally interval_s, strikes,
stop_grace_s, meminfo, pressure, docker_socket (paths the tests point elsewhere).
"""

import json
import os
import signal
import socket
import sys
import time
from http.client import HTTPConnection

KIB_PER_GIB = 1024 * 1024
CONTAINER_EVERY_S = 5.0    # how often it asks whether the container still runs
API_TIMEOUT_S = 10.0


def parse_meminfo(text):
    """/proc/meminfo as {field: kB}; lines that are not `Name: number [kB]` are skipped."""
    fields = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        words = rest.split()
        if name and words and words[0].isdigit():
            fields[name.strip()] = int(words[0])
    return fields


def parse_pressure(text):
    """/proc/pressure/memory as {"some": {"avg10": ..}, "full": {..}}; an absent line is absent."""
    lines = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        values = {}
        for word in rest.split():
            key, _, value = word.partition("=")
            try:
                values[key] = float(value)
            except ValueError:
                continue
        if kind in ("some", "full") and "avg10" in values:
            lines[kind] = values
    return lines


def full_avg10(pressure):
    """The `full avg10` percentage, or None when the kernel does not report it."""
    return pressure.get("full", {}).get("avg10")


def trigger(mem_available_kib, floor_kib, pressure_full, pressure_pct):
    """Why the engine must stop now ("floor" or "pressure"), or None: MemAvailable under the floor first."""
    if mem_available_kib < floor_kib:
        return "floor"
    if pressure_full is not None and pressure_full >= pressure_pct:
        return "pressure"
    return None


def gib(kib):
    return f"{kib / KIB_PER_GIB:.1f}"


def floor_gib(kib):
    return f"{round(kib / KIB_PER_GIB, 2):g}"


def describe(node, why, mem_available_kib, floor_kib, pressure_full, pressure_pct):
    """The one line that says why the guard stopped the engine (sparkpair.probes.memory.describe says the same)."""
    pressure = (f"pressure full avg10 {pressure_full:.0f}%" if pressure_full is not None
                else "pressure not reported (no /proc/pressure/memory)")
    if why == "pressure":
        return (f"stopped by the memory guard on {node}: {pressure} >= {pressure_pct}% limit, "
                f"MemAvailable {gib(mem_available_kib)} GiB ({floor_gib(floor_kib)} GiB floor)")
    return (f"stopped by the memory guard on {node}: MemAvailable {gib(mem_available_kib)} GiB < "
            f"{floor_gib(floor_kib)} GiB floor, {pressure}")


class DockerSocket(HTTPConnection):
    """HTTP to the Docker Engine API over its unix socket."""

    def __init__(self, path, timeout):
        HTTPConnection.__init__(self, "docker", timeout=timeout)
        self.socket_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


def docker_socket():
    host = os.environ.get("DOCKER_HOST", "")
    return host[len("unix://"):] if host.startswith("unix://") else "/var/run/docker.sock"


def api(path_to_socket, method, path, timeout=API_TIMEOUT_S):
    """(HTTP status, body) of one Docker Engine API call."""
    connection = DockerSocket(path_to_socket, timeout)
    try:
        connection.request(method, path)
        answer = connection.getresponse()
        return answer.status, answer.read(65536)
    finally:
        connection.close()


def container_running(path_to_socket, name):
    """True while the container runs, False once it stopped or is gone; raises OSError when Docker does not answer."""
    status, body = api(path_to_socket, "GET", f"/containers/{name}/json")
    if status == 404:
        return False
    if status != 200:
        raise OSError(f"docker answered HTTP {status}")
    state = json.loads(body.decode("utf-8", "replace")).get("State") or {}
    return bool(state.get("Running"))


def stop_container(path_to_socket, name, grace_s):
    """Stop the container (SIGTERM, then SIGKILL after grace_s); "" when it is stopped, else why not."""
    try:
        status, body = api(path_to_socket, "POST", f"/containers/{name}/stop?t={grace_s}",
                           timeout=grace_s + API_TIMEOUT_S)
    except (OSError, ValueError) as error:
        return f"docker did not answer ({error})"
    if status in (204, 304, 404):
        return ""
    return f"docker answered HTTP {status}: {body.decode('utf-8', 'replace').strip()[:200]}"


class Guard:
    """One node's guard: its settings, its log, its record."""

    def __init__(self, config):
        self.node = str(config["node"])
        self.container = str(config["container"])
        self.floor_kib = int(config["floor_kib"])
        self.pressure_pct = int(config["pressure_pct"])
        self.dir = str(config["dir"])
        self.interval_s = float(config.get("interval_s", 1.0))
        self.strikes = int(config.get("strikes", 2))
        self.grace_s = int(config.get("stop_grace_s", 3))
        self.meminfo = str(config.get("meminfo", "/proc/meminfo"))
        self.pressure = str(config.get("pressure", "/proc/pressure/memory"))
        self.socket = str(config.get("docker_socket") or docker_socket())

    def say(self, text):
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with open(os.path.join(self.dir, "memguard.log"), "a") as log:
            log.write(f"{stamp} {self.node}: {text}\n")

    def write_record(self, record):
        """stop.json, replaced whole (a reader never sees half of it)."""
        temporary = os.path.join(self.dir, f".stop.json.{os.getpid()}")
        with open(temporary, "w") as handle:
            json.dump(record, handle)
        os.replace(temporary, os.path.join(self.dir, "stop.json"))

    def reading(self):
        """(MemAvailable kB, full avg10 or None) now."""
        with open(self.meminfo) as handle:
            available = parse_meminfo(handle.read()).get("MemAvailable")
        if available is None:
            raise ValueError(f"{self.meminfo} has no MemAvailable line")
        try:
            with open(self.pressure) as handle:
                pressure = full_avg10(parse_pressure(handle.read()))
        except OSError:
            pressure = None
        return available, pressure

    def stop_engine(self, why, available, pressure):
        line = describe(self.node, why, available, self.floor_kib, pressure, self.pressure_pct)
        error = stop_container(self.socket, self.container, self.grace_s)
        self.write_record({"node": self.node, "container": self.container, "time": time.time(), "trigger": why,
                           "mem_available_kib": available, "floor_kib": self.floor_kib,
                           "pressure_full_avg10": pressure, "pressure_pct": self.pressure_pct,
                           "stopped": not error, "error": error})
        self.say(line + (f"; the engine container {self.container} is stopped" if not error else
                         f"; stopping the engine container {self.container} failed: {error}"))
        return not error

    def run(self):
        self.say(f"watching the engine container {self.container}: floor {floor_gib(self.floor_kib)} GiB, "
                 f"pressure limit full avg10 {self.pressure_pct}% (pid {os.getpid()})")
        strikes, asked = 0, 0.0
        while True:
            if time.monotonic() - asked >= CONTAINER_EVERY_S:
                asked = time.monotonic()
                try:
                    running = container_running(self.socket, self.container)
                except (OSError, ValueError) as error:
                    self.say(f"docker did not answer ({error}); still watching")
                    running = True
                if not running:
                    self.say(f"the engine container {self.container} is not running: the memory guard ends")
                    return 0
            available, pressure = self.reading()
            why = trigger(available, self.floor_kib, pressure, self.pressure_pct)
            strikes = strikes + 1 if why else 0
            if strikes >= self.strikes:
                if self.stop_engine(why, available, pressure):
                    return 0
                strikes = 0  # the stop failed: its record says so; try again at the next reading
            time.sleep(self.interval_s)


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: python3 -S memguard.py CONFIG_JSON\n")
        return 2
    guard = Guard(json.loads(argv[1]))
    pid_file = os.path.join(guard.dir, "memguard.pid")
    with open(pid_file, "w") as handle:
        handle.write(f"{os.getpid()}\n")

    def ended(signum, frame):
        guard.say(f"ended by sparkpair stop (signal {signum})")
        forget(pid_file)
        os._exit(0)

    signal.signal(signal.SIGTERM, ended)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        return guard.run()
    except Exception as error:  # noqa: BLE001 (never a silent exit: the log says why the guard ended)
        guard.say(f"the memory guard failed and ended: {type(error).__name__}: {error}")
        return 1
    finally:
        forget(pid_file)


def forget(pid_file):
    """Remove the pid file when it is still this process's (a newer guard may have replaced it)."""
    try:
        with open(pid_file) as handle:
            mine = handle.read().strip() == str(os.getpid())
        if mine:
            os.unlink(pid_file)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv))
