"""The simulated cluster's larger shapes (sparkpair_testbed.shape): a ring of three and a switch of four.

The first tests are pure (the shapes, their addresses and cabling plans, the inventory they write, the
shape record). The rest bring a ring of three up, then a switch of four, through `testbed_shape`, prove
the wiring with real frames (ARP probes and don't-fragment pings at MTU out of a given port) and the two
faults of those shapes, and end with a plain `up` that must bring back exactly the pair.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from sparkpair_testbed import inventory, shape
from sparkpair_testbed.hostexec import CommandError
from sparkpair_testbed.layout import NODES, PAIR_NODES, STATE_DIR, Node
from sparkpair_testbed.network import netns_list

F0, F0B, F1, F1B = "enp1s0f0np0", "enP2p1s0f0np0", "enp1s0f1np1", "enP2p1s0f1np1"
RING = shape.Shape(3, "ring")
SWITCH = shape.Shape(4, "switch")
MTU = 9000
DF_PAYLOAD = MTU - 28  # IPv4 and ICMP headers


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    """The shape record in a temporary directory: record(SHAPE) then what the modules read."""
    monkeypatch.setattr(shape, "SHAPE_FILE", tmp_path / "shape.json")
    return shape.SHAPE_FILE


def test_no_options_is_the_pair_and_bad_combinations_are_one_line():
    assert shape.parse(None, None) == shape.PAIR == shape.parse(2, None)
    assert shape.parse(3, "ring") == RING and shape.parse(None, "ring") == RING
    assert shape.parse(4, None) == SWITCH and shape.parse(2, "switch") == shape.Shape(2, "switch")
    for count, topology, named in ((4, "ring", "--nodes: got 4 for topology ring; expected 3"),
                                   (3, "pair", "--nodes: got 3 for topology pair; expected 2"),
                                   (5, "switch", "--nodes: got 5 for topology switch; expected 2 or 3 or 4"),
                                   (1, None, "--nodes: got 1 for topology switch"),
                                   (3, "mesh", "--topology: got 'mesh'")):
        with pytest.raises(CommandError) as raised:
            shape.parse(count, topology)
        assert str(raised.value).startswith(named) and "\n" not in str(raised.value)


def test_a_shape_that_does_not_fit_is_a_usage_error_before_anything_is_touched(monkeypatch, capsys):
    from sparkpair_testbed import cli

    monkeypatch.setattr(cli.os, "geteuid", lambda: 0)
    monkeypatch.setattr(cli, "dispatch", lambda args: pytest.fail("dispatched a shape that does not fit"))
    assert cli.main(["up", "--nodes", "5", "--topology", "ring"]) == 2
    assert capsys.readouterr().err == ("scripts/testbed up: --nodes: got 5 for topology ring; expected 3 "
                                       "(pair: 2, ring: 3, switch: 2 to 4)\n")


def test_the_pair_is_todays_pair_and_every_node_is_swept():
    assert shape.nodes_of(shape.PAIR) is PAIR_NODES
    assert [node.name for node in shape.every_possible_node()] == ["spark-a", "spark-b", "spark-c", "spark-d"]
    assert [node.mgmt_ip for node in shape.every_possible_node()] == [f"198.18.0.1{i}" for i in range(1, 5)]


def test_a_ring_follows_connect_three_sparks_f0_of_each_to_f1_of_the_next():
    """docs/cluster.md's example: one /24 per twin of each cable, .1 on port f0 and .2 on the next node's f1."""
    links = {node.name: node.links for node in shape.nodes_of(RING)}
    assert links == {
        "spark-a": {F0: "198.19.10.1/24", F0B: "198.19.11.1/24", F1: "198.19.30.2/24", F1B: "198.19.31.2/24"},
        "spark-b": {F0: "198.19.20.1/24", F0B: "198.19.21.1/24", F1: "198.19.10.2/24", F1B: "198.19.11.2/24"},
        "spark-c": {F0: "198.19.30.1/24", F0B: "198.19.31.1/24", F1: "198.19.20.2/24", F1B: "198.19.21.2/24"}}
    assert shape.cable_plan(RING) == {
        "cable-ab-p1": ("a-" + F0, "b-" + F1), "cable-ab-p2": ("a-" + F0B, "b-" + F1B),
        "cable-bc-p1": ("b-" + F0, "c-" + F1), "cable-bc-p2": ("b-" + F0B, "c-" + F1B),
        "cable-ca-p1": ("c-" + F0, "a-" + F1), "cable-ca-p2": ("c-" + F0B, "a-" + F1B)}
    assert all(len(bridge) <= 15 and all(len(peer) <= 15 for peer in peers)  # Linux's IFNAMSIZ
               for bridge, peers in shape.cable_plan(RING).items())


def test_a_crossed_ring_cable_swaps_only_that_nodes_two_ports():
    crossed = shape.cable_plan(RING, frozenset({"spark-a"}))
    assert crossed["cable-ab-p1"] == ("a-" + F1, "b-" + F1)  # spark-b's f1 now meets spark-a's f1 ...
    assert crossed["cable-ca-p1"] == ("c-" + F0, "a-" + F0)  # ... and spark-a's f0 reaches spark-c
    assert crossed["cable-bc-p1"] == shape.cable_plan(RING)["cable-bc-p1"]
    assert sorted(p for peers in crossed.values() for p in peers) == \
        sorted(p for peers in shape.cable_plan(RING).values() for p in peers)  # every end still cabled once


def test_a_switch_puts_port_f1_of_every_node_on_one_bridge_per_twin():
    nodes = shape.nodes_of(SWITCH)
    assert [node.links for node in nodes] == [{F1: f"198.19.1.1{i}/24", F1B: f"198.19.2.1{i}/24"} for i in range(1, 5)]
    assert nodes[0].links == PAIR_NODES[0].links and nodes[1].links == PAIR_NODES[1].links
    assert shape.cable_plan(SWITCH) == {"switch-p1": tuple(f"{x}-{F1}" for x in "abcd"),
                                        "switch-p2": tuple(f"{x}-{F1B}" for x in "abcd")}
    assert len({node.twin_mac(twin) for node in nodes for twin in (F0, F0B, F1, F1B)}) == 16


def test_the_record_drives_the_nodes_and_the_pair_leaves_no_record(recorded):
    assert shape.load() == shape.PAIR and [n.name for n in NODES] == ["spark-a", "spark-b"]
    shape.record(RING)
    assert json.loads(recorded.read_text()) == {"nodes": 3, "topology": "ring"}
    assert [n.name for n in NODES] == ["spark-a", "spark-b", "spark-c"] and len(NODES) == 3
    assert NODES[2].links[F1] == "198.19.20.2/24"
    shape.record(shape.PAIR)
    assert not recorded.exists() and list(NODES) == list(PAIR_NODES)


@pytest.mark.parametrize("text", ["{", "[]", '{"nodes": "3", "topology": "ring"}', '{"nodes": 9, "topology": "ring"}'])
def test_a_damaged_record_is_one_line_naming_the_file_and_the_fix(recorded, text):
    recorded.write_text(text)
    with pytest.raises(CommandError) as raised:
        shape.load()
    assert "\n" not in str(raised.value)
    assert str(recorded) in str(raised.value) or "--nodes: got 9" in str(raised.value)


def test_the_pairs_inventory_is_unchanged_and_a_ring_says_its_topology(recorded):
    pair = inventory.render()
    assert "topology:" not in pair and "  name: sim-pair\n" in pair
    assert pair.count("    host: ") == 2
    shape.record(RING)
    ring = inventory.render()
    assert "\ntopology: ring\nnodes:\n" in ring and "  name: sim-ring-3\n" in ring
    assert "  - name: spark-c\n    host: 198.18.0.13\n    port: 22\n    links:\n" in ring
    assert "      enp1s0f0np0: 198.19.30.1/24\n" in ring and ring.count("      enp") == 6


# ---- on the simulated cluster (root, the shared pair: run under flock /tmp/simpair.lock) ----

ARP_PROBE = r"""
import socket, struct, sys, time
ifname, source, target = sys.argv[1:4]
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0806))
sock.bind((ifname, 0))
mac = sock.getsockname()[4]
arp = struct.pack("!HHBBH6s4s6s4s", 1, 0x0800, 6, 4, 1, mac, socket.inet_aton(source), bytes(6),
                  socket.inet_aton(target))
sock.send(b"\xff" * 6 + mac + b"\x08\x06" + arp)
deadline = time.monotonic() + 1.5
while time.monotonic() < deadline:
    sock.settimeout(max(0.01, deadline - time.monotonic()))
    try:
        frame = sock.recv(128)
    except socket.timeout:
        break
    if len(frame) < 32:
        continue
    op, sender, sender_ip = struct.unpack_from("!6xH6s4s", frame, 14)
    if op == 2 and sender_ip == socket.inet_aton(target):
        print(":".join(f"{b:02x}" for b in sender))
        break
"""


def who_answers(bed, node: Node, twin: str, target: str) -> str:
    """The MAC that answers an ARP request for TARGET sent out of NODE's TWIN ('' when nobody does)."""
    source = node.links[twin].split("/")[0]
    return bed.exec(node.name, ["python3", "-c", ARP_PROBE, twin, source, target]).stdout.strip()


def df_ping(bed, node: Node, twin: str, target: str) -> bool:
    """True when TARGET answers a don't-fragment ping at MTU sent out of NODE's TWIN."""
    argv = ["ping", "-c", "1", "-W", "2", "-M", "do", "-s", str(DF_PAYLOAD), "-I", twin, target]
    return bed.exec(node.name, argv, check=False).returncode == 0


def address_every_twin(bed) -> None:
    """Every cabled twin of every node of the running shape up at MTU 9000 with its address."""
    for node in NODES:
        script = " && ".join(f"ip link set {twin} mtu {MTU} up && ip addr replace {address} dev {twin}"
                             for twin, address in node.links.items())
        bed.exec(node.name, script)
    for node in NODES:
        bed.wait_until(lambda n=node: all(has_carrier(bed, n, twin) for twin in n.links), 10,
                       f"carrier on {node.name}'s cabled twins")


def has_carrier(bed, node: Node, twin: str) -> bool:
    """True when NODE's TWIN has carrier (its cable end is plugged and up)."""
    flags = json.loads(bed.exec(node.name, ["ip", "-j", "link", "show", twin]).stdout)[0]["flags"]
    return "LOWER_UP" in flags


def ip_of(node: Node, twin: str) -> str:
    """NODE's address on TWIN, without the prefix."""
    return node.links[twin].split("/")[0]


@pytest.fixture(scope="module")
def ring(testbed_shape):
    """The ring of three, every twin addressed."""
    bed = testbed_shape(3, "ring")
    address_every_twin(bed)
    return bed


def test_the_ring_has_three_nodes_and_writes_its_inventory(ring):
    assert [node.name for node in NODES] == ["spark-a", "spark-b", "spark-c"]
    written = ring.inventory.read_text()
    assert "\ntopology: ring\n" in written and "198.18.0.13" in written
    assert ring.cli("inventory").stdout.strip() == str(ring.inventory)
    assert "cabling:ring-3" in ring.cli("status").stdout
    assert ring.ssh("spark-c", "hostname").stdout.strip() == "spark-c"


def test_each_ring_node_reaches_its_two_neighbours_on_the_right_ports_at_mtu(ring):
    nodes = list(NODES)
    for index, node in enumerate(nodes):
        following, previous = nodes[(index + 1) % 3], nodes[(index - 1) % 3]
        for own, far, neighbour in ((F0, F1, following), (F0B, F1B, following),
                                    (F1, F0, previous), (F1B, F0B, previous)):
            assert df_ping(ring, node, own, ip_of(neighbour, far)), f"{node.name} {own} -> {neighbour.name} {far}"
            assert who_answers(ring, node, own, ip_of(neighbour, far)) == neighbour.twin_mac(far)
        # Out of each port, the other neighbour's address gets no answer: it is not on that cable.
        assert who_answers(ring, node, F0, ip_of(previous, F0)) == ""
        assert who_answers(ring, node, F1, ip_of(following, F1)) == ""


def test_a_crossed_ring_cable_makes_the_port_reach_the_wrong_neighbour(ring):
    a, b, c = NODES
    ring.fault("crossed-ring-cable", "spark-a")
    assert "crossed at spark-a" in ring.cli("status").stdout
    assert who_answers(ring, a, F0, ip_of(b, F1)) == ""  # spark-a's f0 no longer reaches spark-b ...
    assert who_answers(ring, a, F0, ip_of(c, F0)) == c.twin_mac(F0)  # ... but spark-c's f0
    assert not df_ping(ring, a, F0, ip_of(b, F1))
    ring.heal("crossed-ring-cable")
    assert "crossed" not in ring.cli("status").stdout
    assert who_answers(ring, a, F0, ip_of(b, F1)) == b.twin_mac(F1)


def test_a_switch_port_down_fault_is_refused_on_a_ring(ring):
    proc = ring.cli("fault", "switch-port-down", "--node", "spark-c", check=False)
    assert proc.returncode == 1
    assert "needs a switch (scripts/testbed up --nodes 4 --topology switch)" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def switch(testbed_shape):
    """The switch of four, every twin addressed (after the ring tests: a shape change from ring to switch)."""
    bed = testbed_shape(4, "switch")
    address_every_twin(bed)
    return bed


def test_a_switch_of_four_reaches_every_node_from_every_node_at_mtu(switch):
    assert [node.name for node in NODES] == ["spark-a", "spark-b", "spark-c", "spark-d"]
    assert "\ntopology: switch\n" in switch.inventory.read_text()
    for node in NODES:
        for other in NODES:
            if other.name != node.name:
                for twin in (F1, F1B):
                    assert df_ping(switch, node, twin, ip_of(other, twin)), f"{node.name} -> {other.name} {twin}"
        assert not has_carrier(switch, node, F0)  # port f0 unplugged through a switch


def test_a_switch_port_down_cuts_that_node_only(switch):
    a, b, c, d = NODES
    switch.fault("switch-port-down", "spark-c")
    assert not has_carrier(switch, c, F1) and not has_carrier(switch, c, F1B)
    assert not df_ping(switch, a, F1, ip_of(c, F1))
    assert df_ping(switch, a, F1, ip_of(d, F1))
    switch.heal("switch-port-down")
    switch.wait_until(lambda: has_carrier(switch, c, F1), 10, "spark-c's switch port back")
    assert df_ping(switch, a, F1, ip_of(c, F1))


MODEL = "nvidia/Qwen3-235B-A22B-FP4"
IMAGE = "sparkpair/trtllm-sim:1.3.0rc12"
ENGINE_PORT = 18355  # not the serving port 8355: what a project's test left serving there stays out of the way
CONTAINER_SSHD = ("cp -R /tmp/.ssh /root/ && chown -R root:root /root/.ssh && chmod 700 /root/.ssh "
                  "&& chmod 600 /root/.ssh/* && printf 'Host *\\n StrictHostKeyChecking no\\n "
                  "UserKnownHostsFile /dev/null\\n Port 2233\\n LogLevel ERROR\\n' "
                  "> /etc/ssh/ssh_config.d/mpi.conf && sed -i 's/^session.*required.*pam_loginuid.so/"
                  "session optional pam_loginuid.so/' /etc/pam.d/sshd && exec /usr/sbin/sshd -D -p 2233")


def http(method: str, url: str, body: dict | None = None) -> tuple:
    """(status, text) of an HTTP request from the operator's namespace; (0, error) when it fails."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


@pytest.fixture
def engine_containers(switch):
    """On every node of the switch: the nvidia keys of all nodes authorized everywhere (each node's own
    authorized_keys put back afterwards), and an engine container with sshd on 2233 for mpirun."""
    names = [node.name for node in NODES]
    keys = {}
    for name in names:
        switch.exec(name, "cp -p ~/.ssh/authorized_keys ~/.ssh/authorized_keys.before-tp && (test -f ~/.ssh/id_ed25519 "
                          "|| ssh-keygen -q -t ed25519 -N '' -f ~/.ssh/id_ed25519)", user="nvidia")
        keys[name] = switch.exec(name, "cat ~/.ssh/id_ed25519.pub", user="nvidia").stdout.strip()
    try:
        for name in names:
            switch.exec(name, "cat >> ~/.ssh/authorized_keys <<'EOF'\n" + "\n".join(keys.values()) + "\nEOF",
                        user="nvidia")
            switch.ssh(name, f"docker run -d --rm --name tb-mpi --network host -v ~/.ssh:/tmp/.ssh:ro {IMAGE} "
                             f"bash -c \"{CONTAINER_SSHD}\"")
        for name in names:
            switch.wait_until(lambda n=name: ":2233" in switch.exec(n, "ss -Hltn").stdout, 15, f"container sshd on {name}")
        yield names
    finally:
        for name in names:
            switch.ssh(name, "docker rm -f tb-mpi >/dev/null 2>&1; mv ~/.ssh/authorized_keys.before-tp "
                             "~/.ssh/authorized_keys", check=False)


def test_the_stand_in_engine_reaches_ready_at_tp4_across_the_switch(switch, engine_containers):
    for name in engine_containers:
        switch.ssh(name, f"docker exec tb-mpi hf download {MODEL} --quiet", timeout=120)
    taken = switch.exec("spark-a", f"ss -Hltn sport = :{ENGINE_PORT}").stdout.strip()
    assert not taken, f"port {ENGINE_PORT} already taken on spark-a"
    hosts = ",".join(f"{ip_of(node, F1)}:1" for node in NODES)
    switch.ssh("spark-a", "docker exec -d -e OMPI_ALLOW_RUN_AS_ROOT=1 -e OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                          "-e SIM_LOAD_SECONDS=1 -e SIM_COLLECTIVE_TIMEOUT_S=3 tb-mpi "
                          f"mpirun -np 4 -H {hosts} -mca btl tcp,self -mca btl_tcp_if_include {F1} "
                          f"-mca oob_tcp_if_include {F1} -x SIM_LOAD_SECONDS -x SIM_COLLECTIVE_TIMEOUT_S "
                          f"trtllm-llmapi-launch trtllm-serve {MODEL} --backend pytorch --tp_size 4 "
                          f"--host 0.0.0.0 --port {ENGINE_PORT}")
    base = f"http://{NODES[0].mgmt_ip}:{ENGINE_PORT}"
    switch.wait_until(lambda: http("GET", f"{base}/health")[0] == 200, 90, "the engine at TP=4 to be ready")
    status, text = http("POST", f"{base}/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 4})
    assert status == 200 and json.loads(text)["choices"][0]["text"], text
    ranks = [switch.exec(name, "pgrep -fc 'trtllm-serve' || true").stdout.strip() for name in engine_containers]
    assert all(count not in ("", "0") for count in ranks), ranks  # a rank on every one of the four nodes


def test_plain_up_brings_back_exactly_the_pair(switch):
    switch.cli("up")
    assert list(NODES) == list(PAIR_NODES)
    assert not (STATE_DIR / "shape.json").exists() and not (STATE_DIR / "nodes" / "spark-c").exists()
    assert not {"spark-c", "spark-d"} & set(netns_list())
    status = switch.cli("status").stdout
    assert "cabling:straight" in status and "spark-c" not in status
    assert "topology:" not in switch.inventory.read_text()
    a = PAIR_NODES[0]
    fresh = json.loads(switch.exec("spark-a", ["ip", "-j", "addr", "show", F0]).stdout)[0]
    assert not [info for info in fresh.get("addr_info", []) if info["family"] == "inet"]
    switch.exec("spark-a", f"ip link set {F0} up")
    assert not has_carrier(switch, a, F0)  # unplugged again in the pair
    switch.exec("spark-a", f"ip link set {F0} down")


def test_a_node_that_comes_back_keeps_its_host_keys(switch):
    """spark-c left with the switch (previous test); brought back in a ring it is the same machine."""
    assert list(NODES) == list(PAIR_NODES)
    kept = (STATE_DIR / "kept-host-keys" / "spark-c" / "ssh_host_ed25519_key.pub").read_text()
    switch.cli("up", "--nodes", 3, "--topology", "ring")
    assert switch.exec("spark-c", "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout == kept
    switch.cli("up")
    assert list(NODES) == list(PAIR_NODES)
