"""Starting and stopping a node's holder: the pid 1 that owns its namespaces (holder.py)."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from .hostexec import CommandError, holder_pid, holder_pid_file, run
from .layout import PACKAGE_DIR, Node


def child_pid(parent: int) -> int | None:
    """The first child of PARENT (unshare --fork's child is the node's pid 1)."""
    try:
        children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def start_holder(node: Node) -> int:
    """Start NODE's holder in its network namespace and wait until its mounts are made."""
    ready = node.dir / "holder.ready"
    ready.unlink(missing_ok=True)
    log = open(node.dir / "holder.log", "ab")
    cmd = ["nsenter", f"--net=/var/run/netns/{node.netns}", "unshare", "--mount", "--uts",
           "--pid", "--fork", "--mount-proc", "--propagation", "private",
           "/usr/bin/python3", str(PACKAGE_DIR / "holder.py"), node.name, str(node.dir)]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            start_new_session=True, cwd="/")
    log.close()
    deadline = time.monotonic() + 20
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = (node.dir / "holder.log").read_text().strip().splitlines()[-3:]
            raise CommandError(f"{node.name}: node did not start: {' | '.join(tail)}")
        time.sleep(0.05)
    pid = child_pid(proc.pid)
    if pid is None:
        raise CommandError(f"{node.name}: cannot find the holder process")
    holder_pid_file(node).write_text(f"{pid}\n")
    return pid


def stop_holder(node: Node, timeout: float = 15) -> None:
    """Kill NODE's pid 1: the kernel kills every process of the node with it."""
    pid = holder_pid(node)
    if pid is not None:
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while Path(f"/proc/{pid}").exists():
            if time.monotonic() > deadline:
                raise CommandError(f"{node.name}: holder {pid} did not exit")
            time.sleep(0.05)
    holder_pid_file(node).unlink(missing_ok=True)


def kill_netns_stragglers(netns: str) -> list:
    """SIGKILL whatever still runs in network namespace NETNS; returns their pids."""
    pids = [int(p) for p in run(["ip", "netns", "pids", netns], check=False).stdout.split()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids
