"""The Docker SDK over a node's SSH connection, and the only place sparkpair touches its types.

Every Docker error becomes a SparkpairError that names the node, so a daemon that goes away or a
container that stops between two calls ends as a one-line failure, not a traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import docker
import docker.errors
import paramiko
from docker.transport.sshconn import RecentlyUsedContainer, SSHHTTPAdapter
from docker.types import DeviceRequest, Ulimit

from sparkpair.errors import SparkpairError


def docker_over(client: paramiko.SSHClient, node: str) -> docker.DockerClient:
    """docker-py's SSH adapter, riding an already open and verified paramiko client."""

    class SharedSSHAdapter(SSHHTTPAdapter):
        def __init__(self) -> None:  # skip docker-py's own connect and host-key handling
            self.ssh_client, self.ssh_host, self.timeout, self.max_pool_size = client, node, 120, 4
            self.pools = RecentlyUsedContainer(4, dispose_func=lambda pool: pool.close())
            super(SSHHTTPAdapter, self).__init__()

        def close(self) -> None:  # the SSH connection belongs to NodeConnection
            self.pools.clear()

    docker_client = docker.DockerClient(base_url="tcp://127.0.0.1:9", version="1.41", timeout=120)
    api = docker_client.api
    api._custom_adapter = SharedSSHAdapter()
    api.mount("http+docker://ssh", api._custom_adapter)
    api.base_url = "http+docker://ssh"
    api._version = api._retrieve_server_version()
    return docker_client


@contextmanager
def docker_errors(node: str, doing: str) -> Iterator[None]:
    """Turn any Docker SDK error raised in the block into a SparkpairError naming node and what it was doing."""
    try:
        yield
    except docker.errors.APIError as error:
        raise SparkpairError(f"{doing} failed: {error.explanation or error}", node=node) from None
    except docker.errors.DockerException as error:
        raise SparkpairError(f"{doing} failed: {error}", node=node) from None


def find_container(client: docker.DockerClient, name: str) -> Any:
    """The container called name, or None."""
    try:
        return client.containers.get(name)
    except docker.errors.NotFound:
        return None


def find_image_id(client: docker.DockerClient, image: str) -> str | None:
    """The local image ID of image, or None when the node does not have it."""
    try:
        return str(client.images.get(image).id)
    except docker.errors.ImageNotFound:
        return None


def run_container(client: docker.DockerClient, image: str, command: list[str], *, ulimits: dict[str, int],
                  volumes: dict[str, dict[str, str]], gpus: bool, **options: Any) -> Any:
    """docker run -d with the given ulimits, bind mounts and (when gpus) every GPU."""
    return client.containers.run(
        image, command, detach=True, volumes=volumes,
        ulimits=[Ulimit(name=name, soft=value, hard=value) for name, value in ulimits.items()],
        device_requests=[DeviceRequest(count=-1, capabilities=[["gpu"]])] if gpus else [], **options)
