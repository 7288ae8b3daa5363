"""The handle tests get on the running pair (the plugin's `testbed` fixture).

It runs the testbed's command line (`python -m sparkpair_testbed`) in a child process, as
scripts/testbed does, and SSH to the nodes with the operator key; failures fail the test with
the command's output.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from . import triton_pair
from .layout import KNOWN_HOSTS, NODES, OPERATOR_KEY, USER
from .vllm_pair import RECORD, VllmSetup, read_record

CLI = (sys.executable, "-m", "sparkpair_testbed")


@dataclass
class Testbed:
    """Handle on the running pair: paths, and ways to run things in it."""

    __test__ = False  # not a test class, whatever module imports it

    inventory: Path
    brought_up: bool
    reset_spec: dict = field(default_factory=dict)  # what reset() takes back (sparkpair_testbed/reset.py)
    faulted: bool = False
    # Names of what tests set up on the pair since the last reset() (which empties it), so a
    # fixture can skip setting up again what is still there.
    since_reset: set = field(default_factory=set)
    hosts: dict = field(default_factory=lambda: {node.name: node.mgmt_ip for node in NODES})
    operator_key: Path = OPERATOR_KEY
    known_hosts: Path = KNOWN_HOSTS

    @staticmethod
    def wait_until(check, timeout: float, what: str, interval: float = 0.2):
        """Poll CHECK until it returns something truthy; fail naming WHAT after TIMEOUT seconds."""
        deadline = time.monotonic() + timeout
        while True:
            result = check()
            if result:
                return result
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout}s waiting for {what}")
            time.sleep(interval)

    def cli(self, *args, check=True, timeout=600) -> subprocess.CompletedProcess:
        """Run the testbed's command line (scripts/testbed) with ARGS."""
        proc = subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            pytest.fail(f"scripts/testbed {' '.join(map(str, args))} exited {proc.returncode}:\n"
                        f"{proc.stdout}{proc.stderr}")
        return proc

    def exec(self, node, cmd, user=None, check=True, timeout=120) -> subprocess.CompletedProcess:
        """Run CMD (a shell string or an argv list) inside NODE, as root or USER."""
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        user_args = ["--user", user] if user else []
        proc = subprocess.run([*CLI, "exec", node, *user_args, "--", *argv],
                              capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            pytest.fail(f"on {node}: {cmd!r} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
        return proc

    def ssh_argv(self, node, user=USER) -> list:
        """ssh command line to NODE's management address with the operator key, strict host keys."""
        return ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "ConnectTimeout=10",
                "-i", str(self.operator_key), f"{user}@{self.hosts[node]}"]

    def ssh(self, node, cmd, check=True, timeout=60) -> subprocess.CompletedProcess:
        """Run the shell string CMD on NODE over real SSH as nvidia."""
        proc = subprocess.run(self.ssh_argv(node) + [cmd], capture_output=True, text=True,
                              timeout=timeout)
        if check and proc.returncode != 0:
            pytest.fail(f"ssh {node} {cmd!r} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
        return proc

    def fault(self, name, node=None, **options) -> subprocess.CompletedProcess:
        """Inject fault NAME (options like port=2233 become --port 2233)."""
        self.faulted = True
        args = ["fault", name] + (["--node", node] if node else [])
        for key, value in options.items():
            args += [f"--{key.replace('_', '-')}", value]
        return self.cli(*args)

    def heal(self, name=None) -> subprocess.CompletedProcess:
        """Undo all active faults, or those called NAME."""
        return self.cli("heal", *([name] if name else []))

    def vllm(self, timeout=2400) -> VllmSetup:
        """`scripts/testbed vllm` (idempotent): the vLLM image in both engines, the tiny target and
        draft in the head's HF cache (again after a reset took them); what it recorded."""
        self.cli("vllm", timeout=timeout)
        record = read_record()
        if not record:
            pytest.fail(f"scripts/testbed vllm left no record in {RECORD}")
        return VllmSetup(**record)

    def triton(self, timeout=3000) -> triton_pair.TritonSetup:
        """`scripts/testbed triton` (idempotent; does `vllm` first): the Triton image in both engines; what it recorded."""
        self.cli("triton", timeout=timeout)
        record = triton_pair.read_record()
        if not record:
            pytest.fail(f"scripts/testbed triton left no record in {triton_pair.RECORD}")
        return triton_pair.TritonSetup(**record)

    def reset(self) -> subprocess.CompletedProcess:
        """Take back on both nodes what the reset spec lists; forgets what was set up since."""
        self.since_reset.clear()
        return self.cli("reset", "--spec-json", json.dumps(self.reset_spec))
