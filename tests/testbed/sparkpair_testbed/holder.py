"""Pid 1 of a simulated Spark: makes the node's private mounts, then holds them.

Started by the testbed as
    nsenter --net=/var/run/netns/NODE unshare -m -u -p --fork --mount-proc \
        --propagation private /usr/bin/python3 holder.py NODE NODE_DIR
so it runs in the node's network namespace with fresh mount, UTS and pid
namespaces.  It mounts what must differ per node (see mount_plan), sets the
hostname, writes NODE_DIR/holder.ready and then reaps orphans forever.  When
it dies, the kernel kills every process of the node (sshd, dockerd, containers)
and its mount namespace disappears with them.

Only the standard library: it runs under the system /usr/bin/python3.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

# Major 231 is infiniband_verbs; with no RDMA driver loaded, opening these gives ENXIO.
INFINIBAND_DEVICES = (("rdma_cm", 231, 255), ("uverbs0", 231, 192), ("uverbs1", 231, 193),
                      ("uverbs2", 231, 194), ("uverbs3", 231, 195))


def mount(*args: str) -> None:
    """Run mount(8) with ARGS; raise with its message when it fails."""
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"mount {' '.join(args)}: {proc.stderr.strip()}")


def remount_sys(node_dir: Path) -> None:
    """Mount a sysfs of the node's network namespace, keeping the host's cgroup mounts under it."""
    parking = node_dir / "mnt" / "cgroup"
    parking.mkdir(parents=True, exist_ok=True)
    mount("--rbind", "/sys/fs/cgroup", str(parking))
    mount("-t", "sysfs", "sysfs", "/sys")
    mount("--move", str(parking), "/sys/fs/cgroup")


def overlay(target: str, node_dir: Path, name: str) -> None:
    """Give the node a private, writable view of TARGET (host content shows through)."""
    upper, work = node_dir / f"{name}-upper", node_dir / f"{name}-work"
    upper.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    mount("-t", "overlay", "overlay", "-o",
          f"lowerdir={target},upperdir={upper},workdir={work}", target)


def bind(source: Path, target: str) -> None:
    """Bind-mount the node's own SOURCE directory over TARGET."""
    mount("--bind", str(source), target)


def infiniband() -> None:
    """Give the node a /dev/infiniband like a Spark's (device nodes without a driver behind them)."""
    target = Path("/dev/infiniband")
    if not target.is_dir():
        return  # no mount point (the testbed makes one before starting nodes)
    if any(target.iterdir()):
        return  # a real RDMA stack on this machine: leave it alone
    mount("-t", "tmpfs", "-o", "mode=755,size=64k", "tmpfs", str(target))
    for name, major, minor in INFINIBAND_DEVICES:
        os.mknod(target / name, 0o20666, os.makedev(major, minor))
        os.chmod(target / name, 0o666)


def mount_plan(node_dir: Path) -> None:
    """Make every mount that is private to the node."""
    mount("--make-rprivate", "/")
    remount_sys(node_dir)
    mount("-t", "tmpfs", "-o", "mode=755", "tmpfs", "/run")
    overlay("/etc", node_dir, "etc")
    for shared in ("/var/backups", "/var/log"):  # a machine's own backups and logs (the rest of /var is the host's)
        if Path(shared).is_dir():
            overlay(shared, node_dir, shared.strip("/").replace("/", "-"))
    bind(node_dir / "root-home", "/root")  # a Spark's own root home, never this machine's toolchains
    bind(node_dir / "etc-netplan", "/etc/netplan")
    bind(node_dir / "etc-ssh", "/etc/ssh")
    bind(node_dir / "root-ssh", "/root/.ssh")
    bind(node_dir / "home", "/home/nvidia")
    bind(node_dir / "usr-local-bin", "/usr/local/bin")
    bind(node_dir / "tmp", "/tmp")
    infiniband()


def runtime_files(node_dir: Path) -> None:
    """Populate the node's fresh /run: sshd's privilege-separation dir, the GPU device file, the disk."""
    Path("/run/sshd").mkdir(mode=0o755)
    gpu = Path("/run/sparkpair-testbed")
    gpu.mkdir(mode=0o755)
    (gpu / "gpu0.json").write_bytes((node_dir / "gpu0.json").read_bytes())
    if (node_dir / "disk.json").exists():  # the Spark NVMe the df stand-in shows (gb10.py)
        (gpu / "disk.json").write_bytes((node_dir / "disk.json").read_bytes())


def reap_forever() -> None:
    """Reap orphaned children (we are pid 1 of the node) until killed."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        try:
            os.wait()
        except ChildProcessError:
            time.sleep(1)


def main(argv: list) -> int:
    """Set the node up as described in the module docstring."""
    name, node_dir = argv[1], Path(argv[2])
    try:
        mount_plan(node_dir)
        runtime_files(node_dir)
        subprocess.run(["hostname", name], check=True)
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        # As on a Spark running Docker (and so `docker run` does not warn about it).
        Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        print(f"holder {name}: {exc}", file=sys.stderr, flush=True)
        return 1
    (node_dir / "holder.ready").write_text(f"{name}\n")
    reap_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
