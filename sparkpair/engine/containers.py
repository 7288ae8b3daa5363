"""The engine container on each node: found by probe, started with the runbook's own `docker run` line.

A container is reused only when it runs the exact spec sparkpair would create (compared through
a hash label); otherwise it is replaced only when the operator says --replace.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, replace
from typing import TypeVar, cast

from sparkpair import probes
from sparkpair.errors import SparkpairError
from sparkpair.inventory import Inventory
from sparkpair.probes import NodeFacts, Probe, ProbeFailure, docker, host
from sparkpair.render import recipe
from sparkpair.runtimes import Runtime
from sparkpair.transport import Node, Shell, docker_cli

SPEC_LABEL = "sparkpair.spec"
T = TypeVar("T")


def spec_hash(spec: recipe.ContainerSpec) -> str:
    """A short stable digest of everything that defines the container."""
    return hashlib.sha256(json.dumps(asdict(spec), sort_keys=True).encode()).hexdigest()[:16]


def ask(connection: Node, probe: Probe[T]) -> T:
    """One probe's value on the node; its failure becomes a SparkpairError naming the node."""
    facts = probes.gather(connection, [probe])
    value = facts.get(probe)
    if isinstance(value, ProbeFailure):
        raise SparkpairError(f"cannot read {probe.label}: {value}", node=connection.name)
    return cast(T, facts[probe])


def node_spec(inventory: Inventory, runtime: Runtime, connection: Node,
              fabric: recipe.NodeFabric | None = None, known: NodeFacts | None = None) -> recipe.ContainerSpec:
    """The runtime's spec for this node: GPUs when the NVIDIA runtime exists, /dev/infiniband when present, and
    the node's own NCCL_IB_HCA and GID index in its environment (fabric, asked of this node). known: facts
    already gathered on the node this run (launch's preflight); only what they lack is asked."""
    wanted = [docker.DOCKER_INFO, host.INFINIBAND_DEVICES]
    facts = known if known is not None and all(probe in known for probe in wanted) else probes.gather(connection, wanted)
    info = facts.get(docker.DOCKER_INFO)
    if isinstance(info, ProbeFailure) or info is None:
        raise SparkpairError(f"docker info failed: {info}", node=connection.name)
    return runtime.container_spec(inventory, inventory.node(connection.name), connection.home,
                                  gpus="nvidia" in info.runtimes, infiniband=facts.get(host.INFINIBAND_DEVICES) is True,
                                  fabric=fabric)


def image_id(connection: Node, image: str) -> str | None:
    """The node's image ID for image, or None when it does not have it."""
    return ask(connection, docker.image_id(image))


def find(connection: Node, name: str) -> docker.ContainerState | None:
    """The container called name on the node, or None."""
    return ask(connection, docker.container(name))


def ensure(connection: Node, spec: recipe.ContainerSpec, replace_existing: bool,
           known: NodeFacts | None = None) -> str:
    """Make the node run spec; returns what was done (started, reused, replaced). known: facts gathered on
    the node this run, under the pair lock (the container's state in them is still true)."""
    digest = spec_hash(spec)
    probe = docker.container(spec.name)
    if known is not None and probe in known and not isinstance(known[probe], ProbeFailure):
        existing = cast(docker.ContainerState | None, known[probe])
    else:
        existing = find(connection, spec.name)
    if existing is not None:
        labels = existing.labels
        if labels.get(SPEC_LABEL) == digest and existing.running:
            return "reused (same spec, running)"
        if labels.get(SPEC_LABEL) != digest and not replace_existing and "sparkpair.node" not in labels:
            raise SparkpairError(f"a container named {spec.name} exists and was not started by sparkpair",
                                 node=connection.name, hint=f"docker rm -f {spec.name}, or rerun with --replace")
        if labels.get(SPEC_LABEL) != digest and not replace_existing and existing.running:
            raise SparkpairError(f"{spec.name} is running with another spec (inventory, profile or the node's "
                                 "RoCE devices or GID index changed)",
                                 node=connection.name, hint="sparkpair stop first, or rerun with --replace")
        docker_cli.remove(connection, spec.name)
        action = "replaced"
    else:
        action = "started"
    _prepare_host_dirs(connection, spec)
    labelled = replace(spec, labels={**spec.labels, SPEC_LABEL: digest})
    docker_cli.run(connection, recipe.docker_run_argv(labelled))
    return action


def _prepare_host_dirs(connection: Node, spec: recipe.ContainerSpec) -> None:
    """Create mount sources as the user first (Docker would create missing ones owned by root)."""
    directories = recipe.host_directories(spec)
    connection.check(Shell("mkdir -p " + " ".join(["{}"] * len(directories)) + " && chmod 700 {}",
                           *directories, spec.mounts[recipe.SECRETS_DIR][0]))


def remove(connection: Node, name: str) -> str:
    """Remove the engine container if it exists (idempotent); what was done."""
    return f"removed {name}" if docker_cli.remove(connection, name) else f"no {name} container"
