"""The one scripted node of the unit tests: a `sparkpair.transport.Node` without SSH, root or a pair.

    node = FakeNode("spark-a", files={"/etc/hostname": "spark-a\\n"}).files_behave()
    node.on(prefix("docker image inspect"), Reply(exit_code=1, stderr="No such image"))
    pair = fake_pair(node, FakeNode("spark-b").files_behave())

Each command the node may receive is scripted with `on` (matched by exact text, by `prefix(...)` or by a
predicate on the text; the first rule that matches and has uses left answers). `put` writes into an
in-memory file system (`files`, `modes`) that `read` and later replies see; `files_behave()` adds a rule
that carries out the plain file commands sparkpair's shell lines are made of (`[ -e P ]`, `mkdir -p`,
`cp -a`, `mv -f`, `rm -f`, `cmp -s`, `ls -A`, `echo`, `: > P`, `if/then/else/fi`, `&&`, `||`, `;`) on
that file system. Every command is recorded (`calls`, `commands`). A command nothing scripted answers
raises AssertionError naming it, and is kept in `UNEXPECTED`, which tests/unit/conftest.py turns into a
failed test even when the code under test swallowed the error.
"""

from __future__ import annotations

import base64
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko
from fakefiles import ROOT_WORD, FileShell

from sparkpair.errors import RemoteCommandError
from sparkpair.probes import Probe
from sparkpair.transport import TIMED_OUT, Command, CommandResult, Pair, SshTarget, shown_text
from sparkpair.transport.httpio import ANSWER_CAP
from sparkpair.transport.httpio import Reply as HttpReply
from sparkpair.transport.node import COMMAND_TIMEOUT_S, OUTPUT_CAP, STREAM_TIMEOUT_S, require_limits
from sparkpair.transport.ssh import OVER_CAP

UNEXPECTED: list[str] = []  # every unexpected command of the running test (tests/unit/conftest.py checks it)


@dataclass(frozen=True)
class Call:
    """One command the node received: its text (as a trace shows it: a root verb as `sparkpair-root VERB ARGS`),
    whether it asks root (a root helper's verb), how, and with what."""

    text: str
    sudo: bool = False
    timeout: float | None = None
    stdin: str | None = None
    how: str = "run"  # run, check or stream
    cap: int | None = None  # the byte cap on its output (run and check)


@dataclass(frozen=True)
class Reply:
    """What a scripted command answers."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    timed_out: bool = False


TIMES_OUT = Reply(stderr="timed out", exit_code=TIMED_OUT, timed_out=True)  # a command that outlived its timeout

Answer = str | Reply | BaseException
Responder = Answer | Callable[[Call, "FakeNode"], "Answer | None"]
Match = str | Callable[[str], bool]


def prefix(start: str) -> Callable[[str], bool]:
    """A match for every command whose text starts with start."""
    return lambda text: text.startswith(start)


def containing(*parts: str) -> Callable[[str], bool]:
    """A match for every command whose text holds each of parts."""
    return lambda text: all(part in text for part in parts)


@dataclass
class _Rule:
    match: Match
    responder: Responder
    left: int | None

    def matches(self, text: str) -> bool:
        if self.left == 0:
            return False
        return self.match == text if isinstance(self.match, str) else self.match(text)


@dataclass
class FakeNode:
    """A scripted node: the rules that answer its commands, its files, and what it was asked."""

    name: str = "spark-a"
    home: str = "/home/nvidia"
    files: dict[str, bytes] = field(default_factory=dict)
    host: str = "198.18.0.11"
    modes: dict[str, int] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)
    calls: list[Call] = field(default_factory=list)
    puts: list[tuple[str, bytes, int, bool]] = field(default_factory=list)
    http_replies: dict[tuple[int, str, str], HttpReply | None] = field(default_factory=dict)
    http_headers: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # each request's path, headers
    host_key: tuple[str, str] = ("ssh-ed25519", "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl")
    _rules: list[_Rule] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.files = {path: content.encode() if isinstance(content, str) else content
                      for path, content in self.files.items()}

    # --- scripting -------------------------------------------------------------------------------------

    def on(self, match: Match, reply: Responder = "", *, times: int | None = None) -> FakeNode:
        """Answer commands that match (exact text, or a predicate on the text) with reply: stdout (str), a
        Reply, an exception to raise, or a function of (Call, node) giving one of those (None: not this
        rule). times: how many commands it answers (None: any number). Returns the node, for chaining."""
        self._rules.append(_Rule(match, reply, times))
        return self

    def files_behave(self) -> FakeNode:
        """Let the plain file commands act on the in-memory file system (see the module's docstring)."""
        return self.on(lambda text: True, _file_commands)

    @property
    def commands(self) -> list[str]:
        """The text of every command received, in order."""
        return [call.text for call in self.calls]

    def text(self, path: str) -> str | None:
        """A file's content as text, or None when it does not exist."""
        content = self.files.get(path)
        return None if content is None else content.decode()

    # --- the Node protocol ----------------------------------------------------------------------------

    @property
    def target(self) -> SshTarget:
        return SshTarget(self.name, self.host, 22, "nvidia", Path("/nonexistent/id_ed25519"),
                         Path("/nonexistent/known_hosts"))

    def run(self, command: Command, *, timeout: float = COMMAND_TIMEOUT_S, stdin: str | None = None,
            cap: int = OUTPUT_CAP) -> CommandResult:
        return self._answer(Call(shown_text(command), _as_root(command), timeout, stdin, "run", cap))

    def check(self, command: Command, *, timeout: float = COMMAND_TIMEOUT_S, cap: int = OUTPUT_CAP) -> str:
        result = self._answer(Call(shown_text(command), _as_root(command), timeout, None, "check", cap))
        if not result.ok:
            raise RemoteCommandError(self.name, result.command, result.exit_code, result.stderr or result.stdout)
        return result.stdout

    def stream(self, command: Command, on_line: Callable[[str], None], *, timeout: float = STREAM_TIMEOUT_S) -> int:
        result = self._answer(Call(shown_text(command), False, timeout, None, "stream", OUTPUT_CAP))
        for line in (result.stdout + result.stderr).splitlines():
            on_line(line)
        return TIMED_OUT if result.timed_out else result.exit_code

    def put(self, content: str | bytes, path: str, *, mode: int = 0o644, sudo: bool = False) -> None:
        data = content.encode() if isinstance(content, str) else content
        self.puts.append((path, data, mode, sudo))
        self.files[path], self.modes[path] = data, mode

    def read(self, path: str, cap: int = 16 << 20, timeout: float = 30.0) -> bytes | None:
        content = self.files.get(path)
        if content is not None and len(content) > cap:
            raise RemoteCommandError(self.name, f"read {path}", 1, f"{path} is larger than {cap} bytes")
        return content

    def http(self, port: int, method: str, path: str, body: bytes | None = None, timeout: float = 10.0,
             cap: int = ANSWER_CAP, headers: Mapping[str, str] | None = None) -> HttpReply | None:
        key = (port, method, path)
        self.http_headers.append((path, dict(headers or {})))
        if key not in self.http_replies:
            raise self._unexpected(f"HTTP {method} 127.0.0.1:{port}{path}")
        return self.http_replies[key]

    def trace(self, text: str) -> None:
        pass

    def server_key(self) -> tuple[str, str]:
        return self.host_key

    def client(self) -> paramiko.SSHClient:
        raise self._unexpected("an SSH channel of its own (transport.session)")

    def connect(self, timeout: float | None = None) -> None:
        pass

    def connect_soon(self) -> None:
        pass

    def close(self) -> None:
        pass

    # --- answering -----------------------------------------------------------------------------------

    def _answer(self, call: Call) -> CommandResult:
        self.calls.append(call)
        try:
            require_limits(call.timeout, call.cap)  # type: ignore[arg-type]
        except ValueError as error:  # a read from a node without a deadline or a byte cap fails the test
            raise self._unexpected(f"command without its limits ({error}): {call.text}") from None
        for rule in self._rules:
            if not rule.matches(call.text):
                continue
            answer = rule.responder(call, self) if callable(rule.responder) else rule.responder
            if answer is None:
                continue
            if rule.left is not None:
                rule.left -= 1
            if isinstance(answer, BaseException):
                raise answer
            reply = Reply(answer) if isinstance(answer, str) else answer
            if call.how != "stream" and len((reply.stdout + reply.stderr).encode()) > (call.cap or 0):
                return CommandResult(self.name, call.text, OVER_CAP, reply.stdout.encode()[:call.cap].decode(
                    errors="replace"), f"printed more than {call.cap} bytes; the rest was not read", over_cap=True)
            return CommandResult(self.name, call.text, reply.exit_code, reply.stdout, reply.stderr, reply.timed_out)
        raise self._unexpected(f"command{' (sudo)' if call.sudo else ''}: {call.text}")

    def _unexpected(self, what: str) -> AssertionError:
        UNEXPECTED.append(f"{self.name}: unexpected {what}")
        return AssertionError(UNEXPECTED[-1])


def in_local_shell(env: Mapping[str, str] | None = None, shell: str = "sh",
                   timeout: float = 30) -> Callable[[Call, FakeNode], Reply]:
    """A responder that runs the command with this machine's shell (sudo ignored; env replaces the
    environment when given): for commands whose shell semantics are what a test proves (an atomic `ln`, a
    umask, a probe's framing), on paths under a temporary home (`FakeNode(home=str(tmp_path))`)."""
    def run_locally(call: Call, node: FakeNode) -> Reply:
        done = subprocess.run([shell, "-c", call.text], input=call.stdin, capture_output=True, timeout=timeout,
                              env=dict(env) if env is not None else None, encoding="utf-8", errors="replace")
        return Reply(done.stdout, done.stderr, done.returncode)

    return run_locally


_PROBE_START = re.compile(r'\( (.*?) \) >"\$d/([0-9]+)\.o" 2>"\$d/[0-9]+\.e" </dev/null & p[0-9]+=\$!', re.DOTALL)


def is_probe_round(text: str) -> bool:
    """Whether text is a probe round (`probes.batch_script`)."""
    return "sparkpair-batch" in text and text.startswith("d=$(mktemp -d)")


class ProbeRound:
    """A responder answering probe rounds as a node would frame them (`probes.parse_batch` reads it back):
    each probe by its scripted answer, stdout (exit 0) or (exit code, stdout, stderr). A probe with no
    answer gets `others` when given, else it is unexpected (exit 127 in the round). `asked` keeps every
    round's probe commands."""

    def __init__(self, answers: Mapping[Probe[Any], str | tuple[int, str, str]],
                 others: tuple[int, str, str] | None = None) -> None:
        self.others = others
        self.by_text: dict[str, tuple[int, str, str]] = {}
        for probe, answer in answers.items():
            whole = (0, answer, "") if isinstance(answer, str) else answer
            self.by_text[probe.command.shown] = whole  # the round as the node sees it: a root verb by its name
        self.asked: list[list[str]] = []

    def __call__(self, call: Call, node: FakeNode) -> Reply | None:
        if not is_probe_round(call.text):
            return None
        found = sorted((int(index), command) for command, index in _PROBE_START.findall(call.text))
        self.asked.append([command for _, command in found])
        answers = []
        for _, command in found:
            if command not in self.by_text and self.others is None:
                node._unexpected(f"probe: {command[:200]}")
            answers.append(self.by_text.get(command, self.others or (127, "", "not scripted")))
        return Reply(frame_round(answers))


def frame_round(answers: Sequence[tuple[int, str, str]]) -> str:
    """What a probe round prints for these answers (exit code, stdout, stderr), in its framing."""
    sizes = "".join(f"{len(part.encode())}\n" for _, out, err in answers for part in (out, err))
    body = base64.encodebytes("".join(out + err for _, out, err in answers).encode()).decode()
    codes = " ".join(str(code) for code, _, _ in answers)
    return f"\x1esparkpair-batch {codes}\n{sizes}\x1f\n{body}\x1d\n{sizes}"


def _file_commands(call: Call, node: FakeNode) -> Reply | None:
    """The reply of a line of plain file commands carried out on the node's files (fakefiles); None for others."""
    done = FileShell(node.files, node.dirs).answer(call.text)
    return None if done is None else Reply(done[0], "", done[1])


def _as_root(command: Command) -> bool:
    """Whether a command asks root: it runs a verb of the root helper (`transport.root.Root`)."""
    return ROOT_WORD in shown_text(command).split()


def fake_pair(*nodes: FakeNode) -> Pair:
    """`Pair.of` the nodes, the head first (two scripted nodes named spark-a and spark-b when none given)."""
    return Pair.of(list(nodes) or [FakeNode("spark-a"), FakeNode("spark-b", host="198.18.0.12")])


def assert_no_unexpected() -> None:
    """Fail when a fake node received a command nothing scripted (and forget them for the next test)."""
    seen, UNEXPECTED[:] = list(UNEXPECTED), []
    assert not seen, "; ".join(seen)


