"""The simulated RDMA driver's GID tables (rdmad.Port), without a node: the kernel's slot rules."""
from __future__ import annotations

import pytest
from sparkpair_testbed import rdmad

MAC = "02:5b:10:01:00:02"
V4 = "198.19.1.11"
V6 = "2001:db8:5b:1::1"


@pytest.fixture
def port(tmp_path, monkeypatch):
    monkeypatch.setattr(rdmad, "RDMA_TREE", tmp_path / "infiniband")
    return rdmad.Port("enp1s0f1np1", "rocep1s0f1")


def roce_v2_index(port, address):
    gid = rdmad.gid_text(address)
    return next(i for i, entry in enumerate(port.table) if entry and entry[0] == gid and entry[1] == rdmad.V2)


def test_formats_are_the_kernels() -> None:
    assert rdmad.gid_text(V4) == "0000:0000:0000:0000:0000:ffff:c613:010b"
    assert rdmad.default_gid(MAC) == "fe80:0000:0000:0000:005b:10ff:fe01:0002"
    assert rdmad.node_guid("4c:bb:47:2d:1a:17") == "4cbb:4703:002d:1a17"   # as ibv_devinfo shows on a Spark


def test_the_default_gid_takes_0_and_1_and_an_ipv4_address_2_and_3(port) -> None:
    port.update(MAC, ["fe80::5b:10ff:fe01:2", V4], lost=False)   # the link-local address is the default GID
    assert port.table[0] == (rdmad.default_gid(MAC), rdmad.V1, "enp1s0f1np1")
    assert port.table[1][1] == rdmad.V2 and roce_v2_index(port, V4) == 3 and port.table[4] is None


def test_an_address_added_first_moves_the_ipv4_gid_and_its_removal_leaves_a_hole(port) -> None:
    port.update(MAC, [V6], lost=False)
    port.update(MAC, [V6, V4], lost=False)
    assert roce_v2_index(port, V4) == 5
    port.update(MAC, [V4], lost=False)
    assert port.table[2] is None and port.table[3] is None and roce_v2_index(port, V4) == 5
    port.update(MAC, [], lost=False)
    port.update(MAC, [V4], lost=False)
    assert roce_v2_index(port, V4) == 3


def test_a_lost_ipv4_gid_goes_and_comes_back(port) -> None:
    port.update(MAC, [V4], lost=True)
    assert all(entry is None for entry in port.table[2:])
    port.update(MAC, [V4], lost=False)
    assert roce_v2_index(port, V4) == 3


def test_a_full_table_gives_a_new_address_no_roce_v2_gid(port) -> None:
    fillers = [f"2001:db8:5b:9::{n:x}" for n in range(1, 127)]   # 126 addresses: 252 of the 253 free slots
    port.update(MAC, fillers + [V4], lost=False)
    kinds = [entry[1] for entry in port.table if entry and entry[0] == rdmad.gid_text(V4)]
    assert kinds == [rdmad.V1]


def test_a_restarted_driver_keeps_the_tables_history(port, tmp_path) -> None:
    port.update(MAC, [V6, V4], lost=False)
    port.update(MAC, [V4], lost=False)
    tree = rdmad.Tree()
    tree.write(port.files({"mac": MAC, "carrier": True, "admin_up": True}, rdmad.node_guid(MAC)))
    again = rdmad.Port("enp1s0f1np1", "rocep1s0f1")
    assert again.loaded and roce_v2_index(again, V4) == 5
    state = (tmp_path / "infiniband" / "rocep1s0f1" / "ports" / "1" / "state").read_text()
    assert state == "4: ACTIVE\n"
