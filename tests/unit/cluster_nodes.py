"""Scripted Sparks of a ring of three or a switch of four for the cluster flow tests (tests/fakenode.py): each
node answers its probe rounds as a real node would, from its own state (its twins set up once sparkpair's
netplan file is on it), with its own MACs and a neighbour table that says which node answers behind each twin.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakenode import Call, FakeNode, ProbeRound, Reply, containing, fake_pair, is_probe_round, prefix
from test_topology import ring_data, switch_data

from sparkpair import render
from sparkpair.checks import links
from sparkpair.inventory import Inventory, Node, parse_inventory
from sparkpair.network import netplan, watchdog
from sparkpair.probes import Probe, format_sections, host, net, rdma, ssh
from sparkpair.transport import Pair

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RING = parse_inventory(ring_data())
SWITCH = parse_inventory(switch_data(4))
NOT_YET = (125, "", "the twins are not configured yet")
PING_OK = (FIXTURES / "probes" / "ping-ok.txt").read_text()
PING_LOST = "3 packets transmitted, 0 received, 100% packet loss, time 102ms\n"
CLOUD_INIT = (FIXTURES / "probes" / "netplan-cloud-init.yaml").read_text()
# Where each twin's cable really ends: (node, twin) -> (node, twin); by default what the inventory expects.
Cabling = dict[tuple[str, str], tuple[str, str]]
Answers = dict[Probe[Any], str | tuple[int, str, str]]  # a probe's stdout, or (exit code, stdout, stderr)


def host_key(name: str) -> tuple[str, str]:
    return ("ssh-ed25519", f"AAAAC3NzaC1lZDI1NTE5AAAAI{name[-1].upper() * 43}")


def mac(inventory: Inventory, node: str, twin: str) -> str:
    index = [n.name for n in inventory.nodes].index(node)
    return f"02:5b:{index:02x}:00:00:{list(inventory.node(node).links).index(twin):02x}"


def expected_cabling(inventory: Inventory) -> Cabling:
    """(node, twin) -> the (node, twin) the inventory expects at the cable's other end (rings only: through a
    switch every twin reaches every other)."""
    cabling: Cabling = {}
    for link in inventory.links():
        cabling.setdefault((link.node_a, link.port_a), (link.node_b, link.port_b))
        cabling.setdefault((link.node_b, link.port_b), (link.node_a, link.port_a))
    return cabling


def interfaces(inventory: Inventory, name: str, configured: bool) -> str:
    """`ip -j addr show` of a node (captured on a fresh Spark): its management address, its own MACs, and its
    twins down at 1500 or up at the inventory's MTU with its addresses."""
    items = json.loads((FIXTURES / "probes" / "ip-addr-fresh.json").read_text())
    node = inventory.node(name)
    for item in items:
        if item["ifname"] == "enP7s7":
            item["addr_info"][0]["local"] = node.host
        if item["ifname"] in node.links:
            item["address"] = mac(inventory, name, item["ifname"])
            if configured:
                address = node.links[item["ifname"]]
                item.update(flags=["BROADCAST", "MULTICAST", "UP", "LOWER_UP"], mtu=inventory.cluster.mtu)
                item["addr_info"] = [{"family": "inet", "local": str(address.ip), "prefixlen": address.network.prefixlen}]
    return json.dumps(items)


class ClusterNode:
    """One scripted Spark's probe answers: planning facts, and the link facts as its cabling makes them."""

    def __init__(self, inventory: Inventory, name: str, cabling: Cabling | None = None,
                 extra: Answers | None = None) -> None:
        self.inventory, self.name = inventory, name
        self.cabling = cabling if cabling is not None else expected_cabling(inventory)
        self.node = inventory.node(name)
        self.extra = extra or {}

    def answers(self, configured: bool, ssh_files: dict[str, str] | None = None) -> Answers:
        """Every probe's answer; ssh_files: the node's ~/.ssh files now (none: a fresh node)."""
        files = {"/etc/netplan/50-cloud-init.yaml": CLOUD_INIT}
        if configured:
            files[netplan.NETPLAN_PATH] = render.netplan_file(self.inventory, self.node, "the inventory").content
        found: Answers = {
            net.INTERFACES: interfaces(self.inventory, self.name, configured),
            net.DEFAULT_ROUTES: (FIXTURES / "probes" / "ip-route-default.json").read_text(),
            net.SSH_SESSION: f"198.18.0.1 50000 {self.node.host} 22",
            net.SESSION_ROUTE: (FIXTURES / "probes" / "ip-route-get-onlink.json").read_text(),
            net.ROUTES: json.dumps([{"dst": "default", "gateway": "198.18.0.1", "dev": "enP7s7", "flags": []}]),
            net.NETPLAN_FILES: format_sections(files), host.SUDO: "helper ours\nfull no\n",
            ssh.SSH_FILES: format_sections(self.ssh_sections(ssh_files or {}))}
        if configured:
            found.update(self.link_answers())
            found.update(rdma_answers(self.node))
        return {**found, **self.extra}

    def ssh_sections(self, ssh_files: dict[str, str]) -> dict[str, str]:
        """The SSH_FILES probe's sections for the node's ~/.ssh files."""
        sections = {}
        for name, file in (("pub", "id_ed25519.pub"), ("authorized_keys", "authorized_keys"),
                           ("known_hosts", "known_hosts")):
            found = ssh_files.get(file)
            sections[f"{'absent' if found is None else 'present'} {name}"] = found or ""
        sections.update({"present hostname": f"{self.name}\n",
                         "present host_keys": " ".join(host_key(self.name)) + f" root@{self.name}\n",
                         f"{'present' if 'id_ed25519' in ssh_files else 'absent'} private_key": ""})
        return sections

    def trust_answers(self, mine: dict[str, str], everyone: dict[str, dict[str, str]]) -> Answers:
        """The logins to each neighbour and the host keys pinned for its addresses, as the nodes' ~/.ssh files
        make them: a login works when the neighbour authorizes this node's key and this node pins its address."""
        found: Answers = {}
        pinned = {name: line.split()[1:3] for line in mine.get("known_hosts", "").splitlines() if line.strip()
                  for name in line.split()[0].split(",")}
        owners = {str(address.ip): node.name for node in self.inventory.nodes for address in node.links.values()}
        authorized = mine.get("id_ed25519.pub", "?").split()[:2]
        for probe in links.trust_probes(self.inventory, self.node):  # the very probes: a login's is guarded
            address = probe.args[0]
            if probe.kind == "known host":
                found[probe] = (f"# Host {address} found: line 1\n{address} {' '.join(pinned[address])}\n"
                                if address in pinned else (1, "", ""))
                continue
            peer = owners[address]
            allowed = any(line.split()[:2] == authorized
                          for line in everyone[peer].get("authorized_keys", "").splitlines())
            found[probe] = (f"{peer}\n" if allowed and address in pinned else
                            (255, "", "Permission denied (publickey)." if address in pinned else
                             f"Host key for {address} is not in known_hosts"))
        return found

    def reaches(self, twin: str, address: str) -> str | None:
        """The MAC that answers address behind twin, as cabled (through a switch: any node's twin in the subnet)."""
        if self.inventory.topology == "switch":
            owners = [(n.name, port) for n in self.inventory.nodes for port, a in n.links.items() if str(a.ip) == address]
            return mac(self.inventory, *owners[0]) if owners and owners[0][0] != self.name else None
        far = self.cabling.get((self.name, twin))
        if far is None or str(self.inventory.node(far[0]).links[far[1]].ip) != address:
            return None
        return mac(self.inventory, *far)

    def link_answers(self) -> Answers:
        """The pings and the crossing round as the cabling answers them."""
        found: Answers = {}
        mtu = self.inventory.cluster.mtu
        for end in links.link_ends(self.inventory, self.node):
            answered = self.reaches(end.port, end.address) is not None
            for size in (None, mtu - 28):
                found[net.ping(end.port, end.address, size)] = (0, PING_OK, "") if answered else (1, PING_LOST, "")
        if self.inventory.topology != "switch":
            probe = links.crossing_probe(self.inventory, self.node)
            asked = [(twin, address) for twin, address in dict(_args_pairs(probe.args)).items()]
            asked += [(twin, address) for kind, twin, address in _otherwise(probe.args)]
            neighbours = [{"dst": address, "dev": twin, "lladdr": answer, "state": "REACHABLE"}
                          for twin, address in asked if (answer := self.reaches(twin, address))]
            found[probe] = json.dumps(neighbours)
        return found


def _args_pairs(args: tuple[Any, ...]) -> list[tuple[str, str]]:
    return [arg for arg in args if len(arg) == 2]


def _otherwise(args: tuple[Any, ...]) -> list[tuple[str, str, str]]:
    return [arg for arg in args if len(arg) == 3 and arg[0] == "otherwise"]


def ssh_files_of(node: FakeNode) -> dict[str, str]:
    """The node's ~/.ssh files now: file name -> text."""
    folder = f"{node.home}/.ssh/"
    return {path.removeprefix(folder): data.decode() for path, data in node.files.items() if path.startswith(folder)}


def probe_rounds(cluster: ClusterNode, everyone: dict[str, FakeNode],
                 others: tuple[int, str, str] | None = NOT_YET) -> Callable[[Call, FakeNode], Reply | None]:
    """A responder answering each probe round from the node's state now: set up once sparkpair's netplan file
    is on it, its SSH trust as every node's ~/.ssh files make it."""
    def answer(call: Call, node: FakeNode) -> Reply | None:
        configured = netplan.NETPLAN_PATH in node.files
        mine = ssh_files_of(node)
        found = cluster.answers(configured, mine)
        if configured:
            found.update(cluster.trust_answers(mine, {name: ssh_files_of(fake) for name, fake in everyone.items()}))
        return ProbeRound(found, others=others)(call, node)
    return answer


def cluster_of(inventory: Inventory, cabling: Cabling | None = None, configured: bool = False,
               others: tuple[int, str, str] | None = NOT_YET,
               extra: dict[str, Answers] | None = None) -> tuple[Pair, dict[str, FakeNode]]:
    """Scripted nodes for every node of the inventory, the head first: their probe rounds answered (twins set up
    when configured: sparkpair's netplan file on them; extra: node -> more answers), file commands acting on
    their files."""
    nodes: dict[str, FakeNode] = {}
    for node in inventory.nodes:
        files = {netplan.NETPLAN_PATH: render.netplan_file(inventory, node, "the inventory").content.encode()} \
            if configured else {}
        fake = FakeNode(node.name, host=node.host, host_key=host_key(node.name), files=files)
        fake.on(is_probe_round, probe_rounds(ClusterNode(inventory, node.name, cabling, (extra or {}).get(node.name)),
                                             nodes, others))
        nodes[node.name] = fake
    return fake_pair(*nodes.values()), nodes


def arming_and_confirming(fake: FakeNode) -> FakeNode:
    """The node's watchdog arms (a systemd timer), confirms, or reverts when asked (sparkpair's netplan file
    gone: its twins as before); its netplan apply succeeds; files behave."""
    armed: list[bool] = []

    def arm(call: Call, node: FakeNode) -> Reply:
        armed.append(True)
        return Reply("systemd sparkpair-watchdog\n")

    def revert(call: Call, node: FakeNode) -> Reply:
        node.files.pop(netplan.NETPLAN_PATH, None)
        armed.clear()
        return Reply()

    fake.on(prefix("sparkpair-root watchdog-arm "), arm)
    fake.on("sparkpair-root netplan-apply", "")
    fake.on("sparkpair-root confirm", "confirmed\n")
    fake.on("sparkpair-root revert-soon", revert)
    fake.on(containing("for s in armed reverting confirmed"), lambda call, node: "armed\n" if armed else "gone\n")
    fake.on(containing(f"tail -n 1 {watchdog.LOG}"), "reverted: the network is as before\n")
    fake.on(containing("/first-touch/twins.json.new"), _record_twins)
    fake.on(containing("ssh-keygen -q -t ed25519"), _make_key)
    fake.on(prefix("sparkpair-root twin "), "")  # the twins put back as a snapshot says (rollback.snapshot_commands)
    fake.on(lambda text: text.startswith("rm -rf ") and text.endswith("/first-touch"), _forget_first_touch)
    return fake.files_behave()


def _make_key(call: Call, node: FakeNode) -> Reply:
    """The node's own ed25519 key made (trust.key_changes)."""
    node.files[f"{node.home}/.ssh/id_ed25519"] = b"PRIVATE KEY (never read)\n"
    body = f"AAAAC3NzaC1lZDI1NTE5AAAAIK{node.name[-1] * 42}"
    node.files[f"{node.home}/.ssh/id_ed25519.pub"] = f"ssh-ed25519 {body} sparkpair@{node.name}\n".encode()
    return Reply()


def _forget_first_touch(call: Call, node: FakeNode) -> Reply:
    """`firsttouch.clear`: the first-touch folder gone."""
    folder = call.text.removeprefix("rm -rf ") + "/"
    for path in [path for path in node.files if path.startswith(folder)]:
        del node.files[path]
    return Reply()


def _record_twins(call: Call, node: FakeNode) -> Reply:
    """`firsttouch.record_twins` on the node's files: the snapshot kept unless one is kept already."""
    words = shlex.split(call.text)
    snapshot, target = words[words.index("printf") + 2], words[-2].rstrip(";")
    node.files.setdefault(target, snapshot.encode())
    return Reply()


def rdma_answers(node: Node, gid_index: int = 3) -> Answers:
    """ibdev2netdev, ibv_devinfo and the sysfs GID tables of a healthy node (the shapes of tests/fixtures/rdma):
    each twin's RoCE port Up and ACTIVE at 4096, its IPv4 RoCE v2 GID at gid_index."""
    devices, devinfo, tables = [], [], []
    for twin, address in node.links.items():
        device = "roce" + twin[2:].removesuffix("np0").removesuffix("np1")
        devices.append(f"{device} port 1 ==> {twin} (Up)")
        devinfo.append(f"hca_id:\t{device}\n\tfw_ver:\t\t\t\t28.45.4028\n\tphys_port_cnt:\t\t\t1\n\t\tport:\t1\n"
                       "\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tmax_mtu:\t\t4096 (5)\n"
                       "\t\t\tactive_mtu:\t\t4096 (5)\n\t\t\tlink_layer:\t\tEthernet\n")
        port = f"{device}/ports/1"
        tables += [f"{port}/state:4: ACTIVE", f"{port}/phys_state:5: LinkUp", f"{port}/link_layer:Ethernet"]
        gids = {0: ("fe80:0000:0000:0000:005b:10ff:fe01:0002", "IB/RoCE v1"),
                1: ("fe80:0000:0000:0000:005b:10ff:fe01:0002", "RoCE v2"),
                gid_index - 1: (rdma.ipv4_gid_value(str(address.ip)), "IB/RoCE v1"),
                gid_index: (rdma.ipv4_gid_value(str(address.ip)), "RoCE v2")}
        for index, (value, kind) in gids.items():
            tables += [f"{port}/gids/{index}:{value}", f"{port}/gid_attrs/types/{index}:{kind}",
                       f"{port}/gid_attrs/ndevs/{index}:{twin}"]
    return {rdma.DEVICES: "\n".join(devices) + "\n", rdma.PORTS: "\n".join(devinfo),
            rdma.GID_TABLES: "\n".join(tables) + "\n"}


@pytest.fixture
def ring_file(tmp_path: Path) -> Path:
    """A ring of three whose nodes are on loopback ports nothing listens on, with an SSH key that does not exist:
    a command that reaches the nodes fails per node, so the CLI's gate is seen without any connection."""
    data = ring_data()
    for index, node in enumerate(data["nodes"]):
        node["host"], node["port"] = f"127.0.0.{index + 1}", 1
    data["cluster"] = {"ssh_key": str(tmp_path / "absent-key"), "known_hosts": str(tmp_path / "known_hosts")}
    path = tmp_path / "ring.yaml"
    path.write_text(yaml.safe_dump(data))
    return path
