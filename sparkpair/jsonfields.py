"""Typed reads of a JSON answer: every field read checks its type.

An engine's answer is hostile input. `{"choices": "x"}` read with `.get()` and `[0]` is an
AttributeError, KeyError or TypeError somewhere deep in a parser; read through a `Field` it is one
ShapeError whose line names the answer, the field (`choices[0].message`) and what was there, never
the value itself (it could be anything, of any size). The answer is parsed by `sparkpair.boundedjson` (depth
and size capped); standard library otherwise.
"""

from __future__ import annotations

import math

from sparkpair import boundedjson


class ShapeError(ValueError):
    """An answer that is not JSON, or not of the shape asked for; the message says where and what was found."""


def kind(value: object) -> str:
    """What a JSON value is, in words (`a string`, `null`), for a message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    return "an object" if isinstance(value, dict) else type(value).__name__


class Field:
    """One value of a parsed JSON answer and where it is; an absent key reads as null."""

    __slots__ = ("path", "value", "what")

    def __init__(self, value: object, what: str, path: str = "") -> None:
        self.value, self.what, self.path = value, what, path

    @classmethod
    def parse(cls, raw: bytes, what: str) -> Field:
        """raw (UTF-8 JSON) as the root Field of the answer `what`; ShapeError when it is not JSON."""
        try:
            return cls(boundedjson.loads(raw), what)
        except ValueError as error:  # boundedjson.Refused: not JSON, NaN, or nested deeper than it reads
            raise ShapeError(f"{what}: the answer is not JSON ({error})") from None

    def _refuse(self, expected: str) -> ShapeError:
        return ShapeError(f"{self.what}: {self.path or 'the answer'} is {kind(self.value)}, not {expected}")

    def _child(self, value: object, step: str) -> Field:
        return Field(value, self.what, f"{self.path}{step}" if step.startswith("[") or not self.path
                     else f"{self.path}.{step}")

    @property
    def null(self) -> bool:
        """Whether the value is null (or the key absent)."""
        return self.value is None

    def get(self, key: str) -> Field:
        """The field key of this object (null when absent); ShapeError when this is not an object."""
        if not isinstance(self.value, dict):
            raise self._refuse("an object")
        return self._child(self.value.get(key), key)

    def at(self, index: int) -> Field:
        """Item index of this list; ShapeError when this is not a list or is shorter."""
        if not isinstance(self.value, list) or index >= len(self.value):
            raise self._refuse(f"a list of at least {index + 1}")
        return self._child(self.value[index], f"[{index}]")

    def items(self) -> list[Field]:
        """The items of this list; ShapeError when this is not a list."""
        if not isinstance(self.value, list):
            raise self._refuse("a list")
        return [self._child(item, f"[{index}]") for index, item in enumerate(self.value)]

    def text(self, default: str | None = None) -> str:
        """This string; default when null and a default is given; ShapeError otherwise."""
        if isinstance(self.value, str):
            return self.value
        if self.value is None and default is not None:
            return default
        raise self._refuse("a string")

    def count(self, default: int | None = None) -> int:
        """This whole number of at least 0 (3 or 3.0); default when null and given; ShapeError otherwise."""
        value = self.value
        if value is None and default is not None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value < 0 or value != int(value):
            raise self._refuse("a whole number of at least 0")
        return int(value)
