"""The files private to each node, prepared under the state dir before the node starts.

The holder (holder.py) mounts them inside the node's mount namespace:
    etc-upper/      overlay upper of /etc: hosts, hostname, dgx-release, environment, resolv.conf
    root-home/      /root: root's own home, as a fresh machine has it (/etc/skel's files, .ssh); none of
                    this machine's /root (its toolchains: GBs that every search of a node would read)
    etc-netplan/    /etc/netplan with the management config (50-cloud-init.yaml)
    etc-ssh/        /etc/ssh with the node's own host keys and sshd_config
    root-ssh/       /root/.ssh (empty)
    home/           /home/nvidia (skeleton, ~/.ssh/authorized_keys, HF cache)
    usr-local-bin/  /usr/local/bin with the stand-ins (nvidia-smi, ibdev2netdev, ...)
    tmp/            /tmp
    gpu0.json       copied into the node's /run: the GPU "device"
    disk.json       copied into the node's /run: the Spark NVMe the df stand-in shows (gb10.py)
    meminfo         bind-mounted over the node's /proc/meminfo: a GB10's unified memory (gb10.py)
    pressure-memory bind-mounted over the node's /proc/pressure/memory (where the host has PSI): no pressure
"""
from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
from pathlib import Path

from . import gb10
from .hostexec import node_sh, run
from .layout import (
    ENVIRONMENT,
    MGMT_GATEWAY,
    MGMT_IFACE,
    MGMT_PREFIX,
    NODES,
    RUNTIME_DIR,
    STANDINS_DIR,
    USER,
    Node,
    dgx_release,
)

# Like Ubuntu's systemd-resolved stub, but nothing answers there: names resolve from
# /etc/hosts only, and no DNS query ever leaves the node for the host's resolver.
RESOLV_CONF = "# simulated DGX Spark: no DNS (see docs/testbed.md)\nnameserver 127.0.0.53\noptions edns0 trust-ad\n"
HOST_KEY_TYPES = (("rsa", ["-b", "3072"]), ("ecdsa", ["-b", "256"]), ("ed25519", []))

SSHD_CONFIG = """\
# sshd of a simulated DGX Spark (scripts/testbed): key authentication only.
Port 22
ListenAddress 0.0.0.0
ListenAddress ::
HostKey /etc/ssh/ssh_host_rsa_key
HostKey /etc/ssh/ssh_host_ecdsa_key
HostKey /etc/ssh/ssh_host_ed25519_key
PidFile /run/sshd.pid
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM yes
X11Forwarding no
PrintMotd no
AcceptEnv LANG LC_*
Subsystem sftp /usr/lib/openssh/sftp-server
"""


def netplan_yaml(node: Node) -> str:
    """The management network as a real install describes it (must pass `netplan generate`)."""
    return (
        "# Management port, as written by the installer (cloud-init).\n"
        "network:\n"
        "  version: 2\n"
        "  ethernets:\n"
        f"    {MGMT_IFACE}:\n"
        "      dhcp4: false\n"
        "      addresses:\n"
        f"        - {node.mgmt_ip}/{MGMT_PREFIX}\n"
        "      routes:\n"
        "        - to: default\n"
        f"          via: {MGMT_GATEWAY}\n"
    )


def hosts_file(node: Node) -> str:
    """/etc/hosts of NODE: itself on 127.0.1.1, both nodes by management address."""
    lines = ["127.0.0.1\tlocalhost", f"127.0.1.1\t{node.name}"]
    lines += [f"{other.mgmt_ip}\t{other.name}" for other in NODES]
    lines += ["", "::1\tlocalhost ip6-localhost ip6-loopback", "ff02::1\tip6-allnodes",
              "ff02::2\tip6-allrouters"]
    return "\n".join(lines) + "\n"


def serial_number(node: Node) -> str:
    """The node's 13-digit serial number (DGX_SERIAL_NUMBER), stable per node name."""
    return str(int(hashlib.sha256(f"dgx-{node.name}".encode()).hexdigest()[:14], 16))[:13]


def gpu_facts(node: Node) -> dict:
    """Stable identity of the node's GB10, as nvidia-smi reports it."""
    digest = hashlib.sha256(f"gb10-{node.name}".encode()).hexdigest()
    uuid = f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
    return {"name": "NVIDIA GB10", "uuid": uuid, "index": 0, "pci_bus_id": "0000000F:01:00.0",
            "serial": str(int(digest[:10], 16))[:13], "node": node.name}


def write(path: Path, text: str, mode: int = 0o644) -> None:
    """Create PATH (parents made) with TEXT and MODE, unless it exists: a second `up` keeps
    whatever the node changed since (sparkpair's edits are the node's own state)."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def prepare_etc(node: Node) -> None:
    """The node's /etc differences: hosts, hostname, dgx-release, environment, netplan."""
    upper = node.dir / "etc-upper"
    write(upper / "hosts", hosts_file(node))
    write(upper / "hostname", f"{node.name}\n")
    release = dgx_release(serial_number(node))  # the testbed's file: brought up to date on every up
    if not (upper / "dgx-release").exists() or (upper / "dgx-release").read_text() != release:
        upper.mkdir(parents=True, exist_ok=True)
        (upper / "dgx-release").write_text(release)
    write(upper / "environment", ENVIRONMENT)
    write(upper / "resolv.conf", RESOLV_CONF)
    for mount_point in ("netplan", "ssh"):
        (upper / mount_point).mkdir(exist_ok=True)
    netplan = node.dir / "etc-netplan"
    netplan.mkdir(mode=0o755, exist_ok=True)
    write(netplan / "50-cloud-init.yaml", netplan_yaml(node), 0o600)


def prepare_ssh(node: Node) -> None:
    """The node's /etc/ssh: the host's client config, its own host keys, a key-only sshd_config."""
    etc_ssh = node.dir / "etc-ssh"
    etc_ssh.mkdir(mode=0o755, exist_ok=True)
    for name in ("ssh_config", "moduli"):
        if Path("/etc/ssh", name).exists():
            shutil.copy2(Path("/etc/ssh", name), etc_ssh / name)
    for name in ("ssh_config.d", "sshd_config.d"):
        (etc_ssh / name).mkdir(exist_ok=True)
    write(etc_ssh / "sshd_config", SSHD_CONFIG)
    for key_type, extra in HOST_KEY_TYPES:
        key = etc_ssh / f"ssh_host_{key_type}_key"
        if not key.exists():
            run(["ssh-keygen", "-q", "-t", key_type, *extra, "-N", "", "-C", f"root@{node.name}",
                 "-f", str(key)])


def prepare_home(node: Node, operator_pub: str) -> None:
    """The nvidia user's own home: skeleton, authorized operator key, empty HF cache.

    Made once; later runs only make sure the operator key is still authorized."""
    home = node.dir / "home"
    authorized = home / ".ssh" / "authorized_keys"
    if home.exists():
        if operator_pub.strip() not in authorized.read_text():
            with authorized.open("a") as keys:
                keys.write(operator_pub.strip() + "\n")
        return
    staging = node.dir / "home.new"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree("/etc/skel", staging, symlinks=True)
    (staging / ".ssh").mkdir(mode=0o700)
    (staging / ".ssh" / "authorized_keys").write_text(operator_pub.strip() + "\n")
    (staging / ".ssh" / "authorized_keys").chmod(0o600)
    (staging / ".cache" / "huggingface" / "hub").mkdir(parents=True)
    account = pwd.getpwnam(USER)
    for path in [staging, *staging.rglob("*")]:
        os.lchown(path, account.pw_uid, account.pw_gid)
    staging.rename(home)


def install_standins(node: Node) -> None:
    """Copy the stand-ins into the node's /usr/local/bin, and the runc wrapper into the node's
    runtime dir (refreshed on every up). Copies, because the repository may live where the node
    cannot see it (the node's /tmp is private)."""
    for source_dir, target in ((STANDINS_DIR, node.dir / "usr-local-bin"), (RUNTIME_DIR, node.runtime_dir)):
        target.mkdir(mode=0o755, exist_ok=True)
        for source in sorted(source_dir.iterdir()):
            if source.is_file() and not source.name.startswith((".", "_")) and source.suffix != ".md":
                shutil.copy2(source, target / source.name)
                (target / source.name).chmod(0o755)


def prepare_root_home(home: Path) -> None:
    """Root's home as a fresh install leaves it: mode 700, /etc/skel's dotfiles, an empty .ssh (mode 700)."""
    home.chmod(0o700)
    (home / ".ssh").chmod(0o700)
    skel = Path("/etc/skel")
    for name in (".bashrc", ".profile"):
        if (skel / name).is_file() and not (home / name).exists():
            shutil.copyfile(skel / name, home / name)


def prepare(node: Node, operator_pub: str) -> None:
    """Make every private file of NODE (idempotent: host keys are generated only once)."""
    node.dir.mkdir(parents=True, exist_ok=True)
    prepare_etc(node)
    prepare_ssh(node)
    prepare_home(node, operator_pub)
    install_standins(node)
    for name in ("root-home/.ssh", "root-ssh", "tmp", "docker"):
        (node.dir / name).mkdir(parents=True, exist_ok=True)
    prepare_root_home(node.dir / "root-home")
    (node.dir / "root-ssh").chmod(0o700)
    (node.dir / "tmp").chmod(0o1777)
    write(node.dir / "gpu0.json", json.dumps(gpu_facts(node), indent=2) + "\n")
    write(node.dir / "disk.json", gb10.disk_state())
    write(node.dir / "meminfo", gb10.MEMINFO)  # kept while a memory-low fault holds it (heal restores)
    write(node.dir / "pressure-memory", gb10.PRESSURE)  # likewise for memory-exhausted


def mount_node_facts(node: Node) -> None:
    """In the running NODE: its /proc/meminfo shows NODE_DIR/meminfo and its /proc/pressure/memory
    NODE_DIR/pressure-memory (bind mounts, so a fault that rewrites a file in place shows at once; the
    pressure only where the host's kernel has PSI), and its /run holds disk.json. Idempotent: `up` runs
    it for nodes started before and after."""
    node_sh(node, f"""set -e
findmnt -n /proc/meminfo >/dev/null || mount --bind {node.dir / 'meminfo'} /proc/meminfo
if [ -e /proc/pressure/memory ] && ! findmnt -n /proc/pressure/memory >/dev/null; then
    mount --bind {node.dir / 'pressure-memory'} /proc/pressure/memory
fi
[ -e {gb10.DISK_STATE} ] || install -m 644 {node.dir / 'disk.json'} {gb10.DISK_STATE}
""")


def host_public_keys(node: Node) -> list:
    """The node's host public keys, as 'TYPE BASE64' strings."""
    keys = []
    for key_type, _ in HOST_KEY_TYPES:
        fields = (node.dir / "etc-ssh" / f"ssh_host_{key_type}_key.pub").read_text().split()
        keys.append(f"{fields[0]} {fields[1]}")
    return keys
