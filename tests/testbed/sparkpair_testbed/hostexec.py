"""Running commands: on the operator machine (root namespaces) and inside a node.

A node is entered through its holder process (pid 1 of the node's pid
namespace), with `nsenter -t PID -n -m -u -p`: the command then sees the
node's interfaces, mounts, hostname and processes, exactly like a shell on
the node would.
"""
from __future__ import annotations

import subprocess
from pathlib import Path
from shlex import quote

from .layout import NODE_PATH, USER, USER_HOME, Node


class CommandError(RuntimeError):
    """A command the testbed needed failed; the message says which and why."""


def run(cmd, check=True, input=None, timeout=None, env=None) -> subprocess.CompletedProcess:
    """Run CMD (a list) and capture text output; raise CommandError when CHECK and it fails."""
    try:
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True,
                              timeout=timeout, env=env)
    except FileNotFoundError as exc:
        raise CommandError(f"{cmd[0]}: not found") from exc
    except subprocess.TimeoutExpired as exc:
        raise CommandError(f"{' '.join(map(str, cmd))}: timed out after {timeout}s") from exc
    if check and proc.returncode != 0:
        detail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-3:]
        raise CommandError(f"{' '.join(map(str, cmd))}: exit {proc.returncode}: {' | '.join(detail)}")
    return proc


def succeeds(cmd, timeout=None) -> bool:
    """True when CMD exits 0 (output discarded)."""
    try:
        return run(cmd, check=False, timeout=timeout).returncode == 0
    except CommandError:
        return False


def holder_pid_file(node: Node) -> Path:
    """Where the pid of the node's holder process (in the root pid namespace) is kept."""
    return node.dir / "holder.pid"


def holder_pid(node: Node) -> int | None:
    """Pid of the node's live holder process, or None when the node is not running."""
    try:
        pid = int(holder_pid_file(node).read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if b"holder.py" in cmdline else None


def node_prefix(node: Node, user: str | None = None, env: dict | None = None) -> list:
    """Command prefix that runs what follows inside NODE, as root or USER, in the user's home."""
    pid = holder_pid(node)
    if pid is None:
        raise CommandError(f"{node.name} is not running (scripts/testbed up)")
    home = str(USER_HOME) if user == USER else "/root"
    name = user or "root"
    base_env = {"PATH": NODE_PATH, "HOME": home, "USER": name, "LOGNAME": name,
                "SHELL": "/bin/bash", "LANG": "C.UTF-8"}
    base_env.update(env or {})
    prefix = ["nsenter", "-t", str(pid), "-n", "-m", "-u", "-p", "--", "env", "-i"]
    prefix += [f"{key}={value}" for key, value in base_env.items()]
    if user and user != "root":
        prefix += ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--"]
    return prefix + ["sh", "-c", 'cd "$HOME" 2>/dev/null || cd /; exec "$@"', "sh"]


def node_run(node: Node, cmd, user=None, check=True, input=None, timeout=None) -> subprocess.CompletedProcess:
    """Run CMD (a list) inside NODE and capture its output."""
    return run(node_prefix(node, user) + list(cmd), check=check, input=input, timeout=timeout)


def node_sh(node: Node, script: str, user=None, check=True, timeout=None) -> subprocess.CompletedProcess:
    """Run a shell SCRIPT inside NODE."""
    return node_run(node, ["sh", "-c", script], user=user, check=check, timeout=timeout)


def node_spawn(node: Node, script: str, log: Path) -> None:
    """Start a long-lived shell SCRIPT inside NODE in the background, output appended to LOG.

    The script is detached with setsid and reparented to the node's pid 1 (the
    holder reaps it), so nothing of it stays behind in the root namespaces.
    """
    detached = f"setsid sh -c {quote(script)} </dev/null >>{quote(str(log))} 2>&1 &"
    run(node_prefix(node) + ["sh", "-c", detached])
