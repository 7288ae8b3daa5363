"""The inventory's schema: the records of the one file that describes the pair.

Every field names its kind (validation.py), whose message says what is expected there
(messages.py turns problems into one-line errors).
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from sparkpair import registry
from sparkpair.inventory.profiles import OPTION_NAME, RUNTIME, Profile, deep_merge, profile_sources, resolve
from sparkpair.inventory.topology import TOPOLOGIES, Link, links, neighbours
from sparkpair.inventory.validation import (
    UNPRINTABLE,
    Anything,
    Choice,
    Integer,
    ListOf,
    MappingOf,
    Nested,
    Optional,
    Text,
    parse,
    spec,
)

SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|API_KEY|PASSWD", re.IGNORECASE)


IFNAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}")
IFNAME_EXPECTED = "a Linux interface name: at most 15 letters, digits, '.', '_' or '-', not starting with '.' or '-'"


def _check_host(value: str) -> str:
    address, has_zone, zone = value.partition("%")
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        parsed = None
    if parsed is not None:
        if has_zone and not (parsed.version == 6 and parsed.is_link_local and IFNAME.fullmatch(zone)):
            raise ValueError("an IP address (a zone only after an IPv6 link-local address, and only an interface "
                             "name, e.g. fe80::1%enp1s0) or a DNS name")
        return value
    label = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    if len(value) > 253 or not re.fullmatch(rf"{label}(?:\.{label})*", value):
        raise ValueError("a DNS name or IP address of the node's management interface, e.g. spark-a.local")
    return value


def _check_ifname(value: str) -> str:
    if not IFNAME.fullmatch(value):
        raise ValueError(IFNAME_EXPECTED)
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
    if not value or UNPRINTABLE.search(value):
        raise ValueError("a file path on this machine without control characters, e.g. ~/.ssh/id_ed25519")
    return Path(os.path.expanduser(value))


def _check_env_value(value: str) -> str:
    if UNPRINTABLE.search(value):
        raise ValueError("a single-line value without control characters")
    return value


# Directories a model cache must not be, or be inside: the system's own, and the roots of other places.
SYSTEM_TREES = ("bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "root", "run", "sbin", "snap",
                "sys", "usr", "var")
TOP_ONLY = ("home", "media", "mnt", "opt", "srv", "tmp")
NODE_PATH_EXPECTED = ("a directory under ~ or an absolute path outside the system directories, without '.' or '..', "
                      "e.g. ~/.cache/huggingface or /data/huggingface")


# Directories that hold keys or credentials: the engine container mounts hf_cache read-write as root.
CREDENTIAL_DIRS = {".ssh": "the node's SSH keys", ".sparkpair": "sparkpair's secrets and its container config",
                   ".gnupg": "GnuPG keys", ".docker": "Docker's registry credentials", ".aws": "cloud credentials",
                   ".kube": "cluster credentials", ".config": "tools' credentials", ".netrc": "login credentials"}
WORLD_WRITABLE = ("tmp",)  # /var/tmp and /dev/shm are system directories, refused already


def _check_node_path(value: str) -> str:
    """A directory on the node: `~/...` (under the node user's home, never `~user`) or an absolute path that
    is neither `/`, a system directory (or inside one), a top-level directory nor a home itself; nor a directory of
    keys or credentials (or inside one), nor under a directory anyone can write (/tmp)."""
    parts = value.rstrip("/").split("/")
    if any(part in (".", "..") for part in parts[1:]):
        raise ValueError(NODE_PATH_EXPECTED)
    for part in parts[1:]:
        if part in CREDENTIAL_DIRS:
            raise ValueError(f"not ~/{part} or a directory in it: the engine container mounts hf_cache read-write as "
                             f"root and would get {CREDENTIAL_DIRS[part]}; e.g. ~/.cache/huggingface")
    if parts[0] == "~":
        return value
    if parts[1] in SYSTEM_TREES or (len(parts) == 2 and parts[1] in TOP_ONLY) or (parts[1] == "home" and len(parts) == 3):
        raise ValueError(NODE_PATH_EXPECTED)
    if parts[1] in WORLD_WRITABLE:
        raise ValueError(f"not under /{parts[1]}: anyone on the node can write there and plant or swap the models the "
                         "engine loads; e.g. ~/.cache/huggingface or /data/huggingface")
    return value


def _check_image(value: str) -> str:
    if len(value) > 512:
        raise ValueError("a container image reference of at most 512 characters")
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
# The patterns also go to the JSON Schema (editors check with them); the checks after them are stricter.
HOST_PATTERN = (r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
                r"|[0-9A-Fa-f:.]{2,45}(?:%\S{1,64})?")
HOST_NAME = Text("a DNS name or IP address of the node's management interface, e.g. spark-a.local", HOST_PATTERN,
                 check=_check_host)
INTERFACE_NAME = Text(IFNAME_EXPECTED, IFNAME.pattern, check=_check_ifname)
LINK_ADDRESS = Text("an IPv4 address with prefix length, e.g. 192.168.200.13/24", check=_parse_link_address)
PORT = Integer(1, 65535, "a TCP port")
MTU = Integer(1280, 9216, "an MTU")
OPERATOR_PATH = Text("a file path on this machine, e.g. ~/.ssh/id_ed25519", check=_expand_operator_path)
SSH_KEY_PATH = Text("the SSH private key file on this machine that logs in to every node, e.g. ~/.ssh/id_ed25519",
                    check=_expand_operator_path)
KNOWN_HOSTS_PATH = Text("the known_hosts file on this machine that holds every node's SSH host key (sparkpair "
                        "verifies each node against it), e.g. ~/.ssh/known_hosts", check=_expand_operator_path)
NODE_PATH = Text(NODE_PATH_EXPECTED, r"(?:~|)/[A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]+)*/?", check=_check_node_path)
IMAGE_REF = Text("a container image reference starting with a letter or digit, e.g. "
                 "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12",
                 r"(?:[A-Za-z0-9][A-Za-z0-9.-]*(?::[0-9]{1,5})?/)?[a-z0-9]+(?:[._-]+[a-z0-9]+)*"
                 r"(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?",
                 check=_check_image)
CONTAINER_NAME = Text("a container name of letters, digits, '_', '.' or '-'", r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
ENV_NAME = Text("an environment variable name", check=_check_env_name)
ENV_VALUE = Text("a single-line value", check=_check_env_value)
PROFILE_NAME = Text("a profile name of lowercase letters, digits, '.', '_' or '-'", r"[a-z0-9][a-z0-9._-]{0,47}")
# What doctor's playbook.* rows name a departure by (docs/profiles.md): image, env.NAME, flags.NAME,
# config.a.b, model.target|draft, addressing.addresses|mtu.
DEPARTURE_KEY = Text("a departure as doctor's playbook rows name it: image, env.NCCL_SOCKET_IFNAME, "
                     "flags.max_num_tokens, config.kv_cache_config.free_gpu_memory_fraction, model.draft, "
                     "addressing.addresses or addressing.mtu",
                     r"image|env\.[A-Za-z_][A-Za-z0-9_]{0,127}|flags\.[a-z0-9][a-z0-9_-]{0,63}"
                     r"|config\.[a-z0-9_]{1,64}(?:\.[a-z0-9_]{1,64}){0,3}|model\.(?:target|draft)"
                     r"|addressing\.(?:addresses|mtu)")
REASON = Text("one line of at most 300 characters saying why, without control characters",
              r"[^\x00-\x1f\x7f]{1,300}", check=_check_env_value)


@dataclass(frozen=True, kw_only=True)
class Cluster:
    """Settings shared by every node."""

    name: str = spec(NODE_NAME, "spark-pair")
    user: str = spec(USER_NAME, "nvidia")
    ssh_key: Path = spec(SSH_KEY_PATH, factory=lambda: _expand_operator_path("~/.ssh/id_ed25519"))
    known_hosts: Path = spec(KNOWN_HOSTS_PATH, factory=lambda: _expand_operator_path("~/.ssh/known_hosts"))
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
class Engine:
    """One runtime's own engine container (`engines.<runtime>`): its image and container name (None: the
    runtime's own, in the registry, or `container.image` and `container.name`), its environment (under
    `container.env`, which wins), and its options, which the runtime reads and checks itself
    (`runtimes.engine_options`; docs/profiles.md lists each runtime's)."""

    image: str | None = spec(Optional(IMAGE_REF), None)
    name: str | None = spec(Optional(CONTAINER_NAME), None)
    env: dict[str, str] = spec(MappingOf(ENV_NAME, ENV_VALUE), factory=dict)
    options: dict[str, Any] = spec(MappingOf(OPTION_NAME, Anything()), factory=dict)


ENGINE_FIELDS = ("image", "name", "env")  # what a former `<runtime>:` section holds besides its options


def with_current_engine_sections(data: dict[str, Any]) -> dict[str, Any]:
    """data (a whole inventory as read) with each former top-level section named after a runtime (`vllm:`, the
    only one there was) read as `engines.<runtime>`: its image, name and env as they are, every other key as
    one of its options; where `engines.<runtime>` is given too, its values win key by key."""
    former = [name for name in registry.NAMES if isinstance(data.get(name), dict)]
    engines = data.get("engines", {})
    if not former or not isinstance(engines, dict):
        return data
    current = {key: value for key, value in data.items() if key not in former}
    sections = dict(engines)
    for name in former:
        section = data[name]
        spelled = {key: value for key, value in section.items() if key in ENGINE_FIELDS}
        options = {key: value for key, value in section.items() if key not in ENGINE_FIELDS}
        given = sections.get(name, {})
        sections[name] = deep_merge({**spelled, **({"options": options} if options else {})}, given) \
            if isinstance(given, dict) else given
    current["engines"] = sections
    return current


@dataclass(frozen=True, kw_only=True)
class Server:
    """The OpenAI-compatible endpoint on the head node."""

    port: int = spec(PORT, 8355)
    profile: str = spec(PROFILE_NAME, "qwen3-235b")


@dataclass(frozen=True, kw_only=True)
class MemoryGuard:
    """The memory guard launch starts beside the engine on every rank node (docs/runbooks.md#memory-guard): it stops
    the engine's container when MemAvailable falls under the floor, or the kernel's memory pressure reaches the
    limit, before a Spark's unified memory runs out and hangs the box."""

    floor_gib: int = spec(Integer(1, 64, "GiB of MemAvailable the guard keeps"), 4)
    pressure_full_pct: int = spec(Integer(1, 100, "a percentage of time every task stalled on memory "
                                                  "(PSI full avg10)"), 60)


def _two_or_more(nodes: list[Node]) -> list[Node]:
    """nodes, when there are at least two. No upper bound: the topology bounds them (a pair is two, a ring
    three) and through a switch the subnet does (its addresses must all differ)."""
    if len(nodes) < 2:
        raise ValueError(f"at least two nodes (the head first, then the workers); got {len(nodes)}: sparkpair "
                         "drives Sparks cabled to each other, two back-to-back by default (topology)")
    return nodes


@dataclass(frozen=True, kw_only=True)
class Inventory:
    """The whole file. The first node is the head: mpirun and the HTTP endpoint run there."""

    cluster: Cluster = spec(Nested(Cluster), factory=Cluster)
    nodes: list[Node] = spec(ListOf(Nested(Node), _two_or_more, "the head first, then the workers"))
    # How the nodes are cabled (topology.py): pair (two back-to-back), ring (three) or switch.
    topology: str = spec(Choice(*TOPOLOGIES), "pair")
    container: Container = spec(Nested(Container), factory=Container)
    server: Server = spec(Nested(Server), factory=Server)
    # Each runtime's own engine container and options (Engine); a runtime not named here runs with its defaults.
    engines: dict[str, Engine] = spec(MappingOf(RUNTIME, Nested(Engine)), factory=dict)
    memory_guard: MemoryGuard = spec(Nested(MemoryGuard), factory=MemoryGuard)
    # The runtime every command uses when --runtime is not given (profiles without a variant for it keep their
    # own); None: each profile's own.
    runtime: str | None = spec(Optional(RUNTIME), None)
    models: dict[str, dict[str, Any]] = spec(MappingOf(PROFILE_NAME, MappingOf(Text("a string"), Anything())),
                                             factory=dict)
    # The operator's own departures from NVIDIA's playbooks and why: doctor shows them as INFO, not WARN.
    playbook_reasons: dict[str, str] = spec(MappingOf(DEPARTURE_KEY, REASON, 0, 64, "departures"), factory=dict)

    @property
    def head(self) -> Node:
        return self.nodes[0]

    @property
    def worker(self) -> Node:
        """The second node: a pair's other end (the two-node flows' worker)."""
        return self.nodes[1]

    @property
    def workers(self) -> list[Node]:
        """Every node but the head, in inventory order."""
        return self.nodes[1:]

    def links(self) -> list[Link]:
        """Every link the topology expects (topology.links): the one input of the link checks."""
        return list(self._expected_links)

    @cached_property
    def _expected_links(self) -> tuple[Link, ...]:
        """links(), computed once: the link checks ask for it per node and per check."""
        return tuple(links(self))

    def neighbours(self, node: Node) -> list[Node]:
        """The nodes node shares a link with, in inventory order."""
        return neighbours(self, node)

    def node(self, name: str) -> Node:
        """The node called name; KeyError names the known ones."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node {name!r}; the inventory has {', '.join(n.name for n in self.nodes)}")

    def engine(self, runtime: str) -> Engine:
        """`engines.<runtime>` with what it leaves out filled in: the image and container name the registry gives
        the runtime, else `container.image` and `container.name`."""
        given = self.engines.get(runtime) or Engine()
        line = registry.registered(runtime)
        return replace(given, image=given.image or line.image or self.container.image,
                       name=given.name or line.container or self.container.name)

    def setting(self, runtime: str, field: str) -> str:
        """Where the inventory sets the runtime's image, name or env: `engines.<runtime>.<field>` for a runtime with
        a section of its own (given here, or its own defaults in the registry), else `container.<field>`."""
        line = registry.registered(runtime)
        own = runtime in self.engines or line.image is not None or line.container is not None
        return f"engines.{runtime}.{field}" if own else f"container.{field}"

    def for_runtime(self, runtime: str) -> Inventory:
        """The inventory as one runtime's engine sees it: profiles resolve on that runtime where they have a
        variant for it, `container.image` and `container.name` are that runtime's (`engine`) and its own
        environment is under `container.env`, which wins; everything else is shared."""
        engine = self.engine(runtime)
        container = replace(self.container, image=engine.image or self.container.image,
                            name=engine.name or self.container.name, env={**engine.env, **self.container.env})
        return replace(self, runtime=runtime, container=container)

    def peer_of(self, node: Node) -> Node:
        """The other node of a pair (the two-node flows'); with more nodes, see neighbours."""
        return self.nodes[1] if node.name == self.nodes[0].name else self.nodes[0]

    @cached_property
    def profiles(self) -> dict[str, Profile]:
        """Every profile, built-in and inventory-defined, validated, each on its own runtime."""
        return {name: parse(Profile, resolve(name, src))
                for name, src in profile_sources(self.models, len(self.nodes)).items()}

    def profile(self, name: str | None = None, runtime: str | None = None) -> Profile:
        """Profile name (default: server.profile) on runtime (default: the profile's own). KeyError names
        what is missing: the profile, or its variant for that runtime."""
        name = name or self.server.profile
        own = self.profiles[name]
        wanted = runtime or self.runtime
        if wanted is None or wanted == own.runtime:
            return own
        try:
            return parse(Profile, resolve(name, profile_sources(self.models, len(self.nodes))[name], wanted))
        except KeyError:
            if runtime is None:  # the inventory's runtime, which this profile has no variant for: its own
                return own
            raise KeyError(f"profile {name} has no {runtime} variant (add models.{name}.variants.{runtime} "
                           "to the inventory)") from None
