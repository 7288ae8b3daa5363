"""Gather doctor's facts: one batched probe round per node, every node at once, the clock beside it."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sparkpair import probes, transport
from sparkpair.checks import Facts, engine, known, links, training
from sparkpair.errors import SparkpairError
from sparkpair.inventory import Inventory, Node
from sparkpair.inventory.profiles import Profile
from sparkpair.probes import NodeFacts, Probe, host
from sparkpair.transport import Pair


def node_probes(inventory: Inventory, node: Node, profile: Profile,
                verify_budget: float = engine.VERIFY_BUDGET_S) -> list[Probe[Any]]:
    """Every probe doctor runs on one node (one round trip): what each check module judges; model files
    are hashed for at most verify_budget seconds."""
    return [host.IDENTITY, host.SUDO, host.DGX_RELEASE, host.GPUS, host.MEMINFO,
            *links.link_probes(inventory, node), *links.trust_probes(inventory, node),
            *engine.engine_probes(inventory, profile, verify_budget), *training.training_probes(inventory, node),
            *known.known_probes(inventory)]


def clock_offset(connection: transport.Node) -> float:
    """The node's clock minus this machine's, measured around one short round trip."""
    before = time.time()
    remote = host.CLOCK.parse(connection.check(host.CLOCK.command))
    after = time.time()
    return remote - (before + after) / 2


def collect(pair: Pair, inventory: Inventory, profile: Profile, timeout: float) -> Facts:
    """Facts from both nodes in parallel; an unreachable node is recorded, not raised."""
    facts = Facts(inventory, profile)

    def gather(connection: transport.Node) -> tuple[NodeFacts, float]:
        connection.connect()
        with ThreadPoolExecutor(1) as pool:  # the clock's round trip rides beside the probe round
            clock = pool.submit(clock_offset, connection)
            budget = min(engine.VERIFY_BUDGET_S, timeout / 3)  # hashing must leave the round trip time to finish
            gathered = probes.gather(connection, node_probes(inventory, inventory.node(connection.name), profile,
                                                             budget), timeout=timeout)
            return gathered, clock.result()

    result = pair.each(gather)
    for name in result:
        error = result.failed.get(name)
        if error is None:
            facts.nodes[name], facts.clock_offsets[name] = result[name]
            continue
        facts.nodes[name] = NodeFacts()
        facts.unreachable[name] = error.message if isinstance(error, SparkpairError) else \
            f"{type(error).__name__}: {error}"
        facts.connect_hints[name] = error.hint if isinstance(error, SparkpairError) else ""
    return facts
