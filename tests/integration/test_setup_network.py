"""sparkpair setup-network on the simulated pair: real SSH, real netplan generate, real links."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from conftest import run_sparkpair, with_forged_host_key

NETPLAN = "/etc/netplan/40-sparkpair-cx7.yaml"


def test_dry_run_shows_the_diff_and_changes_nothing(pristine, sparkpair) -> None:
    run = sparkpair("setup-network", "--dry-run")
    assert run.code == 0, run.text
    assert "+        - 198.19.1.11/24" in run.out and "+        - 198.19.2.12/24" in run.out
    assert "make ~/.ssh/id_ed25519" in run.out
    for node in ("spark-a", "spark-b"):
        assert not pristine.has_netplan(node)
        assert pristine.exec(node, "test -e /home/nvidia/.ssh/id_ed25519", check=False).returncode != 0
        assert "inet " not in pristine.exec(node, "ip -4 addr show dev enp1s0f1np1").stdout


def test_apply_from_scratch_then_a_second_run_changes_nothing(pristine, sparkpair) -> None:
    first = sparkpair("setup-network", "--yes")
    assert first.code == 0, first.text
    assert "link verified" in first.out and "SSH trust verified" in first.out
    mode = pristine.exec("spark-a", f"stat -c '%a %U' {NETPLAN}").stdout.split()
    assert mode == ["600", "root"]
    for node, peer_address, peer in (("spark-a", "198.19.2.12", "spark-b"), ("spark-b", "198.19.1.11", "spark-a")):
        hop = pristine.exec(node, f"ssh -o BatchMode=yes {peer_address} hostname", user="nvidia")
        assert hop.stdout.strip() == peer
        addresses = pristine.exec(node, "ip -4 -o addr show dev enP2p1s0f1np1").stdout
        assert re.search(r"198\.19\.2\.1[12]/24", addresses)
    second = sparkpair("setup-network", "--yes")
    assert second.code == 0 and "nothing to change on either node" in second.out, second.text
    keys = pristine.exec("spark-b", "cat /home/nvidia/.ssh/authorized_keys").stdout
    assert keys.count("sparkpair@spark-a") == 1


def test_lockout_guard_refuses_the_management_interface(pristine, tmp_path: Path) -> None:
    data = yaml.safe_load(Path(pristine.inventory).read_text())
    for node in data["nodes"]:
        node["links"] = {"enP7s7": node["links"].pop("enP2p1s0f1np1"), **node["links"]}
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(data))
    run = run_sparkpair(inventory, "setup-network", "--yes")
    assert run.code == 1
    assert "spark-a: enP7s7 carries this SSH session (198.18.0.11)" in run.err
    assert "enP7s7 carries the default route" in run.err
    assert not pristine.has_netplan("spark-a") and not pristine.has_netplan("spark-b")


def test_conflicting_netplan_file_is_named_then_taken_over_with_replace(pristine, sparkpair) -> None:
    other = "network:\n  version: 2\n  ethernets:\n    enp1s0f1np1:\n      addresses: [198.19.9.2/24]\n"
    pristine.exec("spark-b", f"printf '%s' '{other}' > /etc/netplan/40-cx7.yaml && chmod 600 /etc/netplan/40-cx7.yaml")
    refused = sparkpair("setup-network", "--yes")
    assert refused.code == 1
    assert "spark-b: /etc/netplan/40-cx7.yaml already configures enp1s0f1np1" in refused.err
    assert not pristine.has_netplan("spark-a")
    taken = sparkpair("setup-network", "--yes", "--replace", "--skip-ssh")
    assert taken.code == 0, taken.text
    assert pristine.exec("spark-b", "test -e /etc/netplan/40-cx7.yaml", check=False).returncode != 0
    backups = pristine.exec("spark-b", "cat /var/backups/sparkpair/*/etc%netplan%40-cx7.yaml").stdout
    assert "198.19.9.2/24" in backups
    assert sparkpair("setup-network", "--restore").code == 0
    assert "198.19.9.2/24" in pristine.exec("spark-b", "cat /etc/netplan/40-cx7.yaml").stdout


def test_a_link_that_cannot_work_is_rolled_back_on_both_nodes(pristine, sparkpair) -> None:
    pristine.fault("crossed-cables")
    run = sparkpair("setup-network", "--yes", "--skip-ssh")
    assert run.code == 1
    assert "cables crossed" in run.err and "rolling back both nodes" in run.err
    for node in ("spark-a", "spark-b"):
        assert not pristine.has_netplan(node)
        link = pristine.exec(node, "ip -o link show dev enp1s0f1np1").stdout
        assert "mtu 1500" in link and "state DOWN" in link
        assert "inet " not in pristine.exec(node, "ip -4 addr show dev enp1s0f1np1").stdout
        assert f"{node}: now enp1s0f1np1 down mtu 1500 no address" in run.err


def test_unreachable_node_stops_everything_before_any_change(pristine, sparkpair) -> None:
    pristine.fault("sshd-down", node="spark-b")
    run = sparkpair("setup-network", "--yes")
    assert run.code == 1
    assert "spark-b: nvidia@198.18.0.12:22 refused the connection" in run.err and "nothing was changed" in run.err
    assert not pristine.has_netplan("spark-a")


def test_stale_peer_host_key_on_a_node_is_refused_with_both_fingerprints(pristine, sparkpair) -> None:
    bogus = pristine.exec("spark-a", "rm -f /tmp/bogus* && ssh-keygen -q -t rsa -N '' -f /tmp/bogus && cat /tmp/bogus.pub").stdout.split()
    pristine.exec("spark-a", f"install -d -o nvidia -m 700 /home/nvidia/.ssh && echo '198.19.1.12 {bogus[0]} "
                             f"{bogus[1]}' > /home/nvidia/.ssh/known_hosts && chown nvidia /home/nvidia/.ssh/known_hosts")
    run = sparkpair("setup-network", "--dry-run")
    assert run.code == 1
    assert "spark-a: ~/.ssh/known_hosts has another host key for 198.19.1.12" in run.err
    assert run.err.count("SHA256:") >= 2 and "ssh-keygen -R 198.19.1.12" in run.err


def test_changed_host_key_of_a_node_is_refused(pristine, tmp_path: Path) -> None:
    inventory = with_forged_host_key(pristine, tmp_path, "198.18.0.12")
    run = run_sparkpair(inventory, "setup-network", "--dry-run")
    assert run.code == 1
    assert "spark-b: host key of 198.18.0.12 CHANGED" in run.err and run.err.count("SHA256:") == 2


def test_unknown_host_needs_the_explicit_flag(pristine, tmp_path: Path) -> None:
    data = yaml.safe_load(Path(pristine.inventory).read_text())
    data["cluster"]["known_hosts"] = str(tmp_path / "known_hosts")
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(data))
    refused = run_sparkpair(inventory, "setup-network", "--dry-run")
    assert refused.code == 1 and "is not in" in refused.err and "--accept-new-host-keys" in refused.err
    accepted = run_sparkpair(inventory, "setup-network", "--dry-run", "--accept-new-host-keys")
    assert accepted.code == 0, accepted.text
    assert "198.18.0.11" in (tmp_path / "known_hosts").read_text()


def test_restore_returns_both_nodes_to_the_state_before(pristine, sparkpair) -> None:
    before = pristine.exec("spark-a", "cat /home/nvidia/.ssh/authorized_keys").stdout
    assert sparkpair("setup-network", "--yes").code == 0
    run = sparkpair("setup-network", "--restore")
    assert run.code == 0, run.text
    for node in ("spark-a", "spark-b"):
        assert not pristine.has_netplan(node)
        assert pristine.exec(node, "test -e /home/nvidia/.ssh/id_ed25519", check=False).returncode != 0
        assert "state DOWN" in pristine.exec(node, "ip -o link show dev enP2p1s0f1np1").stdout
    assert pristine.exec("spark-a", "cat /home/nvidia/.ssh/authorized_keys").stdout == before
    again = sparkpair("setup-network", "--restore")
    assert again.code == 0 and "nothing to restore" in again.out


def test_an_existing_private_key_without_its_pub_is_kept_through_apply_and_restore(pristine, sparkpair) -> None:
    private = "/home/nvidia/.ssh/id_ed25519"
    pristine.exec("spark-a", f"mkdir -p -m 700 /home/nvidia/.ssh && ssh-keygen -q -t ed25519 -N '' -C mine -f {private}"
                             f" && rm {private}.pub", user="nvidia")
    key = pristine.exec("spark-a", f"cat {private}").stdout
    run = sparkpair("setup-network", "--yes")
    assert run.code == 0 and "SSH trust verified" in run.out, run.text
    assert "derive ~/.ssh/id_ed25519.pub from the existing ~/.ssh/id_ed25519" in run.out
    derived = pristine.exec("spark-a", f"ssh-keygen -y -f {private} | cut -d' ' -f2").stdout
    assert pristine.exec("spark-a", f"cat {private}").stdout == key
    assert derived.strip() and derived.strip() in pristine.exec("spark-b", "cat /home/nvidia/.ssh/authorized_keys").stdout
    assert sparkpair("setup-network", "--restore").code == 0
    assert pristine.exec("spark-a", f"cat {private}").stdout == key
    assert pristine.exec("spark-a", f"test -e {private}.pub", check=False).returncode != 0
