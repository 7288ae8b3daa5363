"""The inventory's kinds of value (inventory/validation.py): what each accepts, what it says otherwise."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparkpair.inventory.validation import (
    Choice,
    Integer,
    Invalid,
    MappingOf,
    Nested,
    Number,
    Optional,
    Problem,
    Text,
    json_data,
    parse,
    record_schema,
    spec,
)


def refused(kind: object, value: object) -> list[Problem]:
    problems: list[Problem] = []
    kind.parse(value, ("field",), problems)  # type: ignore[attr-defined]
    return problems


@pytest.mark.parametrize("kind, value, expected", [
    (Integer(1, 9, "a digit"), True, "an integer"),
    (Integer(1, 9, "a digit"), "3", "an integer"),
    (Integer(1, 9, "a digit"), 10, "a digit from 1 to 9"),
    (Number(0), False, "a number of at least 0"),
    (Number(0), float("inf"), "a number of at least 0"),
    (Number(0), -0.5, "a number of at least 0"),
    (Choice("exec", "sshd"), "ssh", "'exec' or 'sshd'"),
    (Choice(1, 2), True, "1 or 2"),
    (Choice("a", "b", "c"), 1, "'a', 'b' or 'c'"),
    (Text("a name", r"[a-z]+"), 5, "a name"),
    (Text("a name", r"[a-z]+"), "A", "a name"),
    (MappingOf(Text("k"), Text("v"), 1), {}, "at least 1"),
    (MappingOf(Text("k"), Text("v"), 1, 2, "twins"), {"a": "x", "b": "y", "c": "z"}, "1 to 2 twins"),
])
def test_each_kind_says_what_it_expected(kind: object, value: object, expected: str) -> None:
    problems = refused(kind, value)
    assert [p.expected for p in problems] == [expected]
    assert problems[0].loc == ("field",)


def test_accepted_values_are_kept_or_converted() -> None:
    problems: list[Problem] = []
    assert Number(0).parse(3, (), problems) == 3.0 and isinstance(Number(0).parse(3, (), problems), float)
    assert Optional(Integer(1, 2, "x")).parse(None, (), problems) is None
    assert Text("an address", check=ipaddress.IPv4Interface).parse("10.0.0.1/24", (), problems) == \
        ipaddress.IPv4Interface("10.0.0.1/24")
    assert problems == []


def test_a_bad_key_is_reported_at_the_key() -> None:
    problems = refused(MappingOf(Text("a lowercase key", r"[a-z]+"), Integer(0, 1, "a bit")), {"Up": 0, "ok": 7})
    assert [(p.loc, p.expected) for p in problems] == [(("field", "Up", "[key]"), "a lowercase key"),
                                                       (("field", "ok"), "a bit from 0 to 1")]


@dataclass(frozen=True, kw_only=True)
class Inner:
    """An inner record."""

    port: int = spec(Integer(1, 65535, "a TCP port"), 22)


@dataclass(frozen=True, kw_only=True)
class Outer:
    """An outer record."""

    name: str = spec(Text("a name", r"[a-z]+"))
    path: Path = spec(Text("a path", check=Path), factory=lambda: Path("/x"))
    inner: Inner = spec(Nested(Inner), factory=Inner)


def test_a_record_reports_every_problem_unknown_and_missing_fields_included() -> None:
    with pytest.raises(Invalid) as caught:
        parse(Outer, {"inner": {"port": 0, "prot": 1}, "extra": True})
    found = {(p.loc, p.got, p.expected) for p in caught.value.problems}
    assert found == {((), "unknown field 'extra'", "one of name, path, inner"),
                     (("name",), "nothing", "a value (this field is required)"),
                     (("inner",), "unknown field 'prot'", "one of port"),
                     (("inner", "port"), "0", "a TCP port from 1 to 65535")}


def test_json_data_and_schema_come_from_the_same_declarations() -> None:
    record = parse(Outer, {"name": "a", "path": "/etc/x", "inner": {"port": 2222}})
    assert record == Outer(name="a", path=Path("/etc/x"), inner=Inner(port=2222))
    assert json_data(record) == {"name": "a", "path": "/etc/x", "inner": {"port": 2222}}
    schema = record_schema(Outer)
    assert schema["required"] == ["name"] and schema["additionalProperties"] is False
    assert schema["properties"]["name"]["pattern"] == "^(?:[a-z]+)$"  # grouped: a pattern with | stays anchored
    assert schema["properties"]["inner"]["properties"]["port"] == {
        "type": "integer", "minimum": 1, "maximum": 65535, "description": "a TCP port", "default": 22}
