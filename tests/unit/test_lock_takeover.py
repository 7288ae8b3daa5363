"""Taking over a stale pair lock: whose lock is stale (machine id, boot, pid and its start time, never
the hostname alone), and two runs judging one stale lock at once: exactly one takes it over.

The head node is a temporary directory and every command runs in a real local shell (`sh -c`), as
on the node: the takeover's compare-and-delete under `flock` is the real one."""

from __future__ import annotations

import getpass
import json
import os
import socket
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from fakenode import Call, FakeNode, Reply, in_local_shell

from sparkpair.errors import SparkpairError
from sparkpair.transport import lock

MACHINE = "0123456789abcdef0123456789abcdef"
OTHER_MACHINE = "fedcba9876543210fedcba9876543210"
BOOT = "01234567-89ab-cdef-0123-456789abcdef"
WAIT_S = 20.0


def _dead_pid() -> int:
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid


@pytest.fixture(autouse=True)
def this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine's id and boot, fixed (a CI container may have no /etc/machine-id)."""
    monkeypatch.setattr(lock, "machine_id", lambda: MACHINE)
    monkeypatch.setattr(lock, "boot_id", lambda: BOOT)


def _stale_record() -> dict[str, object]:
    """A lock left by a run of this machine, in this boot, whose process is gone."""
    return {"user": "op", "host": socket.gethostname(), "machine": MACHINE, "boot": BOOT, "pid": _dead_pid(),
            "started": "12345", "command": "launch qwen3-235b", "since": 0.0}


def Head(home: Path, gate: Callable[[int], None] | None = None) -> FakeNode:  # noqa: N802 - reads as the node
    """The head node: the shared fake node running every command with this machine's sh in home (a temporary
    directory); gate(n) is called before the run's nth command."""
    local = in_local_shell(timeout=60)

    def gated(call: Call, node: FakeNode) -> Reply:
        if gate is not None:
            gate(len(node.calls))
        return local(call, node)

    return FakeNode("spark-a", home=str(home)).on(lambda text: True, gated)


def _lock_file(head: FakeNode) -> Path:
    return Path(head.home) / lock.LOCK_FILE


def _plant(home: Path, record: dict[str, object]) -> Path:
    path = home / lock.LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


class Contender:
    """One run's `lock.held` in a thread: the lock it held (None if refused), or the error that refused it.
    A run that gets in holds the pair until the other run has made its attempt."""

    def __init__(self, head: FakeNode) -> None:
        self.head, self.attempted = head, threading.Event()
        self.other: Contender | None = None
        self.holds = threading.Event()
        self.held_content: str | None = None
        self.refused: str | None = None
        self.warnings: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        assert self.other is not None
        try:
            with lock.held(self.head, "stop", self.warnings.append):  # type: ignore[arg-type]
                self.held_content = _lock_file(self.head).read_text()
                self.attempted.set()
                self.holds.set()
                self.other.attempted.wait(WAIT_S)
        except SparkpairError as error:
            self.refused = error.message
        finally:
            self.attempted.set()


def _race(tmp_path: Path, gate_of: object) -> tuple[Contender, Contender]:
    """Two runs (each with its own connection to one head) taking the same stale lock; gate_of(index,
    runs) gives each run's gate."""
    _plant(tmp_path, _stale_record())
    runs: list[Contender] = []
    first = Contender(Head(tmp_path, gate_of(0, runs)))  # type: ignore[operator,arg-type]
    second = Contender(Head(tmp_path, gate_of(1, runs)))  # type: ignore[operator,arg-type]
    runs += [first, second]
    first.other, second.other = second, first
    for contender in runs:
        contender.thread.start()
    for contender in runs:
        contender.thread.join(WAIT_S * 2)
        assert not contender.thread.is_alive(), "a run hung"
    return first, second


def _exactly_one_won(first: Contender, second: Contender) -> Contender:
    """The winner; fails unless exactly one run held the pair and the other was refused, naming the winner."""
    winners = [c for c in (first, second) if c.held_content is not None]
    assert len(winners) == 1, f"{len(winners)} runs held the pair at once"
    loser = second if winners[0] is first else first
    assert loser.refused is not None, "the loser was neither let in nor refused"
    assert loser.refused.startswith(f"another sparkpair run holds the pair: {getpass.getuser()}@"
                                    f"{socket.gethostname()} pid {os.getpid()} (stop, since "), loser.refused
    assert all(w.startswith("removing a stale lock left by op@") for c in (first, second) for w in c.warnings)
    return winners[0]


def test_a_takeover_never_removes_the_fresh_lock_of_the_run_that_took_over_first(tmp_path: Path) -> None:
    """The second run judged the same stale lock, but its takeover reaches the node only once the first
    run holds the pair: its compare-and-delete finds the first run's lock (not the one it judged) and
    leaves it (before the fix: `rm -f` removed it, and both runs held the pair)."""
    def gate_of(index: int, runs: list[Contender]) -> object:
        def gate(command: int) -> None:
            if index == 1 and command == 2:  # the second run's takeover (its second command) waits
                assert runs[0].holds.wait(WAIT_S), "the first run never took over"
        return gate

    first, second = _race(tmp_path, gate_of)
    assert _exactly_one_won(first, second) is first
    assert not (tmp_path / lock.LOCK_FILE).exists()  # the winner released it; no staged file left
    assert os.listdir(tmp_path / os.path.dirname(lock.LOCK_FILE)) == []


@pytest.mark.parametrize("round_", range(5))
def test_two_concurrent_takeovers_of_one_stale_lock_exactly_one_wins(tmp_path: Path, round_: int) -> None:
    """Both runs judged the lock stale and send their takeover at the same moment."""
    both_judged = threading.Barrier(2, timeout=WAIT_S)

    def gate_of(index: int, runs: list[Contender]) -> object:
        def gate(command: int) -> None:
            if command == 2:
                both_judged.wait()
        return gate

    first, second = _race(tmp_path, gate_of)
    _exactly_one_won(first, second)
    assert os.listdir(tmp_path / os.path.dirname(lock.LOCK_FILE)) == []


def test_a_stale_lock_released_meanwhile_is_simply_taken(tmp_path: Path) -> None:
    mine = lock.holder("stop")
    head = Head(tmp_path)
    assert lock._try_take(head, mine, replacing=json.dumps(_stale_record())) is None
    assert json.loads(_lock_file(head).read_text()) == mine


def test_a_lock_replaced_meanwhile_is_not_removed_and_its_holder_is_named(tmp_path: Path) -> None:
    judged, fresh = _stale_record(), {**_stale_record(), "user": "bob", "pid": os.getpid()}
    path = _plant(tmp_path, fresh)
    found = lock._try_take(Head(tmp_path), lock.holder("stop"), replacing=json.dumps(judged))
    assert found is not None and found.info == fresh
    assert json.loads(path.read_text()) == fresh


@pytest.mark.parametrize("changes, stale", [
    ({}, False),                                                  # this very process: alive
    ({"machine": OTHER_MACHINE, "pid": None}, False),             # another machine with this hostname
    ({"machine": None}, False),                                   # an older sparkpair's lock (no machine id)
    ({"boot": "76543210-89ab-cdef-0123-456789abcdef"}, True),     # this machine booted since
    ({"started": "1"}, True),                                     # the pid now names another process
    ({"started": None}, False),                                   # no start time recorded: the pid decides
])
def test_staleness_is_judged_by_machine_boot_pid_and_start_time(changes: dict[str, object], stale: bool) -> None:
    alive = {"host": socket.gethostname(), "machine": MACHINE, "boot": BOOT, "pid": os.getpid(),
             "started": lock.process_start(os.getpid())}
    assert lock.is_stale({**alive, **changes}) is stale


def test_another_machine_with_the_same_hostname_is_never_judged_stale() -> None:
    record = {**_stale_record(), "machine": OTHER_MACHINE}
    assert record["host"] == socket.gethostname() and not lock.is_stale(record)
    assert lock.is_stale(_stale_record())


def test_the_holder_names_machine_boot_pid_and_its_start_time() -> None:
    mine = lock.holder("launch")
    assert (mine["machine"], mine["boot"], mine["pid"]) == (MACHINE, BOOT, os.getpid())
    assert mine["started"] == lock.process_start(os.getpid()) and str(mine["started"]).isdigit()
    assert lock.process_start(_dead_pid()) is None


def test_a_hostile_lock_is_described_on_one_line() -> None:
    said = lock.describe({"user": "op\nerror: forged", "host": "h\x1b[2J", "pid": 1, "command": "x", "since": 0})
    assert "\n" not in said and "\x1b" not in said and said.startswith("op\\nerror: forged@h\\x1b[2J pid 1")
