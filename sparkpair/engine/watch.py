"""The launch watchdog: where each rank is, whether it still moves, and when a start has stalled.

Each poll asks every rank node once (one SSH round trip per node, both at once) for its rank's
processes (CPU time, resident memory, reads of the model files, run state), the GPU memory of
compute processes, and what the rank printed since the last poll (Open MPI writes a rank's output
files on the rank's own node). A rank's
stage comes from its own output (`engine.stages`, the classifier's judge). A rank progresses when it
prints something new (a line that only repeats an earlier one but for its numbers, as a retry loop
does, stops counting after its third time), its memory grows, it reads the model files, or, in the stages where it works alone
(start-up, loading, warm-up, executor start), its CPU time grows; while the ranks wait on each other
(MPI start, the MPI session, NCCL init) a spinning wait is no progress. A start has stalled when
every rank has gone without progress for the stall limit of the stage it is in: a rank waiting for
a peer that still loads is not stalled, since the peer progresses. Pure apart from `Watchdog.poll`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from sparkpair import probes, registry
from sparkpair.engine import memguard, stages
from sparkpair.linepattern import LinePattern
from sparkpair.probes import ProbeFailure, host, ranks
from sparkpair.probes.models import RepoManifest
from sparkpair.progress import Event, Progress
from sparkpair.runtimes import Runtime, runtime_named
from sparkpair.transport import Node, Pair

STARTING = stages.Stage("start", "the engine is starting the ranks; they have printed nothing yet",
                        LinePattern.compile(r"(?!)"), "start", 180.0, alone=False)


def limits_of(runtime: Runtime) -> dict[str, float]:
    """Seconds each stage of the runtime's start may go without any progress signal (its StageSpec.limit_s;
    docs/runbooks.md#launch-stalled explains each), the engine's first output included (STARTING)."""
    return {STARTING.name: STARTING.limit_s, **{stage.name: stage.limit_s for stage in stages.of_runtime(
        runtime.name).stages}}


def every_stage_limit() -> dict[str, float]:
    """Every stage name of every runtime with its limit (the first runtime's for a name two share): the stages
    --stall-after accepts when it is not told the runtime. A start is judged by its own runtime's (limits_of)."""
    limits: dict[str, float] = {}
    for name in registry.NAMES:
        for stage, limit in limits_of(runtime_named(name)).items():
            limits.setdefault(stage, limit)
    return limits


DEFAULT_LIMITS = every_stage_limit()
MEMORY_STEP = 1 << 20      # growth that counts as progress
CPU_STEP = 0.5             # CPU seconds that count as progress
SHOW_SILENCE_AFTER = 20.0  # a rank's line says how long nothing moved once it is this long
REPEATS_ARE_NOT_PROGRESS = 3  # a line shape printed this often before is a loop (a retry), not progress
SHAPES_KEPT = 1024         # distinct line shapes remembered per rank (then forgotten all at once)


def line_shape(line: str) -> str:
    """The line with every word that holds a digit replaced by `#`: a retry loop's lines (timestamps, attempt
    counters, addresses, ports) all have one shape. Linear: one split, one pass per word."""
    return " ".join("#" if any(char.isdigit() for char in word) else word for word in line.split())


def parse_stall_after(text: str, known: dict[str, float] | None = None) -> dict[str, float]:
    """`--stall-after`: SECONDS for every stage, and/or STAGE=SECONDS for some (`600`, `nccl=60,warmup=3600`), the
    stages of known (a runtime's `limits_of`; default: every runtime's, DEFAULT_LIMITS).

    Raises ValueError naming what is wrong."""
    known = DEFAULT_LIMITS if known is None else known
    limits: dict[str, float] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, _, value = item.rpartition("=")
        try:
            seconds = float(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a number of seconds") from None
        if not 0 < seconds <= 86400:
            raise ValueError(f"{value} s: a stall limit is between 1 and 86400 seconds")
        if name and name not in known:
            raise ValueError(f"no stage {name!r}; stages: {', '.join(known)}")
        limits.update({name: seconds} if name else dict.fromkeys(known, seconds))
    return limits


def weight_bytes(manifest: RepoManifest) -> int:
    """Bytes of a repo's weights (its .safetensors files) in the cache."""
    return sum(manifest.blobs.get(blob, 0) for path, blob in manifest.files.items() if path.endswith(".safetensors"))


def expected_bytes(target: RepoManifest, draft: RepoManifest | None, ranks: int) -> int:
    """What one rank holds once loaded: its share of the target's weights (split tp_size x pp_size ways: a
    tensor slice of its pipeline stage's layers) and the whole draft head."""
    return weight_bytes(target) // max(1, ranks) + (weight_bytes(draft) if draft else 0)


def size(value: float) -> str:
    return f"{value / 2**30:.1f} GiB" if value >= 2**30 else f"{value / 2**20:.1f} MiB"


@dataclass
class RankWatch:
    """One rank as the watchdog follows it: its output so far, its process facts, its last progress."""

    node: str
    rank: int | None                 # None: a one-node engine (no MPI ranks)
    files: tuple[str, ...]           # its output files in its node's engine container
    expected: int                    # bytes it holds once loaded (0: unknown)
    last_progress: float
    start: stages.StartStages = field(default_factory=lambda: stages.of_runtime(registry.DEFAULT))  # its runtime's
    offsets: dict[str, int] = field(default_factory=dict)
    partial: dict[str, str] = field(default_factory=dict)
    where: stages.Position | None = None
    cpu_s: float = 0.0
    memory: int = 0
    reads: dict[str, int] = field(default_factory=dict)
    processes: int = 0
    stopped: bool = False
    base_cpu: float = 0.0
    base_memory: int | None = None
    base_reads: int = 0
    floor: int | None = None         # memory as the weights began to load (the first poll that saw it)
    floor_set: bool = False
    moved: str = ""
    shapes: dict[str, int] = field(default_factory=dict)  # line shape -> times printed (see `line_shape`)

    @property
    def stage(self) -> stages.Stage:
        return self.where.current if self.where else STARTING

    @property
    def model_read(self) -> int:
        return sum(self.reads.values())

    @property
    def loaded(self) -> int:
        """Memory grown since just before the weights began to load."""
        return max(0, self.memory - (self.floor if self.floor is not None else self.memory))

    @property
    def name(self) -> str:
        return f"{self.node} (rank {self.rank})" if self.rank is not None else self.node

    def silent_for(self, now: float) -> float:
        return max(0.0, now - self.last_progress)

    def offsets_asked(self) -> tuple[tuple[str, int], ...]:
        return tuple((path, self.offsets.get(path, 0)) for path in self.files)

    def observe(self, output: dict[str, ranks.OutputChunk] | None, processes: list[ranks.RankProcess] | None,
                gpu_bytes: int, now: float) -> None:
        """Take in one poll's facts (None: not asked or not answered) and note whether the rank progressed."""
        printed = self._read_output(output or {})
        if processes is not None:
            self.processes = len(processes)
            self.stopped = any(process.stopped for process in processes)
            self.cpu_s = sum(process.cpu_s for process in processes)
            self.memory = sum(process.rss for process in processes) + (gpu_bytes if processes else 0)
            for process in processes:
                for path, done in {**process.files, **process.mapped}.items():
                    self.reads[path] = max(self.reads.get(path, 0), done)
            if processes and not self.floor_set:  # frozen at the first poll that sees the weights loading
                self.floor = self.memory
                self.floor_set = self.start.index(self.stage.name) >= self.start.index("model")
        moved = ["output"] if printed else []
        if self.base_memory is None:
            self.base_memory = self.memory
        if self.memory >= self.base_memory + MEMORY_STEP:
            moved.append("memory")
        if self.model_read > self.base_reads:
            moved.append("model reads")
        if self.stage.alone and self.cpu_s >= self.base_cpu + CPU_STEP:
            moved.append("CPU")
        self.base_memory = min(self.base_memory, self.memory)
        if moved:
            self.last_progress, self.moved = now, ", ".join(moved)
            self.base_cpu, self.base_memory, self.base_reads = self.cpu_s, self.memory, self.model_read

    def _read_output(self, output: dict[str, ranks.OutputChunk]) -> bool:
        printed = False
        for path in self.files:
            chunk = output.get(path)
            if chunk is None or chunk.size < 0:
                continue
            if chunk.size < self.offsets.get(path, 0):  # a new file (a new start): read it from the top
                self.offsets[path], self.partial[path] = 0, ""
            if not chunk.data:
                continue
            self.offsets[path] = min(chunk.size, self.offsets.get(path, 0) + ranks.OUTPUT_LIMIT)
            pieces = (self.partial.get(path, "") + chunk.data).split("\n")
            self.partial[path] = pieces.pop()
            lines = stages.clean_lines("\n".join(pieces))
            self.where = self.start.advance(self.where, lines + stages.clean_lines(self.partial[path]))
            printed = self._something_new(lines + stages.clean_lines(self.partial[path])) or printed
        return printed

    def _something_new(self, lines: list[str]) -> bool:
        """Whether lines hold output that is not a loop repeating itself: a worker retrying its master forever
        prints every few seconds, and that alone must not keep a start from being called stalled."""
        if len(self.shapes) > SHAPES_KEPT:
            self.shapes.clear()
        new = False
        for line in lines:
            shape = line_shape(line)
            if not shape:
                continue
            seen = self.shapes.get(shape, 0)
            self.shapes[shape] = seen + 1
            new = new or seen < REPEATS_ARE_NOT_PROGRESS
        return new


@dataclass(frozen=True)
class Stall:
    """A start that stopped moving: the stage and rank furthest behind, and every rank's state."""

    stage: stages.Stage
    where: str                       # "spark-b (rank 1)"
    seconds: float                   # how long the furthest-behind rank has been without progress
    limit: float
    ranks: tuple[str, ...]           # each rank in words

    @property
    def label(self) -> str:
        return self.stage.label

    def detail(self) -> str:
        cpu = "" if self.stage.alone else "; CPU time does not count while ranks wait on each other"
        return (f"no progress for {self.seconds:.0f} s in {self.label} ({self.stage.description}) on {self.where}: "
                f"no new output, no memory growth, no reads of the model files{cpu} "
                f"(stall limit for {self.label}: {self.limit:.0f} s; --stall-after changes it). "
                + "; ".join(self.ranks))


def stalled(watched: list[RankWatch], limits: dict[str, float], now: float) -> Stall | None:
    """The stall, when every rank has gone without progress for at least its stage's limit."""
    if not watched or any(rank.silent_for(now) < limits[rank.stage.name] for rank in watched):
        return None
    behind = min(watched, key=lambda rank: (rank.start.index(rank.stage.name), -rank.silent_for(now)))
    states = tuple(f"{rank.name}: {rank.stage.label}, nothing moved for {rank.silent_for(now):.0f} s"
                   + (", stopped (SIGSTOP)" if rank.stopped else "") for rank in watched)
    return Stall(behind.stage, " and ".join(rank.name for rank in watched), behind.silent_for(now),
                 limits[behind.stage.name], states)


def describe(rank: RankWatch, limits: dict[str, float], now: float) -> str:
    """One rank's live line: stage, memory against what it will hold, model reads, CPU time."""
    label = f"rank {rank.rank}" if rank.rank is not None else "engine"
    text = f"{label} {rank.stage.label}: "
    if not rank.processes:
        text += "no rank process yet"
    else:
        share = f" ({100 * rank.loaded / rank.expected:.0f} %)" if rank.expected else ""
        of = f" of {size(rank.expected)}" if rank.expected else ""
        text += (f"{size(rank.loaded)}{of} loaded{share}, {size(rank.model_read)} read from the model files, "
                 f"CPU {rank.cpu_s:.0f} s")
    if rank.stopped:
        text += ", stopped (SIGSTOP)"
    silent = rank.silent_for(now)
    if silent >= SHOW_SILENCE_AFTER:
        text += f", nothing moved for {silent:.0f} s (limit {limits[rank.stage.name]:.0f} s)"
    return text


class Watchdog:
    """Polls the ranks of one start, reports one live line per node, and says when the start stalled."""

    def __init__(self, pair: Pair, container: str, nodes: list[str], model_root: str, rank_files: list[list[str]],
                 expected: dict[str, int], limits: dict[str, float], progress: Progress, runtime: Runtime,
                 floor: int = 0) -> None:
        now = time.monotonic()
        self.pair, self.container, self.nodes, self.model_root = pair, container, nodes, model_root
        self.limits = {**limits_of(runtime), **limits}
        self.progress = progress
        self.finished = False
        self.stall: Stall | None = None  # the stall poll last found: its seconds are the watch's own clock
        self.floor = floor  # bytes of MemAvailable the memory guard keeps: a load that would end under it stops now
        start = stages.of_runtime(runtime.name)
        self.pattern = runtime.process_pattern
        self.ranks = [RankWatch(node, index if len(nodes) > 1 else None, tuple(rank_files[index]),
                                expected.get(node, 0), now, start) for index, node in enumerate(nodes)]

    def poll(self) -> Stall | memguard.Overshoot | None:
        """Ask both nodes once, update every rank, report, and return the stall if the start stalled, or the load
        that would take a node's MemAvailable under the memory guard's floor."""
        answers = self.pair.each(self._ask, names=self.nodes)
        now = time.monotonic()
        if self.finished:  # the wait ended while this poll was under way (it runs beside readiness polling)
            return None
        for rank in self.ranks:
            facts = answers.values.get(rank.node)
            output = facts.value(ranks.output(self.container, rank.offsets_asked())) if facts else None
            found = facts.get(ranks.processes(self.container, self.model_root, self.pattern)) if facts else None
            gpu = facts.value(ranks.COMPUTE_APPS) if facts else None
            rank.observe(output, None if isinstance(found, ProbeFailure) else found, sum((gpu or {}).values()), now)
            self.progress(Event(rank.node, describe(rank, self.limits, now), key=f"engine {rank.node}"))
        meminfo = {name: facts.value(host.MEMINFO) for name, facts in answers.values.items()}
        available = {name: found.get("MemAvailable", 0) * 1024 for name, found in meminfo.items() if found}
        loading = {rank.node: (rank.loaded, rank.expected) for rank in self.ranks if rank.processes}
        over = memguard.overshoot(loading, available, self.floor) if self.floor else None
        self.stall = stalled(self.ranks, self.limits, now)
        return over or self.stall

    def finish(self, outcome: str) -> None:
        """Close every rank's live line with how the start ended (ready: what it loaded, in all)."""
        self.finished = True
        now = time.monotonic()
        for rank in self.ranks:
            label = f"rank {rank.rank}" if rank.rank is not None else "engine"
            text = (f"{label} {outcome}: {size(rank.loaded)} loaded, {size(rank.model_read)} read from the model files, "
                    f"CPU {rank.cpu_s:.0f} s" if outcome == "ready" else f"{describe(rank, self.limits, now)}; {outcome}")
            self.progress(Event(rank.node, text, key=f"engine {rank.node}", done=1, total=1))

    def _ask(self, connection: Node) -> probes.NodeFacts:
        asked: list[probes.Probe[object]] = [ranks.processes(self.container, self.model_root, self.pattern),
                                             ranks.COMPUTE_APPS, host.MEMINFO]
        asked += [ranks.output(self.container, rank.offsets_asked()) for rank in self.ranks
                  if rank.node == connection.name]
        return probes.gather(connection, asked, timeout=30)
