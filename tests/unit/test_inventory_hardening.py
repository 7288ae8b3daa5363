"""What the inventory refuses (and still accepts), the hints built from it, the HF token's source, and the
names that reach `hf download`: every refusal is one line naming the field or the source and the fix.

The refusals themselves, one fixture each, are in tests/fixtures/inventory/invalid (test_inventory.py).
"""

from __future__ import annotations

import copy
import os
import time
from pathlib import Path
from typing import Any

import paramiko
import pytest
import yaml
from fakenode import FakeNode, containing

from sparkpair.engine import modelfetch
from sparkpair.errors import InventoryError, SparkpairError, UsageError
from sparkpair.inventory import hftoken, parse_inventory, read_inventory
from sparkpair.progress import silent
from sparkpair.transport import SshTarget
from sparkpair.transport.ssh import _connect_error


def _with(example: Path, path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    data = yaml.safe_load(example.read_text())
    holder = data
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = value
    return copy.deepcopy(data)


@pytest.mark.parametrize(("path", "value"), [
    (("container", "hf_cache"), "~/.cache/huggingface"), (("container", "hf_cache"), "~/hf/"),
    (("container", "hf_cache"), "/data/huggingface"), (("container", "hf_cache"), "/raid"),
    (("container", "hf_cache"), "/home/nvidia/hf"), (("container", "hf_cache"), "/mnt/nvme/hf"),
    (("container", "hf_cache"), "~/.hf.d/x_y-z"),
    (("nodes", 0, "host"), "fe80::1%enp1s0"), (("nodes", 0, "host"), "2001:db8::11"),
    (("nodes", 0, "host"), "198.18.0.11"), (("nodes", 0, "host"), "spark-a.local"),
    (("container", "image"), "localhost:5000/trtllm:1"), (("container", "image"), "nvcr.io/nvidia/vllm:26.05-py3"),
    (("container", "env"), {"NCCL_DEBUG": "INFO\twith a tab"}),
])
def test_ordinary_values_are_still_accepted(example_inventory_path: Path, path: tuple[Any, ...], value: Any) -> None:
    parse_inventory(_with(example_inventory_path, path, value))


@pytest.mark.parametrize("value", ["/", "~", "~/", "~root", "~root/hf", "/etc", "/etc/hf", "/usr/share/hf", "/var/lib/hf",
                                   "/proc/self", "/root/hf", "/home", "/home/nvidia", "/tmp", "/./etc", "/data/../etc",
                                   "~/a/./b", "//etc", "~/hf\x1b[2J", "~/hf\u202e", "hf", "./hf", "$HOME/hf"])
def test_hf_cache_refuses_root_system_dirs_other_homes_and_escapes(example_inventory_path: Path, value: str) -> None:
    with pytest.raises(InventoryError) as raised:
        parse_inventory(_with(example_inventory_path, ("container", "hf_cache"), value))
    [line] = raised.value.lines()
    assert line.startswith("inventory.yaml: container.hf_cache: got ") and "expected a directory under ~" in line
    assert "\x1b" not in line and "\u202e" not in line


@pytest.mark.parametrize(("path", "value"), [
    (("nodes", 0, "host"), "fe80::1%$(id)"), (("nodes", 0, "host"), "fe80::1%"), (("nodes", 0, "host"), "2001:db8::1%eth0"),
    (("nodes", 0, "host"), "198.18.0.11%eth0"), (("nodes", 0, "host"), "-oProxyCommand=x"),
    (("container", "image"), "-e/x:1"), (("container", "image"), ".x/y"), (("container", "image"), "a/" + "b" * 600),
    (("container", "name"), "-x"), (("cluster", "user"), "-x"), (("cluster", "ssh_key"), "~/.ssh/id\x1b[2J"),
])
def test_option_like_and_unprintable_values_are_refused_naming_the_field(example_inventory_path: Path,
                                                                         path: tuple[Any, ...], value: Any) -> None:
    with pytest.raises(InventoryError) as raised:
        parse_inventory(_with(example_inventory_path, path, value))
    [line] = raised.value.lines()
    field = ".".join(str(p) for p in path).replace(".0.", "[0].")
    assert line.startswith(f"inventory.yaml: {field}: got ") and "; expected " in line and "\x1b" not in line


def test_a_node_path_with_many_parts_is_judged_in_linear_time(example_inventory_path: Path) -> None:
    """The old pattern `(?:/?[A-Za-z0-9._-]+)*` backtracked exponentially: 30 characters took 40 s."""
    started = time.monotonic()
    for value in ("~" + "a" * 5000 + "!", "/" + "a/" * 3000 + "!"):
        with pytest.raises(InventoryError):
            parse_inventory(_with(example_inventory_path, ("container", "hf_cache"), value))
    assert time.monotonic() - started < 1.0


# --- hints: quoted, and in the form each tool takes -----------------------------------------------------------

def _target(host: str, port: int) -> SshTarget:
    return SshTarget("spark-a", host, port, "nvidia", Path("/keys/my key"), Path("/keys/known hosts"))


@pytest.mark.parametrize(("host", "port", "expected"), [
    ("spark-a.local", 22, "ssh-copy-id -i '/keys/my key.pub' -p 22 nvidia@spark-a.local"),
    ("198.18.0.11", 2222, "ssh-copy-id -i '/keys/my key.pub' -p 2222 nvidia@198.18.0.11"),
    ("fe80::1%enp1s0", 2222, "ssh-copy-id -i '/keys/my key.pub' -p 2222 nvidia@fe80::1%enp1s0"),
])
def test_the_ssh_copy_id_hint_names_the_port_apart_and_quotes_the_key(host: str, port: int, expected: str) -> None:
    error = _connect_error(_target(host, port), paramiko.AuthenticationException("denied"))
    assert error.hint == expected
    [line] = error.lines()
    assert line.endswith(f"(fix: {expected})")


def test_the_ssh_keygen_hint_quotes_a_bracketed_host_and_the_known_hosts_path() -> None:
    offered = paramiko.RSAKey.generate(1024)
    error = _connect_error(_target("fe80::1%enp1s0", 2222), paramiko.BadHostKeyException("h", offered, offered))
    assert error.hint == "if the node was reinstalled: ssh-keygen -R '[fe80::1%enp1s0]:2222' -f '/keys/known hosts'"
    assert "nvidia@[fe80::1%enp1s0]:2222" in _connect_error(_target("fe80::1%enp1s0", 2222), TimeoutError()).message


# --- the HF token: a regular file, at most 4 KiB, one line; never shown ---------------------------------------

@pytest.fixture
def token_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_TOKEN_PATH", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    return monkeypatch


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/urandom", "/", "fifo"])
def test_a_token_path_that_is_not_a_regular_file_is_refused_unread(token_env: pytest.MonkeyPatch, tmp_path: Path,
                                                                   path: str) -> None:
    if path == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)  # nobody writes it: reading it would block forever
    token_env.setenv("HF_TOKEN_PATH", path)
    started = time.monotonic()
    with pytest.raises(UsageError) as raised:
        hftoken.find_token()
    assert time.monotonic() - started < 1.0
    assert raised.value.lines() == [f"HF_TOKEN_PATH {path}: not a regular file (fix: {hftoken.FIX})"]


def test_a_token_file_larger_than_the_cap_is_refused(token_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"hf_" + b"x" * (8 << 20))
    token_env.setenv("HF_TOKEN_PATH", str(big))
    with pytest.raises(UsageError, match="larger than 4096 bytes"):
        hftoken.find_token()


@pytest.mark.parametrize("content", ["hf_Secret0Token\nsecond line\n", "hf_Secret0 Token", "hf_Secret0\x1b[2JToken"])
def test_a_token_file_that_is_not_one_token_is_refused_without_showing_it(token_env: pytest.MonkeyPatch,
                                                                          tmp_path: Path, content: str) -> None:
    source = tmp_path / "token"
    source.write_text(content)
    token_env.setenv("HF_TOKEN_PATH", str(source))
    with pytest.raises(UsageError) as raised:
        hftoken.find_token()
    [line] = raised.value.lines()
    assert line.startswith(f"HF_TOKEN_PATH {source}: does not hold one token") and "Secret0" not in line


def test_a_token_from_the_environment_or_a_file_is_found(token_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert hftoken.find_token() is None
    (tmp_path / "hf-home").mkdir()
    (tmp_path / "hf-home" / "token").write_text("hf_Stored\n")
    assert hftoken.find_token() == "hf_Stored"
    (tmp_path / "t").write_text("  hf_FromPath \n")
    token_env.setenv("HF_TOKEN_PATH", str(tmp_path / "t"))
    assert hftoken.find_token() == "hf_FromPath"
    token_env.setenv("HF_TOKEN", "hf_FromEnv")
    assert hftoken.find_token() == "hf_FromEnv"
    token_env.setenv("HF_TOKEN", "hf_From\nEnv")
    with pytest.raises(UsageError, match="^HF_TOKEN: does not hold one token"):
        hftoken.find_token()


# --- names that reach `hf download` ----------------------------------------------------------------------------

def test_hub_file_names_follow_a_double_dash(example_inventory_path: Path) -> None:
    node = FakeNode("spark-a").on('printf "%s:%s" "$(id -u)" "$(id -g)"', "1000:1000").on(containing("hf download"))
    modelfetch.download(node, read_inventory(example_inventory_path), "org/m", silent,
                        files=["-h", "--local-dir=/etc", "a b.safetensors"], total=10)
    [script] = [call.text for call in node.calls if call.how == "stream"]
    assert "hf download org/m -- -h --local-dir=/etc 'a b.safetensors'" in script


@pytest.mark.parametrize("name", ["../outside", "/etc/passwd", "a/../../b", "", "a//b", "a\nb", "a\x1b[2Jb",
                                  "a\\b", "x" * 2000])
def test_a_hub_file_name_that_is_not_a_path_inside_the_repo_is_refused(name: str) -> None:
    with pytest.raises(SparkpairError) as raised:
        modelfetch.hf_download_argv("org/m", ["config.json", name])
    [line] = raised.value.lines()
    assert line.startswith("the hub's file list for org/m names ") and "\n" not in line and "\x1b" not in line


@pytest.mark.parametrize("repo", ["-h/x", "org/--local-dir", "org--a/b", "org/a..b", "org/b-", "../x", "org/x/y"])
def test_a_repo_id_the_hub_would_not_have_is_refused(repo: str) -> None:
    with pytest.raises(SparkpairError, match="is not a repo id"):
        modelfetch.hf_download_argv(repo)
