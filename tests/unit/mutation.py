"""Mutating parsed YAML documents for the fuzz tests: every path in a document, and one change."""

from __future__ import annotations

import copy
from typing import Any


def value_paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys and list indexes) in a parsed document, the document itself included."""
    found = [prefix]
    if isinstance(data, dict):
        for key, value in data.items():
            found += value_paths(value, prefix + (key,))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found += value_paths(value, prefix + (index,))
    return found


def mutate(data: Any, path: tuple, value: Any, delete: bool) -> Any:
    """A copy of data with the value at path replaced by value, or deleted (mappings only)."""
    mutated = copy.deepcopy(data)
    if not path:
        return mutated
    holder = mutated
    for part in path[:-1]:
        holder = holder[part]
    if delete and isinstance(holder, dict):
        holder.pop(path[-1])
    else:
        holder[path[-1]] = value
    return mutated
