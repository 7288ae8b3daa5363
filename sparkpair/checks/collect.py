"""Gather doctor's facts: one batched probe round per node, both nodes at once, the clock beside it."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sparkpair import probes, recipe
from sparkpair.checks import Facts
from sparkpair.errors import SparkpairError
from sparkpair.inventory import Inventory, Node
from sparkpair.probes import Probe, docker, host, models, net
from sparkpair.transport import NodeConnection, Pair, Shell


def _parse_yes(text: str) -> bool:
    return text.strip() == "yes"


TOKEN_ON_NODE = Probe("token_on_node", Shell(f'test -s "$HOME/{recipe.NODE_SECRETS_DIR}/hf_token" && echo yes || echo no'),
                      _parse_yes)


def node_probes(inventory: Inventory, node: Node, profile: str) -> list[Probe[Any]]:
    """Every probe doctor runs on one node (one round trip)."""
    peer = inventory.peer_of(node)
    cache = inventory.container.hf_cache
    batch: list[Probe[Any]] = [
        host.IDENTITY, host.SUDO, host.DGX_RELEASE, host.GPUS, host.MEMINFO, host.LISTENERS,
        net.INTERFACES, net.NETPLAN_FILES, net.RDMA_DEVICES,
        net.crossing({n: str(peer.links[n].ip) for n in node.links}),
        docker.DOCKER_INFO, docker.image_id(inventory.container.image), docker.container(inventory.container.name),
        models.cache_access(cache), host.free_bytes(cache),
        TOKEN_ON_NODE,
    ]
    for name in node.links:
        target = str(peer.links[name].ip)
        batch += [net.ethtool(name), net.ping(name, target), net.ping(name, target, inventory.cluster.mtu - 28),
                  net.ssh_batch(target)]
    batch += [models.manifest(cache, repo) for repo in inventory.profile(profile).repos]
    return batch


def clock_offset(connection: NodeConnection) -> float:
    """The node's clock minus this machine's, measured around one short round trip."""
    before = time.time()
    remote = host.CLOCK.parse(connection.check(host.CLOCK.command))
    after = time.time()
    return remote - (before + after) / 2


def collect(pair: Pair, inventory: Inventory, profile: str, timeout: float) -> Facts:
    """Facts from both nodes in parallel; an unreachable node is recorded, not raised."""
    facts = Facts(inventory, profile)

    def gather(connection: NodeConnection) -> tuple[dict[str, Any], float]:
        connection.connect()
        with ThreadPoolExecutor(1) as pool:  # the clock's round trip rides beside the probe round
            clock = pool.submit(clock_offset, connection)
            gathered = probes.gather(connection, node_probes(inventory, connection.node, profile), timeout=timeout)
            return gathered, clock.result()

    for name, result in pair.each(gather).items():
        if isinstance(result, SparkpairError):
            facts.unreachable[name] = result.message
            facts.connect_hints[name] = result.hint
            facts.nodes[name] = {}
        elif isinstance(result, BaseException):
            facts.unreachable[name] = f"{type(result).__name__}: {result}"
            facts.nodes[name] = {}
        else:
            facts.nodes[name], facts.clock_offsets[name] = result
    return facts
