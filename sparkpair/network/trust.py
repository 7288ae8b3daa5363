"""SSH trust between the nodes, which mpirun needs: own keys, authorized peers, verified host keys.

Each node makes its own ed25519 key if it has none (a private key never leaves its node). Each
node learns the peer's host key for the peer's QSFP addresses and name, and that key is the one
the operator's own connection verified on the management address: never blind acceptance.
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
    """authorized_keys and known_hosts changes on both nodes; refusals for conflicting host keys.

    host_keys: per node, the key the operator's own connection verified on the management address.
    A node learns every host key its peer has, but only if that verified key is one of them.
    """
    changes: list[apply.Change] = []
    refusals: list[str] = []
    for node in inventory.nodes:
        peer = inventory.peer_of(node)
        mine, theirs = files[node.name], files[peer.name]
        change, problem = _authorize_change(node, peer, mine.public_key, theirs.authorized_keys)
        changes += [change] if change else []
        refusals += [problem] if problem else []
        bad_host_key = _first_problem(theirs.host_keys)
        if bad_host_key:
            refusals.append(f"{peer.name}: /etc/ssh/ssh_host_*_key.pub holds a line that is not one host key "
                            f"({bad_host_key}); refusing to teach its host keys to {node.name}")
            continue
        if host_keys[peer.name] not in theirs.host_keys:
            refusals.append(f"{peer.name}: the host key this machine verified ({fingerprint(*host_keys[peer.name])}) "
                            "is not among its /etc/ssh/ssh_host_*_key.pub; refusing to teach it to "
                            f"{node.name} (is another sshd answering on {peer.host}?)")
            continue
        change, problems = _known_hosts_change(node, peer, mine.known_hosts, theirs.host_keys)
        changes += [change] if change else []
        refusals += problems
    return changes, refusals


def _authorize_change(node: Node, peer: Node, public_key: str | None,
                      authorized_keys: str | None) -> tuple[apply.Change | None, str]:
    """The change appending node's public key to the peer's authorized_keys (None when it is there or
    there is none), or the refusal when node's .pub is not one public key line."""
    if not public_key:
        return None, ""
    try:
        line = public_key_line(public_key)
    except ValueError as error:
        return None, (f"{node.name}: ~/.ssh/id_ed25519.pub is not one public key line ({error}); refusing to "
                      f"authorize it on {peer.name} (fix: on {node.name}, rm ~/.ssh/id_ed25519.pub; "
                      "setup-network derives it again from id_ed25519)")
    if key_body(line) in [key_body(existing) for existing in (authorized_keys or "").splitlines()]:
        return None, ""
    content = authorized_keys or ""
    content += ("" if not content or content.endswith("\n") else "\n") + line + "\n"
    return apply.write_change(peer.name, paths.AUTHORIZED_KEYS, authorized_keys, content, mode=0o600,
                              summary=f"authorize {node.name}'s key"), ""


def _first_problem(keys: tuple[tuple[str, str], ...]) -> str:
    """What is wrong with the first of keys (type, base64) that is not a public key; "" when all are."""
    for kind, body in keys:
        try:
            public_key_line(f"{kind} {body}")
        except ValueError as error:
            return str(error)
    return ""


def _known_hosts_change(node: Node, peer: Node, known_hosts: str | None,
                        peer_keys: tuple[tuple[str, str], ...]) -> tuple[apply.Change | None, list[str]]:
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
    return apply.write_change(node.name, "~/.ssh/known_hosts", known_hosts, content, mode=0o600,
                              summary=f"learn {peer.name}'s host keys for {', '.join(peer.ssh_names)}"), []
