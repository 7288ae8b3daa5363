"""The simulated RDMA driver on the live pair: /sys/class/infiniband, ibv_devinfo and ibdev2netdev agree with
the kernel's netdevs, and follow an address and an MTU as a ConnectX-7's do."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration

TWIN, DEVICE = "enP2p1s0f0np0", "roceP2p1s0f0"   # an uncabled twin: changing it disturbs nothing else
ADDRESS, GID = "198.19.9.11/24", "0000:0000:0000:0000:0000:ffff:c613:090b"


def tree(bed, node):
    """The node's GID table of DEVICE as {index: (gid, type)}."""
    out = bed.exec(node, f"cd /sys/class/infiniband/{DEVICE}/ports/1 && grep -s -H . gids/* gid_attrs/types/*",
                   check=False).stdout
    gids, types = {}, {}
    for line in out.splitlines():
        path, _, value = line.partition(":")
        index = int(path.rsplit("/", 1)[1])
        (types if path.startswith("gid_attrs") else gids)[index] = value
    return {index: (gids[index], types[index]) for index in types}


def active_mtu(bed, node):
    out = bed.exec(node, f"ibv_devinfo -d {DEVICE}").stdout
    return next(line.split()[1] for line in out.splitlines() if "active_mtu:" in line)


def test_every_twin_has_its_rdma_device_as_the_tools_show_it(testbed):
    for node in ("spark-a", "spark-b"):
        devices = testbed.exec(node, "ls /sys/class/infiniband").stdout.split()
        assert sorted(devices) == ["roceP2p1s0f0", "roceP2p1s0f1", "rocep1s0f0", "rocep1s0f1"]
        listing = testbed.ssh(node, "ibv_devinfo -l").stdout
        assert listing.startswith("4 HCAs found:")
        for line in testbed.ssh(node, "ibdev2netdev").stdout.splitlines():
            device, netdev, state = line.split()[0], line.split()[4], line.split()[5]
            port = testbed.exec(node, f"cat /sys/class/infiniband/{device}/ports/1/state").stdout.strip()
            assert (state == "(Up)") == (port == "4: ACTIVE"), line
            assert testbed.exec(node, f"cat /sys/class/infiniband/{device}/ports/1/gid_attrs/ndevs/0").stdout.strip() \
                == netdev


def test_an_address_takes_gid_entries_2_and_3_and_the_roce_mtu_follows_the_netdev(testbed):
    node = "spark-a"
    before = testbed.exec(node, f"ip -j link show {TWIN}").stdout
    mtu = int(before.split('"mtu":')[1].split(",")[0])
    try:
        testbed.exec(node, f"ip addr add {ADDRESS} dev {TWIN}")
        table = testbed.wait_until(lambda: (lambda t: t if 3 in t else None)(tree(testbed, node)), 10, "the GIDs")
        assert table[2] == (GID, "IB/RoCE v1") and table[3] == (GID, "RoCE v2")
        assert table[0][0].startswith("fe80:0000:0000:0000:") and table[0][1] == "IB/RoCE v1"
        testbed.exec(node, f"ip link set dev {TWIN} mtu 9000")
        assert active_mtu(testbed, node) == "4096"
        testbed.exec(node, f"ip link set dev {TWIN} mtu 1500")
        assert active_mtu(testbed, node) == "1024"
    finally:
        testbed.exec(node, f"ip addr del {ADDRESS} dev {TWIN}", check=False)
        testbed.exec(node, f"ip link set dev {TWIN} mtu {mtu}")
    testbed.wait_until(lambda: 3 not in tree(testbed, node), 10, "the GIDs to go")
