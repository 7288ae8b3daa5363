"""SSH trust as a full mesh: each node authorizes every other node's key and pins every other node's host keys,
one change per file; the two-node plan is exactly the pair's plan it always was."""

from __future__ import annotations

from pathlib import Path

from test_topology import ring_data, switch_data

from sparkpair import apply
from sparkpair.inventory import parse_inventory, read_inventory
from sparkpair.network import trust

SIM = read_inventory(Path(__file__).resolve().parents[1] / "fixtures" / "inventory" / "sim.yaml")
RING = parse_inventory(ring_data())
HOST_KEYS = {name: ("ssh-ed25519", f"AAAAC3NzaC1lZDI1NTE5AAAAI{name[-1].upper() * 43}")
             for name in ("spark-a", "spark-b", "spark-c", "spark-d")}
OTHER_KEY = ("ssh-ed25519", "AAAAC3NzaC1lZDI1NTE5AAAAIO" + "x" * 42)


def pub(name: str) -> str:
    return f"{HOST_KEYS[name][0]} {HOST_KEYS[name][1]} sparkpair@{name}"


def fresh(names: list[str], known_hosts: dict[str, str] | None = None) -> dict[str, trust.SshFiles]:
    """Each node with its own key and host key, nothing authorized, nothing pinned (unless known_hosts says)."""
    return {name: trust.SshFiles(pub(name), None, (known_hosts or {}).get(name), name, (HOST_KEYS[name],), True)
            for name in names}


def content(change: apply.Change) -> str:
    return change.actions[0].content  # type: ignore[attr-defined, no-any-return]


def test_the_pair_plan_is_the_one_it_always_was() -> None:
    changes, refusals = trust.trust_plan(SIM, fresh(["spark-a", "spark-b"]), HOST_KEYS)
    assert refusals == []
    assert [(c.node, c.summary, content(c)) for c in changes] == [
        ("spark-b", "authorize spark-a's key", f"{pub('spark-a')}\n"),
        ("spark-a", "learn spark-b's host keys for 198.19.1.12, 198.19.2.12, spark-b",
         f"198.19.1.12,198.19.2.12,spark-b {' '.join(HOST_KEYS['spark-b'])}\n"),
        ("spark-a", "authorize spark-b's key", f"{pub('spark-b')}\n"),
        ("spark-b", "learn spark-a's host keys for 198.19.1.11, 198.19.2.11, spark-a",
         f"198.19.1.11,198.19.2.11,spark-a {' '.join(HOST_KEYS['spark-a'])}\n")]


def test_a_ring_trusts_as_a_full_mesh_one_change_per_file() -> None:
    changes, refusals = trust.trust_plan(RING, fresh(["spark-a", "spark-b", "spark-c"]), HOST_KEYS)
    assert refusals == []
    files = [(c.node, c.actions[0].path) for c in changes]  # type: ignore[attr-defined]
    assert len(files) == len(set(files)) == 6
    authorized = {c.node: content(c) for c in changes if c.summary.startswith("authorize")}
    assert authorized == {"spark-a": f"{pub('spark-b')}\n{pub('spark-c')}\n",
                          "spark-b": f"{pub('spark-a')}\n{pub('spark-c')}\n",
                          "spark-c": f"{pub('spark-a')}\n{pub('spark-b')}\n"}
    [learn_b] = [c for c in changes if c.node == "spark-b" and c.summary.startswith("learn")]
    assert learn_b.summary == ("learn spark-a's host keys for 198.19.10.1, 198.19.11.1, 198.19.30.2, 198.19.31.2, "
                               "spark-a; spark-c's host keys for 198.19.30.1, 198.19.31.1, 198.19.20.2, 198.19.21.2, "
                               "spark-c")
    assert content(learn_b).splitlines() == [
        f"198.19.10.1,198.19.11.1,198.19.30.2,198.19.31.2,spark-a {' '.join(HOST_KEYS['spark-a'])}",
        f"198.19.30.1,198.19.31.1,198.19.20.2,198.19.21.2,spark-c {' '.join(HOST_KEYS['spark-c'])}"]


def test_a_switch_of_four_authorizes_every_other_node_on_each() -> None:
    switch = parse_inventory(switch_data(4))
    names = [node.name for node in switch.nodes]
    changes, refusals = trust.trust_plan(switch, fresh(names), HOST_KEYS)
    assert refusals == [] and len(changes) == 8
    for change in (c for c in changes if c.summary.startswith("authorize")):
        others = [name for name in names if name != change.node]
        assert content(change) == "".join(f"{pub(name)}\n" for name in others)
        assert change.summary == f"authorize {', '.join(others[:-1])} and {others[-1]}'s keys"


def test_a_node_whose_host_key_is_not_the_verified_one_is_refused_by_every_learner_alone() -> None:
    verified = {**HOST_KEYS, "spark-c": OTHER_KEY}
    changes, refusals = trust.trust_plan(RING, fresh(["spark-a", "spark-b", "spark-c"]), verified)
    assert refusals == [f"spark-c: the host key this machine verified ({trust.fingerprint(*OTHER_KEY)}) is not among "
                        f"its /etc/ssh/ssh_host_*_key.pub; refusing to teach it to {learner} (is another sshd "
                        "answering on 198.18.0.13?)" for learner in ("spark-a", "spark-b")]
    learnt = {c.node: c.summary for c in changes if c.summary.startswith("learn")}
    assert learnt["spark-a"].startswith("learn spark-b's host keys") and "spark-c" not in learnt["spark-a"]
    assert "spark-a's host keys" in learnt["spark-c"] and "spark-b's host keys" in learnt["spark-c"]


def test_a_pinned_key_that_clashes_for_one_peer_leaves_the_other_peers_learnt() -> None:
    pinned = {"spark-a": f"198.19.10.2 {' '.join(OTHER_KEY)}\n"}  # spark-a pins another key for spark-b
    changes, refusals = trust.trust_plan(RING, fresh(["spark-a", "spark-b", "spark-c"], pinned), HOST_KEYS)
    assert len(refusals) == 1 and refusals[0].startswith("spark-a: ~/.ssh/known_hosts has another host key for "
                                                         "198.19.10.2 (") and "ssh-keygen -R 198.19.10.2 on spark-a" in refusals[0]
    [learn_a] = [c for c in changes if c.node == "spark-a" and c.summary.startswith("learn")]
    assert learn_a.summary.startswith("learn spark-c's host keys") and "spark-b" not in learn_a.summary
    assert content(learn_a).startswith(pinned["spark-a"])


def test_a_bad_public_key_is_refused_on_every_node_it_would_reach() -> None:
    files = fresh(["spark-a", "spark-b", "spark-c"])
    files["spark-b"] = trust.SshFiles(f'command="touch /tmp/x" {pub("spark-b")}', None, None, "spark-b",
                                      (HOST_KEYS["spark-b"],), True)
    changes, refusals = trust.trust_plan(RING, files, HOST_KEYS)
    assert sorted(r.split("refusing to authorize it on ")[1].split(" ")[0] for r in refusals) == ["spark-a", "spark-c"]
    assert all("touch" not in r for r in refusals)
    assert all("spark-b" not in content(c) for c in changes if c.summary.startswith("authorize"))
