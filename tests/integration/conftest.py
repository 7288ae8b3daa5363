"""sparkpair's fixtures on the simulated pair (the pair's own fixtures come from the testbed's
pytest plugin, sparkpair_testbed.plugin: `testbed`, `healed`, `pristine`; what a reset takes
back is sparkpair's reset spec, in tests/conftest.py). `testbed` here is the plugin's with
sparkpair's root helper installed on the nodes, as an operator does (docs/checklist.md#sudo).

`sparkpair` runs the real CLI against the pair's inventory; `networked` is the pair after a
successful `sparkpair setup-network`, `stopped` a networked pair with no engine running.
"""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from sparkpair import paths

ROOT = Path(__file__).resolve().parents[2]
NETWORKED = "sparkpair setup-network"  # in testbed.since_reset once it succeeded

# A suite started in the background by a shell without job control (`sh -c 'pytest ... &'`, some CI runners)
# inherits SIGINT ignored, and so would every sparkpair it starts: the tests' Ctrl-C would never land, and an
# interrupted run would finish with code 0. A handler of our own is reset to the default in each child.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def testbed(testbed):
    """The plugin's pair set up as docs/checklist.md#sudo says: sparkpair's root helper installed root-owned at
    /usr/local/sbin/sparkpair-root (the host's /usr/local/sbin, which every node shares), taken away after the
    session. The testbed's own sudoers rule still grants nvidia everything (test_root_helper narrows it)."""
    from sparkpair.transport import root

    helper = Path(root.HELPER_PATH)
    staged = helper.with_name(f".{helper.name}.new")
    staged.write_text(root.helper_text())
    staged.chmod(0o755)
    os.chown(staged, 0, 0)
    staged.replace(helper)
    try:
        yield testbed
    finally:
        helper.unlink(missing_ok=True)


def pytest_collection_modifyitems(items):
    """Every test under tests/integration is an integration test."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@dataclass
class Run:
    """A finished sparkpair process."""

    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


def run_sparkpair(inventory: Path, *args, env: dict | None = None, timeout: float = 600,
                  input_text: str | None = None) -> Run:
    """Run the real CLI (`python -m sparkpair -i INVENTORY ARGS`) as the operator would (input_text: its stdin).

    A run still going after timeout fails its test, and leaves nothing behind for the next module: its whole
    process group is killed (SIGTERM, then SIGKILL), and the pair's lock it held is released (`sparkpair unlock`
    removes a lock whose holder is gone)."""
    environment = {**os.environ, **(env or {})}
    environment.pop("SPARKPAIR_INVENTORY", None)
    argv = [sys.executable, "-m", "sparkpair", "-i", str(inventory), *map(str, args)]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment,
                            start_new_session=True)
    try:
        out, err = proc.communicate(input_text, timeout=timeout)
    except subprocess.TimeoutExpired:
        out, err = _end(proc)
        unlocked = subprocess.run([sys.executable, "-m", "sparkpair", "-i", str(inventory), "unlock"],
                                  capture_output=True, text=True, timeout=120, env=environment)
        pytest.fail(f"sparkpair {' '.join(map(str, args))} still ran after {timeout:g} s: killed it "
                    f"(unlock: {unlocked.stdout.strip() or unlocked.stderr.strip()})\n{out}{err}")
    return Run(proc.returncode, out, err)


def _end(proc: subprocess.Popen) -> tuple[str, str]:
    """Stop a run and every process it started (its own session): SIGTERM, then SIGKILL; what it printed."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 30)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            return proc.communicate(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    return proc.communicate()


class Background:
    """sparkpair running in the background; `wait_for` blocks until a stderr line matches. With hold_at (a regex
    of a stderr line) the run holds at the first line matching it (sparkpair.report.holdpoint) until `release`:
    a signal sent meanwhile lands exactly there, however fast or slow the machine."""

    def __init__(self, inventory: Path, *args: str, hold_at: str = "") -> None:
        environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
        environment.pop("SPARKPAIR_INVENTORY", None)
        self.release_file = Path(f"/tmp/sparkpair-test-release-{os.getpid()}-{id(self)}")
        self.release_file.unlink(missing_ok=True)
        if hold_at:
            environment.update(SPARKPAIR_TEST_HOLD_AT=hold_at, SPARKPAIR_TEST_RELEASE=str(self.release_file))
        self.proc = subprocess.Popen([sys.executable, "-m", "sparkpair", "-i", str(inventory), *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)
        self.err: list[str] = []
        self.out = ""
        self._seen = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._seen:
                self.err.append(line)
                self._seen.notify_all()
        with self._seen:
            self.err.append("")  # end of output
            self._seen.notify_all()

    def wait_for(self, pattern: str, timeout: float = 180) -> str:
        """The first stderr line matching pattern; fails if the run ends or times out first."""
        deadline = time.monotonic() + timeout
        checked = 0
        with self._seen:
            while True:
                for line in self.err[checked:]:
                    if line and re.search(pattern, line):
                        return line
                    if line == "":
                        pytest.fail(f"sparkpair ended before {pattern!r}:\n{''.join(self.err)}")
                checked = len(self.err)
                if not self._seen.wait(timeout=max(0.0, deadline - time.monotonic())):
                    pytest.fail(f"no {pattern!r} within {timeout} s:\n{''.join(self.err)}")

    def held(self, timeout: float = 300) -> None:
        """Wait until the run holds at its hold_at line."""
        self.wait_for(r"^sparkpair-test: held$", timeout)

    def release(self) -> None:
        self.release_file.touch()

    def finish(self, timeout: float = 600) -> Run:
        """How the run ended (it is released first); a run still going after timeout is killed, never left behind."""
        self.release()
        try:
            self.out = self.proc.stdout.read() if self.proc.stdout else ""
            code = self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(timeout=30)
            self.release_file.unlink(missing_ok=True)
        self._reader.join(timeout=10)
        return Run(code, self.out, "".join(self.err))


def has_netplan(bed, node) -> bool:
    """Whether NODE holds sparkpair's netplan file."""
    return bed.exec(node, f"test -e {paths.NETPLAN_PATH}", check=False).returncode == 0


def ensure_networked(bed) -> None:
    """Run `sparkpair setup-network` unless it succeeded since the last reset (`pristine`)."""
    if NETWORKED not in bed.since_reset:
        run = run_sparkpair(bed.inventory, "setup-network", "--yes")
        if run.code != 0:
            pytest.fail(f"setup-network failed:\n{run.text}")
        bed.since_reset.add(NETWORKED)


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


def bundle_contents(inventory: Path, out: Path, lock: Path) -> tuple[set[str], str]:
    """`sparkpair bundle --out OUT --lock LOCK` (asserted to succeed): its member names below the top folder, and
    the text of every file in it."""
    run = run_sparkpair(inventory, "bundle", "--out", out, "--lock", lock)
    assert run.code == 0, run.text
    with tarfile.open(out) as archive:
        names = {member.name.split("/", 1)[1] for member in archive.getmembers()}
        text = "".join(archive.extractfile(m).read().decode(errors="replace")  # type: ignore[union-attr]
                       for m in archive.getmembers() if m.isfile())
    return names, text


def engine_cache_files(bed, node: str, kinds: tuple[str, ...]) -> dict[str, str]:
    """The files of node's engine-cache Docker volume whose path matches one of kinds (find -path patterns:
    `*/modelinfos/*` for vLLM's model inspections, `*.so` for compiled kernels wherever vLLM put them), path ->
    mtime, read from the volume on the node (no container needed); {} when there is no volume."""
    patterns = " -o ".join(f"-path {shlex.quote(kind)}" for kind in kinds)
    found = bed.exec(node, f"m=$(docker volume inspect -f '{{{{.Mountpoint}}}}' {paths.ENGINE_CACHE_VOLUME} "
                           f"2>/dev/null) || exit 0; find \"$m\" -type f \\( {patterns} \\) -printf '%P %T@\\n'").stdout
    return dict(line.rsplit(" ", 1) for line in found.splitlines())


# vLLM's CPU build compiles its model with torch.compile at every start unless told not to (about 40 s of each
# start here). Tests that prove something other than the default start (a fault, a split, training) serve
# eagerly, as the vLLM backend's sample model.json does; the module sharing one default start keeps compiling.
EAGER_VLLM = {"models": {"qwen3-235b": {"variants": {"vllm": {"serve_args": {"enforce_eager": True}}}}}}


def merged(into: dict, more: dict) -> dict:
    """INTO with MORE merged in, nested mappings key by key (a copy; neither argument changes)."""
    result = dict(into)
    for key, value in more.items():
        result[key] = merged(result[key], value) if isinstance(value, dict) and isinstance(result.get(key), dict) \
            else value
    return result


def variant_inventory(inventory: Path, folder: Path, *changes: dict) -> Path:
    """INVENTORY's data with each of CHANGES merged in (nested mappings key by key), written in FOLDER."""
    data = yaml.safe_load(Path(inventory).read_text())
    for change in changes:
        data = merged(data, change)
    path = folder / "inventory.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


class WithInventory:
    """The pair, with another inventory in place of its own (exec and everything else are the pair's)."""

    def __init__(self, bed, inventory: Path) -> None:
        self._bed, self.inventory = bed, inventory

    def __getattr__(self, name: str):
        return getattr(self._bed, name)


@pytest.fixture
def sparkpair(testbed):
    """sparkpair(*args, env=None) -> Run against the simulated pair's inventory."""
    return lambda *args, **kw: run_sparkpair(testbed.inventory, *args, **kw)


@pytest.fixture
def networked(testbed):
    """The pair after a successful `sparkpair setup-network`: run again only after `pristine` undid it."""
    ensure_networked(testbed)
    return testbed


@pytest.fixture
def stopped(networked):
    """A networked pair with no engine running before and after the test (whatever inventory it used)."""
    run_sparkpair(networked.inventory, "stop")
    yield networked
    run_sparkpair(networked.inventory, "stop")
