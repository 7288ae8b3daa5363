"""The simulated pair as pytest fixtures (a pytest plugin, registered by the `pytest11` entry point).

`testbed_pair` (session) brings the pair up once, holding the pair lock for the whole session,
and at the end takes it down only if it brought it up. Without root or Linux the tests that
need the pair are skipped with a reason, except under CI=true, where they fail instead.
`testbed` (session) is the handle tests use (handle.py); `healed` (autouse) heals every fault a
test injected; `pristine` resets both nodes first. `testbed_vllm` (session) puts the real vLLM
(CPU build) on the pair on first use (image in both engines, tiny models on the head): only the
tests that ask for it pay for it; `testbed_triton` (module) the real Triton on top of it.
`testbed_shape` (module) is a factory, testbed_shape(nodes, topology), that brings a larger shape up
(a ring of 3, a switch of 2-4: shape.py) for one module and the pair back after it.

What a reset takes back is the project's business, not the testbed's: `testbed_reset_spec`
(session) is the reset spec (reset.py), empty here; the project's conftest overrides it (it may
ask for `testbed_pair`, whose inventory exists by then). Every test that uses the pair gets the
`integration` marker.
"""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from .handle import CLI, Testbed
from .layout import INVENTORY, NODES, STATE_DIR
from .reset import SpecError, parse_spec
from .vllm_pair import VllmSetup

UP_TIMEOUT = 900
DOWN_TIMEOUT = 300
PAIR_LOCK = "/tmp/sparkpair-pair.lock"  # one user of the pair at a time: demo and benchmarks take it too


@dataclass(frozen=True)
class PairSession:
    """The pair as this session holds it."""

    inventory: Path
    brought_up: bool  # the session started it, so the session takes it down


def pytest_configure(config) -> None:
    """Register the marker the pair's tests carry."""
    config.addinivalue_line("markers", "integration: needs the simulated pair (sparkpair_testbed); runs as root")
    config.addinivalue_line("markers", "takes_the_pair_down: takes the pair down: runs after every other test of the "
                                       "pair and of a larger shape, whose engines then keep what was loaded")


def pytest_collection_modifyitems(items) -> None:
    """Every test that uses the pair is an integration test; the tests on a larger shape (`testbed_shape`) run
    after the pair's, so a reshape and its way back can never disturb a module of the pair (a session that ran a
    pair module after a switch of four saw that module's launch fail); a test that takes the pair down (marked
    `takes_the_pair_down`) runs last of all, so the images and models loaded into the engines serve every module
    that needs them once: test_triton and test_vllm reloaded them after test_testbed's down test (about 80 s
    each), and a larger shape after it loaded the vLLM image into spark-a's and spark-b's fresh engines again."""
    for item in items:
        if "testbed_pair" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.integration)
    items.sort(key=place_in_session)  # stable: the order within each group stays


def on_a_larger_shape(item) -> bool:
    """Whether the test brings up a shape other than the pair."""
    return "testbed_shape" in getattr(item, "fixturenames", ())


def place_in_session(item) -> int:
    """0 for a test of the pair as it is, 1 for one on a larger shape, 2 for one that takes the pair down."""
    if item.get_closest_marker("takes_the_pair_down"):
        return 2
    return 1 if on_a_larger_shape(item) else 0


def unavailable_reason() -> str | None:
    """Why the pair cannot run here, or None."""
    if not sys.platform.startswith("linux"):
        return "the simulated Spark pair needs Linux (network namespaces)"
    if os.geteuid() != 0:
        return "the simulated Spark pair needs root (run the integration tests as root)"
    return None


def run_cli(*args, timeout) -> subprocess.CompletedProcess:
    """Run the testbed's command line with ARGS."""
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def testbed_pair():
    """Bring the simulated pair up once per session (see the module docstring)."""
    reason = unavailable_reason()
    if reason:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true: integration tests must run, but {reason}")
        pytest.skip(reason)
    lock = open(PAIR_LOCK, "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    already_up = STATE_DIR.exists()  # `down` removes it: present means the pair runs (maybe degraded)
    proc = run_cli("up", timeout=UP_TIMEOUT)
    if proc.returncode != 0:
        lock.close()
        pytest.fail(f"scripts/testbed up failed:\n{proc.stdout}{proc.stderr}")
    pair = PairSession(inventory=INVENTORY, brought_up=not already_up)
    yield pair
    if pair.brought_up:
        run_cli("down", timeout=DOWN_TIMEOUT)
    lock.close()


@pytest.fixture(scope="session")
def testbed_reset_spec() -> dict:
    """What `testbed.reset()` takes back on each node: nothing, until the project says (override it)."""
    return {}


@pytest.fixture(scope="session")
def testbed(testbed_pair, testbed_reset_spec) -> Testbed:
    """The handle on the running pair, for the whole session."""
    try:
        parse_spec(testbed_reset_spec)
    except SpecError as exc:
        pytest.fail(f"testbed_reset_spec: {exc}")
    return Testbed(inventory=testbed_pair.inventory, brought_up=testbed_pair.brought_up,
                   reset_spec=testbed_reset_spec)


@pytest.fixture(autouse=True)
def healed(request):
    """After a test that injected faults, heal them all (so one failure cannot spread)."""
    yield
    if "testbed" in request.fixturenames:
        bed = request.getfixturevalue("testbed")
        if bed.faulted:
            bed.faulted = False
            bed.heal()


@pytest.fixture(scope="module")
def testbed_vllm(testbed) -> VllmSetup:
    """The real vLLM (CPU build) on the pair, built on first use (`scripts/testbed vllm`: minutes
    cold, about a second when cached): the image in both nodes' engines, the tiny target and Eagle3
    draft in the head's HF cache. Module scope: each module that asks gets them again where a `down`
    (the engines' images) or a reset (the models) in between took them away."""
    return testbed.vllm()


@pytest.fixture(scope="module")
def testbed_triton(testbed):
    """The real Triton Inference Server on the pair (`scripts/testbed triton`: the vLLM setup, then the Triton image
    layered on the vLLM image in both engines; minutes cold, seconds when cached). Module scope, as testbed_vllm."""
    return testbed.triton()


@pytest.fixture(scope="module")
def testbed_shape(testbed):
    """testbed_shape(nodes, topology) runs `scripts/testbed up --nodes N --topology T` and returns the handle,
    its hosts now every node of that shape; after the module a plain `up` brings back exactly the pair
    (the extra nodes removed, the cables rewired), so the next module finds the pair as always."""
    reshaped = []

    def bring_up(nodes: int, topology: str) -> Testbed:
        reshaped.append((nodes, topology))
        testbed.cli("up", "--nodes", nodes, "--topology", topology, timeout=UP_TIMEOUT)
        testbed.hosts = {node.name: node.mgmt_ip for node in NODES}
        return testbed

    yield bring_up
    if reshaped:
        proc = run_cli("up", timeout=UP_TIMEOUT)
        testbed.hosts = {node.name: node.mgmt_ip for node in NODES}
        if proc.returncode != 0:
            pytest.fail(f"scripts/testbed up (back to the pair) failed:\n{proc.stdout}{proc.stderr}")


@pytest.fixture
def pristine(testbed) -> Testbed:
    """Both nodes as `up` left them, as far as the reset spec knows what was added since."""
    testbed.reset()
    return testbed
