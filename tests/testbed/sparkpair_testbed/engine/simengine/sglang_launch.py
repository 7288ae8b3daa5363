"""`python3 -m sglang.launch_server` of the stand-in SGLang: the wheel's own launcher, with only its
`run_server` swapped for simengine's (sglang_server.run_server).

The SGLang image (sparkpair_testbed/sglang_image/) installs the real `sglang` package and keeps its
`sglang/launch_server.py` as `launch_server_wheel.py`; the `launch_server.py` in its place calls
`main()` here, which runs the wheel's module as `__main__` without its `run_server` definition: so
SGLang's own warning, plugins, `prepare_server_args(sys.argv[1:])` (argparse: a misspelt or
mistyped option is refused exactly as SGLang refuses it, exit 2) and its `kill_process_tree` on the
way out are the real ones, and only what needs a GPU is simulated. Where the wheel's file is still
`launch_server.py` (a venv on this machine) that one is run the same way.
"""

import ast
import sys
from pathlib import Path


def wheel_launcher():
    """The wheel's own launch_server.py (renamed by the image build, or still in place)."""
    import importlib.util

    package = Path(importlib.util.find_spec("sglang").origin).parent
    kept = package / "launch_server_wheel.py"
    return kept if kept.exists() else package / "launch_server.py"


def without_run_server(source, filename):
    """The module's code with its `def run_server` removed (run_server is then looked up in the globals given)."""
    tree = ast.parse(source, filename)
    tree.body = [node for node in tree.body if not (isinstance(node, ast.FunctionDef) and node.name == "run_server")]
    return compile(tree, filename, "exec")


def simulated_run_server(server_args):
    """run_server for the wheel's __main__ block: the stand-in's start; a failed one exits 1."""
    from .sglang_server import run_server

    status = run_server(server_args)
    if status:
        sys.exit(status)


def main():
    """Run the wheel's launcher as __main__ with the simulated run_server."""
    path = wheel_launcher()
    code = without_run_server(path.read_text(), str(path.with_name("launch_server.py")))
    exec(code, {"__name__": "__main__", "__file__": str(path), "__builtins__": __builtins__,  # noqa: S102
                "run_server": simulated_run_server})
