"""Root through sparkpair's root helper alone, on the simulated pair: with the sudoers entry docs/checklist.md#sudo
gives (`nvidia ALL=(root) NOPASSWD: /usr/local/sbin/sparkpair-root`) in place of the testbed's NOPASSWD: ALL,
doctor's reach.sudo is OK and setup-network plans, applies (its watchdog armed and confirmed) and restores; a node
with full sudo and no helper still works, through the same helper text, and is warned."""

from __future__ import annotations

import base64
import json

from conftest import has_netplan
from sparkpair_testbed.access import SUDO_RULE
from sparkpair_testbed.layout import SUDOERS_FILE

from sparkpair import paths
from sparkpair.transport import root

NODES = ("spark-a", "spark-b")
NARROW = root.sudoers_line("nvidia") + "\n"


def sudoers(bed, node: str, rule: str) -> None:
    """The node's sudoers file for nvidia holds rule (checked by visudo before it is put in place)."""
    staged = f"{SUDOERS_FILE}.new"  # sudo skips names with a dot
    encoded = base64.b64encode(rule.encode()).decode()
    bed.exec(node, f"printf %s {encoded} | base64 -d > {staged} && chmod 0440 {staged} && visudo -cqf {staged} && "
                   f"mv {staged} {SUDOERS_FILE}")


def reach_sudo(sparkpair) -> list[dict]:
    run = sparkpair("doctor", "--json", "--only", "reach.sudo")
    assert run.code in (0, 1), run.text
    return [f for f in json.loads(run.out)["findings"] if f["check"] == "reach.sudo"]


def test_setup_network_runs_through_the_root_helper_alone(pristine, sparkpair) -> None:
    try:
        for node in NODES:
            sudoers(pristine, node, NARROW)
            assert pristine.exec(node, "sudo -n true", user="nvidia", check=False).returncode != 0  # not everything
        rows = reach_sudo(sparkpair)
        assert [(row["node"], row["status"]) for row in rows] == [("spark-a", "OK"), ("spark-b", "OK")], rows
        assert all("root helper" in row["detail"] and "NOPASSWD: ALL" not in row["detail"] for row in rows)
        dry = sparkpair("setup-network", "--dry-run")
        assert dry.code == 0 and "+        - 198.19.1.11/24" in dry.out, dry.text
        applied = sparkpair("setup-network", "--yes")
        assert applied.code == 0 and "link verified" in applied.out, applied.text
        assert pristine.exec("spark-a", f"stat -c '%a %U' {paths.NETPLAN_PATH}").stdout.split() == ["600", "root"]
        log = pristine.exec("spark-b", f"tail -n 2 {paths.WATCHDOG_LOG}").stdout
        assert "confirmed: the network sparkpair applied" in log, log
        restored = sparkpair("setup-network", "--restore")
        assert restored.code == 0, restored.text
        assert not any(has_netplan(pristine, node) for node in NODES)
    finally:
        for node in NODES:
            sudoers(pristine, node, SUDO_RULE)


def test_full_sudo_without_the_helper_still_works_and_is_warned(pristine, sparkpair) -> None:
    """The helper hidden on both nodes (an empty /usr/local/sbin of their own): the same helper text goes through
    `sudo -n sh -c`, and reach.sudo WARNs with the narrow entry."""
    try:
        for node in NODES:
            pristine.exec(node, "mount -t tmpfs -o mode=755 tmpfs /usr/local/sbin")
        rows = reach_sudo(sparkpair)
        assert [(row["node"], row["status"]) for row in rows] == [("spark-a", "WARN"), ("spark-b", "WARN")], rows
        assert all(NARROW.strip() in row["fix"] and "NOPASSWD:ALL" not in row["fix"] for row in rows)
        applied = sparkpair("setup-network", "--yes")
        assert applied.code == 0 and "link verified" in applied.out, applied.text
        assert sparkpair("setup-network", "--restore").code == 0
        assert not any(has_netplan(pristine, node) for node in NODES)
    finally:
        for node in NODES:
            pristine.exec(node, "umount /usr/local/sbin", check=False)
