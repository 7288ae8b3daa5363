"""One module per engine: outside `sparkpair/runtimes/` (and the registry that names them) no code compares
anything with a runtime's name, looks a value up by one, or imports one runtime's module. Whatever differs
between engines is asked of the runtime (issue 37)."""

from __future__ import annotations

import ast
from pathlib import Path

from sparkpair import registry

PACKAGE = Path(__file__).resolve().parents[2] / "sparkpair"
OWNERS = (PACKAGE / "runtimes", PACKAGE / "registry.py", PACKAGE / "data")  # data: programs run on the nodes
NAMES = frozenset(registry.NAMES)


def _is_name(node: ast.AST) -> bool:
    """A string constant that is a runtime's name, or a tuple, list or set holding one."""
    if isinstance(node, ast.Constant):
        return node.value in NAMES
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_is_name(item) for item in node.elts)


def name_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for every comparison with a runtime's name (==, !=, in, match case), every lookup by one
    (x["vllm"], x.get("vllm"), of_runtime("trtllm")), every fallback to one (`runtime or "trtllm"`) and every
    import of one runtime's module."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(_is_name(side) for side in [node.left, *node.comparators]):
            found.append((node.lineno, "compares with a runtime's name"))
        elif isinstance(node, ast.MatchValue) and _is_name(node.value):
            found.append((node.value.lineno, "matches a runtime's name"))
        elif isinstance(node, ast.Subscript) and _is_name(node.slice):
            found.append((node.lineno, "looks up by a runtime's name"))
        elif isinstance(node, ast.Call) and any(isinstance(arg, ast.Constant) and _is_name(arg) for arg in node.args):
            found.append((node.lineno, "passes a runtime's name"))
        elif isinstance(node, ast.BoolOp) and any(_is_name(value) for value in node.values):
            found.append((node.lineno, "falls back to a runtime's name"))
        elif isinstance(node, ast.ImportFrom) and node.module == "sparkpair.runtimes" and \
                any(alias.name in NAMES for alias in node.names):
            found.append((node.lineno, "imports one runtime's module"))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(module.startswith("sparkpair.runtimes.") and module.split(".")[2] in NAMES for module in modules):
                found.append((node.lineno, "imports one runtime's module"))
    return found


def offenders(root: Path) -> list[str]:
    """`path:line: what` for every use of a runtime's name in the modules under root that no runtime owns."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if any(path == owner or owner in path.parents for owner in OWNERS):
            continue
        for line, what in name_uses(ast.parse(path.read_text(), str(path))):
            found.append(f"{path.relative_to(root.parent)}:{line}: {what}")
    return found


def test_no_module_outside_the_runtimes_compares_with_a_runtimes_name() -> None:
    assert offenders(PACKAGE) == []


def test_the_check_sees_every_way_of_naming_a_runtime() -> None:
    text = ("if profile.runtime == 'vllm': pass\n"
            "x = 'a' if name != \"trtllm\" else 'b'\n"
            "ok = runtime in ('trtllm', 'other')\n"
            "table['vllm']\n"
            "table.get('trtllm', 1)\n"
            "from sparkpair.runtimes import vllm\n"
            "stages.of_runtime('trtllm')\n"
            "chosen = state.runtime or 'trtllm'\n"
            "import sparkpair.runtimes.trtllm\n"
            "match runtime:\n    case 'vllm':\n        pass\n"
            "fine = runtime == registry.DEFAULT and label == 'other' and f'{name}' in names\n"
            "also_fine = click.Choice(['vllm'], default='vllm')\n")
    assert sorted(line for line, _ in name_uses(ast.parse(text))) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 11]
