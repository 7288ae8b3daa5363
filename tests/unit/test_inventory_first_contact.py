"""The inventory as a newcomer writes it (issue 38, item 3): every problem in one pass, interface names a Spark
has, the right node blamed for a typo, an empty file said to be empty, and a JSON Schema that carries the
patterns the validator enforces."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from sparkpair.cli import main
from sparkpair.errors import InventoryError
from sparkpair.inventory import parse_inventory

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE: dict[str, Any] = yaml.safe_load((ROOT / "inventory.example.yaml").read_text())


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def problems_of(data: dict[str, Any]) -> list[str]:
    with pytest.raises(InventoryError) as raised:
        parse_inventory(data, "inventory.yaml")
    return raised.value.lines()


def test_an_unknown_key_and_a_duplicate_address_are_both_reported() -> None:
    data = copy.deepcopy(EXAMPLE)
    data["colour"] = "blue"
    data["nodes"][1]["links"]["enp1s0f1np1"] = data["nodes"][0]["links"]["enp1s0f1np1"]
    found = problems_of(data)
    assert any("unknown field 'colour'" in line for line in found), found
    assert any("nodes[1].links.enp1s0f1np1: got 192.168.100.10/24, already used by nodes[0]" in line for line in found)


def test_a_typo_on_one_node_blames_that_node() -> None:
    for typo in (0, 1):
        data = copy.deepcopy(EXAMPLE)
        links = data["nodes"][typo]["links"]
        links["enp1s0f1np11"] = links.pop("enp1s0f1np1")
        (line,) = problems_of(data)
        assert line.startswith(f"inventory.yaml: nodes[{typo}].links: got enP2p1s0f1np1, enp1s0f1np11;"), line


@pytest.mark.parametrize("names", [("eth0", "wlp1s0"), ("enx001122334455", "enP2p1s0f1np1")])
def test_interfaces_not_named_as_connectx_ports_are_warnings_naming_the_field(names: tuple[str, str],
                                                                             tmp_path: Path) -> None:
    data = copy.deepcopy(EXAMPLE)
    for node in data["nodes"]:
        addresses = list(node["links"].values())
        node["links"] = dict(zip(names, addresses, strict=True))
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data))
    code, out, err = run(["-i", str(path), "inventory", "check"])
    assert code == 0 and ": OK (" in out
    odd = [name for name in names if not name.startswith("enP2")]
    for index, node in enumerate(("spark-a", "spark-b")):
        assert f"warning: {node}: inventory.port-names: nodes[{index}].links: {', '.join(odd)}" in err, err
    assert "enp1s0f0np0, enp1s0f1np1, enP2p1s0f0np0, enP2p1s0f1np1" in err and "ibdev2netdev" in err


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_an_empty_inventory_says_it_is_empty(text: str, tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(text)
    code, _, err = run(["-i", str(path), "inventory", "check"])
    assert code == 2 and f"{path}: empty; expected a mapping with cluster:, nodes:" in err and "NoneType" not in err


def test_the_schema_carries_the_host_and_interface_patterns_and_describes_known_hosts() -> None:
    code, out, _ = run(["inventory", "schema"])
    schema = json.loads(out)
    node = schema["properties"]["nodes"]["items"]["properties"]
    host, interface = node["host"]["pattern"], node["links"]["propertyNames"]["pattern"]
    for good in ("spark-a.local", "192.168.1.10", "fe80::1%enp1s0"):
        assert re.search(host, good), good
    for bad in ("-spark", "a b", "spark_a"):
        assert not re.search(host, bad), bad
    assert re.search(interface, "enP2p1s0f1np1") and not re.search(interface, ".hidden")
    cluster = schema["properties"]["cluster"]["properties"]
    assert "known_hosts file" in cluster["known_hosts"]["description"] and "key" not in \
        cluster["known_hosts"]["description"].split("host key")[0]
    assert "private key" in cluster["ssh_key"]["description"]
    jsonschema.validate(EXAMPLE, schema)
    broken = copy.deepcopy(EXAMPLE)
    broken["nodes"][0]["host"] = "spark a"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)
