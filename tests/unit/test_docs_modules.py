"""docs/architecture.md and every package's docstring name every module of the package, the page's layers are
the import-linter contract's, and whatever takes a runtime's name reads the one registry the page names.

A package is documented by a table row whose package cell lists it (`engine/`, or `cli/`, `report/`); each
module of that package (`sparkpair/<package>/<module>.py`, `__init__` and `__main__` aside) must appear in
that row as `module`. Top-level modules (`sparkpair/<module>.py`) must appear as `module.py` in the
"Top-level modules:" paragraph. The docstring of each package's `__init__.py` must name each of its modules
as `module` too, and say that it may import only the layers of pyproject.toml's `[tool.importlinter]`.
Adding a module without documenting it fails here.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "sparkpair"
DOC = ROOT / "docs" / "architecture.md"
PYPROJECT = ROOT / "pyproject.toml"
LAYERS_RULE = "May import: only the layers below its own in pyproject.toml's `[tool.importlinter]`"

PACKAGE_CELL = re.compile(r"`[a-z_]+(?:/[a-z_]+)*/`(?:, `[a-z_]+(?:/[a-z_]+)*/`)*")
SKIPPED = {"__init__", "__main__"}


def modules_by_package(root: Path) -> dict[str, list[str]]:
    """Every module under root by its package's path relative to root ("" for the top level): the stems of
    its .py files, without __init__ and __main__ (caches skipped)."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        if path.stem in SKIPPED or "__pycache__" in path.parts:
            continue
        package = path.parent.relative_to(root).as_posix()
        found.setdefault("" if package == "." else package, []).append(path.stem)
    return found


def package_rows(doc: str) -> dict[str, str]:
    """Each package a table row of doc documents ("engine", "data/modelnode") -> that row's text."""
    rows: dict[str, str] = {}
    for line in doc.splitlines():
        if not line.startswith("|"):
            continue
        for cell in (cell.strip() for cell in line.strip("|").split("|")):
            if PACKAGE_CELL.fullmatch(cell):
                for package in re.findall(r"`([^`]+)/`", cell):
                    rows[package] = line
    return rows


def top_level_paragraph(doc: str) -> str:
    """The paragraph of doc that starts with "Top-level modules:" ("" when there is none)."""
    for paragraph in doc.split("\n\n"):
        if paragraph.startswith("Top-level modules:"):
            return paragraph
    return ""


def undocumented(doc: str, root: Path) -> list[str]:
    """Every module under root that doc does not name where it should, as `package/module.py`."""
    rows, top = package_rows(doc), top_level_paragraph(doc)
    missing = []
    for package, names in modules_by_package(root).items():
        for name in names:
            if package == "":
                if f"`{name}.py`" not in top:
                    missing.append(f"{name}.py")
            elif f"`{name}`" not in rows.get(package, ""):
                missing.append(f"{package}/{name}.py")
    return missing


def test_the_architecture_page_names_every_module_of_every_package() -> None:
    missing = undocumented(DOC.read_text(), PACKAGE)
    assert not missing, f"docs/architecture.md does not name {', '.join(missing)} in its package's row"


def test_it_finds_the_packages_it_must_check() -> None:
    found = modules_by_package(PACKAGE)
    assert {"", "engine", "runtimes", "transport", "network", "data/modelnode"} <= set(found)
    assert {"vllm", "trtllm"} <= set(found["runtimes"]) and "mn_links" in found["data/modelnode"]
    assert {"engine", "runtimes", "data/modelnode", "cli", "report"} <= set(package_rows(DOC.read_text()))


@pytest.mark.parametrize("new_module", ["engine/newstage.py", "data/modelnode/mn_new.py", "newleaf.py",
                                        "newpkg/first.py"])
def test_a_module_added_without_documenting_it_fails(tmp_path: Path, new_module: str) -> None:
    for package, names in modules_by_package(PACKAGE).items():
        for name in names:
            (tmp_path / package).mkdir(parents=True, exist_ok=True)
            (tmp_path / package / f"{name}.py").touch()
    doc = DOC.read_text()
    assert undocumented(doc, tmp_path) == []
    (tmp_path / new_module).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / new_module).touch()
    assert undocumented(doc, tmp_path) == [new_module]


def test_a_module_named_only_in_another_packages_row_is_not_documented(tmp_path: Path) -> None:
    doc = "| stage | package | holds |\n|---|---|---|\n| x | `engine/` | `launch` |\n| y | `bench/` | `client` |\n"
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "launch.py").touch()
    (tmp_path / "engine" / "client.py").touch()
    assert undocumented(doc, tmp_path) == ["engine/client.py"]


def test_every_place_that_takes_a_runtime_name_reads_the_one_registry() -> None:
    from sparkpair import registry
    from sparkpair.cli.options import RuntimeChoice
    from sparkpair.inventory import profiles, schema
    from sparkpair.runtimes import runtime_named

    fields = {f.name: f.metadata["kind"] for f in dataclasses.fields(schema.Inventory)}
    profile_field = next(f for f in dataclasses.fields(profiles.Profile) if f.name == "runtime").metadata["kind"]
    lists = {"cli --runtime": tuple(RuntimeChoice().choices), "inventory.profiles.RUNTIME": profiles.RUNTIME.values,
             "Profile.runtime": profile_field.values, "Inventory.runtime": fields["runtime"].kind.values,
             "Inventory.engines keys": fields["engines"].key.values,
             "runtimes.runtime_named": tuple(runtime_named(name).name for name in registry.NAMES)}
    assert all(tuple(values) == registry.NAMES for values in lists.values()), lists
    assert "`registry.py`" in DOC.read_text() and "`sparkpair/registry.py`" in DOC.read_text()


def test_adding_a_runtime_names_every_member_of_the_runtime_protocol() -> None:
    from sparkpair.runtimes import Runtime

    members = set(Runtime.__annotations__) | {name for name, value in vars(Runtime).items()
                                                if callable(value) and not name.startswith("_")}
    doc = DOC.read_text()
    section = doc[doc.index("### Adding a runtime"):]
    section = section[:section.index("\n## ")]
    missing = sorted(name for name in members if f"`{name}`" not in section)
    assert {"image", "starts", "stages"} <= members and not missing, missing


def package_docstrings(root: Path) -> dict[str, str]:
    """Each package under root (a folder with an `__init__.py`, by its path relative to root, "" for root
    itself) -> the docstring of its `__init__.py` ("" when it has none)."""
    found = {}
    for init in sorted(root.rglob("__init__.py")):
        if "__pycache__" in init.parts:
            continue
        package = init.parent.relative_to(root).as_posix()
        found["" if package == "." else package] = ast.get_docstring(ast.parse(init.read_text())) or ""
    return found


def undocumented_in_docstrings(root: Path) -> list[str]:
    """Every module of a package under root (the top level aside) that its package's docstring does not name
    as `module`, as `package/module.py`."""
    modules = modules_by_package(root)
    return [f"{package}/{name}.py" for package, docstring in package_docstrings(root).items() if package
            for name in modules.get(package, []) if f"`{name}`" not in docstring]


def test_every_package_docstring_names_every_module_of_its_package() -> None:
    missing = undocumented_in_docstrings(PACKAGE)
    assert not missing, f"the package docstring (its __init__.py) does not name {', '.join(missing)}"


def test_a_module_added_without_a_line_in_its_package_docstring_fails(tmp_path: Path) -> None:
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "__init__.py").write_text('"""Holds `launch`."""\n')
    (tmp_path / "engine" / "launch.py").touch()
    assert undocumented_in_docstrings(tmp_path) == []
    (tmp_path / "engine" / "newstage.py").touch()
    assert undocumented_in_docstrings(tmp_path) == ["engine/newstage.py"]


def test_every_package_docstring_defers_to_the_one_layering_rule() -> None:
    docstrings = package_docstrings(PACKAGE)
    assert {"engine", "checks", "transport", "report", "cli"} <= set(docstrings)
    flat = {package: " ".join(text.split()) for package, text in docstrings.items() if package}
    wrong = sorted(package for package, text in flat.items() if LAYERS_RULE not in text and package != "data")
    assert not wrong, f"these package docstrings do not say {LAYERS_RULE!r}: {', '.join(wrong)}"
    assert "never imported by sparkpair's own code" in flat["data"]


def contract_layers() -> list[str]:
    """The layers of pyproject.toml's `pipeline` contract, top first, as written there."""
    config = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]
    pipeline = next(c for c in config["contracts"] if c["id"] == "pipeline")
    assert pipeline["type"] == "layers"
    return [" ".join(layer.split()) for layer in pipeline["layers"]]


def page_layers(doc: str) -> list[str]:
    """The layers the page's "## Layers" section lists in its code block, top first."""
    section = doc[doc.index("\n## Layers\n"):]
    block = section[section.index("```\n") + 4:]
    return [" ".join(line.split()) for line in block[:block.index("```")].splitlines() if line.strip()]


def test_the_layers_on_the_page_are_the_contracts() -> None:
    assert page_layers(DOC.read_text()) == contract_layers()


def test_every_package_of_sparkpair_is_in_a_layer() -> None:
    layered = {name.strip() for layer in contract_layers() for name in layer.split("|")}
    packages = {f"sparkpair.{package}" for package in package_docstrings(PACKAGE) if package and "/" not in package}
    leaves = {f"sparkpair.{path.stem}" for path in PACKAGE.glob("*.py") if path.stem != "__init__"}
    assert (packages | leaves) - {"sparkpair.data"} == layered
