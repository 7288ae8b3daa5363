"""The floor every speed figure of scripts/bench is a ratio to: `ssh NODE true` to both nodes at once,
with the inventory's key and known_hosts, the least any tool that logs in to both nodes can take.

Imported by the bench scripts beside it (Python puts a script's own directory first on sys.path).
Importing it also byte-compiles sparkpair, as pip does when it installs a package: with
PYTHONDONTWRITEBYTECODE set (this machine's sessions set it), a module changed since its last .pyc
would otherwise be compiled again on every run of the command being measured.
"""

from __future__ import annotations

import compileall
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import sparkpair
from sparkpair.inventory import Inventory, Node

compileall.compile_dir(Path(sparkpair.__file__).parent, quiet=1)


def ssh_argv(inventory: Inventory, node: Node) -> list[str]:
    """ssh to the node as the inventory says: its key, its known_hosts, strict host keys, no prompts."""
    cluster = inventory.cluster
    return ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "IdentitiesOnly=yes",
            "-o", f"UserKnownHostsFile={cluster.known_hosts}", "-i", str(cluster.ssh_key), "-p", str(node.port),
            f"{cluster.user}@{node.host}"]


def timed(action: Callable[[], object]) -> float:
    """Seconds action took."""
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def floor(inventory: Inventory) -> None:
    """One `ssh NODE true` to every node, all at once."""
    def login(node: Node) -> None:
        subprocess.run(ssh_argv(inventory, node) + ["true"], check=True, capture_output=True)
    with ThreadPoolExecutor(len(inventory.nodes)) as pool:
        list(pool.map(login, inventory.nodes))
