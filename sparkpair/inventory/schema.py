"""The inventory's schema: the records of the one file that describes the pair.

Every field names its kind (validation.py), whose message says what is expected there
(messages.py turns problems into one-line errors).
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from sparkpair.inventory.profiles import Profile, profile_sources
from sparkpair.inventory.validation import (
    Anything,
    Choice,
    Integer,
    ListOf,
    MappingOf,
    Nested,
    Text,
    parse,
    spec,
)

SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|API_KEY|PASSWD", re.IGNORECASE)


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


def _parse_link_address(value: str) -> ipaddress.IPv4Interface:
    expected = "an IPv4 address with prefix length, e.g. 192.168.200.13/24"
    if "/" not in value:
        raise ValueError(expected)
    try:
        address = ipaddress.IPv4Interface(value)
    except ValueError:
        raise ValueError(expected) from None
    network = address.network
    if network.prefixlen > 30 or address.ip in (network.network_address, network.broadcast_address):
        raise ValueError("a host address inside a subnet of /30 or larger (not its network or broadcast address)")
    return address


def _expand_operator_path(value: str) -> Path:
    if not value or "\n" in value or "\0" in value:
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


NODE_NAME = Text("a short lowercase name of letters, digits and '-', e.g. spark-a",
                 r"[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?")
USER_NAME = Text("a Linux user name, e.g. nvidia", r"[a-z_][a-z0-9_-]{0,31}")
HOST_NAME = Text("a DNS name or IP address of the node's management interface, e.g. spark-a.local", check=_check_host)
INTERFACE_NAME = Text("a Linux interface name: at most 15 letters, digits, '.', '_' or '-'", check=_check_ifname)
LINK_ADDRESS = Text("an IPv4 address with prefix length, e.g. 192.168.200.13/24", check=_parse_link_address)
PORT = Integer(1, 65535, "a TCP port")
MTU = Integer(1280, 9216, "an MTU")
OPERATOR_PATH = Text("a file path on this machine, e.g. ~/.ssh/id_ed25519", check=_expand_operator_path)
NODE_PATH = Text("an absolute path or one under ~ on the node, e.g. ~/.cache/huggingface",
                 r"(?:~|/)(?:/?(?!\.\.(?:/|$))[A-Za-z0-9._-]+)*/?")
IMAGE_REF = Text("a container image reference, e.g. nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12",
                 r"(?:[A-Za-z0-9.-]+(?::[0-9]{1,5})?/)?[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*"
                 r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?")
CONTAINER_NAME = Text("a container name of letters, digits, '_', '.' or '-'", r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
ENV_NAME = Text("an environment variable name", check=_check_env_name)
ENV_VALUE = Text("a single-line value", check=_check_env_value)
PROFILE_NAME = Text("a profile name of lowercase letters, digits, '.', '_' or '-'", r"[a-z0-9][a-z0-9._-]{0,47}")


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """Settings shared by both nodes."""

    name: str = spec(NODE_NAME, "spark-pair")
    user: str = spec(USER_NAME, "nvidia")
    ssh_key: Path = spec(OPERATOR_PATH, factory=lambda: _expand_operator_path("~/.ssh/id_ed25519"))
    known_hosts: Path = spec(OPERATOR_PATH, factory=lambda: _expand_operator_path("~/.ssh/known_hosts"))
    mtu: int = spec(MTU, 9000)


@dataclass(frozen=True, kw_only=True)
class Node:
    """One Spark: where to reach it, and the QSFP twins of its cabled port."""

    name: str = spec(NODE_NAME)
    host: str = spec(HOST_NAME)
    port: int = spec(PORT, 22)
    links: dict[str, ipaddress.IPv4Interface] = spec(MappingOf(INTERFACE_NAME, LINK_ADDRESS, 1, 4,
                                                                "QSFP interfaces (the twins of the cabled port)"))

    @property
    def ssh_names(self) -> list[str]:
        """The names its peer may reach this node by over SSH: every QSFP address, then the node name."""
        return [str(address.ip) for address in self.links.values()] + [self.name]


@dataclass(frozen=True, kw_only=True)
class Container:
    """The engine container started on both nodes."""

    image: str = spec(IMAGE_REF, "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12")
    name: str = spec(CONTAINER_NAME, "trtllm-multinode")
    mpi_transport: str = spec(Choice("exec", "sshd"), "exec")
    sshd_port: int = spec(PORT, 2233)
    hf_cache: str = spec(NODE_PATH, "~/.cache/huggingface")
    env: dict[str, str] = spec(MappingOf(ENV_NAME, ENV_VALUE), factory=dict)


@dataclass(frozen=True, kw_only=True)
class Server:
    """The OpenAI-compatible endpoint on the head node."""

    port: int = spec(PORT, 8355)
    profile: str = spec(PROFILE_NAME, "qwen3-235b")


def _exactly_two(nodes: list[Node]) -> list[Node]:
    if len(nodes) != 2:
        raise ValueError(f"exactly two nodes (the head first, then the worker); got {len(nodes)}: "
                         "sparkpair drives one pair of Sparks cabled back-to-back")
    return nodes


@dataclass(frozen=True, kw_only=True)
class Inventory:
    """The whole file. The first node is the head: mpirun and the HTTP endpoint run there."""

    cluster: Cluster = spec(Nested(Cluster), factory=Cluster)
    nodes: list[Node] = spec(ListOf(Nested(Node), _exactly_two, "the head first, then the worker"))
    container: Container = spec(Nested(Container), factory=Container)
    server: Server = spec(Nested(Server), factory=Server)
    models: dict[str, dict[str, Any]] = spec(MappingOf(PROFILE_NAME, MappingOf(Text("a string"), Anything())),
                                             factory=dict)

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
        return {name: parse(Profile, src) for name, src in profile_sources(self.models).items()}

    def profile(self, name: str | None = None) -> Profile:
        return self.profiles[name or self.server.profile]
