"""docs/security.md names the tests that prove each claim: every test file and test function it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "security.md").read_text()


def test_every_test_file_the_security_page_names_exists() -> None:
    named = set(re.findall(r"(?:tests/(?:unit|integration)/)?(test_\w+\.py)", DOC))
    present = {path.name for path in (ROOT / "tests").rglob("test_*.py")}
    assert named and named <= present, sorted(named - present)


def test_every_test_function_the_security_page_names_exists() -> None:
    named = {name for name in re.findall(r"`(test_\w+?)(?:\.\.\.)?`", DOC) if not name.endswith("_py")}
    sources = "\n".join(path.read_text() for path in (ROOT / "tests").rglob("test_*.py"))
    defined = set(re.findall(r"^def (test_\w+)", sources, re.MULTILINE))
    assert named and named <= defined, sorted(named - defined)
