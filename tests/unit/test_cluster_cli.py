"""Every command that reaches the nodes drives every node of a ring or a switch: setup-network and doctor; launch,
status, logs, stop and bundle (tests/unit/test_cluster_launch.py); and diff, bench, train-draft and unlock, which
refused more than two nodes (`nodes: got 3 (ring); expected two ...`, exit 2) until issue 28. The gate tests reach
nothing: the nodes are on loopback and the SSH key does not exist. `sparkpair diff` at N runs on scripted nodes
(tests/fakenode.py): one column per node, head first, the fields that differ on any node first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakenode import FakeNode, ProbeRound, fake_pair, is_probe_round

from sparkpair.cli import main
from sparkpair.cli.app import App
from sparkpair.engine import lockflow
from sparkpair.engine.launch import LaunchOptions, resolve
from sparkpair.inventory import Inventory, read_inventory
from sparkpair.lockfile.store import write_lock
from sparkpair.probes import host

REFUSAL = "nodes: got 3 (ring); expected two for a command that reaches the nodes"  # the refusal before issue 28
KERNEL = "6.11.0-1016-nvidia"


@pytest.mark.parametrize("command", [["setup-network", "--dry-run"], ["doctor", "--only", "links", "--timeout", "5"]])
def test_setup_network_and_doctor_take_a_ring(ring_file: Path, command: list[str],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["-i", str(ring_file), *command])
    out, err = capsys.readouterr()
    assert REFUSAL not in err and "Traceback" not in err
    if command[0] == "doctor":  # every node of the ring is judged, each unreachable here
        assert all(name in out for name in ("spark-a", "spark-b", "spark-c")) and "node unreachable" in out
    else:  # every node is named for the missing key: the three of them were to be reached
        assert code == 1 and all(f"spark-{n}: the SSH key" in err for n in "abc")


@pytest.mark.parametrize(("command", "reached"), [
    (["diff"], "abc"), (["diff", "--json"], "abc"), (["bench"], "abc"),
    (["train-draft", "--name", "local/mine"], "abc"), (["train-draft", "--name", "local/mine", "--nodes", "3"], "abc"),
    (["unlock"], "")])
def test_diff_bench_train_draft_and_unlock_take_a_ring_and_reach_every_node(
        ring_file: Path, command: list[str], reached: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-i", str(ring_file), *command]) != 0  # no node answers here
    out, err = capsys.readouterr()
    assert REFUSAL not in err and "expected two" not in err and "Traceback" not in err + out
    assert "SSH key" in err and all(f"spark-{n}: the SSH key" in err for n in reached)  # each was to be reached
    # (unlock: the head only, not named)


def test_train_draft_refuses_more_nodes_than_the_inventory_has_in_one_line(
        ring_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-i", str(ring_file), "train-draft", "--name", "local/mine", "--nodes", "4"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --nodes 4: the inventory has 3 nodes") and "SSH key" not in err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2


# --- sparkpair diff over a ring of three, on scripted nodes ---------------------------------------------------------

def lock_nodes(inventory: Inventory, kernels: dict[str, str]) -> list[FakeNode]:
    """Each node of the inventory answering a lock's probe round: its kernel, every other probe failed."""
    return [FakeNode(node.name, home="/home/nvidia")
            .on(is_probe_round, ProbeRound({host.KERNEL: kernels.get(node.name, KERNEL) + "\n"},
                                           others=(1, "", "not answered")))
            for node in inventory.nodes]


def diff_of(ring_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
            kernels: dict[str, str], *argv: str) -> tuple[int, str, list[FakeNode]]:
    nodes = lock_nodes(read_inventory(str(ring_file)), kernels)
    monkeypatch.setattr(App, "pair", lambda self, **options: fake_pair(*nodes))
    code = main(["-i", str(ring_file), "diff", *argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "expected two" not in err
    return code, out, nodes


def test_diff_puts_every_node_of_a_ring_side_by_side_the_differences_first(
        ring_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    drifted = "6.11.0-1099-nvidia"
    code, out, nodes = diff_of(ring_file, monkeypatch, capsys, {"spark-c": drifted})
    lines = out.splitlines()
    assert code == 1 and lines[0].split() == ["field", "spark-a", "spark-b", "spark-c"]
    assert "≠ kernel" in out and [line.split()[2:] for line in lines if " kernel " in line] == \
        [[KERNEL, KERNEL, drifted]]
    marked = [index for index, line in enumerate(lines[1:-1]) if line.startswith("≠")]
    assert marked == list(range(len(marked)))  # the fields that differ on any node come first
    assert lines[-1].endswith("field(s) differ among spark-a, spark-b and spark-c")
    assert all(len(node.calls) == 1 for node in nodes)  # one probe round per node


def test_diff_json_of_a_ring_gives_every_nodes_value_per_field(
        ring_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = diff_of(ring_file, monkeypatch, capsys, {"spark-b": "6.11.0-1099-nvidia"}, "--json")
    data = json.loads(out)
    assert code == 1 and data["nodes"] == ["spark-a", "spark-b", "spark-c"]
    kernel = next(item for item in data["fields"] if item["field"] == "kernel")
    assert kernel == {"field": "kernel", "same": False,
                      "values": {"spark-a": KERNEL, "spark-b": "6.11.0-1099-nvidia", "spark-c": KERNEL}}
    assert all(list(item["values"]) == data["nodes"] for item in data["fields"])
    assert data["differing"] == sum(not item["same"] for item in data["fields"])


def test_diff_lock_compares_every_node_of_a_ring_with_the_lock(
        ring_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    inventory = read_inventory(str(ring_file))
    view, profile = resolve(inventory, LaunchOptions(profile=inventory.server.profile))
    names = [node.name for node in inventory.nodes]
    locked = lockflow.gather_lock(fake_pair(*lock_nodes(inventory, {})), view, profile, names, ring_file)
    lock_path = ring_file.parent / "sparkpair.lock"
    write_lock(lock_path, locked)
    assert sorted(locked.nodes) == names
    code, out, _ = diff_of(ring_file, monkeypatch, capsys, {"spark-c": "6.11.0-1099-nvidia"},
                           "--lock", str(lock_path))
    assert code == 1 and out.splitlines()[0].startswith(
        f"spark-c: kernel: locked {KERNEL}, found 6.11.0-1099-nvidia; fix: boot spark-c into the locked kernel")
    assert out.splitlines()[-1] == f"1 difference(s) from the lock {lock_path}"
    assert diff_of(ring_file, monkeypatch, capsys, {}, "--lock", str(lock_path))[0] == 0


def test_the_bundles_diff_json_holds_every_node_of_a_ring(ring_file: Path) -> None:
    inventory = read_inventory(str(ring_file))
    view, profile = resolve(inventory, LaunchOptions(profile=inventory.server.profile))
    pair = fake_pair(*lock_nodes(inventory, {"spark-c": "6.11.0-1099-nvidia"}))
    files, missing = lockflow.bundle_files(pair, view, profile, None, ring_file.parent / "no.lock")
    data = json.loads(next(item.text for item in files if item.path == "diff.json"))
    assert data["nodes"] == ["spark-a", "spark-b", "spark-c"] and data["differing"] == 1
    assert data["fields"][0]["values"]["spark-c"] == "6.11.0-1099-nvidia"
