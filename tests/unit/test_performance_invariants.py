"""The latency tricks that stay (docs/architecture.md, "Performance invariants"): each test fails when its trick
is removed, so nobody undoes one without knowing what it bought.
"""

from __future__ import annotations

import ast
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sparkpair.probes import Probe, batch_script
from sparkpair.transport import Shell, tcp

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "sparkpair" / "cli"


def modules_after(statement: str, env: dict[str, str] | None = None) -> list[str]:
    """The modules a fresh interpreter holds after running statement (beyond those it starts with)."""
    code = ("import json, sys; before = set(sys.modules); " + statement +
            "; print(json.dumps(sorted(set(sys.modules) - before)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env={**os.environ, **(env or {})}, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    loaded: list[str] = json.loads(result.stdout.splitlines()[-1])
    return loaded


def test_the_cli_imports_only_click_at_start_up() -> None:
    """`import sparkpair.cli` (every command registered) loads click and the cli package, nothing else of
    sparkpair and no other library: paramiko, jinja2, rich, yaml wait for the command that needs them."""
    loaded = modules_after("import sparkpair.cli")
    ours = {name for name in loaded if name.startswith("sparkpair.")}
    assert ours and all(name.startswith("sparkpair.cli") for name in ours), sorted(ours)
    libraries = {name.split(".")[0] for name in loaded} - set(sys.stdlib_module_names) - {"sparkpair"}
    assert libraries == {"click"}, sorted(libraries)


def test_report_loads_no_flow_and_no_rich_at_import() -> None:
    """report's signatures name the flows' results through TYPE_CHECKING imports only: importing it loads no
    flow, no transport and no rich (rich waits for the first styled line; `--json` never needs it)."""
    loaded = modules_after("import sparkpair.report")
    heavy = [name for name in loaded if name.split(".")[0] in ("rich", "paramiko", "jinja2")
             or name.startswith(("sparkpair.engine", "sparkpair.checks", "sparkpair.transport", "sparkpair.bench",
                                 "sparkpair.network", "sparkpair.apply", "sparkpair.probes", "sparkpair.runtimes"))]
    assert heavy == []


def test_paramiko_is_imported_without_invoke(tmp_path: Path) -> None:
    """paramiko.config imports invoke when it can (about 0.1 s: unittest.mock, asyncio) for ssh_config's
    `Match exec`, which sparkpair never reads; transport.ssh blocks that one import, then unblocks it."""
    (tmp_path / "invoke.py").write_text("import os\nopen(os.environ['INVOKE_MARK'], 'w').close()\n")
    mark = tmp_path / "imported"
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
           "INVOKE_MARK": str(mark)}
    loaded = modules_after("import sparkpair.transport.ssh", env)
    assert "paramiko" in loaded and "invoke" not in loaded and not mark.exists()
    after = modules_after("import sparkpair.transport.ssh, invoke", env)
    assert "invoke" in after and mark.exists()   # unblocked right after: anyone else still gets invoke


def test_run_ends_the_process_with_os_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    """cli.run flushes and calls os._exit with main's status: the interpreter's teardown of every module
    (about 30-40 ms of CPU after each command) is skipped."""
    import sparkpair.cli as cli

    class Exited(Exception):
        pass

    def exit_now(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr(cli, "main", lambda: 3)
    monkeypatch.setattr(cli.os, "_exit", exit_now)
    monkeypatch.setattr(sys, "getprofile", lambda: None)
    monkeypatch.setattr(sys, "gettrace", lambda: None)
    with pytest.raises(Exited) as exited:
        cli.run()
    assert exited.value.args == (3,)


def test_the_ssh_socket_has_nagle_off_and_asks_for_quick_acks() -> None:
    """transport.tcp.dial hands paramiko a QuickAckSocket with TCP_NODELAY set: SSH's small packets go out at
    once (Nagle cost each command about 45 ms) and the first channel open is not held behind a delayed ACK."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        sock = tcp.dial("127.0.0.1", server.getsockname()[1], timeout=5)
        peer, _ = server.accept()
        with sock, peer:
            assert isinstance(sock, tcp.QuickAckSocket)
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
            peer.sendall(b"x")
            assert sock.recv(1) == b"x"
    assert "TCP_QUICKACK" in tcp.QuickAckSocket.recv.__code__.co_names


def test_the_probe_batch_renices_what_follows_the_waiting_probes() -> None:
    """A batch with probes that wait on the network starts them first, then lowers its own priority, so the
    heavy probes after them run at nice 10 and cannot delay a waiting probe's answer."""
    probes = [Probe("heavy", (), Shell("true"), str), Probe("login", (), Shell("true"), str, waits=True)]
    script = batch_script(probes).text
    renice = script.index("renice -n 10 -p $$")
    assert script.index('"$d/1.o"') < renice < script.index('"$d/0.o"')


def _call_order(path: Path, function: str) -> tuple[int, int]:
    """In function of the module at path: the line of the first `app.pair(` call and of the first import of
    a sparkpair module."""
    tree = ast.parse(path.read_text())
    body = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == function)
    pairs = [node.lineno for node in ast.walk(body) if isinstance(node, ast.Call)
             and isinstance(node.func, ast.Attribute) and node.func.attr == "pair"]
    imports = [node.lineno for node in ast.walk(body) if isinstance(node, ast.ImportFrom)
               and (node.module or "").startswith("sparkpair") or isinstance(node, ast.Import)
               and any(alias.name.startswith("sparkpair") for alias in node.names)]
    assert pairs and imports
    return min(pairs), min(imports)


@pytest.mark.parametrize(("module", "function"), [("doctor.py", "doctor_cmd"), ("network.py", "setup_network_cmd")])
def test_doctor_and_setup_network_start_the_handshakes_before_their_imports(module: str, function: str) -> None:
    """`app.pair()` starts both SSH handshakes in the background; doctor and setup-network call it before they
    import their flow, so the handshakes overlap those imports (paramiko's, the checks', report's)."""
    pair_line, import_line = _call_order(CLI / module, function)
    assert pair_line < import_line


def test_sparkpair_is_byte_compiled_by_setup_and_by_the_benchmarks() -> None:
    """The editable install writes no bytecode; with PYTHONDONTWRITEBYTECODE every command would compile its
    modules again (about 0.15 s of each doctor): scripts/setup and the bench floor compile them once."""
    assert "-m compileall -q sparkpair" in (ROOT / "scripts" / "setup").read_text()
    floor = ast.parse((ROOT / "scripts" / "bench" / "floor.py").read_text())
    calls = [node for node in ast.walk(floor) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and node.func.attr == "compile_dir"]
    assert calls
