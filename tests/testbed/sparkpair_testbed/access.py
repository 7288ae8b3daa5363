"""Who may log in where: the nvidia user, its sudo rule, the operator key, known_hosts.

The nvidia account lives in the host's /etc/passwd, which both nodes share,
so it has the same uid on both (as the playbooks require: same user name on
both Sparks).  Its home is per node (nodefs.py).
"""
from __future__ import annotations

import pwd

from .hostexec import run, succeeds
from .layout import KNOWN_HOSTS, NODES, OPERATOR_DIR, OPERATOR_KEY, SUDOERS_FILE, USER
from .nodefs import host_public_keys

SUDO_RULE = f"# scripts/testbed: the simulated Sparks' login user, as on a real Spark.\n{USER} ALL=(ALL:ALL) NOPASSWD: ALL\n"


def ensure_user() -> bool:
    """Create the nvidia user (member of docker) when missing; True when it was created."""
    created = False
    try:
        pwd.getpwnam(USER)
    except KeyError:
        # '*': no password at all (key login only), but not a locked account.
        run(["useradd", "--create-home", "--shell", "/bin/bash", "--password", "*", USER])
        created = True
    if not succeeds(["getent", "group", "docker"]):
        run(["groupadd", "--system", "docker"])
    groups = run(["id", "-nG", USER]).stdout.split()
    if "docker" not in groups:
        run(["usermod", "-aG", "docker", USER])
    return created


def ensure_sudoers() -> None:
    """Passwordless sudo for nvidia, in a file of its own that `down` removes."""
    if SUDOERS_FILE.exists() and SUDOERS_FILE.read_text() == SUDO_RULE:
        return
    staging = SUDOERS_FILE.with_name(f"{SUDOERS_FILE.name}.new")  # sudo skips names with a dot
    staging.write_text(SUDO_RULE)
    staging.chmod(0o440)
    run(["visudo", "-cqf", str(staging)])
    staging.rename(SUDOERS_FILE)


def ensure_operator_key() -> str:
    """The operator's ed25519 key pair (made once); returns the public key line."""
    OPERATOR_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not OPERATOR_KEY.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "operator@sparkpair-testbed",
             "-f", str(OPERATOR_KEY)])
    return OPERATOR_KEY.with_suffix(".pub").read_text().strip()


def write_known_hosts() -> None:
    """known_hosts with every host key of both nodes, for their management addresses."""
    lines = [f"{node.mgmt_ip} {key}" for node in NODES for key in host_public_keys(node)]
    KNOWN_HOSTS.write_text("\n".join(lines) + "\n")
    KNOWN_HOSTS.chmod(0o644)


def remove_sudoers() -> None:
    """Remove the sudo rule (the nvidia user itself stays, see docs/testbed.md)."""
    SUDOERS_FILE.unlink(missing_ok=True)
