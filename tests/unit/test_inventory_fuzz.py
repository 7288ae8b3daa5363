"""Random and mutated inventories: only clean one-line errors, never anything else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mutation import mutate, value_paths

from sparkpair.cli import main
from sparkpair.errors import InventoryError
from sparkpair.inventory import Inventory, parse_inventory, record_schema

EXAMPLE = yaml.safe_load((Path(__file__).parent.parent.parent / "inventory.example.yaml").read_text())
NASTY = st.sampled_from(["", " ", "; rm -rf /", "$(id)", "`id`", "a'b", 'a"b', "a b", "x\ny", "\x00", "~",
                         "../..", "192.168.200.12/24", "enp1s0f1np1", "9000", "-1", "1e9", "nan", "é", "a" * 300])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True),
                    st.text(max_size=30), NASTY)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.one_of(st.text(max_size=12), NASTY),
                                                                       inner, max_size=4)), max_leaves=12)


def _assert_clean(data: Any) -> None:
    try:
        parse_inventory(data)
    except InventoryError as error:
        assert error.exit_code == 2
        assert error.lines() and all(line and "\n" not in line for line in error.lines())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), VALUES, st.booleans())
def test_mutated_example_gives_only_clean_errors(data: st.DataObject, value: Any, delete: bool) -> None:
    path = data.draw(st.sampled_from(value_paths(EXAMPLE)))
    _assert_clean(mutate(EXAMPLE, path, value, delete))


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["cluster", "nodes", "container", "server", "models", "x"]), VALUES))
def test_random_documents_give_only_clean_errors(document: dict) -> None:
    _assert_clean(document)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200) | st.text(max_size=200).map(lambda t: t.encode("utf-8", "replace")))
def test_random_files_through_the_cli_exit_2_without_traceback(tmp_path: Path, capsys: Any, raw: bytes) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_bytes(raw)
    code = main(["-i", str(path), "inventory", "check"])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    assert code in (0, 2)
    if code == 2:
        assert captured.err.startswith("error: ")


SCHEMA = jsonschema.Draft202012Validator(record_schema(Inventory))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), VALUES, st.booleans())
def test_the_published_schema_accepts_every_inventory_the_loader_accepts(data: st.DataObject, value: Any,
                                                                          delete: bool) -> None:
    """`sparkpair inventory schema` is what editors check the file with: it must never flag a file sparkpair
    loads (it can say less: cross-node checks such as one subnet per cable are beyond a JSON Schema)."""
    document = mutate(EXAMPLE, data.draw(st.sampled_from(value_paths(EXAMPLE))), value, delete)
    try:
        parse_inventory(document)
    except InventoryError:
        return
    assert not list(SCHEMA.iter_errors(document))


def test_the_published_schema_refuses_what_one_field_alone_refuses() -> None:
    for path, value in [(("cluster", "mtu"), 1), (("container", "imgae"), "x"), (("server", "port"), "80"),
                        (("container", "mpi_transport"), "ssh"), (("nodes", 0, "links"), {})]:
        document = mutate(EXAMPLE, path, value, False)
        with pytest.raises(InventoryError):
            parse_inventory(document)
        assert list(SCHEMA.iter_errors(document)), path
    assert not list(SCHEMA.iter_errors(EXAMPLE))
