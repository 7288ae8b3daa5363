"""The inventory schema: the example loads, and every defect gives its own one-line message."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sparkpair.errors import InventoryError
from sparkpair.inventory import parse_inventory, read_inventory

INVALID = sorted((Path(__file__).parent.parent / "fixtures" / "inventory" / "invalid").glob("*.yaml"))


def test_example_loads_with_defaults_filled(example_inventory_path: Path) -> None:
    inv = read_inventory(example_inventory_path)
    assert [n.name for n in inv.nodes] == ["spark-a", "spark-b"]
    assert inv.head.port == 22 and inv.worker.port == 22
    assert str(inv.worker.links["enP2p1s0f1np1"]) == "192.168.101.11/24"
    assert inv.container.mpi_transport == "exec" and inv.server.port == 8355
    assert inv.profile().target == "nvidia/Qwen3-235B-A22B-FP4"


def test_tilde_expands_for_operator_paths_only(example_inventory_path: Path) -> None:
    inv = read_inventory(example_inventory_path)
    assert not str(inv.cluster.ssh_key).startswith("~") and str(inv.cluster.ssh_key).endswith(".ssh/id_ed25519")
    assert inv.container.hf_cache == "~/.cache/huggingface"  # resolved on the node, not here


def test_environment_variable_names_the_file(example_inventory_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKPAIR_INVENTORY", str(example_inventory_path))
    assert read_inventory().head.name == "spark-a"


def test_there_are_at_least_fifteen_defects() -> None:
    assert len(INVALID) >= 15


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_each_defect_has_its_message(path: Path) -> None:
    expected = path.read_text().splitlines()[0].removeprefix("# expect: ")
    with pytest.raises(InventoryError) as caught:
        read_inventory(path)
    lines = caught.value.lines()
    assert any(expected in line for line in lines), lines
    assert all("\n" not in line and line.startswith(str(path)) for line in lines)


def test_every_problem_is_reported_not_only_the_first(example_inventory_path: Path) -> None:
    data = yaml.safe_load(example_inventory_path.read_text())
    data["cluster"]["mtu"] = 1
    data["server"]["port"] = -1
    with pytest.raises(InventoryError) as caught:
        parse_inventory(data)
    assert len(caught.value.lines()) == 2


def test_models_section_overrides_a_builtin_profile(example_inventory_path: Path) -> None:
    data = yaml.safe_load(example_inventory_path.read_text())
    data["models"] = {"qwen3-235b": {"max_draft_len": 4, "llm_api": {"kv_cache_config": {"free_gpu_memory_fraction": 0.8}}},
                      "tiny": {"target": "org/tiny", "tp_size": 1}}
    inv = parse_inventory(copy.deepcopy(data))
    qwen = inv.profile("qwen3-235b")
    assert qwen.max_draft_len == 4
    assert qwen.engine_config["kv_cache_config"] == {"free_gpu_memory_fraction": 0.8, "enable_block_reuse": False}
    assert inv.profile("tiny").draft is None


def test_reading_the_inventory_loads_no_pydantic(example_inventory_path: Path) -> None:
    """Every command reads the inventory before its first SSH packet: pydantic (still installed, by openai)
    cost each about 0.12 s of CPU there; the inventory's own validation imports only the standard library."""
    code = (f"import sys; from sparkpair.inventory import read_inventory; read_inventory({str(example_inventory_path)!r});"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
