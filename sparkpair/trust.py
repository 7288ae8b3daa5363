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
from sparkpair.probes import net
from sparkpair.inventory import Inventory, Node
from sparkpair.probes import Probe, ProbeFailure
from sparkpair.transport import Pair, Shell

JOURNAL = "trust"
KEY = "~/.ssh/id_ed25519"
FILE_MARK = "\x1c"


@dataclass(frozen=True)
class SshFiles:
    """A node's SSH client state: its public key (if any), authorized_keys, known_hosts, hostname."""

    public_key: str | None
    authorized_keys: str | None
    known_hosts: str | None
    hostname: str
    host_keys: tuple[tuple[str, str], ...] = ()


def parse_ssh_files(text: str) -> SshFiles:
    """Parse the FS-separated sections `pub`, `authorized_keys`, `known_hosts`, `hostname`."""
    sections: dict[str, str | None] = {}
    for chunk in text.split(FILE_MARK)[1:]:
        name, _, content = chunk.partition("\n")
        status, _, name = name.partition(" ")
        sections[name] = content if status == "present" else None
    public = sections.get("pub")
    host_keys = tuple(key for key in (key_body(line) for line in (sections.get("host_keys") or "").splitlines()) if key)
    return SshFiles(public.strip() if public else None, sections.get("authorized_keys"),
                    sections.get("known_hosts"), (sections.get("hostname") or "").strip(), host_keys)


SSH_FILES = Probe("ssh_files", Shell(
    'for f in pub:.ssh/id_ed25519.pub authorized_keys:.ssh/authorized_keys known_hosts:.ssh/known_hosts; do '
    'n=${f%%:*}; p="$HOME/${f#*:}"; if [ -f "$p" ]; then printf "\\034present %s\\n" "$n"; cat "$p"; '
    'else printf "\\034absent %s\\n" "$n"; fi; done; printf "\\034present hostname\\n"; hostname; '
    'printf "\\034present host_keys\\n"; cat /etc/ssh/ssh_host_*_key.pub 2>/dev/null; true'), parse_ssh_files)


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


def fingerprint(key_type: str, body: str) -> str:
    digest = base64.b64encode(hashlib.sha256(base64.b64decode(body)).digest()).decode().rstrip("=")
    return f"{key_type} SHA256:{digest}"


def probe_ssh_files(pair: Pair) -> dict[str, SshFiles]:
    results = pair.each(lambda connection: probes.gather(connection, [SSH_FILES])["ssh_files"])
    for name, result in results.items():
        if isinstance(result, (BaseException, ProbeFailure)):
            raise result if isinstance(result, BaseException) else RuntimeError(f"{name}: {result}")
    return results  # type: ignore[return-value]


def key_changes(files: dict[str, SshFiles]) -> list[steps.Change]:
    """Make an ed25519 key on each node that has none (on the node itself)."""
    return [steps.Change(name, f"make {KEY} (ed25519, this node's own key)", (steps.RunCommand(
        Shell('mkdir -p -m 700 "$HOME/.ssh" && ssh-keygen -q -t ed25519 -N "" -C {} -f "$HOME/.ssh/id_ed25519"',
              f"sparkpair@{name}"), creates=(KEY, f"{KEY}.pub")),))
            for name, state in files.items() if state.public_key is None]


def peer_names(peer: Node) -> list[str]:
    """The names a node may use for its peer: every QSFP address, then the node name."""
    return [str(address.ip) for address in peer.links.values()] + [peer.name]


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
        for name in peer_names(peer):
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
                              summary=f"learn {peer.name}'s host keys for {', '.join(peer_names(peer))}"), []


def verify_trust(pair: Pair, inventory: Inventory) -> list[str]:
    """ssh -o BatchMode=yes from each node to every QSFP address of the other; the failures."""
    def check(connection: Any) -> list[str]:
        node = inventory.node(connection.name)
        peer = inventory.peer_of(node)
        facts = probes.gather(connection, [net.ssh_batch(str(a.ip)) for a in peer.links.values()])
        problems = []
        for key, value in facts.items():
            if isinstance(value, ProbeFailure):
                problems.append(f"{node.name}: {key} failed: {value.stderr.strip().splitlines()[-1] if value.stderr.strip() else value}")
        return problems
    problems: list[str] = []
    for name, result in pair.each(check).items():
        problems += [f"{name}: {result}"] if isinstance(result, BaseException) else result
    return problems
