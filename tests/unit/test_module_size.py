"""Every module of sparkpair stays under 400 lines (docs/architecture.md): a module that grows past it is
split by what it holds, as checks/links.py was into links and crossing."""

from __future__ import annotations

from pathlib import Path

LIMIT = 400
PACKAGE = Path(__file__).resolve().parents[2] / "sparkpair"


def test_every_module_is_under_the_line_limit() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 100
    long = {str(path.relative_to(PACKAGE)): count for path in modules
            if (count := len(path.read_text(encoding="utf-8").splitlines())) >= LIMIT}
    assert long == {}, f"split these modules (limit {LIMIT} lines): {long}"
