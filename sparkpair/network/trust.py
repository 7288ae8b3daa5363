"""SSH trust between the nodes, which mpirun needs: own keys, authorized peers, verified host keys.

Each node makes its own ed25519 key if it has none (a private key never leaves its node). Trust is a
full mesh: each node authorizes every other node's key and learns every other node's host keys for
its QSFP addresses and name, and those keys hold the one the operator's own connection verified on
that node's management address: never blind acceptance. A pair is the mesh of two.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping

from sparkpair import apply, paths, probes
from sparkpair.errors import SparkpairError
from sparkpair.inventory import Inventory, Node
from sparkpair.probes import NodeFacts
from sparkpair.probes.ssh import SSH_FILES, SshFiles, key_body, known_keys
from sparkpair.transport import Pair, Shell, fingerprint

JOURNAL = "trust"
KEY = paths.NODE_KEY
KEY_TYPES = frozenset({"ssh-ed25519", "ssh-rsa", "ssh-dss", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
                       "ecdsa-sha2-nistp521", "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com"})
PRINTABLE_LINE = re.compile(r"[\x20-\x7e]{1,16384}")


def public_key_line(text: str) -> str:
    """text (a .pub file's content) as the one line `TYPE BASE64 [COMMENT]` to write, when it is exactly that:
    one line of printable ASCII, a known key type first (no options such as `command=` or `from=`), key data
    that is base64 of a key of that type. ValueError saying what is wrong otherwise (never the bad text)."""
    line = text.rstrip("\n")
    if "\n" in line:
        raise ValueError(f"{len(line.splitlines())} lines, not one")
    if not PRINTABLE_LINE.fullmatch(line):
        raise ValueError("control or non-ASCII characters in it")
    kind, _, rest = line.partition(" ")
    body, _, comment = rest.partition(" ")
    if kind not in KEY_TYPES:
        raise ValueError("it does not start with a key type (ssh-ed25519, ...): options are not accepted")
    try:
        blob = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"its key data is not base64 of a {kind} key") from None
    if blob[4:4 + int.from_bytes(blob[:4], "big")] != kind.encode() or len(blob) < 4 + len(kind) + 4:
        raise ValueError(f"its key data is not a {kind} key")
    return f"{kind} {body} {comment.strip()}".rstrip()


def ssh_files(facts: Mapping[str, NodeFacts]) -> dict[str, SshFiles]:
    """Each node's SshFiles from facts gathered with SSH_FILES among the probes; a failed probe raises."""
    files = {}
    for name, node_facts in facts.items():
        value = node_facts.get(SSH_FILES)
        if not isinstance(value, SshFiles):
            raise SparkpairError(str(value), node=name)
        files[name] = value
    return files


def probe_ssh_files(pair: Pair) -> dict[str, SshFiles]:
    return ssh_files(probes.gather_pair(pair, [SSH_FILES]))


DERIVE_PUBLIC = Shell('k="$HOME/.ssh/id_ed25519"; ssh-keygen -y -P "" -f "$k" >"$k.pub.new" && mv -f "$k.pub.new" '
                      '"$k.pub" || { rm -f "$k.pub.new"; exit 1; }')


def key_changes(files: dict[str, SshFiles]) -> list[apply.Change]:
    """Make an ed25519 key on each node that has none (on the node itself).

    A node with the private key but no .pub gets the .pub derived from it, never a new key over it.
    """
    changes = []
    for name, state in files.items():
        if state.public_key is not None:
            continue
        if state.private_key:
            changes.append(apply.Change(name, f"derive {KEY}.pub from the existing {KEY}", (apply.RunCommand(
                DERIVE_PUBLIC, creates=(f"{KEY}.pub",)),)))
        else:
            changes.append(apply.Change(name, f"make {KEY} (ed25519, this node's own key)", (apply.RunCommand(
                Shell('mkdir -p -m 700 "$HOME/.ssh" && ssh-keygen -q -t ed25519 -N "" -C {} -f "$HOME/.ssh/id_ed25519"',
                      paths.node_key_comment(name)), creates=(KEY, f"{KEY}.pub")),)))
    return changes


def trust_plan(inventory: Inventory, files: dict[str, SshFiles],
               host_keys: dict[str, tuple[str, str]]) -> tuple[list[apply.Change], list[str]]:
    """authorized_keys and known_hosts changes on every node, as a full mesh (each node trusts every other
    node's key and pins every other node's host keys); refusals for conflicting host keys.

    host_keys: per node, the key the operator's own connection verified on the management address.
    A node learns every host key another node has, but only if that verified key is one of them.
    One change per file: node i's turn plans the authorized_keys of the node after it (a pair: its peer),
    then its own known_hosts.
    """
    changes: list[apply.Change] = []
    refusals: list[str] = []
    nodes = inventory.nodes
    for index, node in enumerate(nodes):
        target = nodes[(index + 1) % len(nodes)]
        sources = [(other, files[other.name].public_key) for other in nodes if other.name != target.name]
        change, problems = _authorize_change(target, sources, files[target.name].authorized_keys)
        changes += [change] if change else []
        refusals += problems
        taught: list[tuple[Node, tuple[tuple[str, str], ...]]] = []
        for peer in (other for other in nodes if other.name != node.name):
            refusal = _host_key_refusal(node, peer, files[peer.name].host_keys, host_keys[peer.name])
            if refusal:
                refusals.append(refusal)
            else:
                taught.append((peer, files[peer.name].host_keys))
        change, problems = _known_hosts_change(node, taught, files[node.name].known_hosts)
        changes += [change] if change else []
        refusals += problems
    return changes, refusals


def _host_key_refusal(node: Node, peer: Node, peer_keys: tuple[tuple[str, str], ...], verified: tuple[str, str]) -> str:
    """Why node must not learn peer's host keys ("" when it may): a line that is not one host key, or the key
    this machine verified on peer's management address missing among them."""
    bad_host_key = _first_problem(peer_keys)
    if bad_host_key:
        return (f"{peer.name}: /etc/ssh/ssh_host_*_key.pub holds a line that is not one host key "
                f"({bad_host_key}); refusing to teach its host keys to {node.name}")
    if verified not in peer_keys:
        return (f"{peer.name}: the host key this machine verified ({fingerprint(*verified)}) "
                "is not among its /etc/ssh/ssh_host_*_key.pub; refusing to teach it to "
                f"{node.name} (is another sshd answering on {peer.host}?)")
    return ""


def _authorize_change(target: Node, sources: list[tuple[Node, str | None]],
                      authorized_keys: str | None) -> tuple[apply.Change | None, list[str]]:
    """The change appending each source node's public key to target's authorized_keys (None when they are all
    there or there is none), and a refusal for each source whose .pub is not one public key line."""
    content, added, refusals = authorized_keys or "", [], []
    present = [key_body(existing) for existing in content.splitlines()]
    for node, public_key in sources:
        if not public_key:
            continue
        try:
            line = public_key_line(public_key)
        except ValueError as error:
            refusals.append(f"{node.name}: ~/.ssh/id_ed25519.pub is not one public key line ({error}); refusing to "
                            f"authorize it on {target.name} (fix: on {node.name}, rm ~/.ssh/id_ed25519.pub; "
                            "setup-network derives it again from id_ed25519)")
            continue
        if key_body(line) in present:
            continue
        present.append(key_body(line))
        content += ("" if not content or content.endswith("\n") else "\n") + line + "\n"
        added.append(node.name)
    if not added:
        return None, refusals
    whose = f"{added[0]}'s key" if len(added) == 1 else f"{', '.join(added[:-1])} and {added[-1]}'s keys"
    return apply.write_change(target.name, paths.AUTHORIZED_KEYS, authorized_keys, content, mode=0o600,
                              summary=f"authorize {whose}"), refusals


def _first_problem(keys: tuple[tuple[str, str], ...]) -> str:
    """What is wrong with the first of keys (type, base64) that is not a public key; "" when all are."""
    for kind, body in keys:
        try:
            public_key_line(f"{kind} {body}")
        except ValueError as error:
            return str(error)
    return ""


def _known_hosts_change(node: Node, peers: list[tuple[Node, tuple[tuple[str, str], ...]]],
                        known_hosts: str | None) -> tuple[apply.Change | None, list[str]]:
    """Lines teaching node every host key of each peer under the peer's QSFP addresses and name; a peer whose
    name or address node already pins to another key is refused and left out."""
    lines, problems, learnt = [], [], []
    for peer, peer_keys in peers:
        peer_lines, peer_problems = _host_lines(node, peer, peer_keys, known_hosts)
        problems += sorted(set(peer_problems))
        if peer_lines and not peer_problems:
            lines += peer_lines
            learnt.append(f"{peer.name}'s host keys for {', '.join(peer.ssh_names)}")
    if not lines:
        return None, problems
    content = known_hosts or ""
    content += ("" if not content or content.endswith("\n") else "\n") + "\n".join(lines) + "\n"
    return apply.write_change(node.name, "~/.ssh/known_hosts", known_hosts, content, mode=0o600,
                              summary=f"learn {'; '.join(learnt)}"), problems


def _host_lines(node: Node, peer: Node, peer_keys: tuple[tuple[str, str], ...],
                known_hosts: str | None) -> tuple[list[str], list[str]]:
    """The known_hosts lines node lacks for peer's keys, and the names node pins to another key than peer's."""
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
    return lines, problems
