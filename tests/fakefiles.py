"""The plain file commands sparkpair's shell lines are made of, carried out on an in-memory file system
(tests/fakenode.py's `files_behave`): `[ -e P ]` (`-f`, `-d`, `-L`, `!`), `test`, `mkdir -p [-m M]`, `cp -a`,
`mv -f`, `rm -f`, `cmp -s`, `ls -A`, `echo`, `:`, `true`, `false`, `> P` and `2>/dev/null`, joined by
`if/then/else/fi`, `&&`, `||` and `;`; and the root helper's file verbs (`sparkpair-root backup`, `remove`,
`restore-backup`, `differs`, `first-touch-list`, `first-touch-put-back`, `first-touch-clear`: `ROOT_FILE_VERBS`,
each as the plain commands sparkpair/data/sparkpair-root runs for it). Anything else is not carried out
(`answer` gives None), so a scripted node never pretends to run a command it does not understand."""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import quote

ROOT_WORD = "sparkpair-root"  # how a root helper's verb reads in a command's shown text
BACKUPS, FIRST_TOUCH = "/var/backups/sparkpair", "/var/backups/sparkpair/first-touch"


def _backup(stamp: str, path: str) -> str:
    return f"{BACKUPS}/{stamp}/{path.strip('/').replace('/', '%')}"


def _record(path: str) -> str:
    return f"{FIRST_TOUCH}/{quote(path, safe='')}"


def _q(*words: str) -> list[str]:
    return [shlex.quote(word) for word in words]


def _root_backup(stamp: str, path: str, *first: str) -> str:
    p, store, backup, base = _q(path, f"{BACKUPS}/{stamp}", _backup(stamp, path), _record(path))
    record = (f"if [ ! -e {base} ] && [ ! -e {base}.absent ]; then mkdir -p -m 700 {FIRST_TOUCH} && if [ -e {p} ] || "
              f"[ -L {p} ]; then cp -a {p} {base}.new && mv -f {base}.new {base}; else : > {base}.absent; fi; fi && "
              if first == ("first-touch",) else "")
    return record + f"if [ -e {p} ]; then mkdir -p {store} && cp -a {p} {backup} && echo saved; fi"


def _root_put_back(path: str) -> str:
    p, copy = _q(path, _record(path))
    return (f"if [ -e {copy} ]; then if cmp -s {copy} {p}; then echo same; else cp -a {copy} {p} && echo done; fi; "
            f"else if [ -e {p} ]; then rm -f {p} && echo done; fi; fi")


ROOT_FILE_VERBS = {
    "backup": _root_backup,
    "remove": lambda path: f"rm -f {shlex.quote(path)}",
    "restore-backup": lambda stamp, path: f"cp -a {' '.join(_q(_backup(stamp, path), path))}",
    "differs": lambda stamp, path, was: (f"cmp -s {' '.join(_q(_backup(stamp, path), path))}" if was == "saved" else
                                         f"[ ! -e {shlex.quote(path)} ]"),
    "first-touch-list": lambda: f"ls -A {FIRST_TOUCH}",
    "first-touch-put-back": _root_put_back,
    "first-touch-clear": lambda: f"rm -f {FIRST_TOUCH}/*",
}


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
        if name == ROOT_WORD and args and args[0] in ROOT_FILE_VERBS and target is None:
            return self._root(args[0], args[1:])
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

    def _root(self, verb: str, args: list[str]) -> int:
        """A root helper's file verb, carried out as the plain commands it runs on the same files."""
        try:
            text = ROOT_FILE_VERBS[verb](*args)
        except TypeError:
            raise NotPlain(f"{ROOT_WORD} {verb} with {len(args)} arguments") from None
        if verb == "first-touch-clear":
            for path in [path for path in self.node.files if path.startswith(FIRST_TOUCH + "/")]:
                del self.node.files[path]
            self.node.dirs.discard(FIRST_TOUCH)
            return 0
        inner = FileShell(self.node.files, self.node.dirs)
        done = inner.answer(text)
        if done is None:
            raise NotPlain(verb)
        self.out.append(done[0])
        return 0 if verb == "first-touch-list" else done[1]

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


