"""A log's text, cut into lines once and searched by word: the lines a `linepattern.LinePattern` can match.

Pure. `diagnose` tries about a hundred patterns on every log; tried line by line that is a hundred quick
tests per line (8 MiB of empty lines took 138 s), and one `str.find` per word over the whole text still
costs about 190 passes (2 s for 8 MiB here). Here every word of every pattern (`LinePattern.words`, one
of which every line a pattern matches holds) is found in one pass over the folded text with an
Aho-Corasick automaton (pyahocorasick), and only the lines holding a word are searched: the cost follows
the text's length and the lines that hold a word, whatever the number of lines or patterns.

A line is what `stages.clean_lines` makes of the text (terminal colour codes removed, cut where
`str.splitlines` cuts, at most `MAX_LINE` characters) and is known by the offset where it starts, so
offsets sort in log order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache
from typing import Any

from sparkpair.engine.stages import ANSI_ESCAPE
from sparkpair.linepattern import LinePattern, fold

MAX_LINE = 4096   # as stages.clean_lines: the longest line a pattern sees
_BREAKS = re.compile("[\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")   # every str.splitlines break but \n (\r\n first)


@cache
def _automaton(words: tuple[str, ...]) -> Any:
    """The Aho-Corasick automaton that finds every one of words (lowercase) in one pass."""
    import ahocorasick

    automaton = ahocorasick.Automaton()
    for word in words:
        automaton.add_word(word, word)
    automaton.make_automaton()
    return automaton


class LogLines:
    """The lines of one log text, found by the words they hold (words: the ones looked up most, found in
    one pass; any other word is found with str.find when asked)."""

    def __init__(self, text: str, words: Iterable[str] = ()) -> None:
        if "\x1b" in text:
            text = ANSI_ESCAPE.sub("", text)
        if _BREAKS.search(text):
            text = text.replace("\r\n", "\n").translate({ord(char): "\n" for char in "\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"})
        self.text = text
        self.folded = fold(text)   # same length as text: offsets agree
        self._by_word: dict[str, list[int]] = {}
        known = tuple(sorted({word for word in words if word}))
        if known:
            self._scan(known)

    def _scan(self, words: tuple[str, ...]) -> None:
        found: dict[str, list[int]] = {word: [] for word in words}
        folded = self.folded
        for end, word in _automaton(words).iter(folded):
            starts = found[word]
            start = folded.rfind("\n", 0, end) + 1
            if not starts or starts[-1] != start:
                starts.append(start)
        self._by_word.update(found)

    def starts_holding(self, word: str) -> list[int]:
        """The offsets of the lines whose folded text holds word (lowercase), in log order."""
        found = self._by_word.get(word)
        if found is not None:
            return found
        found, folded, at = [], self.folded, self.folded.find(word)
        while at >= 0:
            found.append(folded.rfind("\n", 0, at) + 1)
            end = folded.find("\n", at)
            at = -1 if end < 0 else folded.find(word, end + 1)
        self._by_word[word] = found
        return found

    def candidates(self, pattern: LinePattern) -> list[int]:
        """The lines pattern may match: those holding one of its words (every line when it has none)."""
        if not pattern.words:
            return self.every()
        if len(pattern.words) == 1:
            return self.starts_holding(pattern.words[0])
        return sorted({start for word in pattern.words for start in self.starts_holding(word)})

    def matching(self, pattern: LinePattern) -> list[int]:
        """The lines pattern matches, in log order (identical lines are searched once)."""
        seen: dict[str, bool] = {}
        found = []
        search = pattern.regex.search   # a candidate holds one of the words: the quick test is done
        for start in self.candidates(pattern):
            line = self.line(start)
            hit = seen.get(line)
            if hit is None:
                hit = seen[line] = search(line) is not None
            if hit:
                found.append(start)
        return found

    def last_matching(self, pattern: LinePattern) -> int | None:
        """The last line pattern matches (None when none does), searched from the end."""
        search = pattern.regex.search
        return next((start for start in reversed(self.candidates(pattern)) if search(self.line(start))), None)

    def every(self) -> list[int]:
        """The offset of every line (one Python step per line: only for a pattern without words)."""
        starts, at = [0], self.text.find("\n")
        while at >= 0:
            starts.append(at + 1)
            at = self.text.find("\n", at + 1)
        return starts

    def line(self, start: int) -> str:
        """The line that starts at offset start, cut to MAX_LINE characters."""
        end = self.text.find("\n", start, start + MAX_LINE + 1)
        return self.text[start:end] if end >= 0 else self.text[start:start + MAX_LINE]

    def before(self, start: int, count: int) -> list[int]:
        """The offsets of at most count lines just above the line at start, in log order."""
        starts: list[int] = []
        while start > 0 and len(starts) < count:
            start = self.text.rfind("\n", 0, start - 1) + 1
            starts.append(start)
        return starts[::-1]

    def last_lines(self, count: int) -> list[int]:
        """The offsets of the last count lines that hold more than whitespace, last first."""
        starts: list[int] = []
        end = len(self.text.rstrip())
        while end > 0 and len(starts) < count:
            start = self.text.rfind("\n", 0, end) + 1
            if self.text[start:end].strip():
                starts.append(start)
            end = start - 1
        return starts
