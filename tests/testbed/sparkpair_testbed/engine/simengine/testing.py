"""Helpers for the simengine tests (tests/testbed/tests/test_simengine_*.py); not used at run time.

They start the real executables (through this checkout's ``bin/``) with the test's Python
first on PATH, poll with deadlines instead of sleeping, and clean up only the processes
they started (found by a unique marker in their environment).
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

ENGINE_DIR = Path(__file__).resolve().parent.parent
BIN_DIR = ENGINE_DIR / "bin"
MPIRUN_BASE = ["mpirun", "--oversubscribe", "--allow-run-as-root", "--bind-to", "none",
               "--mca", "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo"]
STRIPPED_PREFIXES = ("OMPI_", "PMIX_", "PMI_", "SLURM_", "HF_", "SIM_", "TLLM_")


def tool_env(**overrides):
    """A clean environment for the tools: this checkout's bin/ and this Python first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(STRIPPED_PREFIXES)}
    env["PATH"] = os.pathsep.join([str(BIN_DIR), os.path.dirname(sys.executable), env.get("PATH", "")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["SIM_LOAD_SECONDS"] = "0.2"
    env["SIM_TEST_MARKER"] = uuid.uuid4().hex
    env["HF_HOME"] = "/nonexistent/simengine-tests-must-set-a-cache"  # never the user's real cache or token
    env.update({k: str(v) for k, v in overrides.items()})
    return env


def run_tool(args, env, timeout=60):
    """Run a tool to completion; returns CompletedProcess with text stdout/stderr."""
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)


def free_port():
    """A TCP port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(predicate, timeout, interval=0.05, what="condition"):
    """Poll ``predicate`` until it returns a truthy value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def http_get(url, timeout=5.0):
    """(status, body bytes); (None, b"") when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except (TimeoutError, urllib.error.URLError, ConnectionError, OSError):
        return None, b""


def http_post_json(url, body, timeout=30.0):
    """POST JSON; returns (status, parsed body or raw text); (None, error text) on connection failure."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")
    except (TimeoutError, urllib.error.URLError, ConnectionError, OSError) as error:
        return None, str(error)


def make_model(cache_dir, repo_id, local_dir=None, **env_overrides):
    """Download a synthetic model with the real `hf` executable; returns the printed path."""
    env = tool_env(HF_HUB_CACHE=cache_dir, **env_overrides)
    args = ["hf", "download", repo_id, "--quiet"] + (["--local-dir", str(local_dir)] if local_dir else [])
    result = run_tool(args, env)
    assert result.returncode == 0, result.stderr
    return Path(result.stdout.strip())


def pids_with_marker(marker, extra=None):
    """PIDs of live processes whose environment holds ``SIM_TEST_MARKER=marker`` (and ``extra``)."""
    wanted = [f"SIM_TEST_MARKER={marker}".encode()] + ([extra.encode()] if extra else [])
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_text().split(") ")[-1][:1]
        except OSError:
            continue
        if state != "Z" and all(item in environ for item in wanted):
            found.append(int(entry))
    return found


class ServerJob:
    """A trtllm-serve job (plain or under mpirun) started in its own session, output to a file."""

    def __init__(self, args, env, log_path):
        self.env, self.log_path = env, Path(log_path)
        self.marker = env["SIM_TEST_MARKER"]
        self._log = open(self.log_path, "w")
        self.process = subprocess.Popen(args, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                        start_new_session=True)

    def output(self):
        """Everything the job printed so far."""
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def wait_healthy(self, port, timeout=30.0):
        """Poll /health until 200; fail early (with the log) if the job exits."""
        def healthy():
            if self.process.poll() is not None:
                raise AssertionError(f"server exited with {self.process.returncode}:\n{self.output()}")
            return http_get(f"http://127.0.0.1:{port}/health", timeout=1.0)[0] == 200
        wait_until(healthy, timeout, what=f"/health on port {port}")

    def wait_exit(self, timeout):
        """Wait for the job to end; returns its exit status."""
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"job still running after {timeout}s:\n{self.output()}")

    def stop(self):
        """Terminate the job and any of its processes still alive (by marker)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        for pid in pids_with_marker(self.marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._log.close()


def mpirun_args(np, tool_args, env_names=()):
    """``mpirun ... -np N [-x VAR]... trtllm-llmapi-launch <tool_args>`` on loopback."""
    exports = [item for name in env_names for item in ("-x", name)]
    return MPIRUN_BASE + exports + ["-np", str(np), "trtllm-llmapi-launch"] + list(tool_args)
