"""Regular expressions for one line of a log, linear and quick on hostile lines. Standard library only.

The patterns of `engine.stages` and `engine.signatures` run on lines an engine, a node or a user
wrote: megabytes of them, each up to `stages.clean_lines`'s cap, some read while the pair lock is
held. Two rules keep that bounded:

- linear: no quantifier may rescan the rest of the line from each of many starting points (a
  leading `\\w*` or `\\d+` before a literal, `A.*B` on a line of A repeated); `followed_by` writes
  "A, later B" that way;
- a quick test first: a `LinePattern` knows words one of which every match holds
  (`required_words`, read from the expression) and looks for them with `in` in the folded line
  before it runs the expression, which case-insensitive costs ~15 ns a character.

tests/unit/test_diagnose_redos.py times every pattern on adversarial lines and checks the words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The only characters re.IGNORECASE matches to an ASCII letter that str.lower() does not lower to it.
_FOLD = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s"})
_BRACES = re.compile(r"\{(?:\d+|\d*,\d*)\}")  # {m}, {m,}, {,n}, {m,n}: a repeat; any other { is itself


def followed_by(first: str, then: str) -> str:
    """A pattern for `first` with `then` later on the same line, linear in the line's length.

    `first.*then` rescans the rest of the line from every `first` (quadratic on `first` repeated);
    here the text between may not hold another `first`, so each character is scanned from one start
    only. It matches the same lines as long as `then` cannot begin inside a `first` (true of words)."""
    return rf"(?:{first})(?:(?!{first}).)*?(?:{then})"


def fold(line: str) -> str:
    """line lowercased as re.IGNORECASE compares it: an ASCII word it matches is in the result."""
    return line.lower() if line.isascii() else line.translate(_FOLD).lower()


def required_words(source: str) -> tuple[str, ...]:
    """Lowercase words, one of which is in every line the case-insensitive expression source matches;
    empty when this reading is sure of none (then every line is searched).

    The reading is conservative: a run of plain characters (escaped punctuation too) that no
    quantifier makes optional; a group without a quantifier gives the words of its alternatives;
    classes, escapes such as \\w or \\b, lookarounds and anything quantified give nothing. Of the
    choices in a sequence, the one whose shortest word is longest wins."""
    words = _alternation_words(source)
    return tuple(sorted(set(words))) if words else ()


def _alternation_words(source: str) -> list[str] | None:
    branches = [_sequence_words(branch) for branch in _split_alternatives(source)]
    if any(words is None for words in branches):
        return None
    return [word for words in branches if words for word in words]


def _sequence_words(source: str) -> list[str] | None:
    choices: list[list[str]] = []
    run, at = "", 0
    while at < len(source):
        char, group, at = _atom(source, at)
        end = _quantifier_end(source, at)
        quantified, at = end > at, end
        if char and not quantified:
            run += char
            continue
        if run:
            choices.append([run.lower()])
        run = ""
        words = _alternation_words(group) if group is not None and not quantified else None
        if words:
            choices.append(words)
    if run:
        choices.append([run.lower()])
    return max(choices, key=lambda words: min(map(len, words))) if choices else None


def _atom(source: str, at: int) -> tuple[str, str | None, int]:
    """The atom at `at`: (its plain character or "", the body of a plain group or None, where it ends)."""
    char = source[at]
    if char == "\\":
        escaped = source[at + 1:at + 2]
        return (escaped if escaped and not escaped.isalnum() else ""), None, _escape_end(source, at)
    if char == "[":
        return "", None, _class_end(source, at)
    if char == "(":
        end = _group_end(source, at)
        if source.startswith("(?:", at):
            return "", source[at + 3:end - 1], end
        if source.startswith("(?P<", at):
            return "", source[source.index(">", at) + 1:end - 1], end
        return "", (None if source.startswith("(?", at) else source[at + 1:end - 1]), end
    return ("" if char in ".^$?*+{}|)" else char), None, at + 1


def _escape_end(source: str, at: int) -> int:
    """Where the escape at `at` ends: \\x41, \\u0041, \\U00000041, \\N{...} and \\012 or \\12 run on."""
    kind, end = source[at + 1:at + 2], at + 2
    if kind == "N" and source.startswith("{", end):
        close = source.find("}", end)
        return len(source) if close < 0 else close + 1
    if kind.isdigit():
        while end < min(at + 4, len(source)) and source[end].isdigit():
            end += 1
        return end
    return end + {"x": 2, "u": 4, "U": 8}.get(kind, 0)


def _quantifier_end(source: str, at: int) -> int:
    """Where the quantifier at `at` ends, with its lazy or possessive mark (`at` itself when there is none)."""
    braces = _BRACES.match(source, at)
    if braces:
        at = braces.end()
    elif source.startswith(("?", "*", "+"), at):
        at += 1
    else:
        return at
    return at + 1 if source.startswith(("?", "+"), at) else at


def _class_end(source: str, at: int) -> int:
    at += 1
    at += source.startswith("^", at)
    at += source.startswith("]", at)
    while at < len(source) and source[at] != "]":
        at += 2 if source[at] == "\\" else 1
    return at + 1


def _group_end(source: str, at: int) -> int:
    depth = 0
    while at < len(source):
        char = source[at]
        if char == "\\":
            at += 2
            continue
        if char == "[":
            at = _class_end(source, at)
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        at += 1
        if depth == 0:
            return at
    return at


def _split_alternatives(source: str) -> list[str]:
    """source cut at its top-level `|`."""
    parts, start, at = [], 0, 0
    while at < len(source):
        char = source[at]
        if char == "\\":
            at += 2
        elif char == "[":
            at = _class_end(source, at)
        elif char == "(":
            at = _group_end(source, at)
        elif char == "|":
            parts.append(source[start:at])
            start = at = at + 1
        else:
            at += 1
    return [*parts, source[start:]]


@dataclass(frozen=True)
class LinePattern:
    """A case-insensitive regular expression for one log line with its quick test: `words`, one of
    which (lowercase) is in every line it matches (empty: no quick test)."""

    regex: re.Pattern[str]
    words: tuple[str, ...] = ()

    @classmethod
    def compile(cls, source: str) -> LinePattern:
        """The pattern for source, case-insensitive, with the words `required_words` finds in it."""
        return cls(re.compile(source, re.IGNORECASE), required_words(source))

    def search(self, line: str) -> re.Match[str] | None:
        """The first match in line, as re.search; None without running the expression when the line
        holds none of the words."""
        if self.words:
            folded = fold(line)
            if not any(word in folded for word in self.words):
                return None
        return self.regex.search(line)
