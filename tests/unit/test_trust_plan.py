"""The SSH trust planner and the journal of its key changes, from constructed facts (no nodes)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from fakenode import FakeNode

from sparkpair import apply
from sparkpair.apply import executor
from sparkpair.errors import SparkpairError
from sparkpair.inventory import read_inventory
from sparkpair.network import trust
from sparkpair.probes import NodeFacts, ProbeFailure, ssh
from sparkpair.transport import Shell

FIXTURES = Path(__file__).parent.parent / "fixtures"
SIM = read_inventory(FIXTURES / "inventory" / "sim.yaml")
HOST_KEY = ("ssh-ed25519", "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl")


def _files(public: str | None, private: bool) -> trust.SshFiles:
    return trust.SshFiles(public, None, None, "spark-x", (HOST_KEY,), private)


def _probe_locally(home: Path) -> str:
    return subprocess.run(["sh", "-c", ssh.SSH_FILES.command.text], capture_output=True, text=True, timeout=5,
                          env={**os.environ, "HOME": str(home)}).stdout


def test_ssh_files_probe_reports_the_private_key_without_reading_it(tmp_path: Path) -> None:
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_ed25519").write_text("SECRET-KEY-BYTES\n")
    output = _probe_locally(tmp_path)
    assert "SECRET-KEY-BYTES" not in output
    files = ssh.parse_ssh_files(output)
    assert files.private_key and files.public_key is None and files.authorized_keys is None
    (tmp_path / ".ssh" / "id_ed25519").unlink()
    (tmp_path / ".ssh" / "id_ed25519.pub").write_text(f"{' '.join(HOST_KEY)} me@here\n")
    files = ssh.parse_ssh_files(_probe_locally(tmp_path))
    assert not files.private_key and files.public_key == f"{' '.join(HOST_KEY)} me@here"


def test_a_node_without_any_key_gets_a_new_one() -> None:
    [change] = trust.key_changes({"spark-a": _files(None, private=False), "spark-b": _files(" ".join(HOST_KEY), True)})
    [action] = change.actions
    assert change.node == "spark-a" and "ssh-keygen -q -t ed25519" in action.command.text
    assert action.creates == (trust.KEY, f"{trust.KEY}.pub")


def test_an_existing_private_key_without_its_pub_is_never_overwritten() -> None:
    [change] = trust.key_changes({"spark-a": _files(None, private=True)})
    [action] = change.actions
    assert change.summary == f"derive {trust.KEY}.pub from the existing {trust.KEY}"
    assert "ssh-keygen -y" in action.command.text and "-t ed25519" not in action.command.text
    assert action.creates == (f"{trust.KEY}.pub",)


def test_a_failed_ssh_files_probe_is_an_error_naming_the_node() -> None:
    facts = {"spark-a": NodeFacts({ssh.SSH_FILES: _files(None, False)}),
             "spark-b": NodeFacts({ssh.SSH_FILES: ProbeFailure("ssh files", 1, "cat: .ssh/known_hosts: Permission denied\n")})}
    with pytest.raises(SparkpairError) as raised:
        trust.ssh_files(facts)
    assert raised.value.lines() == ["spark-b: ssh files: cat: .ssh/known_hosts: Permission denied"]


def test_known_hosts_learns_the_peer_key_under_every_name_it_answers_to() -> None:
    files = {name: _files(None, False) for name in ("spark-a", "spark-b")}
    changes, refusals = trust.trust_plan(SIM, files, {"spark-a": HOST_KEY, "spark-b": HOST_KEY})
    assert refusals == []
    assert [c.summary for c in changes] == [
        "learn spark-b's host keys for 198.19.1.12, 198.19.2.12, spark-b",
        "learn spark-a's host keys for 198.19.1.11, 198.19.2.11, spark-a"]
    assert SIM.node("spark-b").ssh_names == ["198.19.1.12", "198.19.2.12", "spark-b"]


def test_restore_puts_back_a_file_a_command_overwrote_instead_of_deleting_it() -> None:
    private, public = "/home/nvidia/.ssh/id_ed25519", "/home/nvidia/.ssh/id_ed25519.pub"
    node = FakeNode("spark-a", home="/home/nvidia", files={private: "the operator's own key\n"}).files_behave()
    journal = apply.Journal("trust", "20250101-000000")
    overwrite = Shell("echo a new key > {} && echo a new pub > {}", private, public)
    executor._run_action(node, journal, apply.RunCommand(overwrite, creates=(trust.KEY, f"{trust.KEY}.pub")))
    assert [(e["path"], bool(e["backup"])) for e in journal.entries] == [(private, True), (public, False)]
    assert node.text(private) == "a new key\n" and node.text(public) == "a new pub\n"
    done = apply.restore(node, journal)
    assert done == [f"removed {public}", f"restored {private}"]
    assert node.text(private) == "the operator's own key\n" and public not in node.files
    assert f"rm -f {private}" not in node.commands


PEER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl sparkpair@spark-a"


def _authorizing(public: str) -> tuple[list[apply.Change], list[str]]:
    files = {"spark-a": trust.SshFiles(public, None, None, "spark-a", (HOST_KEY,), True),
             "spark-b": trust.SshFiles(None, "ssh-ed25519 AAAAold x\n", None, "spark-b", (HOST_KEY,), True)}
    return trust.trust_plan(SIM, files, {"spark-a": HOST_KEY, "spark-b": HOST_KEY})


def test_exactly_one_public_key_line_is_appended_to_the_peers_authorized_keys() -> None:
    changes, refusals = _authorizing(PEER_KEY)
    [authorize] = [change for change in changes if change.summary == "authorize spark-a's key"]
    assert refusals == [] and authorize.node == "spark-b"
    assert authorize.actions[0].content == f"ssh-ed25519 AAAAold x\n{PEER_KEY}\n"  # type: ignore[attr-defined]


@pytest.mark.parametrize(("public", "why"), [
    (f"{PEER_KEY}\nssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA== extra", "2 lines, not one"),
    (f'command="touch /tmp/x",no-pty {PEER_KEY}', "does not start with a key type"),
    (f"from=\"*\" {PEER_KEY}", "does not start with a key type"),
    ("ssh-foo AAAAC3NzaC1lZDI1NTE5AAAAIOMq", "does not start with a key type"),
    ("ssh-ed25519 not!base64 x", "not base64 of a ssh-ed25519 key"),
    ("ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl x", "not a ssh-rsa key"),
    (f"{PEER_KEY}\x1b[2J", "control or non-ASCII characters"),
    (f"{PEER_KEY}\r", "control or non-ASCII characters"),
])
def test_a_pub_file_that_is_not_one_key_line_is_refused_naming_the_node(public: str, why: str) -> None:
    changes, refusals = _authorizing(public)
    assert not [change for change in changes if change.summary == "authorize spark-a's key"]
    [refusal] = refusals
    assert refusal.startswith("spark-a: ~/.ssh/id_ed25519.pub is not one public key line (") and why in refusal
    assert refusal.endswith("refusing to authorize it on spark-b (fix: on spark-a, rm ~/.ssh/id_ed25519.pub; "
                            "setup-network derives it again from id_ed25519)")
    assert "touch" not in refusal and "\x1b" not in refusal


def test_a_host_key_line_that_is_not_a_key_is_never_taught() -> None:
    bad = ("ssh-ed25519", "AAAA\x1b[2J")
    files = {"spark-a": _files(None, False), "spark-b": trust.SshFiles(None, None, None, "spark-b", (HOST_KEY, bad), False)}
    changes, refusals = trust.trust_plan(SIM, files, {"spark-a": HOST_KEY, "spark-b": HOST_KEY})
    assert [c.summary for c in changes] == ["learn spark-a's host keys for 198.19.1.11, 198.19.2.11, spark-a"]
    assert refusals == ["spark-b: /etc/ssh/ssh_host_*_key.pub holds a line that is not one host key (control or "
                        "non-ASCII characters in it); refusing to teach its host keys to spark-a"]
