"""Turn schema errors and cross-field problems of an inventory into one-line messages.

Each line reads `FILE: field.path: got VALUE; expected WHAT`.
"""

from __future__ import annotations

import re
import typing
from typing import Any

from sparkpair.inventory import topology
from sparkpair.inventory.validation import Location, Problem, shown
from sparkpair.safetext import visible

if typing.TYPE_CHECKING:
    from sparkpair.inventory.schema import Inventory

# OpenMPI (and PMIx/PRRTE) copy these variables into the orted command line that mpirun's rsh
# agent hands to a shell on the worker, inside double quotes: their values must not be shell code.
MPI_PARAMETER_PREFIXES = ("OMPI_MCA_", "PMIX_MCA_", "PRTE_MCA_")
_MPI_PARAMETER_VALUE = re.compile(r"[A-Za-z0-9_.,:/=@%+^ -]*")


def one_line(text: str) -> str:
    """text with every line-breaking or disguising character written as an escape (\\n, \\x1b, \\u200e)."""
    return visible(text, lines=False)


def field_path(loc: Location) -> str:
    """Render a location as `nodes[1].links.enp1s0f1np1`."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part == "[key]":
            text += " (key)"
        elif not re.fullmatch(r"[A-Za-z0-9_.$();`'\" -]{1,40}", str(part)) or "\n" in str(part):
            text += f"[{shown(part)}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "(top level)"


def describe(problems: list[Problem], source: str, prefix: Location = ()) -> list[str]:
    """One line per problem: file, field path, bad value, expectation."""
    return [f"{source}: {field_path(prefix + problem.loc)}: got {problem.got}; expected {problem.expected}"
            for problem in problems]


def node_problems(inventory: Inventory) -> list[str]:
    """Problems that only show when the nodes are read together: their count and cabling for the topology,
    names, hosts and addresses used twice."""
    nodes = inventory.nodes
    counted = topology.node_count_problems(inventory.topology, len(nodes))
    if counted:
        return counted
    problems = _duplicates("name", [n.name for n in nodes]) + _duplicates("host", [n.host for n in nodes])
    problems += _interface_set_problems(inventory) if inventory.topology == "pair" else []
    problems += _address_problems(inventory)
    if inventory.topology == "pair":
        problems += _twin_subnet_problems(inventory)
    elif inventory.topology == "ring":
        problems += topology.ring_problems(inventory)
    else:
        problems += topology.switch_problems(inventory)
    return problems


def env_problems(inventory: Inventory) -> list[str]:
    """container.env values that another program would hand to a shell."""
    return [f"container.env.{name}: got {shown(value)}; expected only letters, digits, spaces and _.,:/=@%+^- "
            "(OpenMPI copies this variable into the command line a shell runs on the worker)"
            for name, value in inventory.container.env.items()
            if name.upper().startswith(MPI_PARAMETER_PREFIXES) and not _MPI_PARAMETER_VALUE.fullmatch(value)]


def _duplicates(field: str, values: list[str]) -> list[str]:
    """`nodes[i].field` for each value that an earlier node already has."""
    first: dict[str, int] = {}
    problems = []
    for index, value in enumerate(values):
        if value in first:
            problems.append(f"nodes[{index}].{field}: got {value!r}, same as nodes[{first[value]}]; expected a "
                            f"different {field} per node")
        first.setdefault(value, index)
    return problems


def _interface_set_problems(inventory: Inventory) -> list[str]:
    """The pair's twins differ: blamed on the node whose differing names are no ConnectX-7 port names (its typo),
    else on the worker."""
    head, worker = inventory.nodes
    if set(head.links) == set(worker.links):
        return []
    wrong = 0 if topology.blamed([set(head.links), set(worker.links)], 0) else 1
    node, other = inventory.nodes[wrong], inventory.nodes[1 - wrong]
    return [f"nodes[{wrong}].links: got {', '.join(sorted(node.links))}; expected the same interfaces as "
            f"nodes[{1 - wrong}] ({other.name}): {', '.join(sorted(other.links))} (cable the same port on both Sparks)"]


def _address_problems(inventory: Inventory) -> list[str]:
    problems: list[str] = []
    seen: dict[Any, str] = {}
    hosts = {n.host for n in inventory.nodes}
    for index, node in enumerate(inventory.nodes):
        for name, address in node.links.items():
            path = f"nodes[{index}].links.{name}"
            if address.ip in seen:
                problems.append(f"{path}: got {address}, already used by {seen[address.ip]}; "
                                "expected an address used nowhere else")
            seen.setdefault(address.ip, path)
            if str(address.ip) in hosts:
                problems.append(f"{path}: got {address}, which is a node's management host; expected the "
                                "management address (host) and QSFP addresses (links) to differ")
    return problems


def _twin_subnet_problems(inventory: Inventory) -> list[str]:
    """A pair's twins: each in one subnet on both nodes."""
    problems: list[str] = []
    head, worker = inventory.nodes
    for name in sorted(set(head.links) & set(worker.links)):
        if head.links[name].network != worker.links[name].network:
            problems.append(f"nodes[1].links.{name}: got {worker.links[name]}, outside {head.name}'s subnet "
                            f"{head.links[name].network}; expected both ends of a cable in one subnet")
    return problems
