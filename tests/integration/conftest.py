"""The simulated Spark pair as a pytest fixture (scripts/testbed, docs/testbed.md).

`testbed` (session) brings the pair up once and yields a handle to it; at the
end it takes the pair down only if it brought it up.  Without root or Linux
the integration tests are skipped with a reason, except under CI=true, where
they fail instead.  `healed` (autouse) heals every fault a test injected.
"""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TESTBED = ROOT / "scripts" / "testbed"
UP_TIMEOUT = 900
STATE_DIR = Path("/var/lib/sparkpair-testbed")
PAIR_LOCK = "/tmp/sparkpair-pair.lock"


def pytest_collection_modifyitems(items):
    """Every test under tests/integration is an integration test."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@dataclass
class Testbed:
    """Handle on the running pair: paths, and ways to run things in it."""

    root: Path
    inventory: Path
    brought_up: bool
    faulted: bool = False
    networked: bool = False  # set by the networked fixture, cleared by pristine
    hosts: dict = field(default_factory=lambda: {"spark-a": "198.18.0.11", "spark-b": "198.18.0.12"})
    operator_key: Path = Path("/var/lib/sparkpair-testbed/operator/id_ed25519")
    known_hosts: Path = Path("/var/lib/sparkpair-testbed/operator/known_hosts")

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
        """Run scripts/testbed ARGS."""
        proc = subprocess.run([str(TESTBED), *map(str, args)], capture_output=True, text=True,
                              timeout=timeout)
        if check and proc.returncode != 0:
            pytest.fail(f"scripts/testbed {' '.join(map(str, args))} exited {proc.returncode}:\n"
                        f"{proc.stdout}{proc.stderr}")
        return proc

    def exec(self, node, cmd, user=None, check=True, timeout=120) -> subprocess.CompletedProcess:
        """Run CMD (a shell string or an argv list) inside NODE, as root or USER."""
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        user_args = ["--user", user] if user else []
        proc = subprocess.run([str(TESTBED), "exec", node, *user_args, "--", *argv],
                              capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            pytest.fail(f"on {node}: {cmd!r} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
        return proc

    def ssh_argv(self, node, user="nvidia") -> list:
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

    def has_netplan(self, node) -> bool:
        """Whether NODE holds sparkpair's netplan file."""
        return self.exec(node, "test -e /etc/netplan/40-sparkpair-cx7.yaml", check=False).returncode == 0

    def ensure_networked(self) -> None:
        """Run `sparkpair setup-network` unless it succeeded since the last `pristine`."""
        if not self.networked:
            run = run_sparkpair(self.inventory, "setup-network", "--yes")
            if run.code != 0:
                pytest.fail(f"setup-network failed:\n{run.text}")
            self.networked = True

    def heal(self, name=None) -> subprocess.CompletedProcess:
        """Undo all active faults, or those called NAME."""
        return self.cli("heal", *([name] if name else []))


def unavailable_reason() -> str | None:
    """Why the pair cannot run here, or None."""
    if not sys.platform.startswith("linux"):
        return "the simulated Spark pair needs Linux (network namespaces)"
    if os.geteuid() != 0:
        return "the simulated Spark pair needs root (run the integration tests as root)"
    return None


@pytest.fixture(scope="session")
def testbed():
    """Bring the simulated pair up once per session (see the module docstring)."""
    reason = unavailable_reason()
    if reason:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true: integration tests must run, but {reason}")
        pytest.skip(reason)
    lock = open(PAIR_LOCK, "w")  # one user of the pair at a time: the demo and the benchmarks take it too
    fcntl.flock(lock, fcntl.LOCK_EX)
    already_up = STATE_DIR.exists()  # `down` removes it: present means the pair runs (maybe degraded)
    proc = subprocess.run([str(TESTBED), "up"], capture_output=True, text=True, timeout=UP_TIMEOUT)
    if proc.returncode != 0:
        pytest.fail(f"scripts/testbed up failed:\n{proc.stdout}{proc.stderr}")
    inventory = Path(subprocess.run([str(TESTBED), "inventory"], capture_output=True,
                                    text=True, check=True).stdout.strip())
    bed = Testbed(root=ROOT, inventory=inventory, brought_up=not already_up)
    yield bed
    if bed.brought_up:
        subprocess.run([str(TESTBED), "down"], capture_output=True, text=True, timeout=300)
    lock.close()


@pytest.fixture(autouse=True)
def healed(request):
    """After a test that injected faults, heal them all (so one failure cannot spread)."""
    yield
    if "testbed" in request.fixturenames:
        bed = request.getfixturevalue("testbed")
        if bed.faulted:
            bed.faulted = False
            bed.heal()



@dataclass
class Run:
    """A finished sparkpair process."""

    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


def run_sparkpair(inventory: Path, *args, env: dict | None = None, timeout: float = 600) -> Run:
    """Run the real CLI (`python -m sparkpair -i INVENTORY ARGS`) as the operator would."""
    environment = {**os.environ, **(env or {})}
    environment.pop("SPARKPAIR_INVENTORY", None)
    proc = subprocess.run([sys.executable, "-m", "sparkpair", "-i", str(inventory), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=environment)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def with_forged_host_key(bed, tmp_path: Path, address: str) -> Path:
    """The pair's inventory with a known_hosts that holds a freshly made, wrong key for address."""
    data = yaml.safe_load(Path(bed.inventory).read_text())
    real = Path(data["cluster"]["known_hosts"]).read_text().splitlines()
    forged = bed.exec("spark-a", "rm -f /tmp/forged-hk* && ssh-keygen -q -t ed25519 -N '' -f /tmp/forged-hk && "
                                 "cat /tmp/forged-hk.pub && rm -f /tmp/forged-hk*").stdout.split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text("\n".join(line for line in real if not line.startswith(f"{address} "))
                     + f"\n{address} {' '.join(forged)}\n")
    data["cluster"]["known_hosts"] = str(known)
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def sparkpair(testbed):
    """sparkpair(*args, env=None) -> Run against the simulated pair's inventory."""
    return lambda *args, **kw: run_sparkpair(testbed.inventory, *args, **kw)


@pytest.fixture
def pristine(testbed):
    """Both nodes as `scripts/testbed up` left them: no sparkpair files, keys, addresses or engine."""
    testbed.networked = False
    testbed.cli("reset")
    return testbed


@pytest.fixture
def networked(testbed):
    """The pair after a successful `sparkpair setup-network`: run again only after `pristine` undid it."""
    testbed.ensure_networked()
    return testbed


@pytest.fixture
def stopped(networked):
    """A networked pair with no engine running before and after the test (whatever inventory it used)."""
    run_sparkpair(networked.inventory, "stop")
    yield networked
    run_sparkpair(networked.inventory, "stop")
