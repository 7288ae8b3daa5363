"""Node faults: a busy port, stopped daemons, a missing peer key, a missing GPU, another kernel string.

Each fault is a real change inside the node (a process, a stopped daemon, a
file gone); apply(node, options) returns what heal(node, data, others) needs.
"""
from __future__ import annotations

import json
import os
import shutil

from .daemons import listening, start_dockerd, start_sshd, stop_dockerd, stop_sshd, wait_for
from .hostexec import CommandError, node_run, node_sh, node_spawn
from .layout import FAULT_STASH, GPU_STATE, PACKAGE_DIR, SERVING_PORT, Node, peer_of


def port_busy_apply(node: Node, options) -> dict:
    """A stray listener on the serving port (or --port N) inside the node."""
    port = int(options.get("port") or SERVING_PORT)
    if listening(node, port):
        raise CommandError(f"port {port} on {node.name} is already in use")
    pidfile = f"/run/sparkpair-testbed/port-busy-{port}.pid"
    program = node.dir / "busy_port.py"  # a copy: the repository may be invisible in the node (private /tmp)
    shutil.copy2(PACKAGE_DIR / "busy_port.py", program)
    script = f"exec /usr/bin/python3 {program} {port} {pidfile}"
    node_spawn(node, script, node.dir / "port-busy.log")
    wait_for(lambda: listening(node, port), f"the stray listener on {node.name}:{port}", 10)
    return {"port": port, "pidfile": pidfile}


def port_busy_heal(node: Node, data, others) -> None:
    """Stop the stray listener and wait until the port is free."""
    node_sh(node, f'kill "$(cat {data["pidfile"]})" 2>/dev/null; rm -f {data["pidfile"]}',
            check=False)
    wait_for(lambda: not listening(node, data["port"]), f"port {data['port']} to be free", 10)


def sshd_down_apply(node: Node, options) -> dict:
    """Stop the node's sshd: new SSH connections are refused."""
    stop_sshd(node)
    return {}


def sshd_down_heal(node: Node, data, others) -> None:
    """Start sshd again."""
    start_sshd(node)


def docker_down_apply(node: Node, options) -> dict:
    """Stop the node's Docker engine (its containers stop with it)."""
    stop_dockerd(node)
    return {}


def docker_down_heal(node: Node, data, others) -> None:
    """Start the Docker engine again."""
    start_dockerd(node)


def public_key_blobs(node: Node) -> set:
    """Base64 blobs of every public key in NODE's ~/.ssh and /root/.ssh."""
    blobs = set()
    for directory in (node.dir / "home" / ".ssh", node.dir / "root-ssh"):
        for pub in directory.glob("*.pub"):
            fields = pub.read_text().split()
            if len(fields) >= 2:
                blobs.add(fields[1])
    return blobs


def peer_key_apply(node: Node, options) -> dict:
    """Remove the peer's public keys from the node's ~/.ssh/authorized_keys (copy kept)."""
    authorized = node.dir / "home" / ".ssh" / "authorized_keys"
    blobs = public_key_blobs(peer_of(node))
    lines = authorized.read_text().splitlines(keepends=True) if authorized.exists() else []
    kept = [line for line in lines if not any(blob in line for blob in blobs)]
    if len(kept) == len(lines):
        raise CommandError(f"{node.name}'s authorized_keys holds no key of {peer_of(node).name} "
                           "(exchange the node keys first)")
    FAULT_STASH.mkdir(parents=True, exist_ok=True)
    backup = FAULT_STASH / f"authorized_keys.{node.name}"
    shutil.copy2(authorized, backup)
    stat = authorized.stat()
    authorized.write_text("".join(kept))
    return {"backup": str(backup), "uid": stat.st_uid, "gid": stat.st_gid, "mode": stat.st_mode & 0o777}


def peer_key_heal(node: Node, data, others) -> None:
    """Restore authorized_keys exactly as it was."""
    authorized = node.dir / "home" / ".ssh" / "authorized_keys"
    shutil.copyfile(data["backup"], authorized)
    os.chown(authorized, data["uid"], data["gid"])
    authorized.chmod(data["mode"])


def gpu_missing_apply(node: Node, options) -> dict:
    """The GPU disappears: nvidia-smi finds no device, --gpus containers fail to start."""
    facts = node_run(node, ["cat", GPU_STATE]).stdout
    node_run(node, ["rm", "-f", GPU_STATE])
    return {"facts": json.loads(facts)}


def gpu_missing_heal(node: Node, data, others) -> None:
    """Put the GPU device file back."""
    FAULT_STASH.mkdir(parents=True, exist_ok=True)
    staged = FAULT_STASH / f"gpu0.{node.name}.json"
    staged.write_text(json.dumps(data["facts"], indent=2) + "\n")
    node_run(node, ["install", "-m", "644", str(staged), GPU_STATE])
    staged.unlink()


DRIFTED_KERNEL = "6.11.0-1099-nvidia-drifted"  # what `uname -r` prints on a node under the kernel-string fault
UNAME_STANDIN = f"""#!/bin/sh
# kernel-string fault (sparkpair_testbed/faults_node.py): the node reports another kernel; heal removes this file.
case "$*" in -r) echo {DRIFTED_KERNEL}; exit 0;; esac
exec /bin/uname "$@"
"""


def kernel_string_apply(node: Node, options) -> dict:
    """`uname -r` on the node prints DRIFTED_KERNEL: a uname stand-in first on PATH (/usr/local/bin), as after
    a kernel update on one node only. Everything else uname prints is the real one's."""
    path = node.dir / "usr-local-bin" / "uname"
    if path.exists():
        raise CommandError(f"{node.name} already has a uname stand-in at {path}")
    path.write_text(UNAME_STANDIN)
    path.chmod(0o755)
    return {"path": str(path)}


def kernel_string_heal(node: Node, data, others) -> None:
    """Remove the uname stand-in: the node reports its real kernel again."""
    if os.path.exists(data["path"]):
        os.unlink(data["path"])
