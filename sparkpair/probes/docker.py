"""Docker facts, read with the docker CLI on the node (batched with the other probes)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from sparkpair.probes import Probe
from sparkpair.transport import Shell


@dataclass(frozen=True)
class DockerInfo:
    server_version: str
    runtimes: frozenset[str]


def parse_docker_info(text: str) -> DockerInfo:
    """Parse `docker info --format '{{json .}}'`: version and registered runtimes."""
    info = json.loads(text)
    if info.get("ServerErrors"):
        raise ValueError("; ".join(info["ServerErrors"]))
    return DockerInfo(str(info.get("ServerVersion", "")), frozenset(info.get("Runtimes") or {}))


@dataclass(frozen=True)
class ContainerState:
    """A container's state, its image ID and sparkpair's labels."""

    name: str
    status: str
    running: bool
    image_id: str
    labels: dict[str, str]
    started_at: str


def parse_container(text: str) -> ContainerState | None:
    """Parse `docker container inspect NAME` (a one-element list); None when it does not exist."""
    items = json.loads(text or "[]")
    if not items:
        return None
    item = items[0]
    state = item.get("State", {})
    return ContainerState(item.get("Name", "").lstrip("/"), state.get("Status", ""), bool(state.get("Running")),
                          item.get("Image", ""), dict(item.get("Config", {}).get("Labels") or {}),
                          state.get("StartedAt", ""))


def parse_image_id(text: str) -> str | None:
    """Parse `docker image inspect --format '{{.Id}}'`; empty output means no such image."""
    return text.strip() or None


DOCKER_INFO = Probe("docker info", (), Shell("docker info --format '{{json .}}'"), parse_docker_info)


def image_id(image: str) -> Probe[str | None]:
    """The local ID of image; None when the node does not have it."""
    return Probe("image id", (image,), Shell("docker image inspect --format '{{.Id}}' {} 2>/dev/null || true", image),
                 parse_image_id)


def container(name: str) -> Probe[ContainerState | None]:
    """The container called name; None when there is none."""
    return Probe("container", (name,), Shell("docker container inspect {} 2>/dev/null; true", name), parse_container)
