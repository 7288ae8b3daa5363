"""sparkpair setup-network on the simulated pair: real SSH, real netplan generate, real links."""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path

import yaml
from conftest import has_netplan, run_sparkpair, with_forged_host_key

from sparkpair import paths
from sparkpair.inventory import read_inventory
from sparkpair.network import watchdog
from sparkpair.transport import NodeConnection, Shell, SshTarget, tcp

NETPLAN = "/etc/netplan/40-sparkpair-cx7.yaml"
NODES = ("spark-a", "spark-b")
TWINS = ("enp1s0f1np1", "enP2p1s0f1np1")


def network_state(bed, node: str) -> dict:
    """A node's netplan files byte for byte (with mode and owner) and its QSFP twins: MTU, up, IPv4."""
    files = bed.exec(node, "for f in /etc/netplan/*; do printf '\\034%s %s\\n' \"$f\" \"$(stat -c '%a %U' \"$f\")\"; "
                           "cat \"$f\"; done").stdout
    twins = {}
    for twin in TWINS:
        item = json.loads(bed.exec(node, f"ip -j addr show dev {twin}").stdout)[0]
        twins[twin] = (item["mtu"], "UP" in item["flags"],
                       sorted(f"{a['local']}/{a['prefixlen']}" for a in item.get("addr_info", []) if a["family"] == "inet"))
    return {"netplan": files, "twins": twins}


def ssh_state(bed, node: str) -> str:
    """nvidia's SSH files on a node, byte for byte (ABSENT for a missing one)."""
    return bed.exec(node, "cd /home/nvidia/.ssh && for f in authorized_keys known_hosts id_ed25519 id_ed25519.pub; "
                          "do printf '\\034%s\\n' $f; cat $f 2>/dev/null || echo ABSENT; done").stdout


def nothing_left_running(bed) -> None:
    """No watchdog armed or running on either node, nor its copy for the next boot."""
    for node in NODES:
        assert bed.exec(node, f"test -e {paths.WATCHDOG_DIR}", check=False).returncode != 0, node
        assert bed.exec(node, f"test -e {watchdog.BOOT_DIR}", check=False).returncode != 0, node
        assert "watchdog" not in bed.exec(node, "ps -eo args").stdout, node


def inventory_with(bed, tmp_path: Path, links: dict | None = None, mtu: int | None = None) -> Path:
    """The pair's inventory with enp1s0f1np1 of each node at links[node] and/or another MTU."""
    data = yaml.safe_load(Path(bed.inventory).read_text())
    for node in data["nodes"]:
        if links:
            node["links"]["enp1s0f1np1"] = links[node["name"]]
    if mtu:
        data["cluster"]["mtu"] = mtu
    path = tmp_path / f"inventory-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_dry_run_shows_the_diff_and_changes_nothing(pristine, sparkpair) -> None:
    run = sparkpair("setup-network", "--dry-run")
    assert run.code == 0, run.text
    assert "+        - 198.19.1.11/24" in run.out and "+        - 198.19.2.12/24" in run.out
    assert "make ~/.ssh/id_ed25519" in run.out
    for node in ("spark-a", "spark-b"):
        assert not has_netplan(pristine, node)
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
    assert run.code == 2, run.text
    assert "spark-a: enP7s7 carries this SSH session (198.18.0.11)" in run.err
    assert "enP7s7 carries the default route" in run.err
    assert not has_netplan(pristine, "spark-a") and not has_netplan(pristine, "spark-b")


def test_conflicting_netplan_file_is_named_then_taken_over_with_replace(pristine, sparkpair) -> None:
    other = "network:\n  version: 2\n  ethernets:\n    enp1s0f1np1:\n      addresses: [198.19.9.2/24]\n"
    pristine.exec("spark-b", f"printf '%s' '{other}' > /etc/netplan/40-cx7.yaml && chmod 600 /etc/netplan/40-cx7.yaml")
    refused = sparkpair("setup-network", "--yes")
    assert refused.code == 1
    assert "spark-b: /etc/netplan/40-cx7.yaml already configures enp1s0f1np1" in refused.err
    assert not has_netplan(pristine, "spark-a")
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
        assert not has_netplan(pristine, node)
        link = pristine.exec(node, "ip -o link show dev enp1s0f1np1").stdout
        assert "mtu 1500" in link and "state DOWN" in link
        assert "inet " not in pristine.exec(node, "ip -4 addr show dev enp1s0f1np1").stdout
        assert f"{node}: now enp1s0f1np1 down mtu 1500 no address" in run.err


def test_unreachable_node_stops_everything_before_any_change(pristine, sparkpair) -> None:
    pristine.fault("sshd-down", node="spark-b")
    run = sparkpair("setup-network", "--yes")
    assert run.code == 1
    assert "spark-b: nvidia@198.18.0.12:22 refused the connection" in run.err and "nothing was changed" in run.err
    assert not has_netplan(pristine, "spark-a")


def test_stale_peer_host_key_on_a_node_is_refused_with_both_fingerprints(pristine, sparkpair) -> None:
    bogus = pristine.exec("spark-a", "rm -f /tmp/bogus* && ssh-keygen -q -t rsa -N '' -f /tmp/bogus && "
                                     "cat /tmp/bogus.pub").stdout.split()
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
        assert not has_netplan(pristine, node)
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


def _refused(run, address: str, twin: str) -> str:
    """The one error line of spark-a naming address and twin; it says the fix."""
    lines = [line for line in run.err.splitlines()
             if line.startswith("error: spark-a: ") and address in line and f"{twin}'s subnet" in line]
    assert len(lines) == 1, run.text
    assert "lockout guard; fix: nodes[" in lines[0] and lines[0].startswith("error: "), lines[0]
    return lines[0]


def test_lockout_guard_refuses_every_subnet_the_ssh_session_needs_with_nothing_changed(pristine, tmp_path) -> None:
    before = {node: (network_state(pristine, node), ssh_state(pristine, node)) for node in NODES}
    operator = inventory_with(pristine, tmp_path, {"spark-a": "198.18.0.2/29", "spark-b": "198.18.0.3/29"})
    management = inventory_with(pristine, tmp_path, {"spark-a": "198.18.0.9/29", "spark-b": "198.18.0.10/29"})
    for args in (["--dry-run"], ["--yes"]):
        run = run_sparkpair(operator, "setup-network", *args)
        assert run.code == 2, run.text
        assert "198.18.0.0/29 contains 198.18.0.1, the operator's address as this node sees the SSH session" in \
            _refused(run, "198.18.0.1,", "enp1s0f1np1")
        run = run_sparkpair(management, "setup-network", *args)
        assert run.code == 2, run.text
        assert "spark-a: enp1s0f1np1's subnet 198.18.0.8/29 contains the management address 198.18.0.11;" in \
            _refused(run, "198.18.0.11;", "enp1s0f1np1")
    # spark-a answers the operator through spark-b: the session's next hop is 198.18.0.12
    pristine.exec("spark-a", "ip route add 198.18.0.1/32 via 198.18.0.12 dev enP7s7")
    try:
        hop = inventory_with(pristine, tmp_path, {"spark-a": "198.18.0.13/30", "spark-b": "198.18.0.14/30"})
        for args in (["--dry-run"], ["--yes"]):
            run = run_sparkpair(hop, "setup-network", *args)
            assert run.code == 2, run.text
            assert ("spark-a: enp1s0f1np1's subnet 198.18.0.12/30 contains 198.18.0.12, the next hop of this SSH "
                    "session's route (198.18.0.1 via 198.18.0.12 dev enP7s7)") in \
                _refused(run, "the next hop", "enp1s0f1np1")
    finally:
        pristine.exec("spark-a", "ip route del 198.18.0.1/32", check=False)
    overlap = run_sparkpair(inventory_with(pristine, tmp_path, {"spark-a": "198.18.0.65/26", "spark-b": "198.18.0.66/26"}),
                            "setup-network", "--dry-run")
    assert overlap.code == 0, overlap.text
    assert "warning: spark-a: enp1s0f1np1's subnet 198.18.0.64/26 overlaps the route to 198.18.0.0/24 (dev enP7s7)" \
        in overlap.err
    assert {node: (network_state(pristine, node), ssh_state(pristine, node)) for node in NODES} == before
    nothing_left_running(pristine)
    for node in NODES:
        assert pristine.exec(node, f"test -e {paths.SYSTEM_BACKUPS} || test -e /home/nvidia/.sparkpair/first-touch",
                             check=False).returncode != 0


def test_restore_goes_back_to_before_sparkpair_and_restore_last_to_the_previous_apply(pristine, sparkpair,
                                                                                     tmp_path) -> None:
    before = {node: (network_state(pristine, node), ssh_state(pristine, node)) for node in NODES}
    assert sparkpair("setup-network", "--yes").code == 0
    first = {node: (network_state(pristine, node), ssh_state(pristine, node)) for node in NODES}
    other_mtu = inventory_with(pristine, tmp_path, mtu=4000)
    second = run_sparkpair(other_mtu, "setup-network", "--yes")
    assert second.code == 0 and "link verified" in second.out, second.text
    assert network_state(pristine, "spark-b")["twins"]["enp1s0f1np1"][0] == 4000
    last = sparkpair("setup-network", "--restore", "--last")
    assert last.code == 0, last.text
    assert {node: (network_state(pristine, node), ssh_state(pristine, node)) for node in NODES} == first
    assert run_sparkpair(other_mtu, "setup-network", "--yes").code == 0
    restored = sparkpair("setup-network", "--restore")
    assert restored.code == 0, restored.text
    for node in NODES:
        said = next(line for line in restored.out.splitlines() if line.startswith(f"{node}: "))
        for done in (f"removed {NETPLAN}", "netplan generate && netplan apply", "removed /home/nvidia/.ssh/id_ed25519",
                     "restored /home/nvidia/.ssh/authorized_keys", "removed /home/nvidia/.ssh/known_hosts",
                     "twins back to: enp1s0f1np1 down mtu 1500 no address; enP2p1s0f1np1 down mtu 1500 no address"):
            assert done in said, said
    assert {node: (network_state(pristine, node), ssh_state(pristine, node)) for node in NODES} == before
    again = sparkpair("setup-network", "--restore")
    assert again.code == 0 and again.out.count("nothing to restore") == 2, again.text


def test_a_node_cut_off_by_its_apply_comes_back_by_itself_and_both_are_as_before(pristine, sparkpair) -> None:
    before = {node: network_state(pristine, node) for node in NODES}
    pristine.fault("strand-on-apply", node="spark-b")
    start = time.monotonic()
    run = sparkpair("setup-network", "--yes", "--confirm-timeout", "15")
    elapsed = time.monotonic() - start
    assert run.code == 1, run.text
    assert re.search(r"^spark-b: watchdog armed as root \(a detached process \(pid \d+\)\): unless confirmed by "
                     r"\d\d:\d\d:\d\d \(15 s\)", run.err, re.M), run.err
    assert "error: spark-b: not reachable over a new SSH connection after the apply" in run.err
    assert "rolling back both nodes (spark-b cut off by the new network)" in run.err
    assert re.search(r"^spark-b: not reachable; its watchdog puts it back by itself at \d\d:\d\d:\d\d", run.err, re.M)
    assert re.search(r"^spark-b: came back by itself .*its watchdog logged: .* spark-b: reverted: ", run.err, re.M)
    assert re.search(r"^spark-a: reverted now; its watchdog logged: ", run.err, re.M), run.err
    assert elapsed < 15 + 30, elapsed  # the deadline plus the margin sparkpair gives a node to come back
    assert pristine.ssh("spark-b", "hostname").stdout.strip() == "spark-b"  # reachable again over SSH
    assert {node: network_state(pristine, node) for node in NODES} == before
    log = pristine.exec("spark-b", f"cat {paths.WATCHDOG_LOG}").stdout
    assert "spark-b: not confirmed within 15 s: putting the network back" in log and "spark-b: reverted: " in log
    assert "spark-a: revert asked" in pristine.exec("spark-a", f"cat {paths.WATCHDOG_LOG}").stdout
    nothing_left_running(pristine)
    pristine.heal()
    again = sparkpair("setup-network", "--yes")
    assert again.code == 0 and "SSH trust verified" in again.out, again.text
    assert again.err.count("confirmed over a new SSH connection with the link verified") == 2
    nothing_left_running(pristine)


def _connection(bed, name: str) -> NodeConnection:
    inventory = read_inventory(bed.inventory)
    node, cluster = inventory.node(name), inventory.cluster
    return NodeConnection(SshTarget(name, node.host, node.port, cluster.user, cluster.ssh_key, cluster.known_hosts))


def test_the_connection_sends_small_packets_at_once(testbed) -> None:
    """Nagle is off on sparkpair's SSH socket, and it acknowledges at once: with Nagle on, every command
    waited for a delayed ACK (about 45 ms a command instead of one round trip); with delayed ACKs, the
    first command of every connection did."""
    connection = _connection(testbed, "spark-a")
    try:
        assert connection.check(Shell("hostname")).strip() == "spark-a"
        sock = connection.client().get_transport().sock
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        assert isinstance(sock, tcp.QuickAckSocket)  # acknowledges at once (the unit tests show how)
    finally:
        connection.close()


def test_the_watchdog_is_confirmed_reverted_by_hand_or_fires_by_itself(pristine) -> None:
    """The runbook's commands on a watchdog armed as setup-network arms it, over a file it 'applied'."""
    inventory = read_inventory(pristine.inventory)
    node = inventory.node("spark-b")
    twins = json.dumps({twin: {"mtu": 1500, "up": False, "ipv4": []} for twin in TWINS})
    connection = _connection(pristine, "spark-b")
    script = f"sh {paths.WATCHDOG_SCRIPT}"
    try:
        for how, seconds in (("confirm", 60), ("revert", 60), ("fires", 8)):
            armed = watchdog.arm(connection, node, f"test-{how}", seconds, [NETPLAN], twins)
            assert armed.how.startswith("a detached process (pid ")  # no systemd on the simulated nodes
            pristine.exec("spark-b", f"cp /etc/netplan/50-cloud-init.yaml {NETPLAN}")  # what an apply would write
            assert pristine.ssh("spark-b", f"cat {paths.WATCHDOG_DIR}/deadline").stdout.strip().isdigit()
            if how != "fires":
                said = pristine.ssh("spark-b", f"sudo {script} {how}").stdout
                assert said.strip().splitlines()[-1] == ("confirmed" if how == "confirm" else "reverted"), said
            pristine.wait_until(lambda: watchdog.state(connection) == "gone", seconds + 15, f"the watchdog ({how})")
            kept = has_netplan(pristine, "spark-b")
            assert kept == (how == "confirm"), how
            assert pristine.exec("spark-b", f"test -e {watchdog.BOOT_DIR}", check=False).returncode != 0, how
            assert "watchdog" not in pristine.exec("spark-b", "ps -eo args").stdout
            pristine.exec("spark-b", f"rm -f {NETPLAN}")
    finally:
        connection.close()
    log = pristine.exec("spark-b", f"cat {paths.WATCHDOG_LOG}").stdout
    assert "confirmed: the network sparkpair applied (run test-confirm) stays" in log
    assert "revert asked: putting the network back as it was before sparkpair's apply (run test-revert)" in log
    assert "not confirmed within 8 s: putting the network back as it was before sparkpair's apply (run test-fires)" in log
    assert pristine.exec("spark-b", f"stat -c %a {paths.WATCHDOG_LOG}").stdout.strip() == "644"


def test_a_reboot_inside_the_confirm_window_reverts_the_unconfirmed_network_at_boot(pristine) -> None:
    """A reboot empties /run (the watchdog's directory) and ends its timer, while the new netplan file stays
    in /etc/netplan: the copy armed on disk, run at boot as the boot unit runs it, puts the network back.
    (The simulated nodes run no systemd: the reboot is what it does to the watchdog, the boot is the
    unit's command run by hand.)"""
    inventory = read_inventory(pristine.inventory)
    twins = json.dumps({twin: {"mtu": 1500, "up": False, "ipv4": []} for twin in TWINS})
    connection = _connection(pristine, "spark-b")
    try:
        watchdog.arm(connection, inventory.node("spark-b"), "test-reboot", 60, [NETPLAN], twins)
        pristine.exec("spark-b", f"cp /etc/netplan/50-cloud-init.yaml {NETPLAN}")  # what an apply would write
        assert pristine.exec("spark-b", f"test -e {watchdog.BOOT_DIR}/armed", check=False).returncode == 0
        pristine.exec("spark-b", f'env kill -s TERM -- "-$(cat {paths.WATCHDOG_DIR}/pid)"; rm -rf {paths.WATCHDOG_DIR}')
        assert watchdog.state(connection) == "gone" and has_netplan(pristine, "spark-b")  # the reboot: nothing left
        boot = pristine.exec("spark-b", watchdog.BOOT_EXEC)  # what the boot unit runs
        assert boot.stdout.strip().splitlines()[-1] == "reverted", boot.stdout
    finally:
        connection.close()
    assert not has_netplan(pristine, "spark-b")
    log = pristine.exec("spark-b", f"cat {paths.WATCHDOG_LOG}").stdout
    assert ("spark-b: the node restarted before the network was confirmed: putting the network back as it was "
            "before sparkpair's apply (run test-reboot)") in log
    nothing_left_running(pristine)  # the copy went with it: the next boot does nothing
