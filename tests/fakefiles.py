"""The plain file commands sparkpair's shell lines are made of, carried out on an in-memory file system
(tests/fakenode.py's `files_behave`): `[ -e P ]` (`-f`, `-d`, `-L`, `!`), `test`, `mkdir -p [-m M]`, `cp -a`,
`mv -f`, `rm -f`, `cmp -s`, `ls -A`, `echo`, `:`, `true`, `false`, `> P` and `2>/dev/null`, joined by
`if/then/else/fi`, `&&`, `||` and `;`. Anything else is not carried out (`answer` gives None), so a scripted
node never pretends to run a command it does not understand."""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath


@dataclass
class _Disk:
    """The files (path -> bytes) and folders a FileShell acts on (the node's own, shared)."""

    files: dict[str, bytes]
    dirs: set[str]


class NotPlain(Exception):
    """A command FileShell does not carry out: left to the other rules (else unexpected)."""


_SEPARATORS = {";", "&&", "||", "\n"}
_KEYWORDS = {"if", "then", "else", "fi"}


class FileShell:
    """Carries out one command line made only of plain file commands on a FakeNode's files."""

    def __init__(self, files: dict[str, bytes], dirs: set[str]) -> None:
        self.node = _Disk(files, dirs)
        self.out: list[str] = []
        self.tokens: list[str] = []

    def answer(self, text: str) -> tuple[str, int] | None:
        """(stdout, exit code) of text carried out, or None when it holds anything but plain file commands."""
        lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|>")
        lexer.whitespace_split = True
        try:
            self.tokens = list(lexer)
            status = self._list(until=set())
        except (NotPlain, ValueError):
            return None
        return "".join(self.out), status

    # list := and_or ((';') and_or)*
    def _list(self, until: set[str]) -> int:
        status = 0
        while self.tokens and self.tokens[0] not in until:
            status = self._and_or(until)
            if self.tokens and self.tokens[0] == ";":
                self.tokens.pop(0)
        return status

    def _and_or(self, until: set[str]) -> int:
        status = self._command(until)
        while self.tokens and self.tokens[0] in ("&&", "||"):
            operator = self.tokens.pop(0)
            if (operator == "&&") == (status == 0):
                status = self._command(until)
            else:
                self._skip_command(until)
        return status

    def _command(self, until: set[str]) -> int:
        if self.tokens[0] == "if":
            return self._if()
        words = self._words(until)
        return self._simple(words)

    def _skip_command(self, until: set[str]) -> None:
        with self._dropped():
            self._command(until)  # parsed, then its effects dropped

    @contextlib.contextmanager
    def _dropped(self) -> Iterator[None]:
        """The block's effects on the output and the files undone (a branch or operand not taken is parsed only)."""
        out, files, dirs = list(self.out), dict(self.node.files), set(self.node.dirs)
        yield
        self.out[:] = out
        self.node.files.clear()
        self.node.files.update(files)
        self.node.dirs.clear()
        self.node.dirs.update(dirs)

    def _if(self) -> int:
        self._expect("if")
        condition = self._list({"then"})
        self._expect("then")
        chosen = 0
        if condition == 0:
            chosen = self._list({"else", "fi"})
            if self.tokens[0] == "else":
                self._expect("else")
                self._skipped_list({"fi"})
        else:
            self._skipped_list({"else", "fi"})
            if self.tokens[0] == "else":
                self._expect("else")
                chosen = self._list({"fi"})
        self._expect("fi")
        return chosen

    def _skipped_list(self, until: set[str]) -> None:
        with self._dropped():
            self._list(until)

    def _expect(self, word: str) -> None:
        if not self.tokens or self.tokens.pop(0) != word:
            raise NotPlain(word)

    def _words(self, until: set[str]) -> list[str]:
        words: list[str] = []
        while self.tokens and self.tokens[0] not in _SEPARATORS | until and not (
                not words and self.tokens[0] in _KEYWORDS):
            words.append(self.tokens.pop(0))
        if not words:
            raise NotPlain("an empty command")
        return words

    def _simple(self, words: list[str]) -> int:
        words, target = _redirected(words)
        name, args = words[0], words[1:]
        files = self.node.files
        if name in ("[", "test"):
            return 0 if self._test(args[:-1] if name == "[" else args) else 1
        if name in (":", "true") and not args:
            if target is not None:
                files[target] = b""
            return 0
        if name == "false" and not args:
            return 1
        if name == "echo":
            if target is not None:
                files[target] = (" ".join(args) + "\n").encode()
            else:
                self.out.append(" ".join(args) + "\n")
            return 0
        if target is not None:
            raise NotPlain(name)
        return self._file_command(name, args)

    def _file_command(self, name: str, args: list[str]) -> int:
        files, dirs = self.node.files, self.node.dirs
        if name == "mkdir" and args[:1] == ["-p"]:
            rest = args[1:]
            if rest[:1] == ["-m"]:
                rest = rest[2:]
            for path in rest:
                dirs.update(_with_parents(path))
            return 0
        if name == "rm" and args[:1] == ["-f"]:
            for path in args[1:]:
                files.pop(path, None)
            return 0
        if [name, *args[:1]] in (["cp", "-a"], ["mv", "-f"]) and len(args) == 3:
            source, dest = args[1:]
            if source not in files:
                return 1
            files[dest] = files.pop(source) if name == "mv" else files[source]
            return 0
        if name == "cmp" and args[:1] == ["-s"] and len(args) == 3:
            return 0 if args[1] in files and files.get(args[1]) == files.get(args[2]) else 1
        if name == "ls" and args[:1] == ["-A"] and len(args) == 2:
            found = sorted(PurePosixPath(path).name for path in [*files, *dirs] if str(PurePosixPath(path).parent) == args[1])
            self.out.append("".join(f"{entry}\n" for entry in found))
            return 0 if self._exists(args[1]) else 2
        raise NotPlain(name)

    def _test(self, args: list[str]) -> bool:
        if args[:1] == ["!"]:
            return not self._test(args[1:])
        if len(args) != 2 or args[0] not in ("-e", "-f", "-d", "-L"):
            raise NotPlain(" ".join(args))
        flag, path = args
        if flag == "-L":
            return False  # the in-memory file system holds no links
        if flag == "-f":
            return path in self.node.files
        if flag == "-d":
            return path in self.node.dirs
        return self._exists(path)

    def _exists(self, path: str) -> bool:
        return path in self.node.files or path in self.node.dirs or any(
            other.startswith(path.rstrip("/") + "/") for other in self.node.files)


def _redirected(words: list[str]) -> tuple[list[str], str | None]:
    """words without their redirections (2>/dev/null dropped), and the file stdout goes to (None: the output)."""
    kept: list[str] = []
    target = None
    index = 0
    while index < len(words):
        word = words[index]
        if word == ">" and index + 1 < len(words):
            if kept and kept[-1] == "2":
                kept.pop()
            elif words[index + 1] != "/dev/null":
                target = words[index + 1]
            index += 2
            continue
        kept.append(word)
        index += 1
    if not kept:
        raise NotPlain("a redirection alone")
    return kept, target


def _with_parents(path: str) -> Iterable[str]:
    """path and each of its parent folders (absolute paths)."""
    current = PurePosixPath(path)
    return [str(current), *(str(parent) for parent in current.parents if str(parent) != "/")]


