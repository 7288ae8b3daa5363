"""Commands for a node's shell: argv lists, or `Shell` templates whose `{}` slots are quoted here.

The only place a value is put into a remote shell line.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

# Non-interactive SSH sessions on Debian get no sbin in PATH; ip, ss, ethtool live there.
PATH_PREFIX = 'PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"; export PATH; '


class Shell:
    """A shell command line; each `{}` slot is filled with a shell-quoted argument.

    Only the literal two characters `{}` are slots, so shell braces (`${HOME}`, `{ a; }`) are
    safe in templates. The number of slots must match the number of arguments.
    """

    def __init__(self, template: str, *args: object) -> None:
        pieces = template.split("{}")
        if len(pieces) != len(args) + 1:
            raise ValueError(f"template has {len(pieces) - 1} slots for {len(args)} arguments: {template!r}")
        quoted = [shlex.quote(str(arg)) for arg in args] + [""]
        self.text = "".join(piece + value for piece, value in zip(pieces, quoted, strict=True))
        self.shown = self.text  # how it reads in a trace (`transport.root.Root` shows its verb, not the helper's text)

    @classmethod
    def compose(cls, parts: Sequence[Shell], separator: str = "; ") -> Shell:
        """Join already-quoted Shell commands into one script (nothing is re-quoted)."""
        joined = cls("")
        joined.text = separator.join(part.text for part in parts)
        joined.shown = separator.join(part.shown for part in parts)
        return joined

    def __repr__(self) -> str:
        return f"Shell({self.text!r})"


Command = Shell | Sequence[str]


def command_text(command: Command) -> str:
    """The exact line sent to the node's shell (root only through `transport.root.Root`)."""
    if isinstance(command, str):
        raise TypeError("pass an argv list or a Shell template, never a bare string")
    return command.text if isinstance(command, Shell) else shlex.join(command)


def shown_text(command: Command) -> str:
    """The line as a trace shows it: a root verb as `sparkpair-root VERB ARGS`, not the helper's whole text."""
    return command.shown if isinstance(command, Shell) else command_text(command)
