"""The engine container on each node, through the Docker API over the node's SSH connection.

A container is reused only when it runs the exact spec sparkpair would create (compared through
a hash label); otherwise it is replaced only when the operator says --replace.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from sparkpair import recipe
from sparkpair.errors import SparkpairError
from sparkpair.inventory import Inventory
from sparkpair.transport import NodeConnection, Shell
from sparkpair.transport.dockerapi import docker_errors, find_container, find_image_id, run_container

SPEC_LABEL = "sparkpair.spec"


def spec_hash(spec: recipe.ContainerSpec) -> str:
    """A short stable digest of everything that defines the container."""
    return hashlib.sha256(json.dumps(asdict(spec), sort_keys=True).encode()).hexdigest()[:16]


def node_spec(inventory: Inventory, connection: NodeConnection) -> recipe.ContainerSpec:
    """The spec for this node: GPUs when the NVIDIA runtime exists, /dev/infiniband when present."""
    with docker_errors(connection.name, "docker info"):
        gpus = "nvidia" in (connection.docker().info().get("Runtimes") or {})
    infiniband = connection.run(Shell("test -d /dev/infiniband")).ok
    return recipe.container_spec(inventory, connection.node, connection.home, gpus=gpus, infiniband=infiniband)


def image_id(connection: NodeConnection, image: str) -> str | None:
    """The node's image ID for image, or None when it does not have it."""
    with docker_errors(connection.name, f"docker image inspect {image}"):
        return find_image_id(connection.docker(), image)


def find(connection: NodeConnection, name: str) -> Any:
    """The container called name on the node, or None."""
    with docker_errors(connection.name, f"docker container inspect {name}"):
        return find_container(connection.docker(), name)


def ensure(connection: NodeConnection, spec: recipe.ContainerSpec, replace: bool) -> str:
    """Make the node run spec; returns what was done (started, reused, replaced)."""
    digest = spec_hash(spec)
    existing = find(connection, spec.name)
    if existing is not None:
        labels = existing.labels or {}
        if labels.get(SPEC_LABEL) == digest and existing.status == "running":
            return "reused (same spec, running)"
        if labels.get(SPEC_LABEL) != digest and not replace and "sparkpair.node" not in labels:
            raise SparkpairError(f"a container named {spec.name} exists and was not started by sparkpair",
                                 node=connection.name, hint=f"docker rm -f {spec.name}, or rerun with --replace")
        if labels.get(SPEC_LABEL) != digest and not replace and existing.status == "running":
            raise SparkpairError(f"{spec.name} is running with another spec (inventory or profile changed)",
                                 node=connection.name, hint="sparkpair stop first, or rerun with --replace")
        with docker_errors(connection.name, f"docker rm -f {spec.name}"):
            existing.remove(force=True)
        action = "replaced"
    else:
        action = "started"
    _prepare_host_dirs(connection, spec)
    _run(connection, spec, digest)
    return action


def _prepare_host_dirs(connection: NodeConnection, spec: recipe.ContainerSpec) -> None:
    """Create mount sources as the user first (Docker would create missing ones owned by root)."""
    directories = [source for target, (source, _) in spec.mounts.items() if target != recipe.HOST_KEY]
    connection.check(Shell("mkdir -p " + " ".join(["{}"] * len(directories)) + " && chmod 700 {}",
                           *directories, spec.mounts[recipe.SECRETS_DIR][0]))


def _run(connection: NodeConnection, spec: recipe.ContainerSpec, digest: str) -> None:
    with docker_errors(connection.name, f"docker run {spec.image}"):
        run_container(connection.docker(), spec.image, spec.command, name=spec.name, network_mode="host",
                      ipc_mode="host", environment=spec.env, labels={**spec.labels, SPEC_LABEL: digest},
                      ulimits=spec.ulimits, gpus=spec.gpus, devices=[f"{device}:{device}" for device in spec.devices],
                      volumes={source: {"bind": target, "mode": mode}
                               for target, (source, mode) in spec.mounts.items()})


def remove(connection: NodeConnection, name: str) -> str:
    """Remove the engine container if it exists (idempotent); what was done."""
    existing = find(connection, name)
    if existing is None:
        return f"no {name} container"
    with docker_errors(connection.name, f"docker rm -f {name}"):
        existing.remove(force=True)
    return f"removed {name}"


def exec_in(connection: NodeConnection, name: str, argv: list[str], *, user: str | None = None,
            detach: bool = False, environment: dict[str, str] | None = None,
            container: Any = None) -> tuple[int, str]:
    """Run argv inside the node's engine container; (exit code, combined output).

    container: the container as `find` just returned it, to spare a second lookup."""
    container = container or find(connection, name)
    if container is None or container.status != "running":
        raise SparkpairError(f"engine container {name} is not running", node=connection.name,
                             hint="sparkpair launch")
    with docker_errors(connection.name, f"docker exec {name}"):
        result = container.exec_run(argv, user=user or "", detach=detach, environment=environment)
    if detach:
        return 0, ""
    return int(result.exit_code or 0), result.output.decode("utf-8", "replace")


def stream_in(connection: NodeConnection, name: str, argv: list[str], on_line: Callable[[str], None], *,
              user: str | None = None, environment: dict[str, str] | None = None) -> int:
    """Run argv in the container, handing each output line to on_line as it comes; the exit code."""
    with docker_errors(connection.name, f"docker exec {name}"):
        client = connection.docker().api
        exec_id = client.exec_create(name, argv, user=user or "", environment=environment)["Id"]
        pending = ""
        for chunk in client.exec_start(exec_id, stream=True):
            pending += chunk.decode("utf-8", "replace").replace("\r", "\n")
            *lines, pending = pending.split("\n")
            for line in lines:
                if line.strip():
                    on_line(line)
        if pending.strip():
            on_line(pending)
        return int(client.exec_inspect(exec_id).get("ExitCode") or 0)
