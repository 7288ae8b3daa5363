"""The simulated pair knows nothing of sparkpair: none of sparkpair's node paths, file, key or
container names appears under tests/testbed, and neither the testbed nor its stand-in engine
imports sparkpair. What a reset takes back on a node comes from sparkpair's tests
(tests/conftest.py), and the engine validates configs against its own allow-list."""

from __future__ import annotations

import re
from pathlib import Path

from sparkpair import paths
from sparkpair.inventory import Container

TESTBED = Path(__file__).resolve().parents[1] / "testbed"
SPARKPAIR_NAMES = (Container().name, paths.NETPLAN_FILE.removesuffix(".yaml"), paths.STATE_DIR.removeprefix("~/"),
                   paths.SYSTEM_BACKUPS, paths.node_key_comment(""))
IMPORTS_SPARKPAIR = re.compile(r"^\s*(?:from|import)\s+sparkpair(?:\.|\s|$)", re.M)


def files_of_the_testbed() -> list[Path]:
    """Every source, data and documentation file of the testbed package and its tests."""
    skipped = ("__pycache__", ".egg-info", ".pytest_cache")
    return [path for path in sorted(TESTBED.rglob("*"))
            if path.is_file() and not any(part.endswith(skipped) for part in path.parts) and path.suffix != ".pyc"]


def test_the_testbed_names_nothing_of_sparkpair() -> None:
    assert len(files_of_the_testbed()) > 50
    found = [f"{path.relative_to(TESTBED)}: {name}" for path in files_of_the_testbed()
             for name in SPARKPAIR_NAMES if name in path.read_text(errors="replace")]
    assert found == []


def test_neither_the_testbed_nor_the_engine_imports_sparkpair() -> None:
    found = [str(path.relative_to(TESTBED)) for path in files_of_the_testbed()
             if IMPORTS_SPARKPAIR.search(path.read_text(errors="replace"))]
    assert found == []
    assert IMPORTS_SPARKPAIR.search("from sparkpair.paths import NETPLAN_PATH")
    assert not IMPORTS_SPARKPAIR.search("from sparkpair_testbed.layout import STATE_DIR")
