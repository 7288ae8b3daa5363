"""A tiny command-line parser that fails exactly the way click does.

The real `trtllm-serve` and `hf` are click/typer programs; callers (sparkpair) rely on
their exit status (2 for usage errors) and on messages such as
``Error: No such option: --foo``. Only the features those tools use are implemented:
long options with one value or none (flags), aliases, choices, ``--opt=value``,
interspersed positional arguments, ``--`` and ``--help``.
"""

import difflib
import os
import sys
from dataclasses import dataclass, field


class UsageError(Exception):
    """A command-line error; printed click-style, exit status 2."""


class HelpRequested(Exception):
    """Raised when --help was given; the help text goes to stdout, exit status 0."""


@dataclass(frozen=True)
class Opt:
    """One option: all its spellings, its destination and how its value is converted."""

    names: tuple
    dest: str
    kind: str = "str"  # str | int | float | flag | choice | path
    default: object = None
    choices: tuple = ()
    aliases: tuple = ()  # ((alias, canonical), ...) for choices
    multiple: bool = False
    help: str = ""

    def hint(self):
        """The parameter hint click prints, e.g. ``'--tensor_parallel_size' / '--tp_size'``."""
        return " / ".join(repr(name) for name in self.names)


@dataclass(frozen=True)
class Arg:
    """A positional argument; ``variadic`` swallows every remaining positional."""

    name: str
    dest: str
    required: bool = True
    variadic: bool = False


@dataclass
class Command:
    """A command's usage line, help text, options and positional arguments."""

    prog: str
    usage_tail: str
    options: list
    arguments: list
    summary: str = ""
    help_names: tuple = ("--help",)
    _by_name: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self):
        self._by_name = {name: opt for opt in self.options for name in opt.names}

    def lookup(self, name):
        """Return the option spelled ``name`` or raise click's NoSuchOption message."""
        if name in self._by_name:
            return self._by_name[name]
        raise UsageError(no_such_option_message(name, list(self._by_name) + list(self.help_names)))


def no_such_option_message(name, known_names):
    """Click 8's wording, including its 'Did you mean' suggestion."""
    message = f"No such option: {name}"
    matches = difflib.get_close_matches(name, known_names)
    if len(matches) == 1:
        message += f" Did you mean {matches[0]}?"
    elif matches:
        message += f" (Possible options: {', '.join(sorted(matches))})"
    return message


def _split_tokens(command, argv):
    """First pass: collect raw option values and positionals in order, as click's parser does."""
    raw_options, positionals, wants_help = [], [], False
    index = 0
    while index < len(argv):
        token = argv[index]
        index += 1
        if token == "--":
            positionals.extend(argv[index:])
            break
        if token in command.help_names:
            wants_help = True
            continue
        if not token.startswith("-") or token == "-":
            positionals.append(token)
            continue
        name, has_inline, inline_value = token.partition("=")
        opt = command.lookup(name)
        if opt.kind == "flag":
            if has_inline:
                raise UsageError(f"Option '{name}' does not take a value.")
            raw_options.append((opt, True))
            continue
        if has_inline:
            raw_options.append((opt, inline_value))
        elif index < len(argv):
            raw_options.append((opt, argv[index]))
            index += 1
        else:
            raise UsageError(f"Option '{name}' requires an argument.")
    return raw_options, positionals, wants_help


def convert_value(opt, raw):
    """Convert one raw string the way click's ParamType would, with click's error text."""
    if opt.kind in ("str", "flag"):
        return raw
    if opt.kind == "int":
        try:
            return int(raw, 10)
        except ValueError:
            raise UsageError(f"Invalid value for {opt.hint()}: {raw!r} is not a valid integer.")
    if opt.kind == "float":
        try:
            return float(raw)
        except ValueError:
            raise UsageError(f"Invalid value for {opt.hint()}: {raw!r} is not a valid float.")
    if opt.kind == "choice":
        value = dict(opt.aliases).get(raw, raw)
        if value not in opt.choices:
            listed = ", ".join(repr(choice) for choice in opt.choices)
            raise UsageError(f"Invalid value for {opt.hint()}: {raw!r} is not one of {listed}.")
        return value
    if opt.kind == "path":
        if not os.path.exists(raw):
            raise UsageError(f"Invalid value for {opt.hint()}: Path {raw!r} does not exist.")
        return os.path.abspath(raw)
    raise ValueError(f"unknown option kind {opt.kind}")


def _assign_positionals(command, positionals, values):
    """Distribute positionals over the command's arguments; click's missing/extra messages."""
    remaining = list(positionals)
    for arg in command.arguments:
        if arg.variadic:
            values[arg.dest] = tuple(remaining)
            remaining = []
        elif remaining:
            values[arg.dest] = remaining.pop(0)
        elif arg.required:
            raise UsageError(f"Missing argument '{arg.name}'.")
        else:
            values[arg.dest] = None
    if remaining:
        plural = "s" if len(remaining) > 1 else ""
        raise UsageError(f"Got unexpected extra argument{plural} ({' '.join(remaining)})")


def parse(command, argv):
    """Parse ``argv`` for ``command``; return a dict of destination -> value.

    Raises UsageError (click exit status 2) or HelpRequested.
    """
    raw_options, positionals, wants_help = _split_tokens(command, argv)
    if wants_help:
        raise HelpRequested()
    values = {opt.dest: (() if opt.multiple else opt.default) for opt in command.options}
    for opt, raw in raw_options:
        value = True if opt.kind == "flag" else convert_value(opt, raw)
        values[opt.dest] = values[opt.dest] + (value,) if opt.multiple else value
    _assign_positionals(command, positionals, values)
    return values


def help_text(command):
    """A plain rendering of the command's help, in click's layout."""
    lines = [f"Usage: {command.prog} {command.usage_tail}", ""]
    if command.summary:
        lines += [f"  {command.summary}", ""]
    lines.append("Options:")
    for opt in command.options:
        spelled = ", ".join(opt.names)
        if opt.kind not in ("flag",):
            spelled += " " + ("[" + "|".join(opt.choices) + "]" if opt.kind == "choice" else opt.kind.upper())
        lines.append(f"  {spelled:<48} {opt.help}".rstrip())
    lines.append(f"  {', '.join(command.help_names):<48} Show this message and exit.")
    return "\n".join(lines)


def parse_or_exit(command, argv, stdout=None, stderr=None):
    """Parse like click's standalone mode: usage errors exit 2, --help prints and exits 0."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    try:
        return parse(command, argv)
    except HelpRequested:
        print(help_text(command), file=stdout)
        raise SystemExit(0)
    except UsageError as error:
        print(f"Usage: {command.prog} {command.usage_tail}", file=stderr)
        print(f"Try '{command.prog} {command.help_names[0]}' for help.", file=stderr)
        print("", file=stderr)
        print(f"Error: {error}", file=stderr)
        raise SystemExit(2)
