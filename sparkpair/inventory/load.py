"""Loading the inventory: bounded safe YAML (duplicate keys refused), then schema and cross-node checks.

Loading never raises anything but InventoryError, whose lines each name the file, the field
path, the bad value and what is expected.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from pathlib import Path
from typing import Any

import yaml

from sparkpair.errors import InventoryError
from sparkpair.inventory import messages
from sparkpair.inventory.profiles import Profile, profile_sources, resolve
from sparkpair.inventory.schema import Inventory, with_current_engine_sections
from sparkpair.inventory.validation import Invalid, Problem, parse

DEFAULT_PATH = "inventory.yaml"
ENV_VAR = "SPARKPAIR_INVENTORY"


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
            key = self.construct_object(key_node, deep=True)
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
    if data is None:
        raise InventoryError([f"{path}: empty; expected a mapping with cluster:, nodes:, container:, server: and "
                              f"models: (copy inventory.example.yaml to {DEFAULT_PATH} and edit it)"])
    if not isinstance(data, dict):
        raise InventoryError([f"{path}: got {type(data).__name__} at the top level; expected a mapping "
                              "with cluster:, nodes:, container:, server: and models:"])
    return data


def parse_inventory(data: dict[str, Any], source: str = DEFAULT_PATH) -> Inventory:
    """Validate an already-parsed mapping (a former `vllm:` section read as `engines.vllm`); problems are reported
    against source."""
    try:
        inventory = parse(Inventory, with_current_engine_sections(data))
    except Invalid as error:   # every problem in one pass: the nodes' own, too, when they parse
        found = messages.describe(error.problems, source)
        raise InventoryError(found + [f"{source}: {problem}" for problem in _node_problems_alone(data)]) from None
    problems = messages.node_problems(inventory) + messages.env_problems(inventory) + _profile_problems(inventory)
    if problems:
        raise InventoryError([f"{source}: {problem}" for problem in problems])
    return inventory


def _node_problems_alone(data: dict[str, Any]) -> list[str]:
    """The problems of the nodes read together (names, hosts and addresses used twice, cabling), when the nodes and
    the topology parse though another field did not."""
    kinds = {field.name: field.metadata["kind"] for field in dataclasses.fields(Inventory)}
    problems: list[Problem] = []
    nodes = kinds["nodes"].parse(data.get("nodes"), ("nodes",), problems)
    chosen = kinds["topology"].parse(data.get("topology", "pair"), ("topology",), problems)
    if problems:
        return []
    return messages.node_problems(Inventory(nodes=nodes, topology=chosen))


def _profile_problems(inventory: Inventory) -> list[str]:
    problems: list[str] = []
    sources = profile_sources(inventory.models, len(inventory.nodes))
    for name, source in sources.items():
        try:
            parse(Profile, resolve(name, source))
        except Invalid as error:
            problems += messages.describe(error.problems, "", prefix=("models", name))
            continue
        for runtime in source.get("variants") or {}:
            try:
                parse(Profile, resolve(name, source, runtime))
            except (Invalid, KeyError) as error:
                found = error.problems if isinstance(error, Invalid) else []
                problems += messages.describe(found, "", prefix=("models", name, "variants", str(runtime)))
    if inventory.server.profile not in sources:
        problems.append(f"server.profile: got {inventory.server.profile!r}; expected one of "
                        f"{', '.join(sorted(sources))}")
    return [p.lstrip(": ") for p in problems]
