"""Docker facts, read from the Docker Engine API on the node's socket with curl (batched with the other probes)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sparkpair import boundedjson
from sparkpair.probes import Probe
from sparkpair.transport import Shell


@dataclass(frozen=True)
class DockerInfo:
    server_version: str
    runtimes: frozenset[str]


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
    items = boundedjson.loads(text or "[]")
    if not items:
        return None
    item = items[0]
    state = item.get("State", {})
    return ContainerState(item.get("Name", "").lstrip("/"), state.get("Status", ""), bool(state.get("Running")),
                          item.get("Image", ""), dict(item.get("Config", {}).get("Labels") or {}),
                          state.get("StartedAt", ""))


# The Docker Engine API over the daemon's socket, one curl per question: the docker CLI costs a Go
# start and an API version negotiation per call (about 40 ms of CPU each on a busy node, three per
# doctor round), curl a few ms. The socket is DOCKER_HOST's when that names one, else the default.
SOCKET = ('s=/var/run/docker.sock; case "$DOCKER_HOST" in unix://*) s=${DOCKER_HOST#unix://};; esac; '
          '[ -S "$s" ] || { echo "Cannot connect to the Docker daemon at unix://$s (no socket): is dockerd '
          'running?" >&2; exit 1; }; [ -r "$s" ] && [ -w "$s" ] || { echo "permission denied on the Docker '
          'socket unix://$s (is $(id -un) in group docker?)" >&2; exit 1; }; ')


def api_get(path: str) -> Shell:
    """GET path from the node's Docker Engine API; prints the body, then the HTTP status on a line of its own."""
    return Shell(SOCKET + "curl -sS --max-time 10 --unix-socket \"$s\" -w '\\n%{http_code}\\n' {}",
                 f"http://docker{path}")


def api_answer(text: str) -> tuple[int, str]:
    """(HTTP status, body) of an `api_get` output."""
    body, _, status = text.rstrip("\n").rpartition("\n")
    return int(status), body


def parse_api_info(text: str) -> DockerInfo:
    """Parse GET /info: server version and registered runtimes.

    Sample: tests/fixtures/probes/docker-api-info.txt (a real Docker Engine 20.10)
    """
    status, body = api_answer(text)
    if status != 200:
        raise ValueError(f"GET /info answered HTTP {status}: {body.strip()[:200]}")
    info = boundedjson.loads(body)
    return DockerInfo(str(info.get("ServerVersion", "")), frozenset(info.get("Runtimes") or {}))


def parse_api_container(text: str) -> ContainerState | None:
    """Parse GET /containers/NAME/json; None when the daemon says 404 (no such container)."""
    status, body = api_answer(text)
    if status == 404:
        return None
    if status != 200:
        raise ValueError(f"container inspect answered HTTP {status}: {body.strip()[:200]}")
    return parse_container(f"[{body}]")


def parse_api_image_id(text: str) -> str | None:
    """Parse GET /images/NAME/json for the image ID; None when the daemon says 404 (no such image)."""
    status, body = api_answer(text)
    if status == 404:
        return None
    if status != 200:
        raise ValueError(f"image inspect answered HTTP {status}: {body.strip()[:200]}")
    return str(boundedjson.loads(body)["Id"])


DOCKER_INFO = Probe("docker info", (), api_get("/info"), parse_api_info)


def image_id(image: str) -> Probe[str | None]:
    """The local ID of image; None when the node does not have it."""
    return Probe("image id", (image,), api_get(f"/images/{image}/json"), parse_api_image_id)


def parse_commands(text: str) -> frozenset[str]:
    """The command names an image_commands probe found (one per line; anything else is dropped)."""
    return frozenset(line.strip() for line in text.splitlines() if line.strip().replace("-", "").isalnum())


def image_commands(image: str, commands: tuple[str, ...]) -> Probe[frozenset[str]]:
    """Which of commands the image has on its PATH: a throw-away container without a network runs
    `command -v` for each (only for runtimes whose mode needs a command the image may lack)."""
    script = " ".join(f"command -v {name} >/dev/null 2>&1 && echo {name};" for name in commands) + " true"
    return Probe("image commands", (image, commands),
                 Shell("docker run --rm --network none --entrypoint sh {} -c {}", image, script), parse_commands)


def container(name: str) -> Probe[ContainerState | None]:
    """The container called name; None when there is none."""
    return Probe("container", (name,), api_get(f"/containers/{name}/json"), parse_api_container)


@dataclass(frozen=True)
class ImageConfig:
    """What the node's engine holds under an image name: its ID (the digest of its config: another build
    under the same name has another), its registry digests, and the environment and labels it was built with."""

    image_id: str
    repo_digests: tuple[str, ...]
    env: dict[str, str]
    labels: dict[str, str]


def _strings(value: object) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def parse_api_image_config(text: str) -> ImageConfig | None:
    """Parse GET /images/NAME/json for the ID, RepoDigests, Config.Env and Config.Labels; None when the daemon
    says 404. Entries of the wrong type are dropped; an ID that is not `sha256:` and 64 hex raises ValueError.

    Sample: tests/fixtures/probes/docker-api-image.txt"""
    status, body = api_answer(text)
    if status == 404:
        return None
    if status != 200:
        raise ValueError(f"image inspect answered HTTP {status}: {body.strip()[:200]}")
    data = boundedjson.loads(body)
    image = str(data.get("Id", ""))
    if not IMAGE_ID.fullmatch(image):
        raise ValueError("the image ID is not sha256: and 64 hex digits")
    config = data.get("Config")
    config = config if isinstance(config, dict) else {}
    env = dict(item.partition("=")[::2] for item in _strings(config.get("Env")))
    labels = config.get("Labels")
    labels = labels if isinstance(labels, dict) else {}
    return ImageConfig(image, tuple(sorted(_strings(data.get("RepoDigests")))), env,
                       {str(key): value for key, value in labels.items() if isinstance(value, str)})


IMAGE_ID = re.compile(r"sha256:[0-9a-f]{64}")


def image_config(image: str) -> Probe[ImageConfig | None]:
    """The image's ID, digests, environment and labels on the node; None when the node does not have it."""
    return Probe("image config", (image,), api_get(f"/images/{image}/json"), parse_api_image_config)
