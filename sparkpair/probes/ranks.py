"""The engine's ranks as a node sees them: their processes (CPU time, memory, reads of the model
files, run state), their output files, and the GPU memory of compute processes.

Process facts are read inside the engine container (`docker exec`, as the container's root: it
may read its processes' fd positions and mappings, which the login user may not on the node).
A rank process is one whose command line the runtime's `process_pattern` finds (TensorRT-LLM's
`trtllm-serve`, `trtllm-llmapi-launch`, a `tensorrt_llm` module, mpi4py's worker server; vLLM's
`vllm serve` and its `VLLM::` engine core and workers), not the shells and MPI daemons around it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkpair import boundedjson
from sparkpair.probes import Probe, parse_sections, section
from sparkpair.transport import Shell

# Runs inside the container with the image's python3; prints one JSON list. Only facts leave it:
# no command lines (they may carry anything the operator typed).
PROCESS_SCRIPT = r"""
import json, os, re, sys
root = sys.argv[1].rstrip("/") + "/"
engine = re.compile(sys.argv[2])
around = {"sh", "bash", "dash", "mpirun", "mpiexec", "orterun", "orted", "prted", "prterun", "ssh", "sshd",
          "timeout", "tail", "docker"}
tick = os.sysconf("SC_CLK_TCK")
found = []
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    base = "/proc/" + pid
    try:
        argv = open(base + "/cmdline", "rb").read().split(b"\0")
        text = b" ".join(argv).decode("utf-8", "replace")
        if not engine.search(text) or os.path.basename(argv[0].decode("utf-8", "replace")) in around:
            continue
        fields = open(base + "/stat").read().rsplit(")", 1)[1].split()
        rss = 0
        for line in open(base + "/status"):
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
        files, mapped, current = {}, {}, None
        for fd in os.listdir(base + "/fd"):
            try:
                target = os.readlink(base + "/fd/" + fd)
                if target.startswith(root):
                    for line in open(base + "/fdinfo/" + fd):
                        if line.startswith("pos:"):
                            files[target] = max(files.get(target, 0), int(line.split()[1]))
            except OSError:
                continue
        try:
            for line in open(base + "/smaps"):
                if line[:1].isdigit() or line[:1] in "abcdef":
                    parts = line.split(None, 5)
                    current = parts[5].strip() if len(parts) == 6 and parts[5].startswith(root) else None
                elif current and line.startswith("Rss:"):
                    mapped[current] = mapped.get(current, 0) + int(line.split()[1]) * 1024
        except OSError:
            pass
        found.append({"pid": int(pid), "state": fields[0], "cpu": (int(fields[11]) + int(fields[12])) / tick,
                      "rss": rss, "files": files, "mapped": mapped})
    except (OSError, IndexError, ValueError):
        continue
print(json.dumps(found))
"""


@dataclass(frozen=True)
class RankProcess:
    """One process of a rank: its run state (R, S, D, T, Z...), CPU seconds, resident bytes, and how
    far it read each model file it has open (file offset) or mapped (resident bytes of the mapping)."""

    pid: int
    state: str
    cpu_s: float
    rss: int
    files: dict[str, int] = field(default_factory=dict)
    mapped: dict[str, int] = field(default_factory=dict)

    @property
    def stopped(self) -> bool:
        """Stopped by a signal (SIGSTOP) or a tracer: alive but not running."""
        return self.state in ("T", "t")


def parse_processes(text: str) -> list[RankProcess]:
    """Parse the container script's JSON list (empty when no rank process runs)."""
    items = boundedjson.loads(text or "[]")
    return [RankProcess(int(item["pid"]), str(item["state"]), float(item["cpu"]), int(item["rss"]),
                        {str(k): int(v) for k, v in item.get("files", {}).items()},
                        {str(k): int(v) for k, v in item.get("mapped", {}).items()}) for item in items]


# TensorRT-LLM's ranks (runtimes.trtllm.TensorRtLlm.process_pattern; a default for callers that name none).
ENGINE_PATTERN = r"trtllm-serve|trtllm-llmapi-launch|tensorrt_llm|mpi4py"


def processes(container: str, model_root: str, pattern: str = ENGINE_PATTERN) -> Probe[list[RankProcess]]:
    """The engine's rank processes in container (a process whose command line the regex pattern finds, its
    runtime's `process_pattern`); reads are counted for files under model_root (the HF cache as the
    container mounts it)."""
    return Probe("rank processes", (container, model_root, pattern),
                 Shell("docker exec {} python3 -c {} {} {}", container, PROCESS_SCRIPT, model_root, pattern),
                 parse_processes)


@dataclass(frozen=True)
class OutputChunk:
    """What one output file holds past an offset: its size now, and up to a limit of its new bytes."""

    size: int          # -1 when the file does not exist (yet)
    data: str


def parse_output(text: str) -> dict[str, OutputChunk]:
    """Parse the sections (`probes.section`) named `PATH SIZE`, each holding that file's new bytes."""
    chunks = {}
    for header, data in parse_sections(text).items():
        path, _, size = header.rpartition(" ")
        if path:
            chunks[path] = OutputChunk(int(size) if size.lstrip("-").isdigit() else -1, data)
    return chunks


OUTPUT_LIMIT = 262144  # bytes of one output file read per poll


def output(container: str, offsets: tuple[tuple[str, int], ...],
           limit: int = OUTPUT_LIMIT) -> Probe[dict[str, OutputChunk]]:
    """The size of each output file in container and at most limit bytes of it from its offset on (the next
    offset is min(size, offset + limit): a character cut at the limit is read as two halves)."""
    parts = [Shell('for a in "$@"; do f=${a%:*}; o=${a##*:}; s=$(stat -c %s "$f" 2>/dev/null || echo -1); '
                   + section('"$f $s"', '[ "$s" -gt "$o" ] && tail -c +$((o + 1)) "$f" | head -c {}')
                   + "; done; true", str(int(limit)))]
    script = Shell.compose(parts, "").text
    argv = [f"{path}:{int(offset)}" for path, offset in offsets]
    command = Shell("docker exec {} sh -c {} sh" + " {}" * len(argv), container, script, *argv)
    return Probe("rank output", (container, offsets, limit), command, parse_output)


def parse_compute_apps(text: str) -> dict[int, int]:
    """Parse `nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits`: pid -> bytes."""
    used = {}
    for line in text.splitlines():
        pid, _, mib = line.partition(",")
        if pid.strip().isdigit() and mib.strip().isdigit():
            used[int(pid)] = int(mib) * 2**20
    return used


COMPUTE_APPS = Probe("gpu compute apps", (), Shell(
    "nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits"), parse_compute_apps)
