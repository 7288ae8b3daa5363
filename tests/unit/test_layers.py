"""The one layering rule (pyproject.toml's `[tool.importlinter]`, docs/architecture.md "Layers") holds for the
tree, and breaks on an import that runs back up: proven on a copy of sparkpair with one upward import added.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(package_parent: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports over the sparkpair found in package_parent, with the repository's contracts."""
    env = {**os.environ, "PYTHONPATH": str(package_parent), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", str(ROOT / "pyproject.toml")], capture_output=True,
                          text=True, timeout=120, env=env, cwd=package_parent)


def copy_of_sparkpair(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "sparkpair", tmp_path / "sparkpair", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "sparkpair"


def test_the_tree_keeps_every_contract() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "broken" in result.stdout and " 0 broken" in result.stdout


@pytest.mark.parametrize(("module", "upward", "contract"), [
    ("inventory/schema.py", "import sparkpair.cli", "sparkpair.inventory is not allowed to import sparkpair.cli"),
    ("checks/deep.py", "from sparkpair.engine import containers", "sparkpair.checks is not allowed to import "
                                                                      "sparkpair.engine"),
    ("bench/stats.py", "from sparkpair import report", "sparkpair.bench is not allowed to import sparkpair.report"),
    ("network/verify.py", "from sparkpair.engine import state", "sparkpair.network is not allowed to import "
                                                                  "sparkpair.engine"),
])
def test_an_import_that_runs_back_up_breaks_the_layers(tmp_path: Path, module: str, upward: str, contract: str) -> None:
    copy = copy_of_sparkpair(tmp_path)
    target = copy / module
    target.write_text(target.read_text() + f"\n{upward}  # upward\n")
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout[-2000:]
    assert contract in result.stdout


def test_a_pure_stage_that_connects_breaks_its_contract(tmp_path: Path) -> None:
    copy = copy_of_sparkpair(tmp_path)
    target = copy / "render" / "runbook.py"
    target.write_text(target.read_text() + "\nfrom sparkpair.transport import Shell  # a connection\n")
    result = lint_imports(tmp_path)
    assert result.returncode == 1 and "sparkpair.render is not allowed to import sparkpair.transport" in result.stdout
