"""SSH facts of a node: its own public key, authorized_keys, known_hosts, host keys (never a private key)."""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass

from sparkpair.probes import Probe, parse_sections, section
from sparkpair.transport import Shell


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
    """Parse the sections (`probes.section`) `pub`, `authorized_keys`, `known_hosts`, `hostname`, `host_keys`,
    and `private_key` (present or absent, never its content), each named `present NAME` or `absent NAME`."""
    sections: dict[str, str | None] = {}
    for header, content in parse_sections(text).items():
        status, _, name = header.partition(" ")
        sections[name] = content if status == "present" else None
    public = sections.get("pub")
    host_keys = tuple(key for key in (key_body(line) for line in (sections.get("host_keys") or "").splitlines()) if key)
    return SshFiles(public.strip() if public else None, sections.get("authorized_keys"),
                    sections.get("known_hosts"), (sections.get("hostname") or "").strip(), host_keys,
                    sections.get("private_key") is not None)


SSH_FILES = Probe("ssh files", (), Shell(
    'for f in pub:.ssh/id_ed25519.pub authorized_keys:.ssh/authorized_keys known_hosts:.ssh/known_hosts; do '
    'n=${f%%:*}; p="$HOME/${f#*:}"; if [ -f "$p" ]; then ' + section('"present $n"', 'cat "$p"')
    + '; else ' + section('"absent $n"') + '; fi; done; ' + section('"present hostname"', "hostname") + "; "
    + section('"present host_keys"', "cat /etc/ssh/ssh_host_*_key.pub 2>/dev/null") + "; "
    'if [ -e "$HOME/.ssh/id_ed25519" ]; then s=present; else s=absent; fi; ' + section('"$s private_key"') + "; true"),
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
