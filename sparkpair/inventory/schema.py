"""The inventory's schema: the pydantic models of the one file that describes the pair.

Every field carries its own validator, whose message says what is expected (messages.py turns
them into one-line errors).
"""

from __future__ import annotations

import ipaddress
import os
import re
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
)

from sparkpair.inventory.profiles import Profile, profile_sources

SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|API_KEY|PASSWD", re.IGNORECASE)


def _matching(regex: str, expected: str) -> AfterValidator:
    compiled = re.compile(regex)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(expected)
        return value

    return AfterValidator(check)


def _in_range(low: int, high: int, what: str) -> AfterValidator:
    def check(value: int) -> int:
        if not low <= value <= high:
            raise ValueError(f"{what} from {low} to {high}")
        return value

    return AfterValidator(check)


def _check_host(value: str) -> str:
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    label = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    if len(value) > 253 or not re.fullmatch(rf"{label}(?:\.{label})*", value):
        raise ValueError("a DNS name or IP address of the node's management interface, e.g. spark-a.local")
    return value


def _check_ifname(value: str) -> str:
    if len(value) > 15 or value in (".", "..") or not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
        raise ValueError("a Linux interface name: at most 15 letters, digits, '.', '_' or '-'")
    return value


def _parse_link_address(value: Any) -> ipaddress.IPv4Interface:
    expected = "an IPv4 address with prefix length, e.g. 192.168.200.13/24"
    if not isinstance(value, str) or "/" not in value:
        raise ValueError(expected)
    try:
        address = ipaddress.IPv4Interface(value)
    except ValueError:
        raise ValueError(expected) from None
    network = address.network
    if network.prefixlen > 30 or address.ip in (network.network_address, network.broadcast_address):
        raise ValueError("a host address inside a subnet of /30 or larger (not its network or broadcast address)")
    return address


def _expand_operator_path(value: Any) -> Path:
    if not isinstance(value, str) or not value or "\n" in value or "\0" in value:
        raise ValueError("a file path on this machine, e.g. ~/.ssh/id_ed25519")
    return Path(os.path.expanduser(value))


def _check_env_value(value: str) -> str:
    if "\n" in value or "\0" in value:
        raise ValueError("a single-line value")
    return value


def _check_env_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", value):
        raise ValueError("an environment variable name")
    if SECRET_NAME.search(value):
        raise ValueError("no secrets in container.env (docker inspect shows them); sparkpair hands the HF "
                         "token to containers as a mounted 0600 file")
    return value


NodeName = Annotated[StrictStr, _matching(r"[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?",
                                          "a short lowercase name of letters, digits and '-', e.g. spark-a")]
UserName = Annotated[StrictStr, _matching(r"[a-z_][a-z0-9_-]{0,31}", "a Linux user name, e.g. nvidia")]
HostName = Annotated[StrictStr, AfterValidator(_check_host)]
InterfaceName = Annotated[StrictStr, AfterValidator(_check_ifname)]
LinkAddress = Annotated[ipaddress.IPv4Interface, BeforeValidator(_parse_link_address)]
Port = Annotated[StrictInt, _in_range(1, 65535, "a TCP port")]
Mtu = Annotated[StrictInt, _in_range(1280, 9216, "an MTU")]
OperatorPath = Annotated[Path, BeforeValidator(_expand_operator_path)]
NodePath = Annotated[StrictStr, _matching(r"(?:~|/)(?:/?(?!\.\.(?:/|$))[A-Za-z0-9._-]+)*/?",
                                          "an absolute path or one under ~ on the node, e.g. ~/.cache/huggingface")]
ImageRef = Annotated[StrictStr, _matching(
    r"(?:[A-Za-z0-9.-]+(?::[0-9]{1,5})?/)?[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?",
    "a container image reference, e.g. nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12")]
ContainerName = Annotated[StrictStr, _matching(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}",
                                               "a container name of letters, digits, '_', '.' or '-'")]
EnvName = Annotated[StrictStr, AfterValidator(_check_env_name)]
EnvValue = Annotated[StrictStr, AfterValidator(_check_env_value)]
ProfileName = Annotated[StrictStr, _matching(r"[a-z0-9][a-z0-9._-]{0,47}",
                                             "a profile name of lowercase letters, digits, '.', '_' or '-'")]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Cluster(StrictModel):
    """Settings shared by both nodes."""

    name: NodeName = "spark-pair"
    user: UserName = "nvidia"
    ssh_key: OperatorPath = Field(default_factory=lambda: _expand_operator_path("~/.ssh/id_ed25519"))
    known_hosts: OperatorPath = Field(default_factory=lambda: _expand_operator_path("~/.ssh/known_hosts"))
    mtu: Mtu = 9000


class Node(StrictModel):
    """One Spark: where to reach it, and the QSFP twins of its cabled port."""

    name: NodeName
    host: HostName
    port: Port = 22
    links: dict[InterfaceName, LinkAddress] = Field(min_length=1, max_length=4)

    @property
    def ssh_names(self) -> list[str]:
        """The names its peer may reach this node by over SSH: every QSFP address, then the node name."""
        return [str(address.ip) for address in self.links.values()] + [self.name]


class Container(StrictModel):
    """The engine container started on both nodes."""

    image: ImageRef = "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12"
    name: ContainerName = "trtllm-multinode"
    mpi_transport: Literal["exec", "sshd"] = "exec"
    sshd_port: Port = 2233
    hf_cache: NodePath = "~/.cache/huggingface"
    env: dict[EnvName, EnvValue] = Field(default_factory=dict)


class Server(StrictModel):
    """The OpenAI-compatible endpoint on the head node."""

    port: Port = 8355
    profile: ProfileName = "qwen3-235b"


def _exactly_two(nodes: list[Node]) -> list[Node]:
    if len(nodes) != 2:
        raise ValueError(f"exactly two nodes (the head first, then the worker); got {len(nodes)}: "
                         "sparkpair drives one pair of Sparks cabled back-to-back")
    return nodes


class Inventory(StrictModel):
    """The whole file. The first node is the head: mpirun and the HTTP endpoint run there."""

    cluster: Cluster = Field(default_factory=Cluster)
    nodes: Annotated[list[Node], AfterValidator(_exactly_two)]
    container: Container = Field(default_factory=Container)
    server: Server = Field(default_factory=Server)
    models: dict[ProfileName, dict[StrictStr, Any]] = Field(default_factory=dict)

    @property
    def head(self) -> Node:
        return self.nodes[0]

    @property
    def worker(self) -> Node:
        return self.nodes[1]

    def node(self, name: str) -> Node:
        """The node called name; KeyError names the known ones."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node {name!r}; the inventory has {', '.join(n.name for n in self.nodes)}")

    def peer_of(self, node: Node) -> Node:
        return self.nodes[1] if node.name == self.nodes[0].name else self.nodes[0]

    @cached_property
    def profiles(self) -> dict[str, Profile]:
        """Every profile, built-in and inventory-defined, validated."""
        return {name: Profile.model_validate(src) for name, src in profile_sources(self.models).items()}

    def profile(self, name: str | None = None) -> Profile:
        return self.profiles[name or self.server.profile]
