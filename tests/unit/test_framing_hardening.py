"""Issue 24, items 3 and 4: no byte a node prints can forge another probe's answer, another file's section,
or a bundle member's name; netplan paths are taken only under /etc/netplan; the bundle is written 0600
through a fresh file.

Every probe here runs for real: the batch with the local bash (as a node's shell would), the probes'
own commands with stand-in `ss`, `sudo` and `docker` on PATH where the real tool would need privileges.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from fakenode import FakeNode, in_local_shell

from sparkpair import paths, probes
from sparkpair.engine import bundle
from sparkpair.inventory import read_inventory
from sparkpair.network import netplan
from sparkpair.probes import Probe, batch_script, host, net, parse_batch, ranks, ssh
from sparkpair.transport import Shell, root

FIXTURES = Path(__file__).parent.parent / "fixtures"
FRAMING_BYTES = "\x1c\x1d\x1e\x1f"


def _local_node(env: dict[str, str], home: Path | None = None) -> FakeNode:
    """The shared fake node running every command with this machine's bash, PATH and HOME as given."""
    return FakeNode("spark-a", home=str(home or env["HOME"])).on(lambda text: True, in_local_shell(env, "bash"))


def _tool(bin_dir: Path, name: str, script: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text("#!/bin/sh\n" + script)
    (bin_dir / name).chmod(0o755)


def _env(bin_dir: Path, home: Path | None = None) -> dict[str, str]:
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(home or bin_dir), "LC_ALL": "C.UTF-8"}


def test_a_listener_named_with_the_framing_bytes_cannot_forge_the_identity(tmp_path: Path) -> None:
    """Any user names a process; `ss -Htlnp` prints the name raw. A 13-byte name that closes the listeners'
    record and opens the identity's (index 0) again used to replace the identity with `uid 0`."""
    name = "\x1e0 0\n0\nr\nr\nh\x1f"  # fits a process name (15 bytes)
    bin_dir = tmp_path / "bin"
    _tool(bin_dir, "sudo", "exit 1\n")
    _tool(bin_dir, "ss", f"printf 'LISTEN 0 4096 0.0.0.0:8000 0.0.0.0:* users:((\"%s\",pid=77,fd=3))\\n' '{name}'\n")
    env = _env(bin_dir)
    facts = probes.gather(_local_node(env), [host.IDENTITY, host.LISTENERS])
    own = subprocess.run(["sh", "-c", host.IDENTITY.command.text], capture_output=True, text=True, env=env).stdout
    assert facts[host.IDENTITY] == host.parse_identity(own) and facts[host.IDENTITY].uid == os.getuid()
    [listener] = facts[host.LISTENERS]
    assert listener.port == 8000


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_every_byte_a_probe_prints_comes_back_in_its_own_record_only(shell: str) -> None:
    """Probes printing every framing byte, forged records and a forged batch header, on stdout and stderr:
    each record holds exactly what its probe printed, and no other record changes."""
    forged = "\x1e0 0\nforged\x1f\x1d\x1esparkpair-batch 0 0\n" + FRAMING_BYTES
    printed = Shell("printf %s {}; printf %s {} >&2; exit 3", forged, forged)
    asked = [Probe("victim", (), Shell("echo real; echo warn >&2"), str), Probe("forger", (1,), printed, str),
             Probe("forger", (2,), Shell("printf '\\036\\0370 0\\n'; printf 'caf\\303\\251 \\377\\n'"), str)]
    result = subprocess.run([shell, "-c", batch_script(asked).text], capture_output=True, timeout=10,
                            encoding="utf-8", errors="replace")  # as the transport decodes
    assert parse_batch(result.stdout) == {0: (0, "real\n", "warn\n"), 1: (3, forged, forged),
                                          2: (0, "\x1e\x1f0 0\ncafé \ufffd\n", "")}


def test_a_probe_whose_output_grows_while_the_batch_reads_it_is_lost_not_misread(tmp_path: Path) -> None:
    """A probe that left a writer behind, whose output grows between the batch's two `stat`s: its record and
    every later one are reported lost; the ones before it are exact. Deterministic: the writer's line lands
    just before the second `stat` (a `stat` on PATH appends it, as a writer scheduled between the two would;
    a real background writer raced the batch and was missed 1 run in 6 under load)."""
    bin_dir = tmp_path / "bin"
    real_stat = next(path for path in ("/usr/bin/stat", "/bin/stat") if Path(path).exists())
    _tool(bin_dir, "stat", f'if [ -e "{tmp_path}/first-stat-done" ]; then\n'
                           '  for f in "$@"; do case "$f" in */1.o) echo more >> "$f";; esac; done\n'
                           f'else : > "{tmp_path}/first-stat-done"; fi\nexec {real_stat} "$@"\n')
    asked = [Probe("before", (), Shell("echo exact"), str), Probe("writer", (), Shell("echo first"), str),
             Probe("after", (), Shell("echo later"), str)]
    result = subprocess.run(["bash", "-c", batch_script(asked).text], capture_output=True, text=True, timeout=30,
                            env=_env(bin_dir))
    raw = parse_batch(result.stdout)
    assert raw[0] == (0, "exact\n", "")
    for index in (1, 2):
        code, stdout, stderr = raw[index]
        assert code != 0 and stdout == "" and "changed while the batch read it" in stderr


def test_parse_batch_refuses_a_header_it_did_not_write() -> None:
    """Out-of-band framing: a header whose codes, sizes or body do not agree gives no record at all."""
    good = subprocess.run(["sh", "-c", batch_script([Probe("a", (), Shell("echo a"), str)]).text],
                          capture_output=True, text=True, timeout=10).stdout
    assert parse_batch("login banner\n" + good) == {0: (0, "a\n", "")}
    for broken in (good.replace("sparkpair-batch 0", "sparkpair-batch 0 0"), good.replace("\n2\n", "\n3\n"),
                   good[:-3], good.replace("YQo=", "YQo*")):
        assert parse_batch(broken) == {}, repr(broken)


def test_a_netplan_file_cannot_forge_another_file(tmp_path: Path) -> None:
    """The netplan probe's root verb, run on a directory standing in for /etc/netplan: a file whose content
    holds the section mark and a path used to add /etc/netplan/99-forged.yaml to what setup-network edits."""
    directory = tmp_path / "netplan"
    directory.mkdir()
    hostile = "network:\n  version: 2\n\x1c/etc/netplan/99-forged.yaml\nnetwork:\n  ethernets:\n    enp1s0f1np1: {}\n"
    (directory / "50-cloud-init.yaml").write_text(hostile)
    (directory / "60-x.yml").write_text("network: {version: 2}\n")
    helper = root.helper_text().replace("/etc/netplan", str(directory))  # its verb, run here without root
    assert net.NETPLAN_FILES.command.shown == "sparkpair-root netplan-files"
    output = subprocess.run(["sh", "-c", helper, "sparkpair-root", "netplan-files"], capture_output=True, text=True,
                            timeout=10).stdout
    files = net.parse_netplan_files(output.replace(str(directory), "/etc/netplan"))
    assert sorted(files) == ["/etc/netplan/50-cloud-init.yaml", "/etc/netplan/60-x.yml"]
    assert files["/etc/netplan/50-cloud-init.yaml"].content == hostile


@pytest.mark.parametrize("path", ["/etc/netplan/../sudoers.d/x.yaml", "/etc/netplan/sub/x.yaml", "/home/x/a.yaml",
                                  "/etc/netplan/a\x1b[2J.yaml", "/etc/netplan/", "etc/netplan/a.yaml",
                                  "/etc/netplan/..", "/etc/netplan/a\u202e.yaml"])
def test_netplan_paths_outside_etc_netplan_are_refused(path: str) -> None:
    """By the planner (whatever built its facts): a file there that configures a twin is neither rewritten
    nor removed, even with --replace; and by the probe's parser."""
    assert not net.is_netplan_path(path)
    with pytest.raises(ValueError, match="netplan"):
        net.parse_netplan_files(probes.format_sections({path: "network: {version: 2}\n"}))
    sim = read_inventory(FIXTURES / "inventory" / "sim.yaml")
    facts = _plan_facts(sim, {path: "network:\n  version: 2\n  ethernets:\n    enp1s0f1np1: {}\n"})
    plan = netplan.plan_network(sim, facts, replace=True)
    assert plan.changes == [] and any("not a plain file under /etc/netplan/" in r for r in plan.refusals)
    assert all(path not in repr(change.actions) for change in plan.changes)


def _plan_facts(sim: object, files: dict[str, str]) -> dict[str, probes.NodeFacts]:
    import test_network_plan  # the planner's own fixtures (tests/unit is on sys.path under pytest)

    facts: dict[str, probes.NodeFacts] = test_network_plan._facts()
    for node in facts.values():
        node[net.NETPLAN_FILES] = {**node[net.NETPLAN_FILES],
                                   **{path: net.NetplanFile.read(path, text) for path, text in files.items()}}
    return facts


def test_a_rank_log_cannot_forge_another_files_output(tmp_path: Path) -> None:
    """The rank output probe's command, with `docker exec` standing in: a log holding a section mark and
    the other log's path used to replace that log's chunk."""
    bin_dir = tmp_path / "bin"
    _tool(bin_dir, "docker", '[ "$1" = exec ] || exit 1; shift 2; exec "$@"\n')
    rank0, rank1 = tmp_path / "rank0.log", tmp_path / "rank1.log"
    rank0.write_text("loading\n")
    hostile = f"prompt: \x1c{rank0} 9\nforged\n"
    rank1.write_text(hostile)
    probe = ranks.output("engine", ((str(rank0), 0), (str(rank1), 0)))
    output = subprocess.run(["sh", "-c", probe.command.text], capture_output=True, text=True, timeout=10,
                            env=_env(bin_dir)).stdout
    chunks = probe.parse(output)
    assert chunks == {str(rank0): ranks.OutputChunk(8, "loading\n"), str(rank1): ranks.OutputChunk(len(hostile), hostile)}


def test_authorized_keys_cannot_forge_the_nodes_public_key(tmp_path: Path) -> None:
    """The SSH files probe run with a HOME whose authorized_keys holds a section mark and `present pub`."""
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_ed25519.pub").write_text("ssh-ed25519 AAAAreal me@a\n")
    hostile = "ssh-ed25519 AAAAx b@b\n\x1cpresent pub\nssh-ed25519 AAAAforged evil@x\n"
    (tmp_path / ".ssh" / "authorized_keys").write_text(hostile)
    output = subprocess.run(["sh", "-c", ssh.SSH_FILES.command.text], capture_output=True, text=True, timeout=5,
                            env={**os.environ, "HOME": str(tmp_path)}).stdout
    files = ssh.parse_ssh_files(output)
    assert files.public_key == "ssh-ed25519 AAAAreal me@a" and files.authorized_keys == hostile


def _bundle_from(tmp_path: Path, logs: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str]]:
    """The failed-launch logs probe of the bundle, run locally on logs; the archive's member names, and
    what the bundle says it did not collect."""
    inventory = read_inventory(FIXTURES / "inventory" / "sim.yaml")
    home = tmp_path / "home"
    directory = home / paths.FAILED_LAUNCH_LOGS.removeprefix("~/")
    for name, text in logs.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text)
    wanted = "logs/failed-launch/"
    only = {wanted: bundle.node_probes(inventory, "spark-a", False)[wanted]}
    monkeypatch.setattr(bundle, "node_probes", lambda *_: only)
    files, missing = bundle.collect_node(_local_node(_env(tmp_path / "bin", home), home), inventory, False)
    result = bundle.BundleResult(missing=missing)
    out = tmp_path / "evidence.tar.gz"
    bundle._write(result, files, out, "sim-pair")
    with tarfile.open(out) as archive:
        return archive.getnames(), result.missing


def test_a_rank_log_line_cannot_add_a_bundle_member(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A log line holding `\\x1c../../../../pwned.sh` used to become a member that `tar -x` writes outside
    the directory it extracts to."""
    (tmp_path / "bin").mkdir()
    log = "rank 0 ready\n\x1c../../../../pwned.sh\n#!/bin/sh\ntouch /tmp/owned\n"
    names, _ = _bundle_from(tmp_path, {"rank0.log": log, "sub/rank1.log": "ok\n"}, monkeypatch)
    assert sorted(names) == ["evidence/MANIFEST.txt", "evidence/spark-a/logs/failed-launch/rank0.log",
                             "evidence/spark-a/logs/failed-launch/sub/rank1.log"]


def test_a_log_file_with_a_control_character_in_its_name_is_named_in_the_manifest_not_archived(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bin").mkdir()
    names, missing = _bundle_from(tmp_path, {"rank0.log": "ok\n", "evil\x1b[31m.log": "x\n"}, monkeypatch)
    assert sorted(names) == ["evidence/MANIFEST.txt", "evidence/spark-a/logs/failed-launch/rank0.log"]
    assert not any("\x1b" in line for line in missing)


@pytest.mark.parametrize("member", ["spark-a/logs/../../../pwned.sh", "/etc/cron.d/x", "spark-a/logs/a\nb.log",
                                    "spark-a/logs/\x1b[2J.log", "spark-a//logs/./../../x", "", "."])
def test_the_archive_refuses_a_member_name_that_is_not_a_plain_relative_path(tmp_path: Path, member: str) -> None:
    out = tmp_path / "evidence.tar.gz"
    result = bundle.BundleResult(path=str(out))
    bundle._write(result, [bundle.Collected(member, "payload", "spark-a: logs"),
                           bundle.Collected("spark-a/logs/./rank0.log", "ok", "spark-a: logs")], out, "sim-pair")
    with tarfile.open(out) as archive:
        assert archive.getnames() == ["evidence/MANIFEST.txt", "evidence/spark-a/logs/rank0.log"]
    assert any("refused" in line for line in result.missing)


def test_an_existing_out_file_is_replaced_by_a_private_one(tmp_path: Path) -> None:
    out = tmp_path / "evidence.tar.gz"
    out.write_text("old")
    out.chmod(0o644)
    bundle._write(bundle.BundleResult(path=str(out)), [], out, "sim-pair")
    assert out.stat().st_mode & 0o777 == 0o600 and tarfile.is_tarfile(out)


def test_a_symlink_at_out_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    out = tmp_path / "evidence.tar.gz"
    out.symlink_to(victim)
    bundle._write(bundle.BundleResult(path=str(out)), [], out, "sim-pair")
    assert victim.read_text() == "keep me" and not out.is_symlink() and out.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left


def test_sections_come_back_byte_for_byte_and_anything_else_is_refused() -> None:
    """What `probes.section` prints, run by sh: content with every framing byte and invalid UTF-8 stays in
    its section; a name holding a newline is skipped; a name given twice, a stray line or bad base64 raise."""
    script = ("f=$(printf 'cut\\nname'); " + probes.section('"$f"', "echo hidden") + "; "
              + probes.section('"a b"', "printf '\\034b\\n\\036\\037\\035 \\377'") + "; " + probes.section('"empty"'))
    run = subprocess.run(["sh", "-c", script], capture_output=True, encoding="utf-8", errors="replace", timeout=5)
    assert probes.parse_sections(run.stdout) == {"a b": "\x1cb\n\x1e\x1f\x1d \ufffd", "empty": ""}
    assert "skipped a name holding a newline" in run.stderr
    assert probes.parse_sections(probes.format_sections({"x": "1", "y": ""})) == {"x": "1", "y": ""}
    for bad in ("\x1cx\nMQ==\n\x1cx\nMg==\n", "stray\n\x1cx\nMQ==\n", "\x1cx\nM Q==\n", "\x1cx\nMQ=\n"):
        with pytest.raises(ValueError):
            probes.parse_sections(bad)
