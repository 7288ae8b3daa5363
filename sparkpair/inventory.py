"""The inventory: schema, loading and validation of the one file that describes the pair.

Loading never raises anything but InventoryError, whose lines each name the file, the field
path, the bad value and what is expected.
"""

from __future__ import annotations

import ipaddress
import os
import re
import typing
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
)

from sparkpair import validation
from sparkpair.errors import InventoryError
from sparkpair.profiles import Profile, profile_sources

DEFAULT_PATH = "inventory.yaml"
ENV_VAR = "SPARKPAIR_INVENTORY"
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


def read_inventory(path: str | os.PathLike[str] | None = None) -> Inventory:
    """Load and validate the inventory at path (default: $SPARKPAIR_INVENTORY or ./inventory.yaml)."""
    path = Path(path or os.environ.get(ENV_VAR) or DEFAULT_PATH)
    data = load_yaml_mapping(path)
    return parse_inventory(data, str(path))


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
            if isinstance(key, typing.Hashable) and key in seen:
                raise yaml.MarkedYAMLError("while reading a mapping", node.start_mark,
                                           f"key {key!r} appears twice", key_node.start_mark)
            if isinstance(key, typing.Hashable):
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml_mapping(path: Path, max_bytes: int = 256 * 1024) -> dict[str, Any]:
    """Read path as a YAML mapping; every way this can fail becomes one InventoryError line."""
    hint = f"copy inventory.example.yaml to {DEFAULT_PATH}, or pass -i PATH or set {ENV_VAR}"
    try:
        with path.open("rb") as handle:  # bounded: -i /dev/zero must not read forever
            raw = handle.read(max_bytes + 1)
    except FileNotFoundError:
        raise InventoryError([f"{path}: no such file; {hint}"]) from None
    except OSError as error:
        raise InventoryError([f"{path}: cannot read: {error.strerror}; {hint}"]) from None
    if len(raw) > max_bytes:
        raise InventoryError([f"{path}: more than {max_bytes} bytes; expected an inventory under {max_bytes} bytes"])
    try:
        data = yaml.load(raw.decode("utf-8"), Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except UnicodeDecodeError:
        raise InventoryError([f"{path}: not UTF-8 text; expected a YAML file"]) from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise InventoryError([f"{where}: invalid YAML: {error.problem or error.context}"]) from None
    except (yaml.YAMLError, RecursionError) as error:
        raise InventoryError([f"{path}: invalid YAML: {type(error).__name__}"]) from None
    if not isinstance(data, dict):
        raise InventoryError([f"{path}: got {type(data).__name__} at the top level; expected a mapping "
                              "with cluster:, nodes:, container:, server: and models:"])
    return data


def parse_inventory(data: dict[str, Any], source: str = DEFAULT_PATH) -> Inventory:
    """Validate an already-parsed mapping; problems are reported against source."""
    try:
        inventory = Inventory.model_validate(data)
    except ValidationError as error:
        raise InventoryError(validation.describe(error, source, Inventory)) from None
    problems = validation.pair_problems(inventory) + validation.env_problems(inventory) + _profile_problems(inventory)
    if problems:
        raise InventoryError([f"{source}: {problem}" for problem in problems])
    return inventory


def _profile_problems(inventory: Inventory) -> list[str]:
    problems: list[str] = []
    sources = profile_sources(inventory.models)
    for name, source in sources.items():
        try:
            Profile.model_validate(source)
        except ValidationError as error:
            problems += validation.describe(error, "", Profile, prefix=("models", name))
    if inventory.server.profile not in sources:
        problems.append(f"server.profile: got {inventory.server.profile!r}; expected one of "
                        f"{', '.join(sorted(sources))}")
    return [p.lstrip(": ") for p in problems]
