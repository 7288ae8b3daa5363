"""Random and mutated command lines and inventories through `sparkpair.cli.main`, for every command.

Whatever the arguments, the outcome is an exit status (0, 1 or 2) and clean lines: click's usage
block or `error:` lines, each one line. Never a traceback, never an internal error.

Nothing here can reach a node: `sparkpair.transport.Pair` is replaced by a stub that fails the
way an unreachable pair does, and every socket connect fails the test, so only the parsing and
validation that happen before connecting are exercised. Input that is valid therefore ends at the
stub (exit 1, its message) or, for the offline commands, succeeds (exit 0).
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import socket
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from mutation import mutate, value_paths

import sparkpair.transport
from sparkpair.cli import cli, main
from sparkpair.errors import ConnectError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((ROOT / "inventory.example.yaml").read_text())
STUB_MESSAGE = "stub pair: this test never connects"
CLEAN_PREFIXES = ("Usage: ", "Try '", "Error: ", "error: ", "warning: ")

# Strings an operator (or an attacker who controls a wrapper script) could pass. NUL cannot be in
# argv (the kernel ends each argument there); undecodable bytes arrive as lone surrogates.
NASTY = ["", " ", "-", "--", ";", "; touch /tmp/sparkpair-canary", "$(touch /tmp/sparkpair-canary)",
         "`touch /tmp/sparkpair-canary`", "'", '"', "a'b", 'a"b', "a b", "x\ny", "\n", "\r\n", "\t",
         "é", "日本", "\U0001f600", "\udcff", "\u202e", "~", "..", "../..", "/", "-1", "0", "1e9", "1e400",
         "nan", "NaN", "inf", "-inf", "0x10", "99999999999999999999999", "-99999999999999999999",
         "1,2,3", ",", "1,,2", "local:", "local:/", "local:relative", "local:/x y/$(id)", "hub", "cached",
         "spark-a", "spark-b", "qwen3-235b", "gpt-oss-120b", "--json", "-y", "a" * 5000]
NASTY_TEXT = st.sampled_from(NASTY) | st.text(max_size=40).filter(lambda s: "\0" not in s) | \
    st.binary(max_size=12).map(lambda b: b.decode("utf-8", "surrogateescape")).filter(lambda s: "\0" not in s)
NUMBERS = st.integers(-10**30, 10**30).map(str) | st.floats(allow_nan=True, allow_infinity=True).map(str)
VALUE = NASTY_TEXT | NUMBERS

# Plausible values per option and for the PROFILE argument; any other option gets only VALUE.
PLAUSIBLE: dict[str, list[str]] = {
    "PROFILE": ["qwen3-235b", "gpt-oss-120b"], "--out": ["OUT"], "--prompts": ["PROMPTS"],
    "--only": ["links,path", "trust"], "--timeout": ["1", "60", "3600"],
    "--model-source": ["hub", "cached", "local:/srv/hf"], "--node": ["spark-a", "spark-b"],
    "--tail": ["1", "100", "100000"], "--concurrency": ["1", "1,2,4"], "--requests": ["1", "20"],
    "--max-tokens": ["1", "128"], "--draft-len": ["1,3"],
}


def _command_table() -> dict[tuple[str, ...], dict[str, Any]]:
    """Every command of the CLI (walked from click, so a new one is fuzzed too) with its parameters."""
    table: dict[tuple[str, ...], dict[str, Any]] = {}

    def walk(group: click.Group, path: tuple[str, ...]) -> None:
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                walk(command, path + (name,))
                continue
            spec: dict[str, Any] = {"flags": [], "options": {}}
            for param in command.params:
                if isinstance(param, click.Argument):
                    spec["argument"] = PLAUSIBLE.get(param.human_readable_name, ["x"])
                elif isinstance(param, click.Option) and param.is_flag:
                    spec["flags"] += param.opts + param.secondary_opts
                elif isinstance(param, click.Option):
                    spec["options"][param.opts[-1]] = PLAUSIBLE.get(param.opts[-1], [])
            table[path + (name,)] = spec

    walk(cli, ())
    return table


COMMANDS = _command_table()
if importlib.util.find_spec("sparkpair.bench") is None:  # bench lands separately
    COMMANDS.pop(("bench",), None)


class StubPair:
    """Stands in for sparkpair.transport.Pair: the pair is never reached."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise ConnectError(STUB_MESSAGE)


def _no_dialing(*args: Any, **kwargs: Any) -> None:
    raise AssertionError(f"the CLI fuzz test tried to open a connection: {args!r}")


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No pair, no sockets, a scratch working directory and an inventory file in it."""
    monkeypatch.setattr(sparkpair.transport, "Pair", StubPair)
    monkeypatch.setattr(socket.socket, "connect", _no_dialing)
    monkeypatch.setattr(socket, "create_connection", _no_dialing)
    monkeypatch.delenv("SPARKPAIR_INVENTORY", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inventory.yaml").write_text(yaml.safe_dump(EXAMPLE))
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hello"}\n')
    return tmp_path


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def assert_clean(argv: list[str], code: int, out: str, err: str) -> None:
    """The contract of every outcome: an exit status and clean one-line messages."""
    shown = f"argv={argv!r}\nexit={code}\nstdout={out[-2000:]!r}\nstderr={err[-2000:]!r}"
    assert "Traceback" not in out + err, shown
    assert "internal error" not in err, shown
    assert code in (0, 1, 2), shown
    if code == 0:
        return
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, shown
    if code == 2 and lines[0].startswith("Usage: ") and "Commands:" in lines:
        return  # a group named without a command shows its help (click's no_args_is_help)
    assert all(line.startswith(CLEAN_PREFIXES) for line in lines), shown
    assert any(line.startswith(("Error: ", "error: ")) for line in lines), shown
    if code == 1:
        assert STUB_MESSAGE in err, shown  # the only way to fail with valid input here: the pair


def _out_dir(base: Path, name: str) -> str:
    """An --out under the scratch directory (no `..`, so nothing is written outside it)."""
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".", "..")]
    return str(base.joinpath("out", *parts)) if parts else str(base / "out")


@st.composite
def command_lines(draw: st.DrawFn, base: Path) -> list[str]:
    argv: list[str] = []
    argv += ["-v"] * draw(st.integers(0, 3))
    inventory = draw(st.sampled_from(["inventory.yaml", "inventory.yaml", "inventory.yaml", "missing.yaml",
                                      "/dev/null", "/dev/zero", "/etc", "PATH"]))
    if inventory == "PATH":
        inventory = draw(NASTY_TEXT)
    argv += ["-i", inventory]
    command = draw(st.sampled_from(sorted(COMMANDS)))
    spec = COMMANDS[command]
    argv += list(command)
    words: list[list[str]] = []
    if spec.get("argument") and draw(st.booleans()):
        words.append([draw(st.sampled_from(spec["argument"]) | VALUE)])
    for flag in spec.get("flags", []):
        if draw(st.integers(0, 2)) == 0:
            words.append([flag])
    for option, plausible in spec.get("options", {}).items():
        if option in ("--out",) or draw(st.booleans()):
            value = draw(st.sampled_from(plausible) | VALUE if plausible else VALUE)
            if value == "OUT" or option == "--out":
                value = _out_dir(base, value)
            elif value == "PROMPTS":
                value = str(base / "prompts.jsonl")
            words.append([option, value])
    for _ in range(draw(st.integers(0, 2))):  # junk: unknown options, stray words, a lone option
        junk = draw(st.sampled_from(["--nope", "-Z", "--json=", "--timeout", "--node", "extra"]) | VALUE)
        words.append([junk])
    order = draw(st.permutations(range(len(words)))) if words else []
    for index in order:
        argv += words[index]
    if draw(st.integers(0, 9)) == 0 and len(argv) > 1:  # a value missing at the end, or a cut line
        argv = argv[: draw(st.integers(1, len(argv)))]
    return argv


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_command_lines_end_cleanly(offline: Path, data: st.DataObject) -> None:
    argv = data.draw(command_lines(offline))
    code, out, err = run_cli(argv)
    event(f"exit {code}")
    assert_clean(argv, code, out, err)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(VALUE | st.sampled_from(["inventory", "check", "launch", "doctor", "-i", "--help",
                                               "--version", "-v", "--json", "--out"]), max_size=8))
def test_arbitrary_words_end_cleanly(offline: Path, words: list[str]) -> None:
    argv = ["-i", "inventory.yaml"] + [w for w in words if w != "--out"]
    code, out, err = run_cli(argv)
    event(f"exit {code}")
    assert_clean(argv, code, out, err)


# --- mutated inventories, through every command ------------------------------------------------

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True),
                    st.sampled_from(NASTY).filter(lambda s: "\udcff" not in s), st.text(max_size=20))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) |
                      st.dictionaries(st.text(max_size=10) | st.sampled_from(NASTY[:20]), inner, max_size=3),
                      max_leaves=8)


# Paths under which a value may be added (new keys are as interesting as changed ones).
EXTRA_KEYS = [("container", "env"), ("models",), ("models", "qwen3-235b"), ("models", "qwen3-235b", "llm_api"),
              ("models", "qwen3-235b", "serve_args"), ("nodes", 0, "links"), ("cluster",), ()]


@st.composite
def mutated_inventories(draw: st.DrawFn) -> Any:
    data = copy.deepcopy(EXAMPLE)
    data.setdefault("container", {}).setdefault("env", {})
    data.setdefault("models", {}).setdefault("qwen3-235b", {}).setdefault("llm_api", {})
    data["models"]["qwen3-235b"].setdefault("serve_args", {})
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            data = mutate(data, draw(st.sampled_from(value_paths(data))), draw(VALUES), draw(st.integers(0, 3)) == 0)
        else:
            holder = data
            for part in draw(st.sampled_from(EXTRA_KEYS)):
                if isinstance(holder, dict):
                    holder = holder.get(part)
                elif isinstance(holder, list) and isinstance(part, int) and part < len(holder):
                    holder = holder[part]
                else:
                    holder = None
            if isinstance(holder, dict):
                holder[draw(st.sampled_from(NASTY[:30]) | st.text(max_size=12))] = draw(VALUES)
    return data


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=mutated_inventories(), command=st.sampled_from(sorted(COMMANDS)), data=st.data())
def test_mutated_inventories_through_every_command(offline: Path, document: Any, command: tuple[str, ...],
                                                   data: st.DataObject) -> None:
    path = offline / "mutated.yaml"
    try:
        path.write_text(yaml.safe_dump(document, allow_unicode=True))
    except yaml.YAMLError:
        return
    argv = ["-i", str(path), *command]
    if command in (("render",), ("bench",)):
        argv += ["--out", str(offline / "out")]
    if command == ("launch",) and data.draw(st.booleans()):
        argv += ["--dry-run"]
    code, out, err = run_cli(argv)
    event(f"exit {code}")
    assert_clean(argv, code, out, err)


def test_raw_yaml_with_shell_text_everywhere_is_refused_cleanly(offline: Path) -> None:
    """Shell metacharacters in every field that reaches a node: exit 2 naming each field."""
    data = copy.deepcopy(EXAMPLE)
    data["cluster"]["user"] = "nvidia; touch /tmp/x"
    data["nodes"][0]["host"] = "$(touch /tmp/x)"
    data["nodes"][1]["links"] = {"`id`": "198.19.1.12/24"}
    data.setdefault("container", {})["image"] = "img' ; id '"
    data["container"]["name"] = "a b"
    data["container"]["hf_cache"] = "~/x\ny"
    path = offline / "nasty.yaml"
    path.write_text(yaml.safe_dump(data))
    for command in sorted(COMMANDS):
        argv = ["-i", str(path), *command] + (["--out", str(offline / "out")] if command[0] in ("render", "bench")
                                               else [])
        code, out, err = run_cli(argv)
        assert_clean(argv, code, out, err)
        if command not in (("inventory", "schema"), ("diagnose",), ("root-helper",)):  # those that read no inventory
            assert code == 2, (argv, err)
            for field in ("cluster.user", "nodes[0].host", "container.image", "container.name",
                          "container.hf_cache"):
                assert field in err, (field, err)


@pytest.mark.parametrize("argv, expected", [
    (["doctor", "--timeout", "nan"], "is not a number of seconds"),
    (["launch", "--timeout", "NaN"], "is not a number of seconds"),
    (["launch", "--timeout", "1e400"], "is not in the range"),
    (["launch", "--model-source", "local:relative"], "expected hub, cached or local:/ABSOLUTE/PATH"),
    (["setup-network", "--restore", "--dry-run"], "cannot be combined with --dry-run"),
    (["logs", "--tail", "-5"], "is not in the range"),
    (["render", "--out", "/dev/null/inside"], "cannot write /dev/null/inside"),
    (["launch", "no;such$(profile)"], "no profile 'no;such$(profile)'"),
    (["doctor", "--only", "links;$(id)", "--timeout", "1"], "no check or group 'links;$(id)'"),
    (["logs", "--node", "`id`", "--tail", "100000"], "no node '`id`' in the inventory"),
])
def test_bad_values_are_usage_errors(offline: Path, argv: list[str], expected: str) -> None:
    code, out, err = run_cli(["-i", "inventory.yaml", *argv])
    assert_clean(argv, code, out, err)
    assert code == 2 and expected in err, err


@pytest.mark.parametrize("argv", [
    ["launch", "--model-source", "local:/srv/x y/$(touch /tmp/sparkpair-canary)"],
    ["launch", "gpt-oss-120b", "--node", "spark-b"],
    ["doctor", "--only", "links,path.mtu", "--timeout", "1"],
    ["setup-network", "--restore"],
    ["logs", "--node", "spark-b", "--tail", "100000"],
])
def test_valid_values_reach_the_pair_and_nothing_else(offline: Path, argv: list[str]) -> None:
    """Unusual but valid values pass parsing; with no pair they stop at connecting (exit 1)."""
    code, out, err = run_cli(["-i", "inventory.yaml", *argv])
    assert_clean(argv, code, out, err)
    assert code == 1 and STUB_MESSAGE in err


def test_inventory_that_is_an_endless_device_is_refused(offline: Path) -> None:
    code, out, err = run_cli(["-i", "/dev/zero", "inventory", "check"])
    assert code == 2 and "expected an inventory under" in err


def test_every_command_is_fuzzed() -> None:
    assert {("launch",), ("setup-network",), ("doctor",), ("status",), ("logs",), ("stop",), ("unlock",),
            ("render",), ("inventory", "check"), ("inventory", "show"), ("inventory", "schema")} <= set(COMMANDS)
    assert "--timeout" in COMMANDS[("launch",)]["options"] and "--restore" in COMMANDS[("setup-network",)]["flags"]


def test_mpi_parameters_in_container_env_refuse_shell_text(offline: Path) -> None:
    """OpenMPI hands OMPI_MCA_* values to a shell on the worker; other env values never meet one."""
    data = copy.deepcopy(EXAMPLE)
    data.setdefault("container", {})["env"] = {"OMPI_MCA_btl_tcp_if_include": "enp1s0f1np1$(touch /tmp/x)",
                                               "SPARKPAIR_NOTE": "$(touch /tmp/x); `id` 'a' \"b\""}
    (offline / "mpi.yaml").write_text(yaml.safe_dump(data))
    code, out, err = run_cli(["-i", "mpi.yaml", "inventory", "check"])
    assert code == 2 and err.count("error: ") == 1, err
    assert "container.env.OMPI_MCA_btl_tcp_if_include: got 'enp1s0f1np1$(touch /tmp/x)'" in err
    data["container"]["env"]["OMPI_MCA_btl_tcp_if_include"] = "^lo,docker0"
    (offline / "mpi.yaml").write_text(yaml.safe_dump(data))
    assert run_cli(["-i", "mpi.yaml", "inventory", "check"])[0] == 0


def test_free_text_cannot_end_a_comment_of_a_rendered_script(offline: Path) -> None:
    data = copy.deepcopy(EXAMPLE)
    data.setdefault("models", {})["qwen3-235b"] = {"description": "x\ntouch /tmp/pwned\n#\u2028y"}
    name = "inv\ntouch pwned\n#.yaml"
    (offline / name).write_text(yaml.safe_dump(data))
    code, out, err = run_cli(["-i", name, "render", "--out", str(offline / "out")])
    assert code == 0, err
    for path in (offline / "out").rglob("*"):
        if path.is_file():
            assert all(line.startswith("#") or "touch" not in line for line in path.read_text().splitlines()), path
