"""The shape of the simulated cluster: how many Sparks, and how their QSFP ports are cabled.

    pair    two Sparks back-to-back (the default, today's pair): port f1's twins cable-p1 / cable-p2
    ring    three Sparks, NVIDIA's Connect Three Sparks: port f0 of each Spark to port f1 of the next,
            every twin of a cable in a /24 of its own (docs/cluster.md's example: spark-a f0 198.19.10.1
            and spark-b f1 198.19.10.2, ...); both ports of every Spark cabled
    switch  two to four Sparks, NVIDIA's Multi Sparks through a Switch: port f1 of each Spark to the
            switch (one bridge per twin in spark-cable, like a VLAN per twin), 198.19.1.1N and 198.19.2.1N
            (a pair's addresses, extended); port f0 unplugged

`scripts/testbed up --nodes N --topology T` records the shape in STATE_DIR/shape.json; every later
command (exec, fault, inventory, status, down) reads it. No file means the pair, so a plain `up` after
a cluster shape brings back exactly the pair. Pure, except load() and record().
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from .hostexec import CommandError
from .layout import PAIR_NODES, STATE_DIR, Node

SHAPE_FILE = STATE_DIR / "shape.json"
TOPOLOGIES = ("pair", "ring", "switch")
MAX_NODES = 4  # spark-a .. spark-d; NVIDIA's own setup script stops at four too
RING_NODES = 3
PORT_F0 = ("enp1s0f0np0", "enP2p1s0f0np0")  # the two twins (logical interfaces) of QSFP port f0
PORT_F1 = ("enp1s0f1np1", "enP2p1s0f1np1")  # ... and of port f1 (the pair's cabled port)


@dataclass(frozen=True)
class Shape:
    """N Sparks cabled as TOPOLOGY."""

    count: int
    topology: str

    @property
    def label(self) -> str:
        """`pair`, `ring-3`, `switch-4`: how logs and the inventory name the shape."""
        return "pair" if self.topology == "pair" else f"{self.topology}-{self.count}"


PAIR = Shape(2, "pair")


def parse(count: int | None, topology: str | None) -> Shape:
    """The shape `--nodes COUNT --topology TOPOLOGY` asks for (neither: the pair); raises CommandError
    with one line naming the option and what fits when the two do not go together."""
    chosen = topology or ("pair" if count in (None, 2) else "switch")
    if chosen not in TOPOLOGIES:
        raise CommandError(f"--topology: got {chosen!r}; expected one of {', '.join(TOPOLOGIES)}")
    wanted = count if count is not None else {"pair": 2, "ring": RING_NODES, "switch": MAX_NODES}[chosen]
    fits = {"pair": (2,), "ring": (RING_NODES,), "switch": tuple(range(2, MAX_NODES + 1))}[chosen]
    if wanted not in fits:
        raise CommandError(f"--nodes: got {wanted} for topology {chosen}; expected "
                           f"{' or '.join(map(str, fits))} (pair: 2, ring: 3, switch: 2 to {MAX_NODES})")
    return Shape(wanted, chosen)


def ring_links(index: int) -> dict:
    """QSFP addresses of ring node INDEX: port f0 ends cable INDEX (.1), port f1 ends the previous
    node's cable (.2); cable k's twins in 198.19.(10k+10).0/24 and 198.19.(10k+11).0/24."""
    previous = (index - 1) % RING_NODES
    own = {twin: f"198.19.{10 * index + 10 + half}.1/24" for half, twin in enumerate(PORT_F0)}
    theirs = {twin: f"198.19.{10 * previous + 10 + half}.2/24" for half, twin in enumerate(PORT_F1)}
    return {**own, **theirs}


def switch_links(index: int) -> dict:
    """QSFP addresses of switch node INDEX: port f1's twins in 198.19.1.0/24 and 198.19.2.0/24, host 11+INDEX."""
    return {twin: f"198.19.{half + 1}.{11 + index}/24" for half, twin in enumerate(PORT_F1)}


def nodes_of(shape: Shape) -> tuple:
    """The Nodes of SHAPE: the pair's own Node objects for the pair, spark-a.. otherwise."""
    if shape.topology == "pair":
        return PAIR_NODES
    plan = ring_links if shape.topology == "ring" else switch_links
    return tuple(Node(f"spark-{letter}", letter, index + 1, f"198.18.0.{11 + index}", plan(index))
                 for index, letter in enumerate("abcd"[:shape.count]))


def every_possible_node() -> tuple:
    """Every node any shape can have (spark-a .. spark-d): what a shape change or `down` sweeps."""
    return nodes_of(Shape(MAX_NODES, "switch"))


def cable_plan(shape: Shape, crossed_at: frozenset = frozenset()) -> dict:
    """Bridge in spark-cable -> the cable-side peers it joins, for a ring or a switch (the pair's plan is
    network.cabling). A node named in CROSSED_AT has the cables on its ports f0 and f1 swapped."""
    nodes = nodes_of(shape)
    if shape.topology == "switch":
        return {f"switch-p{half + 1}": tuple(node.cable_peer(twin) for node in nodes)
                for half, twin in enumerate(PORT_F1)}

    def end(node: Node, port_f0: bool, half: int) -> str:
        on_f0 = port_f0 != (node.name in crossed_at)
        return node.cable_peer((PORT_F0 if on_f0 else PORT_F1)[half])

    plan = {}
    for index, node in enumerate(nodes):
        following = nodes[(index + 1) % len(nodes)]
        for half in range(2):
            plan[f"cable-{node.letter}{following.letter}-p{half + 1}"] = (end(node, True, half),
                                                                           end(following, False, half))
    return plan


def load() -> Shape:
    """The recorded shape (no file: the pair); raises CommandError naming the file when it is not one."""
    try:
        data = json.loads(SHAPE_FILE.read_text())
    except FileNotFoundError:
        return PAIR
    except (OSError, ValueError) as exc:
        raise CommandError(f"{SHAPE_FILE}: unreadable ({exc}); fix: scripts/testbed up (restores the pair)") from exc
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), int) or not isinstance(data.get("topology"), str):
        raise CommandError(f"{SHAPE_FILE}: expected {{\"nodes\": N, \"topology\": T}}; fix: scripts/testbed up")
    return parse(data["nodes"], data["topology"])


def record(shape: Shape) -> None:
    """Remember SHAPE for later commands; the pair is the absence of the file (as before shapes existed)."""
    if shape == PAIR:
        SHAPE_FILE.unlink(missing_ok=True)
        return
    SHAPE_FILE.parent.mkdir(parents=True, exist_ok=True)
    staging = SHAPE_FILE.with_suffix(".tmp")
    staging.write_text(json.dumps({"nodes": shape.count, "topology": shape.topology}) + "\n")
    staging.replace(SHAPE_FILE)


def current_nodes() -> tuple:
    """The nodes of the recorded shape."""
    return nodes_of(load())
