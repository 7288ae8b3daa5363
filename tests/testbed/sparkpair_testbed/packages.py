"""Debian packages the testbed needs on the operator machine, installed when missing.

Installation is quiet and non-interactive.  Services that packages would
start on the host (the host's own sshd, a host dockerd that would create
docker0 in 172.17.0.0/16) are held back with a temporary policy-rc.d.
"""
from __future__ import annotations

import os
from pathlib import Path

from .hostexec import run
from .layout import HOST_PACKAGES

POLICY_RC_D = Path("/usr/sbin/policy-rc.d")


def missing_packages(names=HOST_PACKAGES) -> list:
    """The packages among NAMES that are not installed."""
    proc = run(["dpkg-query", "-W", "-f=${Package} ${db:Status-Status}\n", *names], check=False)
    installed = {line.split()[0] for line in proc.stdout.splitlines()
                 if line.endswith(" installed")}
    return [name for name in names if name not in installed]


def install(names) -> None:
    """apt-get install NAMES quietly, without starting their services on the host."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive", NEEDRESTART_MODE="l")
    made_policy = not POLICY_RC_D.exists()
    if made_policy:
        POLICY_RC_D.write_text("#!/bin/sh\n# scripts/testbed: no service starts during install\nexit 101\n")
        POLICY_RC_D.chmod(0o755)
    try:
        run(["apt-get", "-qq", "update"], env=env)
        run(["apt-get", "-qq", "-y", "--no-install-recommends", "-o", "Dpkg::Use-Pty=0",
             "install", *names], env=env)
    finally:
        if made_policy:
            POLICY_RC_D.unlink(missing_ok=True)


def ensure_packages() -> list:
    """Install whatever is missing; returns what was installed."""
    missing = missing_packages()
    if missing:
        install(missing)
    return missing
