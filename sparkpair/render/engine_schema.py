"""TensorRT-LLM's LLM-API schema as sparkpair reads it: which version, which fields, which values.

The data is sparkpair/data/trtllm_schema.json, derived from NVIDIA's published sources by
scripts/trtllm_schema/derive.py (its `_header` names every source with its commit). This module
picks the version an image carries and judges single values; engine_config walks a whole mapping.
A field spec is `types` (JSON types, or null when only the key is known), optional `strings` and
`ints` (the allowed values of those types), bounds `min`/`max`/`xmin`/`xmax` and `items` (the
types of a list's elements).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

ORDER = ["boolean", "integer", "number", "string", "array", "object", "null"]
TAG = re.compile(r":([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})$")


@cache
def schema_data() -> dict[str, Any]:
    """The derived schema shipped with sparkpair."""
    text = resources.files("sparkpair.data").joinpath("trtllm_schema.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


@dataclass(frozen=True)
class Judged:
    """The TensorRT-LLM version a configuration is judged against, and why when it is the pinned one."""

    version: str
    note: str = ""

    @property
    def label(self) -> str:
        """How problem lines name the version: `TensorRT-LLM 1.3.0rc12`, plus the note if any."""
        return f"TensorRT-LLM {self.version}" + (f" ({self.note})" if self.note else "")

    @property
    def rules(self) -> dict[str, Any]:
        """This version's part of the schema data."""
        data: dict[str, Any] = schema_data()["versions"][self.version]
        return data


def image_tag(image: str) -> str | None:
    """The tag of an image reference (`repo/name:tag[@digest]`), or None for a digest-only one."""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    match = TAG.search(name)
    return match.group(1) if match else None


def judged_version(image: str) -> Judged:
    """The version an image's tag names; the pinned version, with the reason, for any other image."""
    data = schema_data()
    pinned: str = data["pinned"]
    tag = image_tag(image)
    if tag is not None and tag in data["versions"]:
        return Judged(tag)
    if tag is None:
        return Judged(pinned, f"the pinned version: image {image} has no tag")
    known = ", ".join(sorted(data["versions"]))
    return Judged(pinned, f"the pinned version: sparkpair has NVIDIA's schema for {known}, not for image tag {tag!r}")


def pinned() -> Judged:
    """The version sparkpair's recipe pins."""
    return Judged(schema_data()["pinned"])


def json_kind(value: Any) -> str:
    """The JSON Schema type of a YAML value (an integral float counts as an integer, as in JSON Schema)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    kinds = {float: "number", str: "string", list: "array", dict: "object", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


def accepts(spec: dict[str, Any], value: Any) -> bool:
    """True when a value fits the field spec."""
    types = spec.get("types")
    if types is None:
        return True
    kind = json_kind(value)
    if kind not in types and not (kind == "integer" and "number" in types):
        return False
    if kind == "string" and "strings" in spec:
        return bool(value in spec["strings"])
    if kind == "integer" and "ints" in spec and "number" not in types:
        return bool(value in spec["ints"])
    if kind in ("integer", "number"):
        return _in_bounds(spec, value)
    if kind == "array" and spec.get("items"):
        return all(accepts({"types": spec["items"]}, item) for item in value)
    return True


def _in_bounds(spec: dict[str, Any], value: float) -> bool:
    return (("min" not in spec or value >= spec["min"]) and ("max" not in spec or value <= spec["max"])
            and ("xmin" not in spec or value > spec["xmin"]) and ("xmax" not in spec or value < spec["xmax"]))


def describe(spec: dict[str, Any]) -> str:
    """What a field accepts, in words: `an integer >= 0 or null`, `one of 'auto', 'fp8'`."""
    parts = []
    for kind in sorted(spec.get("types") or [], key=ORDER.index):
        if kind == "boolean":
            parts.append("a boolean (true or false)")
        elif kind == "integer" and "number" not in spec["types"]:
            ints = spec.get("ints")
            parts.append(f"one of {', '.join(map(str, ints))}" if ints else "an integer" + _bounds(spec))
        elif kind == "number":
            parts.append("a number" + _bounds(spec))
        elif kind == "string":
            strings = spec.get("strings")
            parts.append(f"one of {', '.join(repr(s) for s in strings)}" if strings else "a string")
        elif kind == "array":
            parts.append("a list" + (f" of {'/'.join(spec['items'])}" if spec.get("items") else ""))
        elif kind == "object":
            parts.append("a mapping")
        elif kind == "null":
            parts.append("null")
    return " or ".join(parts) or "anything"


def _bounds(spec: dict[str, Any]) -> str:
    low = f"[{spec['min']}" if "min" in spec else f"({spec['xmin']}" if "xmin" in spec else None
    high = f"{spec['max']}]" if "max" in spec else f"{spec['xmax']})" if "xmax" in spec else None
    if low and high:
        return f" in {low}, {high}"
    if low:
        return f" {'>=' if low[0] == '[' else '>'} {low[1:]}"
    if high:
        return f" {'<=' if high[-1] == ']' else '<'} {high[:-1]}"
    return ""


def versions_with(cls: str, key: str, besides: str) -> list[str]:
    """The other versions whose class (or its counterpart) has this key."""
    data = schema_data()
    names = {cls, data["counterparts"].get(cls, cls)} | {old for old, new in data["counterparts"].items() if new == cls}
    return [version for version, rules in sorted(data["versions"].items())
            if version != besides and any(key in rules["classes"].get(name, {}) for name in names)]
