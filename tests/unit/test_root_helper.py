"""sparkpair's root helper (sparkpair/data/sparkpair-root): the one program sudo needs to grant.

Its arguments are checked by the helper itself: here only through its `check` verb, which runs the checks
and nothing else (these tests run as root in CI: no real verb is ever run here). The transport runs the
installed helper when it is this sparkpair's, else the same text through full sudo; doctor's reach.sudo
says which, and its fix grants the helper alone, never NOPASSWD: ALL.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkpair.checks import Status
from sparkpair.checks.node import root_access
from sparkpair.cli import cli
from sparkpair.probes import host
from sparkpair.transport import HELPER_PATH, Root, root

HELPER = root.helper_text()


def checked(*argv: str) -> subprocess.CompletedProcess[str]:
    """The helper's verdict on argv (its `check` verb: the checks of that verb, then `ok`; nothing is done)."""
    return subprocess.run(["sh", "-c", HELPER, "sparkpair-root", "check", *argv], capture_output=True, text=True,
                          timeout=10)


@pytest.mark.parametrize("argv", [
    ("install", "/etc/netplan/40-sparkpair-cx7.yaml", "600"), ("remove", "/etc/netplan/50-cloud-init.yaml"),
    ("backup", "20261128-050000", "/etc/netplan/01-x.yml", "first-touch"), ("netplan-read", "/etc/netplan/a.yaml"),
    ("differs", "20261128-050000", "/etc/netplan/a.yaml", "absent"), ("netplan-apply",), ("netplan-files",),
    ("twin", "enp1s0f1np1", "9000", "up", "198.19.1.11/24"), ("twin", "enP2p1s0f1np1", "1500", "down"),
    ("first-touch-put-back", "/etc/netplan/40-sparkpair-cx7.yaml"), ("confirm",), ("fire", "20261128-050000"),
    ("watchdog-arm", "20261128-050000", "60", "spark-a", "/etc/netplan/40-sparkpair-cx7.yaml", "--",
     "enp1s0f1np1,1500,down", "enP2p1s0f1np1,9000,up,198.19.2.11/24,198.19.3.1/24"),
])
def test_the_helper_takes_what_sparkpair_asks(argv: tuple[str, ...]) -> None:
    done = checked(*argv)
    assert (done.returncode, done.stdout, done.stderr) == (0, "ok\n", "")


@pytest.mark.parametrize("argv, named", [
    (("install", "/etc/netplan/../sudoers.d/nvidia", "600"), "not a file in /etc/netplan"),
    (("install", "/etc/netplan/../shadow.yaml", "600"), "not a file in /etc/netplan"),
    (("remove", "/etc/netplan/sub/x.yaml"), "not a file in /etc/netplan"),
    (("remove", "/etc/passwd"), "not a file in /etc/netplan"),
    (("remove", "/etc/netplan/.hidden.yaml"), "not a file in /etc/netplan"),
    (("remove", "/etc/netplan/x.conf"), "not a netplan file"),
    (("netplan-read", "/etc/netplan/a.yaml\n/etc/shadow"), "not a file in /etc/netplan"),
    (("netplan-read", "etc/netplan/a.yaml"), "not a file in /etc/netplan"),
    (("install", "/etc/netplan/a.yaml", "4755"), "not a mode"),
    (("backup", "../../etc", "/etc/netplan/a.yaml"), "not a run stamp"),
    (("backup", "..", "/etc/netplan/a.yaml"), "not a run stamp"),
    (("restore-backup", "a/b", "/etc/netplan/a.yaml"), "not a run stamp"),
    (("twin", "eth0;reboot", "9000", "up"), "not an interface name"),
    (("twin", "-fdev", "9000", "up"), "not an interface name"),
    (("twin", "enp1s0f1np1-far-too-long", "9000", "up"), "not an interface name"),
    (("twin", "enp1s0f1np1", "9000 mtu 68", "up"), "not an MTU"),
    (("twin", "enp1s0f1np1", "65536", "up"), "not an MTU"),
    (("twin", "enp1s0f1np1", "9000", "promisc"), "not up or down"),
    (("twin", "enp1s0f1np1", "9000", "up", "198.19.1.256/24"), "not an IPv4 address"),
    (("twin", "enp1s0f1np1", "9000", "up", "198.19.1.1/33"), "not an IPv4 prefix"),
    (("twin", "enp1s0f1np1", "9000", "up", "198.19.1.1"), "not an IPv4 address with its prefix"),
    (("watchdog-arm", "s", "60", "spark-a", "/etc/netplan/a.yaml", "--", "lo;id,1500,up"), "not an interface name"),
    (("watchdog-arm", "s", "60", "spark-a", "/tmp/x.yaml", "--"), "not a file in /etc/netplan"),
    (("watchdog-arm", "s", "0", "spark-a", "--"), "not a number of seconds"),
    (("watchdog-arm", "s", "60", "../a", "--"), "not a node name"),
    (("sh", "-c", "id"), "usage"), (("netplan-apply", "--debug"), "usage"), (("fire",), "usage"),
])
def test_the_helper_refuses_anything_else_before_it_acts(argv: tuple[str, ...], named: str) -> None:
    done = checked(*argv)
    assert done.returncode == 2 and done.stdout == "" and done.stderr.startswith("sparkpair-root: "), done
    assert named in done.stderr


@pytest.fixture
def sudo_here(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A `sudo` on PATH that writes down its arguments and runs the rest (as this user)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sudo").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$SUDO_ARGS"\nshift\nexec "$@"\n')
    (bin_dir / "sudo").chmod(0o755)
    return tmp_path, {"PATH": f"{bin_dir}:/usr/bin:/bin", "SUDO_ARGS": str(tmp_path / "args")}


@pytest.mark.parametrize("installed", ["ours", "another", "none"])
def test_the_transport_runs_the_installed_helper_only_when_it_is_this_sparkpairs(
        sudo_here: tuple[Path, dict[str, str]], installed: str) -> None:
    """`sudo -n HELPER VERB ARGS` when the file at the helper's path is the one shipped (what the narrow
    sudoers entry grants), else the same text through full sudo: both run the verb with its arguments intact."""
    tmp_path, env = sudo_here
    helper = tmp_path / "sparkpair-root"
    if installed != "none":
        helper.write_text(HELPER if installed == "ours" else HELPER.replace("sparkpair-root 1", "sparkpair-root 0"))
        helper.chmod(0o755)
    command = Root("check", "twin", "enp1s0f1np1", "9000", "up", "198.19.1.11/24")
    assert command.shown == "sparkpair-root check twin enp1s0f1np1 9000 up 198.19.1.11/24"
    done = subprocess.run(["sh", "-c", command.text.replace(HELPER_PATH, str(helper))], capture_output=True,
                          text=True, env=env, timeout=10)
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr
    argv = (tmp_path / "args").read_text().splitlines()
    verb = ["check", "twin", "enp1s0f1np1", "9000", "up", "198.19.1.11/24"]
    if installed == "ours":
        assert argv == ["-n", str(helper), *verb]
    else:
        assert argv[:3] == ["-n", "sh", "-c"] and argv[-7:] == ["sparkpair-root", *verb]


def test_the_digest_is_the_shipped_helpers() -> None:
    assert root.helper_digest() == hashlib.sha256(HELPER.encode()).hexdigest()
    assert CliRunner().invoke(cli, ["root-helper"]).output == HELPER


NARROW = "nvidia ALL=(root) NOPASSWD: /usr/local/sbin/sparkpair-root"


@pytest.mark.parametrize("access, status", [(host.RootAccess("absent", False), Status.FAIL),
                                            (host.RootAccess("other", False), Status.FAIL),
                                            (host.RootAccess("denied", False), Status.FAIL),
                                            (host.RootAccess("absent", True), Status.WARN)])
def test_the_reach_sudo_fix_grants_the_helper_alone_never_everything(access: host.RootAccess, status: Status) -> None:
    finding = root_access("spark-b", access, "nvidia")
    assert finding.status is status
    for step in (NARROW, "sparkpair root-helper > sparkpair-root",
                 f"sudo install -m 0755 -o root -g root sparkpair-root {HELPER_PATH}", "sudo chmod 0440 ",
                 "sudo visudo -cf /etc/sudoers.d/sparkpair.new", "docs/checklist.md#sudo"):
        assert step in finding.fix, step
    assert "NOPASSWD:ALL" not in finding.fix.replace(" ", "") and "(ALL)" not in finding.fix


def test_reach_sudo_is_ok_through_the_helper_and_says_when_full_sudo_stays() -> None:
    narrow = root_access("spark-a", host.RootAccess("ours", False), "nvidia")
    assert narrow.status is Status.OK and "root helper" in narrow.detail and "anything" not in narrow.detail
    both = root_access("spark-a", host.RootAccess("ours", True), "nvidia")
    assert both.status is Status.OK and "NOPASSWD: ALL" in both.detail


@pytest.mark.parametrize("text, access", [("helper ours\nfull no\n", host.RootAccess("ours", False)),
                                          ("helper absent\nfull yes\n", host.RootAccess("absent", True))])
def test_the_root_probe_says_which_way_root_goes(text: str, access: host.RootAccess) -> None:
    assert host.parse_sudo(text) == access
    with pytest.raises(ValueError):
        host.parse_sudo("ok\n")
