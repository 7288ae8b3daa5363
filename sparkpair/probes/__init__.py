"""Read-only facts about a node: each probe is a command plus a pure parser.

A probe is identified by what it asks: its kind and its arguments (`net.ping("enp1s0f1np1",
"198.19.1.12")`). Whoever needs a fact builds the same probe again and looks the fact up with it
(`facts.get(net.ping(...))`); no string key is built twice. `gather` runs any number of probes on
one node in a single SSH round trip. Parsers take captured text and are unit-tested from
captured output (tests/fixtures/probes).

Holds the probe model and the batch runner here, and the probes by domain: `net`, `rdma`, `host`,
`memory` (the kernel's memory pressure, the memory guard's state and record), `docker`, `models`, `drafts`
(a trained draft's record), `training` (train-draft's training image and the device torch in it sees), `ranks`,
`ssh`, `prometheus`. May import: only the layers below its own in
pyproject.toml's `[tool.importlinter]` (`transport` and the leaf modules).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sparkpair.errors import ConnectionLost, last_line
from sparkpair.safetext import printable as printable  # a name from a node: no control, separator or bidi mark
from sparkpair.transport import CommandResult, Node, Pair, Shell

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
BATCH_HEAD = "\x1esparkpair-batch"  # the batch's first line; what precedes it (a login's rc files) is not the batch's
SECTION_MARK = "\x1c"  # starts the name line of each section of a probe printing several (files); \034 in the shell
CHANGED = "its output changed while the batch read it (a process it started kept writing); not trusted"
_COUNT = re.compile(r"[0-9]{1,15}")


@dataclass(frozen=True)
class Probe(Generic[T_co]):
    """A read-only question to a node: what it asks (kind and arguments, its identity), the command
    that asks it, and the parser of the command's stdout."""

    kind: str
    args: tuple[Any, ...]
    command: Shell = field(compare=False)
    parse: Callable[[str], T_co] = field(compare=False)
    ok_codes: tuple[int, ...] = field(default=(0,), compare=False)
    waits: bool = field(default=False, compare=False)  # mostly waits on the network (a login, pings): see batch_script

    @property
    def label(self) -> str:
        """What the probe asks, in words: `ping enp1s0f1np1 198.19.1.12 8972`."""
        return " ".join([self.kind, *(str(arg) for arg in self.args if arg is not None)])


@dataclass(frozen=True)
class ProbeFailure:
    """A probe whose command failed; checks report it instead of a fact."""

    name: str
    exit_code: int
    stderr: str

    def __str__(self) -> str:
        return f"{self.name}: {last_line(self.stderr, f'exit {self.exit_code}')}"


class NodeFacts(MutableMapping[Probe[Any], Any]):
    """What one node answered: each probe's parsed value, or its ProbeFailure, looked up by the probe."""

    def __init__(self, values: Mapping[Probe[Any], Any] | None = None) -> None:
        self._values: dict[Probe[Any], Any] = dict(values or {})

    def __getitem__(self, probe: Probe[Any]) -> Any:
        return self._values[probe]

    def __setitem__(self, probe: Probe[Any], value: Any) -> None:
        self._values[probe] = value

    def __delitem__(self, probe: Probe[Any]) -> None:
        del self._values[probe]

    def __iter__(self) -> Iterator[Probe[Any]]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def get(self, probe: Probe[T], default: Any = None) -> T | ProbeFailure | None:
        """The probe's value, its ProbeFailure when the command failed, or None when it was not asked."""
        found: T | ProbeFailure | None = self._values.get(probe, default)
        return found

    def value(self, probe: Probe[T]) -> T | None:
        """The probe's value; None when it failed or was not asked."""
        found = self._values.get(probe)
        return None if isinstance(found, ProbeFailure) else found

    def of_kind(self, kind: str) -> Iterable[tuple[Probe[Any], Any]]:
        """Every (probe, value) of one kind, e.g. all `model` manifests."""
        return [(probe, value) for probe, value in self._values.items() if probe.kind == kind]

    def merged(self, other: Mapping[Probe[Any], Any]) -> NodeFacts:
        """These facts with other's added (other wins for a probe asked twice)."""
        return NodeFacts({**self._values, **other})


def expanded_path(path: str) -> Shell:
    """Shell prefix `p=PATH; ` with a leading ~ expanded to the node's $HOME: later commands use "$p"."""
    return Shell('p={}; case "$p" in "~"*) p="$HOME${p#"~"}";; esac; ', path)



def batch_script(probes: Sequence[Probe[Any]]) -> Shell:
    """One shell script running every probe concurrently, then printing every answer, framed out of band.

    Each probe's stdout and stderr go to files of their own. When all have ended the batch prints, in
    this order: BATCH_HEAD and every probe's exit code (one line), each file's size in bytes (`stat`),
    a US line, every file's bytes base64-encoded (one `cat | base64`), a GS line, and each file's size again.
    No byte a probe prints reaches the stream unencoded, so none can forge a record, a size or another
    probe's answer (a process name in `ss` output, a log line); a file whose size changed between the
    two `stat`s (a probe left a writer behind) is known, and that record and the later ones are lost,
    never misread (`parse_batch`). Four forks in all (two `stat`, `cat`, `base64`): a fork per probe
    for the framing alone cost a busy node about 0.15 s per round (doctor runs 26 probes per node).

    The probes that mostly wait on the network (`waits`: the login to the peer, the pings) start
    first; then the batch's shell lowers its own priority (`renice -n 10`), so every probe started
    after them runs at nice 10. On a node whose CPUs are busy (the round's own probes, or a serving
    engine) a waiting probe then gets the CPU the moment its answer arrives instead of queueing
    behind the heavy ones, and the round no longer ends with the login's tail: doctor went from
    0.80 s to 0.70 s on the simulated pair. With idle cores (a real Spark's 20) nothing changes.
    """
    parts = [Shell("d=$(mktemp -d) || exit 97; trap 'rm -rf \"$d\"' EXIT")]
    waiting = [index for index, probe in enumerate(probes) if probe.waits]
    rest = [index for index, probe in enumerate(probes) if not probe.waits]
    starts = [_start(index, probes[index]) for index in waiting]
    if waiting and rest:
        starts.append(Shell("renice -n 10 -p $$ >/dev/null 2>&1"))
    parts += starts + [_start(index, probes[index]) for index in rest]
    parts += [Shell(f"wait $p{index}; c{index}=$?") for index in range(len(probes))]
    codes = " ".join(f"$c{index}" for index in range(len(probes)))
    files = " ".join(f'"$d/{index}.o" "$d/{index}.e"' for index in range(len(probes)))
    parts.append(Shell(f"printf '\\036sparkpair-batch %s\\n' \"{codes}\""))
    if probes:
        parts.append(Shell(f"stat -c %s {files}; printf '\\037\\n'; cat {files} | base64; printf '\\035\\n'; "
                           f"stat -c %s {files}"))
    return Shell.compose(parts, "\n")


def _start(index: int, probe: Probe[Any]) -> Shell:
    """The batch line starting probe number index in the background, its output in "$d/INDEX.o/.e"."""
    return Shell.compose([
        Shell("( "), probe.command, Shell(f' ) >"$d/{index}.o" 2>"$d/{index}.e" </dev/null & p{index}=$!'),
    ], "")


def parse_batch(text: str) -> dict[int, tuple[int, str, str]]:
    """Split a batch's stdout (`batch_script`) into probe index -> (exit code, stdout, stderr).

    Empty when the framing is not whole: no header, a code or size that is not a number, counts that do
    not agree, a body that is not base64 or not exactly as long as the sizes say (a cut stream). A probe
    whose output changed while the batch read it, and every one after it, get exit 255 and CHANGED."""
    start = text.find(BATCH_HEAD)
    if start < 0:
        return {}
    header, newline, rest = text[start + len(BATCH_HEAD):].partition("\n")
    before_text, unit, rest = rest.partition("\x1f\n")
    encoded, group, after_text = rest.partition("\x1d\n")
    codes, before, after = header.split(), _counts(before_text), _counts(after_text)
    if not (codes and newline and unit and group) or not all(_COUNT.fullmatch(code) for code in codes):
        return {}
    if before is None or after is None or not len(before) == len(after) == 2 * len(codes):
        return {}
    try:
        data = base64.b64decode(encoded.replace("\n", ""), validate=True)
    except ValueError:
        return {}
    results: dict[int, tuple[int, str, str]] = {}
    offset = 0
    for index, code in enumerate(codes):
        out_size, err_size = before[2 * index:2 * index + 2]
        if [out_size, err_size] != after[2 * index:2 * index + 2]:
            return {**results, **{later: (255, "", CHANGED) for later in range(index, len(codes))}}
        out_end, end = offset + out_size, offset + out_size + err_size
        results[index] = (int(code), data[offset:out_end].decode(errors="replace"),
                          data[out_end:end].decode(errors="replace"))
        offset = end
    return results if offset == len(data) else {}


def _counts(text: str) -> list[int] | None:
    """The whitespace-separated decimal numbers text holds; None when it holds anything else."""
    words = text.split()
    return [int(word) for word in words] if all(_COUNT.fullmatch(word) for word in words) else None


def section(name: str, command: str | None = None) -> str:
    """Shell text printing one section of a probe's output that holds several (files, usually): a line of
    SECTION_MARK and name (a shell word, `"$f"`, expanded on the node), then command's stdout base64-encoded.

    So no byte of a file can end its section or start another (a log line, a netplan file); a name
    holding a newline is skipped, with a line on stderr. Without command: an empty section. Costs one
    `base64` fork per section. `parse_sections` reads them back; `format_sections` is its inverse."""
    body = "" if command is None else f"{{ {command}; }} | base64"
    return (f"case {name} in *'\n'*) echo 'skipped a name holding a newline' >&2;; "
            f"*) printf '\\034%s\\n' {name}; {body or ':'};; esac")


def parse_sections(text: str) -> dict[str, str]:
    """The sections `section` printed: name -> content (UTF-8; bytes that are not, replaced), in order.

    Raises ValueError for anything else: output before the first name, a line of neither, a name given
    twice, base64 that does not decode. Names are as the node spelled them: the caller checks them."""
    encoded: dict[str, list[str]] = {}
    lines: list[str] | None = None
    for line in text.split("\n"):
        if line.startswith(SECTION_MARK):
            name = line[len(SECTION_MARK):]
            if name in encoded:
                raise ValueError(f"the section {name!r} is given twice")
            lines = encoded[name] = []
        elif line:
            if lines is None:
                raise ValueError("output before the first section")
            lines.append(line)
    return {name: _decoded(name, lines) for name, lines in encoded.items()}


def _decoded(name: str, lines: list[str]) -> str:
    try:
        return base64.b64decode("".join(lines), validate=True).decode(errors="replace")
    except ValueError as error:
        raise ValueError(f"the section {name!r} is not base64 ({error})") from None


def format_sections(sections: Mapping[str, str]) -> str:
    """What `section` prints for each (name, content): the inverse of `parse_sections` (tests, fixtures)."""
    return "".join(f"{SECTION_MARK}{name}\n{base64.encodebytes(content.encode()).decode()}"
                   for name, content in sections.items())


def judge(probe: Probe[T], code: int, stdout: str, stderr: str) -> T | ProbeFailure:
    """A probe's fact from its command's outcome: the parsed stdout, or a ProbeFailure."""
    if code not in probe.ok_codes:
        return ProbeFailure(probe.label, code, stderr or stdout)
    try:
        return probe.parse(stdout)
    except (ValueError, KeyError, IndexError, TypeError) as error:
        return ProbeFailure(probe.label, code, f"unexpected output ({error})")


ROUND_CAP = 64 << 20  # the most a probe round prints, base64 of every probe's output (two model listings at
#                       their own cap, models.LISTING_CAP, base64 twice: 56 MiB); doctor's is about 0.2 MiB


def gather(connection: Node, probes: Sequence[Probe[Any]], timeout: float = 60, cap: int = ROUND_CAP) -> NodeFacts:
    """Run probes on one node in one round trip, read within timeout seconds and cap bytes; each probe maps to its
    fact or a ProbeFailure (every one, when the round outlived either)."""
    unique = list(dict.fromkeys(probes))
    script = batch_script(unique)
    try:
        result = connection.run(script, timeout=timeout, cap=cap)
    except ConnectionLost:
        # The connection was open and ended under the round (seen on the simulated pair: the node's sshd
        # closed a fresh connection while its first channels opened). A fact about the transport: asked
        # once more on a new connection; a node that drops it again is reported unreachable.
        result = connection.run(script, timeout=timeout, cap=cap)
    raw = parse_batch(result.stdout)
    if not raw and not result.ok and not result.timed_out and not result.over_cap:
        # Not one probe answered and the round did not time out: its session died before any probe ran
        # (seen on the simulated pair under load: no output, no exit status). A fact about the transport,
        # not the node: asked once more before every probe is reported as failed.
        result = connection.run(script, timeout=timeout, cap=cap)
        raw = parse_batch(result.stdout)
    missing = (result.exit_code or 255, "", round_lost(result, timeout))
    return NodeFacts({probe: judge(probe, *raw.get(index, missing)) for index, probe in enumerate(unique)})


def round_lost(result: CommandResult, timeout: float) -> str:
    """Why a probe has no answer of its own: the round did not finish in time, printed more than its cap, or
    ended without the probe's record (its last words, else its exit code)."""
    if result.timed_out:
        return f"the node's probe round did not finish within {timeout:.0f} s"
    if result.over_cap:
        return f"the node's probe round {result.stderr}"
    return result.stderr.strip() or f"the node's probe round ended without this probe's answer (exit {result.exit_code})"


def gather_pair(pair: Pair, probes: Sequence[Probe[Any]]) -> dict[str, NodeFacts]:
    """`gather` on both nodes at once (one round trip each); a node's exception (unreachable) raises."""
    return dict(pair.each(lambda connection: gather(connection, probes)).raise_failures().values)
