"""SSH trust between the nodes, which mpirun needs: own keys, authorized peers, verified host keys.

Each node makes its own ed25519 key if it has none (a private key never leaves its node). Each
node learns the peer's host key for the peer's QSFP addresses and name, and that key is the one
the operator's own connection verified on the management address: never blind acceptance.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from typing import Any

from sparkpair import probes, steps
from sparkpair.errors import SparkpairError, last_line
from sparkpair.inventory import Inventory, Node
from sparkpair.probes import FILE_MARK, Probe, ProbeFailure, net
from sparkpair.transport import Pair, Shell, fingerprint

JOURNAL = "trust"
KEY = "~/.ssh/id_ed25519"


@dataclass(frozen=True)
class SshFiles:
    """A node's SSH client state: its public key (if any), authorized_keys, known_hosts, hostname.

    private_key: whether ~/.ssh/id_ed25519 exists (only that: the probe never reads a private key).
    """

    public_key: str | None
    authorized_keys: str | None
    known_hosts: str | None
    hostname: str
    host_keys: tuple[tuple[str, str], ...] = ()
    private_key: bool = False


def parse_ssh_files(text: str) -> SshFiles:
    """Parse the FS-separated sections `pub`, `authorized_keys`, `known_hosts`, `hostname`, `host_keys`,
    and `private_key` (present or absent, never its content)."""
    sections: dict[str, str | None] = {}
    for chunk in text.split(FILE_MARK)[1:]:
        name, _, content = chunk.partition("\n")
        status, _, name = name.partition(" ")
        sections[name] = content if status == "present" else None
    public = sections.get("pub")
    host_keys = tuple(key for key in (key_body(line) for line in (sections.get("host_keys") or "").splitlines()) if key)
    return SshFiles(public.strip() if public else None, sections.get("authorized_keys"),
                    sections.get("known_hosts"), (sections.get("hostname") or "").strip(), host_keys,
                    sections.get("private_key") is not None)


SSH_FILES = Probe("ssh_files", Shell(
    'for f in pub:.ssh/id_ed25519.pub authorized_keys:.ssh/authorized_keys known_hosts:.ssh/known_hosts; do '
    'n=${f%%:*}; p="$HOME/${f#*:}"; if [ -f "$p" ]; then printf "\\034present %s\\n" "$n"; cat "$p"; '
    'else printf "\\034absent %s\\n" "$n"; fi; done; printf "\\034present hostname\\n"; hostname; '
    'printf "\\034present host_keys\\n"; cat /etc/ssh/ssh_host_*_key.pub 2>/dev/null; '
    'if [ -e "$HOME/.ssh/id_ed25519" ]; then s=present; else s=absent; fi; printf "\\034%s private_key\\n" "$s"; true'),
    parse_ssh_files)


def key_body(line: str) -> tuple[str, str] | None:
    """(type, base64) of a public key or authorized_keys line (options and comment ignored)."""
    fields = line.split()
    for index, field in enumerate(fields[:-1]):
        if field.startswith(("ssh-", "ecdsa-", "sk-")):
            return field, fields[index + 1]
    return None


def _host_matches(pattern: str, name: str) -> bool:
    if pattern.startswith("|1|"):
        _, _, salt, digest = pattern.split("|")[:4]
        mac = hmac.new(base64.b64decode(salt), name.encode(), hashlib.sha1).digest()
        return hmac.compare_digest(base64.b64encode(mac).decode(), digest)
    return pattern == name


def known_keys(known_hosts: str | None, name: str) -> list[tuple[str, str]]:
    """Keys known_hosts holds for name (hashed entries included, @revoked and CA lines skipped)."""
    keys = []
    for line in (known_hosts or "").splitlines():
        fields = line.split()
        if len(fields) < 3 or line.startswith(("#", "@")):
            continue
        if any(_host_matches(pattern, name) for pattern in fields[0].split(",")):
            keys.append((fields[1], fields[2]))
    return keys


def ssh_files(facts: dict[str, dict[str, Any]]) -> dict[str, SshFiles]:
    """Each node's SshFiles from facts gathered with SSH_FILES among the probes; a failed probe raises."""
    files = {}
    for name, node_facts in facts.items():
        value = node_facts[SSH_FILES.name]
        if isinstance(value, ProbeFailure):
            raise SparkpairError(str(value), node=name)
        files[name] = value
    return files


def probe_ssh_files(pair: Pair) -> dict[str, SshFiles]:
    return ssh_files(probes.gather_pair(pair, [SSH_FILES]))


DERIVE_PUBLIC = Shell('k="$HOME/.ssh/id_ed25519"; ssh-keygen -y -P "" -f "$k" >"$k.pub.new" && mv -f "$k.pub.new" '
                      '"$k.pub" || { rm -f "$k.pub.new"; exit 1; }')


def key_changes(files: dict[str, SshFiles]) -> list[steps.Change]:
    """Make an ed25519 key on each node that has none (on the node itself).

    A node with the private key but no .pub gets the .pub derived from it, never a new key over it.
    """
    changes = []
    for name, state in files.items():
        if state.public_key is not None:
            continue
        if state.private_key:
            changes.append(steps.Change(name, f"derive {KEY}.pub from the existing {KEY}", (steps.RunCommand(
                DERIVE_PUBLIC, creates=(f"{KEY}.pub",)),)))
        else:
            changes.append(steps.Change(name, f"make {KEY} (ed25519, this node's own key)", (steps.RunCommand(
                Shell('mkdir -p -m 700 "$HOME/.ssh" && ssh-keygen -q -t ed25519 -N "" -C {} -f "$HOME/.ssh/id_ed25519"',
                      f"sparkpair@{name}"), creates=(KEY, f"{KEY}.pub")),)))
    return changes


def trust_plan(inventory: Inventory, files: dict[str, SshFiles],
               host_keys: dict[str, tuple[str, str]]) -> tuple[list[steps.Change], list[str]]:
    """authorized_keys and known_hosts changes on both nodes; refusals for conflicting host keys.

    host_keys: per node, the key the operator's own connection verified on the management address.
    A node learns every host key its peer has, but only if that verified key is one of them.
    """
    changes: list[steps.Change] = []
    refusals: list[str] = []
    for node in inventory.nodes:
        peer = inventory.peer_of(node)
        mine, theirs = files[node.name], files[peer.name]
        if mine.public_key and key_body(mine.public_key) not in [key_body(l) for l in (theirs.authorized_keys or "").splitlines()]:
            content = (theirs.authorized_keys or "")
            content += ("" if not content or content.endswith("\n") else "\n") + mine.public_key + "\n"
            changes.append(steps.write_change(peer.name, "~/.ssh/authorized_keys", theirs.authorized_keys, content,
                                              mode=0o600, summary=f"authorize {node.name}'s key"))
        if host_keys[peer.name] not in theirs.host_keys:
            refusals.append(f"{peer.name}: the host key this machine verified ({fingerprint(*host_keys[peer.name])}) "
                            "is not among its /etc/ssh/ssh_host_*_key.pub; refusing to teach it to "
                            f"{node.name} (is another sshd answering on {peer.host}?)")
            continue
        change, problems = _known_hosts_change(node, peer, mine.known_hosts, theirs.host_keys)
        changes += [change] if change else []
        refusals += problems
    return changes, refusals


def _known_hosts_change(node: Node, peer: Node, known_hosts: str | None,
                        peer_keys: tuple[tuple[str, str], ...]) -> tuple[steps.Change | None, list[str]]:
    """Lines teaching node every peer host key under the peer's QSFP addresses and name."""
    lines, problems = [], []
    for expected in peer_keys:
        missing = []
        for name in peer.ssh_names:
            keys = known_keys(known_hosts, name)
            other = next((key for key in keys if key[0] == expected[0] and key != expected), None)
            if other is not None:
                problems.append(f"{node.name}: ~/.ssh/known_hosts has another host key for {name} "
                                f"({fingerprint(*other)}) than {peer.name} has ({fingerprint(*expected)}); "
                                f"refusing (fix, if {peer.name} was reinstalled: ssh-keygen -R {name} on {node.name})")
            elif expected not in keys:
                missing.append(name)
        if missing:
            lines.append(f"{','.join(missing)} {expected[0]} {expected[1]}")
    if problems or not lines:
        return None, sorted(set(problems))
    content = known_hosts or ""
    content += ("" if not content or content.endswith("\n") else "\n") + "\n".join(lines) + "\n"
    return steps.write_change(node.name, "~/.ssh/known_hosts", known_hosts, content, mode=0o600,
                              summary=f"learn {peer.name}'s host keys for {', '.join(peer.ssh_names)}"), []


def verify_trust(pair: Pair, inventory: Inventory) -> list[str]:
    """ssh -o BatchMode=yes from each node to every QSFP address of the other; the failures."""
    def check(connection: Any) -> list[str]:
        node = inventory.node(connection.name)
        peer = inventory.peer_of(node)
        facts = probes.gather(connection, [net.ssh_batch(str(a.ip)) for a in peer.links.values()])
        problems = []
        for key, value in facts.items():
            if isinstance(value, ProbeFailure):
                problems.append(f"{node.name}: {key} failed: {last_line(value.stderr, str(value))}")
        return problems
    problems: list[str] = []
    for name, result in pair.each(check).items():
        problems += [f"{name}: {result}"] if isinstance(result, BaseException) else result
    return problems
