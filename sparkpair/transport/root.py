"""Root on a node: every root action is one verb of sparkpair's own helper program, `sparkpair-root`.

The helper (package data `sparkpair/data/sparkpair-root`, POSIX sh) checks each argument itself and
evaluates none in a shell. Installed root-owned at HELPER_PATH, sudoers grants the login only it
(`SUDOERS_LINE`); `Root(verb, *args)` then runs `sudo -n HELPER_PATH VERB ARGS`. On a node where it is
not installed (or is another version than this sparkpair's), the same text runs through full sudo
(`sudo -n sh -c TEXT sparkpair-root VERB ARGS`): one program, either way. The choice is made on the node
in the command itself, so no round trip asks it first; `probes.host.ROOT` tells which way a node goes.
May import: only `shell` (a leaf of transport).
"""

from __future__ import annotations

import hashlib
import shlex
from functools import cache
from importlib import resources

from sparkpair.transport.shell import Shell

HELPER_PATH = "/usr/local/sbin/sparkpair-root"
HELPER_DATA = "sparkpair-root"  # its name in the package data


@cache
def helper_text() -> str:
    """The helper program this sparkpair ships (what `sparkpair root-helper` prints)."""
    return resources.files("sparkpair.data").joinpath(HELPER_DATA).read_text(encoding="utf-8")


def helper_digest() -> str:
    """The SHA-256 (hex) of the helper this sparkpair ships: an installed helper is used only when it is this one."""
    return hashlib.sha256(helper_text().encode()).hexdigest()


def sudoers_line(user: str) -> str:
    """The one sudoers line the helper needs: the login may run it, and nothing else, as root."""
    return f"{user} ALL=(root) NOPASSWD: {HELPER_PATH}"


def install_commands(user: str) -> list[str]:
    """What the operator runs once on a node (with the helper's file, from `sparkpair root-helper`, copied
    there as ./sparkpair-root) to grant sparkpair root through the helper only."""
    line = sudoers_line(user)
    return [f"sudo install -m 0755 -o root -g root sparkpair-root {HELPER_PATH}",
            f"echo {shlex.quote(line)} | sudo tee /etc/sudoers.d/sparkpair.new >/dev/null && "
            "sudo chmod 0440 /etc/sudoers.d/sparkpair.new && sudo visudo -cf /etc/sudoers.d/sparkpair.new && "
            "sudo mv /etc/sudoers.d/sparkpair.new /etc/sudoers.d/sparkpair"]


def _chooser() -> str:
    """Shell text: sh-function `sparkpair_root` running the helper as root, the installed one when it is ours."""
    return (f'sparkpair_root() {{ if [ -x {HELPER_PATH} ] && [ "$(sha256sum <{HELPER_PATH})" = '
            f'"{helper_digest()}  -" ]; then sudo -n {HELPER_PATH} "$@"; else sudo -n sh -c '
            f'{shlex.quote(helper_text())} sparkpair-root "$@"; fi; }}; ')


class Root(Shell):
    """One verb of the helper, run as root; `shown` is `sparkpair-root VERB ARGS` (traces, the unit tests' nodes)."""

    def __init__(self, verb: str, *args: object) -> None:
        words = [verb, *(str(arg) for arg in args)]
        super().__init__("")
        self.verb, self.args = verb, tuple(words[1:])
        self.text = "{ " + _chooser() + "sparkpair_root " + shlex.join(words) + "; }"
        self.shown = "sparkpair-root " + shlex.join(words)


def define() -> Shell:
    """Shell text defining `sparkpair_root` for a script that calls it with the node's own values ("$f")."""
    defined = Shell("")
    defined.text, defined.shown = _chooser(), "sparkpair_root() { sparkpair-root \"$@\"; }; "
    return defined
