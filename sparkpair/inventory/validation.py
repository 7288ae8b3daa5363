"""What each inventory field accepts: kinds of value, records built of them, and every problem found.

A kind checks one value and returns it, converted where the record keeps another type (an
IPv4Interface, a Path), or records a Problem at the value's location. A record is a frozen,
keyword-only dataclass whose fields name their kind with `spec()`. `parse` visits every field of
every record, so one pass reports every problem, not only the first. The same declarations give
the plain JSON data of a record (`json_data`) and the file's JSON Schema (`record_schema`).

Hand-written, not pydantic: the six records of the inventory need none of its power, and its import
and model building cost every command about 0.12 s of CPU before the first SSH packet leaves.
Imports only the standard library.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from pathlib import PurePath
from typing import Any, TypeVar

Location = tuple[int | str, ...]
Record = TypeVar("Record")

REQUIRED = "a value (this field is required)"

# Characters that break a line or can disguise one: C0/C1 controls (tab aside), line and
# paragraph separators, and bidirectional overrides.
UNPRINTABLE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


@dataclasses.dataclass(frozen=True)
class Problem:
    """One bad value: where it is, what it was (already shown as text) and what is expected there."""

    loc: Location
    got: str
    expected: str


class Invalid(Exception):
    """A record that failed to parse; carries its problems."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(f"{p.loc}: {p.expected}" for p in problems))
        self.problems = problems


def shown(value: Any, limit: int = 60) -> str:
    """A short, single-line repr of a bad value."""
    if isinstance(value, (list, dict)):
        count = len(value)
        return f"a {type(value).__name__} with {count} {'entry' if count == 1 else 'entries'}"
    text = repr(value).replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."


_BAD: Any = object()  # what a kind returns for a value it refused (its problem is recorded)


class Kind:
    """What one value may be. parse returns the value to keep, or _BAD after recording a problem."""

    def parse(self, value: Any, loc: Location, problems: list[Problem]) -> Any:
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        raise NotImplementedError

    @staticmethod
    def refuse(value: Any, loc: Location, problems: list[Problem], expected: str) -> Any:
        problems.append(Problem(loc, shown(value), expected))
        return _BAD


class Text(Kind):
    """A string, matching pattern when given, then passed through check (which may convert it or
    raise ValueError with what is expected). Anything else is refused with `expected`."""

    def __init__(self, expected: str, pattern: str | None = None, check: Callable[[str], Any] | None = None) -> None:
        self.expected, self.pattern, self.check = expected, pattern, check
        self._compiled = re.compile(pattern) if pattern else None

    def parse(self, value: Any, loc: Location, problems: list[Problem]) -> Any:
        if not isinstance(value, str) or (self._compiled and not self._compiled.fullmatch(value)):
            return self.refuse(value, loc, problems, self.expected)
        if self.check is None:
            return value
        try:
            return self.check(value)
        except ValueError as error:
            return self.refuse(value, loc, problems, str(error))

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "description": self.expected,
                **({"pattern": f"^(?:{self.pattern})$"} if self.pattern else {})}


class Integer(Kind):
    """An integer (not true/false, not a string of digits) from low to high."""

    def __init__(self, low: int, high: int, what: str) -> None:
        self.low, self.high, self.what = low, high, what

    def parse(self, value: Any, loc: Location, problems: list[Problem]) -> Any:
        if type(value) is not int:
            return self.refuse(value, loc, problems, "an integer")
        if not self.low <= value <= self.high:
            return self.refuse(value, loc, problems, f"{self.what} from {self.low} to {self.high}")
        return value

    def schema(self) -> dict[str, Any]:
        return {"type": "integer", "minimum": self.low, "maximum": self.high, "description": self.what}


class Number(Kind):
    """A finite number (integer or decimal, kept as a float) of at least minimum."""

    def __init__(self, minimum: float) -> None:
        self.minimum = minimum

    def parse(self, value: Any, loc: Location, problems: list[Problem]) -> Any:
        if type(value) not in (int, float) or not math.isfinite(value) or value < self.minimum:
            return self.refuse(value, loc, problems, f"a number of at least {self.minimum:g}")
        return float(value)

    def schema(self) -> dict[str, Any]:
        return {"type": "number", "minimum": self.minimum}


class Choice(Kind):
    """One of a few values, of the same type as the listed one (1 is not true, '1' is not 1)."""

    def __init__(self, *values: str | int) -> None:
        self.values = values

    def parse(self, value: Any, loc: Location, problems: list[Problem]) -> Any:
        if any(type(value) is type(choice) and value == choice for choice in self.values):
            return value
        listed = [repr(choice) for choice in self.values]
        return self.refuse(value, loc, problems, ", ".join(listed[:-1]) + f" or {listed[-1]}")

    def schema(self) -> dict[str, Any]:
        return {"enum": list(self.values)}


class Optional(Kind):
    """null, or a value of kind."""

    def __init__(self, kind: Kind) -> None:
        self.kind = kind

    def parse(self, value: Any, loc: Location, problems: list[Problem]) -> Any:
        return None if value is None else self.kind.parse(value, loc, problems)

    def schema(self) -> dict[str, Any]:
        return {"anyOf": [self.kind.schema(), {"type": "null"}]}


class Scalar(Kind):
    """A string, a number or true/false (a command-line option's value)."""

    def parse(self, value: Any, loc: Location, problems: list[Problem]) -> Any:
        if isinstance(value, (str, bool, int)) or (isinstance(value, float) and math.isfinite(value)):
            return value
        return self.refuse(value, loc, problems, "a string, a number, true or false")

    def schema(self) -> dict[str, Any]:
        return {"type": ["string", "number", "boolean"]}


class Anything(Kind):
    """Any YAML value, kept as it is (checked later by whoever reads it)."""

    def parse(self, value: Any, loc: Location, problems: list[Problem]) -> Any:
        return value

    def schema(self) -> dict[str, Any]:
        return {}


class MappingOf(Kind):
    """A mapping whose keys are of kind key and values of kind value, with min_items to max_items entries.
    A bad key is reported at `KEY (key)`."""

    def __init__(self, key: Kind, value: Kind, min_items: int = 0, max_items: int | None = None, what: str = "") -> None:
        self.key, self.value, self.min_items, self.max_items, self.what = key, value, min_items, max_items, what

    def parse(self, value: Any, loc: Location, problems: list[Problem]) -> Any:
        if not isinstance(value, dict):
            return self.refuse(value, loc, problems, "a mapping")
        before = len(problems)
        parsed = {}
        for key, item in value.items():
            good_key = self.key.parse(key, (*loc, str(key), "[key]"), problems)
            good_item = self.value.parse(item, (*loc, str(key)), problems)
            parsed[good_key if good_key is not _BAD else key] = good_item
        if not self.min_items <= len(value) <= (self.max_items if self.max_items is not None else len(value)):
            bounds = f"{self.min_items} to {self.max_items}" if self.max_items is not None else f"at least {self.min_items}"
            return self.refuse(value, loc, problems, f"{bounds} {self.what}".strip())
        return parsed if len(problems) == before else _BAD

    def schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "object", "propertyNames": self.key.schema(),
                                  "additionalProperties": self.value.schema()}
        if self.min_items:
            schema["minProperties"] = self.min_items
        if self.max_items is not None:
            schema["maxProperties"] = self.max_items
        return schema


class ListOf(Kind):
    """A list of values of kind item; once every item is good, check(list) may raise ValueError."""

    def __init__(self, item: Kind, check: Callable[[list[Any]], Any] | None = None, description: str = "") -> None:
        self.item, self.check, self.description = item, check, description

    def parse(self, value: Any, loc: Location, problems: list[Problem]) -> Any:
        if not isinstance(value, list):
            return self.refuse(value, loc, problems, "a list")
        before = len(problems)
        parsed = [self.item.parse(item, (*loc, index), problems) for index, item in enumerate(value)]
        if len(problems) != before:
            return _BAD
        try:
            return self.check(parsed) if self.check else parsed
        except ValueError as error:
            return self.refuse(value, loc, problems, str(error))

    def schema(self) -> dict[str, Any]:
        return {"type": "array", "items": self.item.schema(), "description": self.description}


class Nested(Kind):
    """A mapping parsed as the record type cls."""

    def __init__(self, cls: type[Any]) -> None:
        self.cls = cls

    def parse(self, value: Any, loc: Location, problems: list[Problem]) -> Any:
        return _parse_record(self.cls, value, loc, problems)

    def schema(self) -> dict[str, Any]:
        return record_schema(self.cls)


def spec(kind: Kind, default: Any = dataclasses.MISSING, factory: Any = dataclasses.MISSING) -> Any:
    """A record field of kind: required, or with a default (immutable) or a factory of one."""
    return dataclasses.field(default=default, default_factory=factory, metadata={"kind": kind})


def _parse_record(cls: type[Any], value: Any, loc: Location, problems: list[Problem]) -> Any:
    if not isinstance(value, dict):
        return Kind.refuse(value, loc, problems, "a mapping")
    before = len(problems)
    fields = dataclasses.fields(cls)
    names = [field.name for field in fields]
    for key in value:
        if key not in names:
            problems.append(Problem(loc, f"unknown field {key!r}", f"one of {', '.join(names)}"))
    given = {}
    for field in fields:
        if field.name in value:
            given[field.name] = field.metadata["kind"].parse(value[field.name], (*loc, field.name), problems)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            problems.append(Problem((*loc, field.name), "nothing", REQUIRED))
    return cls(**given) if len(problems) == before else _BAD


def parse(cls: type[Record], value: Any) -> Record:
    """value (a mapping read from YAML) as the record cls; Invalid lists every problem found."""
    problems: list[Problem] = []
    record = _parse_record(cls, value, (), problems)
    if problems:
        raise Invalid(problems)
    return record  # type: ignore[no-any-return]


def json_data(value: Any) -> Any:
    """value with every record turned into a mapping and every path or address into its text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: json_data(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {key: json_data(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_data(item) for item in value]
    if isinstance(value, PurePath) or type(value).__module__ == "ipaddress":
        return str(value)
    return value


def record_schema(cls: type[Any]) -> dict[str, Any]:
    """The JSON Schema of the record type cls: its fields, which are required, and their defaults."""
    properties, required = {}, []
    for field in dataclasses.fields(cls):
        schema = dict(field.metadata["kind"].schema())
        if field.default is not dataclasses.MISSING:
            schema["default"] = json_data(field.default)
        elif field.default_factory is dataclasses.MISSING:
            required.append(field.name)
        properties[field.name] = schema
    schema = {"title": cls.__name__, "description": " ".join((cls.__doc__ or "").split()), "type": "object",
              "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema
