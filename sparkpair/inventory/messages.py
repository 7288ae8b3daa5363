"""Turn schema errors and cross-field problems of an inventory into one-line messages.

Each line reads `FILE: field.path: got VALUE; expected WHAT`.
"""

from __future__ import annotations

import re
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

if typing.TYPE_CHECKING:
    from sparkpair.inventory.schema import Inventory

_PLAIN_EXPECTATIONS = {
    "missing": "a value (this field is required)",
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "dict_type": "a mapping",
    "list_type": "a list",
    "model_type": "a mapping",
    "recursion_loop": "a value without cyclic YAML aliases",
}


# Characters that break a line or can disguise one: C0/C1 controls (tab aside), line and
# paragraph separators, and bidirectional overrides.
_UNPRINTABLE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")

# OpenMPI (and PMIx/PRRTE) copy these variables into the orted command line that mpirun's rsh
# agent hands to a shell on the worker, inside double quotes: their values must not be shell code.
MPI_PARAMETER_PREFIXES = ("OMPI_MCA_", "PMIX_MCA_", "PRTE_MCA_")
_MPI_PARAMETER_VALUE = re.compile(r"[A-Za-z0-9_.,:/=@%+^ -]*")


def one_line(text: str) -> str:
    """text with every line-breaking or disguising character written as an escape (\\n, \\x1b)."""
    return _UNPRINTABLE.sub(lambda match: repr(match.group())[1:-1], text)


def field_path(loc: tuple[int | str, ...]) -> str:
    """Render a pydantic location as `nodes[1].links.enp1s0f1np1`."""
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


def shown(value: Any, limit: int = 60) -> str:
    """A short, single-line repr of a bad value."""
    if isinstance(value, (list, dict)):
        count = len(value)
        return f"a {type(value).__name__} with {count} {'entry' if count == 1 else 'entries'}"
    text = repr(value).replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fields_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """Names of the fields the model accepts at loc (for 'unknown field' messages)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or not (isinstance(current, type) and issubclass(current, BaseModel)):
            current = _inner_model(current)
            if isinstance(part, int):
                continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)) or part not in current.model_fields:
            return []
        current = current.model_fields[part].annotation
    current = _inner_model(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _inner_model(annotation: Any) -> Any:
    for arg in typing.get_args(annotation):
        found = _inner_model(arg) if typing.get_args(arg) else arg
        if isinstance(found, type) and issubclass(found, BaseModel):
            return found
    return annotation


def _expectation(error: Any, model: type[BaseModel]) -> str:
    kind = error["type"]
    if kind == "value_error":
        return str(error["msg"]).removeprefix("Value error, ")
    if kind in _PLAIN_EXPECTATIONS:
        return _PLAIN_EXPECTATIONS[kind]
    return str(error["msg"]).replace("Input should be", "").replace("String should", "a string that should").strip()


def describe(error: ValidationError, source: str, model: type[BaseModel],
             prefix: tuple[int | str, ...] = ()) -> list[str]:
    """One line per schema error: file, field path, bad value, expectation."""
    lines = []
    for item in error.errors(include_url=False):
        loc = prefix + tuple(item["loc"])
        expected = _expectation(item, model)
        if item["type"] == "missing":
            got = "nothing"
        elif item["type"] == "extra_forbidden":
            allowed = _fields_at(model, loc[len(prefix):-1])
            lines.append(f"{source}: {field_path(loc[:-1])}: got unknown field {loc[-1]!r}; expected "
                         + (f"one of {', '.join(allowed)}" if allowed else "no such field"))
            continue
        else:
            got = shown(item["input"])
        lines.append(f"{source}: {field_path(loc)}: got {got}; expected {expected}")
    return lines


def pair_problems(inventory: Inventory) -> list[str]:
    """Problems that only show when both nodes are read together."""
    nodes = inventory.nodes
    problems = _duplicates("name", [n.name for n in nodes]) + _duplicates("host", [n.host for n in nodes])
    problems += _interface_set_problems(inventory)
    problems += _address_problems(inventory)
    return problems


def env_problems(inventory: Inventory) -> list[str]:
    """container.env values that another program would hand to a shell."""
    return [f"container.env.{name}: got {shown(value)}; expected only letters, digits, spaces and _.,:/=@%+^- "
            "(OpenMPI copies this variable into the command line a shell runs on the worker)"
            for name, value in inventory.container.env.items()
            if name.upper().startswith(MPI_PARAMETER_PREFIXES) and not _MPI_PARAMETER_VALUE.fullmatch(value)]


def _duplicates(field: str, values: list[str]) -> list[str]:
    if len(set(values)) == len(values):
        return []
    return [f"nodes[1].{field}: got {values[1]!r}, same as nodes[0]; expected a different {field} per node"]


def _interface_set_problems(inventory: Inventory) -> list[str]:
    head, worker = inventory.nodes
    if set(head.links) == set(worker.links):
        return []
    return [f"nodes[1].links: got {', '.join(sorted(worker.links))}; expected the same interfaces as "
            f"nodes[0] ({head.name}): {', '.join(sorted(head.links))} (cable the same port on both Sparks)"]


def _address_problems(inventory: Inventory) -> list[str]:
    problems: list[str] = []
    seen: dict[Any, str] = {}
    for index, node in enumerate(inventory.nodes):
        for name, address in node.links.items():
            path = f"nodes[{index}].links.{name}"
            if address.ip in seen:
                problems.append(f"{path}: got {address}, already used by {seen[address.ip]}; "
                                "expected an address used nowhere else")
            seen.setdefault(address.ip, path)
            if any(n.host == str(address.ip) for n in inventory.nodes):
                problems.append(f"{path}: got {address}, which is a node's management host; expected the "
                                "management address (host) and QSFP addresses (links) to differ")
    head, worker = inventory.nodes
    for name in sorted(set(head.links) & set(worker.links)):
        if head.links[name].network != worker.links[name].network:
            problems.append(f"nodes[1].links.{name}: got {worker.links[name]}, outside {head.name}'s subnet "
                            f"{head.links[name].network}; expected both ends of a cable in one subnet")
    return problems
