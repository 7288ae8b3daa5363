"""Docker on a node, through the `docker` CLI over the node's one SSH connection.

Why the CLI and not the Docker SDK: the SDK's SSH transport opens its own SSH session, which
would verify host keys against ~/.ssh/known_hosts instead of the inventory's and could only
share our verified connection through docker-py internals. The CLI runs over the connection that
is already open and verified, speaks JSON (`docker container inspect`), and the `docker run` line
it executes is the very line the runbook prints. Reads (inspect, info) are probes
(`sparkpair.probes.docker`); this module holds the actions. Every failure is a SparkpairError
naming the node.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence

from sparkpair.errors import SparkpairError, last_line
from sparkpair.transport.node import Node
from sparkpair.transport.shell import Shell

EXEC_TIMEOUT_S = 60.0   # a read in the engine container (a log's tail, an exit code); callers of a longer job say so
EXEC_CAP = 4 << 20      # the most such a read returns (its command cuts what it prints: `tail -c`)
TAIL_CAP = 2 << 20      # the most a log's tail brings back (`tails`)

DAEMON_ERRORS = ("Error response from daemon", "Error: No such container", "Cannot connect to the Docker daemon",
                 "permission denied while trying to connect")


class ContainerNotRunning(SparkpairError):
    """docker exec found no running container of that name."""


def run(connection: Node, argv: Sequence[str]) -> str:
    """`docker run -d ...` (argv as render built it, starting with docker run); the new container's ID."""
    if list(argv[:2]) != ["docker", "run"]:
        raise ValueError(f"not a docker run line: {argv[:2]}")
    result = connection.run(list(argv))
    if not result.ok:
        raise SparkpairError(f"docker run failed: {last_line(result.stderr, f'exit {result.exit_code}')}",
                             node=connection.name)
    return result.stdout.strip()


def remove(connection: Node, name: str) -> bool:
    """`docker rm -f name`; True when a container was removed, False when there was none (docker rm -f
    prints the name of what it removed, and since Docker 20.10 exits 0 without a word when there is none)."""
    result = connection.run(["docker", "rm", "-f", name])
    if result.ok:
        return bool(result.stdout.strip())
    if "No such container" in result.stderr:
        return False
    raise SparkpairError(f"docker rm -f {name} failed: {last_line(result.stderr, f'exit {result.exit_code}')}",
                         node=connection.name)


def _exec_argv(name: str, argv: Sequence[str], user: str | None, environment: Mapping[str, str] | None,
               detach: bool = False) -> list[str]:
    options = ["-d"] if detach else []
    options += ["-u", user] if user else []
    for key, value in (environment or {}).items():
        options += ["-e", f"{key}={value}"]
    return ["docker", "exec", *options, name, *argv]


def _refused(connection: Node, name: str, stderr: str) -> SparkpairError | None:
    """The error when docker itself (not the command in the container) refused an exec, else None."""
    last = last_line(stderr, "")
    if "is not running" in last or "No such container" in last:
        return ContainerNotRunning(f"engine container {name} is not running", node=connection.name,
                                   hint="sparkpair launch")
    if last.startswith(DAEMON_ERRORS):
        return SparkpairError(f"docker exec {name} failed: {last}", node=connection.name)
    return None


def exec_in(connection: Node, name: str, argv: Sequence[str], *, user: str | None = None,
            environment: Mapping[str, str] | None = None, timeout: float = EXEC_TIMEOUT_S,
            cap: int = EXEC_CAP) -> tuple[int, str]:
    """Run argv inside container name; (exit code, stdout then stderr), read within timeout seconds and cap bytes
    (past either: the exit code is TIMED_OUT or OVER_CAP and the output what came). A container that is not
    running raises ContainerNotRunning."""
    result = connection.run(_exec_argv(name, argv, user, environment), timeout=timeout, cap=cap)
    if not result.ok and (refused := _refused(connection, name, result.stderr)) is not None:
        raise refused
    return result.exit_code, result.stdout + result.stderr


def regular_head(path: str) -> str:
    """sh text: the first 32 bytes of path when it is a regular file (an exit code, a pid). A FIFO or a device a
    hostile engine put there is never opened: reading one would wait for a writer, forever."""
    return f"{{ [ -f {path} ] && head -c 32 {path}; }}"


def tails(files: Sequence[str], lines: int, cap: int = TAIL_CAP) -> str:
    """sh text: the last lines of each regular file of files, at most cap bytes in all (the end kept); 400 lines of
    a hostile rank log were 192 MiB before."""
    return (f"for f in {' '.join(map(shlex.quote, files))}; do [ -f \"$f\" ] && tail -n {int(lines)} \"$f\"; "
            f"done 2>/dev/null | tail -c {int(cap)}")


def exec_detached(connection: Node, name: str, argv: Sequence[str], *,
                  environment: Mapping[str, str] | None = None) -> None:
    """`docker exec -d`: start argv in the container and return at once."""
    result = connection.run(_exec_argv(name, argv, None, environment, detach=True))
    if not result.ok:
        raise _refused(connection, name, result.stderr) or SparkpairError(
            f"docker exec -d {name} failed: {last_line(result.stderr, f'exit {result.exit_code}')}",
            node=connection.name)


def stream_in(connection: Node, name: str, argv: Sequence[str], on_line: Callable[[str], None], *,
              user: str | None = None, environment: Mapping[str, str] | None = None) -> int:
    """Run argv in the container, handing each output line to on_line as it comes; the exit code."""
    lines: list[str] = []

    def seen(line: str) -> None:
        lines[-1:] = [line]
        on_line(line)

    code = connection.stream(_exec_argv(name, argv, user, environment), seen)
    if code != 0 and lines and (refused := _refused(connection, name, lines[-1])) is not None:
        raise refused
    return code


def kill_matching(connection: Node, name: str, pattern: str, signal: str = "INT") -> None:
    """pkill -SIGNAL -f pattern inside the container (best effort: a stopped container is no error)."""
    connection.run(_exec_argv(name, ["pkill", f"-{signal}", "-f", pattern], None, None))


def exec_line(name: str, argv: Sequence[str], *, user: str | None = None,
              environment: Mapping[str, str] | None = None) -> Shell:
    """`docker exec [-u USER] [-e K=V] name argv...` as a Shell command, to compose with others."""
    return quoted(_exec_argv(name, argv, user, environment))


def quoted(argv: Sequence[str]) -> Shell:
    """argv as one Shell command line."""
    return Shell(" ".join(["{}"] * len(argv)), *argv)
