"""The node's daemons: sshd on port 22, a Docker engine on /run/docker.sock, and the simulated RDMA
driver that keeps /sys/class/infiniband (rdmad.py).

Both run inside the node's namespaces and are children of the node's pid 1,
so killing the holder takes them down with it.  Start and stop wait until the
daemon really serves (or really stopped), with a deadline.
"""
from __future__ import annotations

import shutil
import time

from . import rdmad
from .hostexec import CommandError, node_run, node_sh, node_spawn
from .layout import PACKAGE_DIR, Node

DOCKERD_FLAGS = (
    "--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-forward=false",
    "--ip-masq=false", "--userland-proxy=false", "--storage-driver=overlay2",
    # Networks a user might create, and their DNS, stay inside the benchmarking range too
    # (docker would otherwise fall back to public resolvers).
    "--default-address-pool=base=198.19.128.0/17,size=24", "--dns=198.18.0.1",
    "--add-runtime=nvidia=runc", "--exec-root=/run/docker-exec", "--pidfile=/run/docker.pid",
    "--host=unix:///run/docker.sock", "--group=docker",
)


def wait_for(check, what: str, timeout: float) -> None:
    """Poll CHECK until it returns True; raise CommandError naming WHAT after TIMEOUT seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise CommandError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)


def pidfile_alive(node: Node, pidfile: str) -> bool:
    """True when PIDFILE in the node names a live process."""
    script = f'test -s {pidfile} && kill -0 "$(cat {pidfile})" 2>/dev/null'
    return node_sh(node, script, check=False).returncode == 0


def listening(node: Node, port: int) -> bool:
    """True when something in the node listens on TCP PORT."""
    out = node_run(node, ["ss", "-Hltn", "sport", "=", f":{port}"], check=False).stdout
    return bool(out.strip())


def stop_pidfile(node: Node, pidfile: str, what: str, timeout: float) -> None:
    """SIGTERM the process in PIDFILE inside the node and wait until it has exited."""
    if not pidfile_alive(node, pidfile):
        return
    node_sh(node, f'kill "$(cat {pidfile})"', check=False)
    wait_for(lambda: not pidfile_alive(node, pidfile), f"{what} to stop on {node.name}", timeout)
    node_sh(node, f"rm -f {pidfile}", check=False)


def sshd_running(node: Node) -> bool:
    """True when the node's sshd is alive and listens on port 22."""
    return pidfile_alive(node, "/run/sshd.pid") and listening(node, 22)


def start_sshd(node: Node) -> None:
    """Start the node's sshd (it daemonizes; its log goes to the node dir)."""
    if sshd_running(node):
        return
    node_run(node, ["/usr/sbin/sshd", "-E", str(node.dir / "sshd.log")])
    wait_for(lambda: sshd_running(node), f"sshd on {node.name}", 15)


def stop_sshd(node: Node) -> None:
    """Stop the node's sshd listener (open sessions survive, as with systemctl stop ssh)."""
    stop_pidfile(node, "/run/sshd.pid", "sshd", 15)


def docker_running(node: Node) -> bool:
    """True when the node's Docker engine answers on /run/docker.sock."""
    if not pidfile_alive(node, "/run/docker.pid"):
        return False
    probe = node_run(node, ["docker", "version", "--format", "{{.Server.Version}}"], check=False)
    return probe.returncode == 0


def start_dockerd(node: Node) -> None:
    """Start the node's Docker engine with its data root in the node dir."""
    if docker_running(node):
        return
    flags = " ".join(DOCKERD_FLAGS) + f" --data-root={node.dir / 'docker'}"
    # The runc wrapper (runtime/runc, copied into the node) comes first on the
    # engine's PATH only.
    node_spawn(node, f'PATH={node.runtime_dir}:$PATH exec dockerd {flags}', node.dir / "dockerd.log")
    wait_for(lambda: docker_running(node), f"dockerd on {node.name}", 60)


def stop_dockerd(node: Node) -> None:
    """Stop the node's Docker engine (it stops its containers first)."""
    stop_pidfile(node, "/run/docker.pid", "dockerd", 60)


def rdma_running(node: Node) -> bool:
    """True when the node's RDMA driver daemon is alive and /sys/class/infiniband shows its devices."""
    first = next(iter(rdmad.DEVICES.values()))[0]
    return pidfile_alive(node, str(rdmad.PIDFILE)) and \
        node_sh(node, f"test -e {rdmad.SYS_CLASS}/infiniband/{first}/ports/1/state", check=False).returncode == 0


def start_rdma(node: Node) -> None:
    """Start the node's simulated RDMA driver (a copy of rdmad.py in the node dir: the repository may not be
    visible from inside the node); it keeps /sys/class/infiniband from the kernel's netdevs."""
    if rdma_running(node):
        return
    shutil.copy2(PACKAGE_DIR / "rdmad.py", node.dir / "rdmad.py")
    node_spawn(node, f"exec /usr/bin/python3 {node.dir / 'rdmad.py'}", node.dir / "rdmad.log")
    wait_for(lambda: rdma_running(node), f"the RDMA driver on {node.name}", 15)


def rdma_settled(node: Node, predicate, what: str, timeout: float = 10.0) -> None:
    """Wait until predicate(tree text) holds for the node's /sys/class/infiniband (the driver catches up with a
    change within a moment, as a kernel's GID work queue does)."""
    def tree() -> str:
        script = f"cd {rdmad.SYS_CLASS}/infiniband && grep -s -H . */ports/*/gids/* */ports/*/gid_attrs/types/*"
        return node_sh(node, script, check=False).stdout

    wait_for(lambda: predicate(tree()), f"{what} on {node.name}", timeout)
