"""`sparkpair bundle`: one tar.gz of what a maintainer asks for, from both nodes, read-only and at once.

Per node, in one round trip each (both nodes in parallel): versions (DGX OS, kernel, driver, Docker,
the engine image's ID and digests, and what the image says of its TensorRT-LLM, NCCL, UCX, Open MPI
and CUDA: asked in the running engine container, else in a throwaway `docker run --rm` of the image;
`unknown` when it cannot tell), `dmesg` lines of NVRM, AER and the OOM killer, memory, links and
RDMA (`ip -j`, `ethtool`, `ibdev2netdev`, `rdma link`), `nvidia-smi`, the netplan files, `docker
inspect` and `docker logs` of the engine container, the memory guard's log and stop record, the kernel's memory
pressure, sparkpair's rendered config on the node, the
launch state (head), and the ranks' output: the running container's and the last failed launch's
(kept by launch). Then doctor's findings, the lock (`sparkpair.lock`, as validated and written again: never
the raw file) with `sparkpair diff`'s JSON (`diff.json`, and `diff-lock.json` against the lock), and the
inventory file. Never read: sparkpair's secrets
directory and ~/.ssh. Every file goes through `engine.redact` (the operator's HF token as well as
anything that looks like a secret); `MANIFEST.txt` lists every file, where it came from, and what
was redacted, and what could not be collected and why.

Files that come several to a probe (a directory's) are framed by `probes.section`: no byte of a file can
name another. Every member name is a plain relative path (`member_path`); a name that is not (absolute,
`..`, a control character) is left out and MANIFEST.txt says so. The archive is written to a new 0600
file beside --out (O_EXCL, O_NOFOLLOW) and renamed over it: an existing file or symlink there is replaced,
never written through.
"""

from __future__ import annotations

import io
import os
import secrets
import tarfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sparkpair import __version__, paths, probes
from sparkpair.engine import credentials
from sparkpair.engine.redact import redact
from sparkpair.errors import SparkpairError
from sparkpair.inventory import Inventory, hftoken
from sparkpair.probes import Probe, ProbeFailure, expanded_path, parse_sections, printable, section
from sparkpair.progress import Event, Progress
from sparkpair.render import recipe
from sparkpair.safetext import visible
from sparkpair.transport import Node, Pair, Shell, root

FILE_LIMIT = 8 << 20                 # bytes kept of one file (its end: a log's last part)
TREE_LIMIT = 32 << 20                # bytes of one directory's files (each at most FILE_LIMIT); the rest is skipped
ROUND_CAP = 192 << 20                # the most one node's round prints (three trees and the logs, base64-encoded)
ROUND_TIMEOUT_S = 300.0
DMESG = r"NVRM|AER|[Oo]ut of memory|oom-kill|oom_reaper|Killed process|Memory cgroup out of memory"
NEVER = (paths.SECRETS_DIR + " (the HF token)", "~/.ssh (keys)", "private keys, tokens and passwords anywhere")

# Asked inside the engine image: each version, or `unknown`.
IMAGE_VERSIONS = r"""
v() { if [ -n "$1" ]; then echo "$1"; else echo unknown; fi; }
meta() { python3 -c 'import importlib.metadata as m, sys
for name in sys.argv[1:]:
    try:
        print(m.version(name)); break
    except Exception:
        pass' "$@" 2>/dev/null; }
trt=$(meta tensorrt_llm tensorrt-llm)
nccl=${NCCL_VERSION:-$(ls /usr/lib/*/libnccl.so.2.* /usr/local/lib/libnccl.so.2.* 2>/dev/null \
  | sed -n 's/.*libnccl\.so\.//p' | head -n 1)}
[ -n "$nccl" ] || nccl=$(meta nvidia-nccl-cu13 nvidia-nccl-cu12)
ucx=$(PATH="$PATH:/usr/local/ucx/bin" ucx_info -v 2>/dev/null | sed -n 's/^# *Library version: *//p' | head -n 1)
ompi=$(ompi_info --version 2>/dev/null | sed -n 's/^Open MPI v\([^ ]*\).*/\1/p' | head -n 1)
[ -n "$ompi" ] || ompi=$(mpirun --version 2>/dev/null | sed -n 's/.*(Open MPI) *\([^ ]*\).*/\1/p' | head -n 1)
echo "tensorrt_llm: $(v "$trt")"; echo "nccl: $(v "$nccl")"; echo "ucx: $(v "$ucx")"
echo "openmpi: $(v "$ompi")"; echo "cuda: $(v "${CUDA_VERSION:-}")"
"""


@dataclass(frozen=True)
class Collected:
    """One file of the bundle before redaction: where it goes, what it says, where it came from."""

    path: str
    text: str
    source: str


@dataclass
class BundleResult:
    """What `sparkpair bundle` wrote: the archive, every file in it with its redactions, what was missing."""

    path: str = ""
    files: list[tuple[str, int, str, Counter[str]]] = field(default_factory=list)  # path, bytes, source, redacted
    missing: list[str] = field(default_factory=list)
    unreached: list[str] = field(default_factory=list)   # the nodes nothing was collected from

    @property
    def redactions(self) -> int:
        return sum(sum(counts.values()) for _, _, _, counts in self.files)


def _raw(text: str) -> str:
    return text


def member_path(path: str) -> str | None:
    """path as an archive member: relative and normalised (`a//./b` is `a/b`); None when it is empty, absolute,
    climbs (`..`) or holds a control character (a name a node chose must not leave the bundle's directory)."""
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if path.startswith("/") or not parts or ".." in parts or not printable(path):
        return None
    return "/".join(parts)


def _ask(name: str, command: Shell, sectioned: bool = False) -> Probe[object]:
    return Probe("bundle", (name,), command, parse_sections if sectioned else _raw)


def _tree(prefix: Shell) -> Shell:
    """After prefix (which cds into a directory or exits 0), every file under it as sections (`probes.section`)
    named by their relative paths (a path holding a newline is not listed: `read` would cut it in two), the last
    FILE_LIMIT bytes of each, until TREE_LIMIT bytes in all (the files after that are named on stderr)."""
    return Shell.compose([prefix, Shell(
        "t=0; find . -type f ! -path '*\n*' | sort | while IFS= read -r f; do "
        's=$(stat -c %s "$f" 2>/dev/null || echo 0); [ "$s" -gt {} ] && s={}; t=$((t + s)); '
        'if [ "$t" -gt {} ]; then printf \'skipped %s: over {} bytes in all\\n\' "$f" >&2; continue; fi; '
        + section('"${f#./}"', 'tail -c {} "$f"') + "; done; true",
        str(FILE_LIMIT), str(FILE_LIMIT), str(TREE_LIMIT), str(TREE_LIMIT), str(FILE_LIMIT))], "")


def node_probes(inventory: Inventory, node: str, head: bool) -> dict[str, Probe[object]]:
    """Bundle path (under the node's directory) -> the read-only probe that fills it."""
    name, image = inventory.container.name, inventory.container.image
    in_image = Shell("if [ \"$(docker container inspect -f '{{.State.Running}}' {} 2>/dev/null)\" = true ]; then "
                     "echo 'asked: the running engine container'; docker exec {} sh -c {}; "
                     "elif docker image inspect {} >/dev/null 2>&1; then echo 'asked: the image (docker run --rm)'; "
                     "docker run --rm --network none --entrypoint sh {} -c {}; "
                     "else echo 'the engine image is not on this node: versions unknown'; fi",
                     name, name, IMAGE_VERSIONS, image, image, IMAGE_VERSIONS)
    asked = {
        "versions/dgx-release.txt": Shell("cat /etc/dgx-release"),
        "versions/os-release.txt": Shell("cat /etc/os-release"),
        "versions/uname.txt": Shell("uname -a"),
        "versions/driver.txt": Shell("nvidia-smi --query-gpu=name,driver_version --format=csv"),
        "versions/docker.txt": Shell("docker version"),
        "versions/image.json": Shell("docker image inspect {}", image),
        "versions/engine-image.txt": in_image,
        "gpu/nvidia-smi.txt": Shell("nvidia-smi"),
        "gpu/nvidia-smi-q.txt": Shell("nvidia-smi -q"),
        "kernel/dmesg-nvrm-aer-oom.txt": Shell.compose([root.define(), Shell(
            "if ! out=$( (sparkpair_root dmesg 2>/dev/null || dmesg) 2>&1 ); then echo \"dmesg not readable: $out\" >&2; "
            "exit 3; fi; printf '%s\\n' \"$out\" | grep -E {} | tail -n 300 | tail -c {}; true", DMESG, str(FILE_LIMIT))], ""),
        "memory/meminfo.txt": Shell("cat /proc/meminfo"),
        "memory/free.txt": Shell("free -b"),
        "memory/pressure.txt": Shell("cat /proc/pressure/memory"),
        "memory/guard.log": Shell.compose([expanded_path(paths.GUARD_DIR), Shell(  # the memory guard: what it did
            'tail -c {} "$p/memguard.log" 2>/dev/null; cat "$p/stop.json" 2>/dev/null; true', str(FILE_LIMIT))], ""),
        "network/ip-addr.json": Shell("ip -j addr show"),
        "network/ip-link-stats.json": Shell("ip -j -s link show"),
        "network/routes.json": Shell("ip -j route show"),
        "network/ibdev2netdev.txt": Shell("ibdev2netdev"),
        "network/rdma-link.txt": Shell("rdma link show"),
        "engine/docker-inspect.json": Shell("docker container inspect {}", name),
        "engine/docker-logs.txt": Shell("docker logs --tail 2000 {} 2>&1 | tail -c {}", name, str(FILE_LIMIT)),
        "engine/docker-ps.txt": Shell("docker ps -a --no-trunc"),
    }
    for interface in inventory.node(node).links:
        asked[f"network/ethtool-{interface}.txt"] = Shell("ethtool {}", interface)
    found: dict[str, Probe[object]] = {path: _ask(path, command) for path, command in asked.items()}
    found["netplan/"] = _ask("netplan/", Shell.compose([root.define(), Shell(
        "for f in /etc/netplan/*.yaml; do [ -e \"$f\" ] || continue; "
        + section('"${f##*/}"', 'sparkpair_root netplan-read "$f" 2>/dev/null || cat "$f" 2>&1') + "; done; true")], ""),
        sectioned=True)
    found["sparkpair/config/"] = _ask("sparkpair/config/", _tree(Shell.compose(
        [expanded_path(paths.CONFIG_DIR), Shell('cd "$p" 2>/dev/null || exit 0; ')], "")), sectioned=True)
    found["logs/failed-launch/"] = _ask("logs/failed-launch/", _tree(Shell.compose(
        [expanded_path(paths.FAILED_LAUNCH_LOGS), Shell('cd "$p" 2>/dev/null || exit 0; ')], "")), sectioned=True)
    live = _tree(Shell("cd {} 2>/dev/null || exit 0; ", recipe.LOG_DIR)).text
    found["logs/running-engine/"] = _ask("logs/running-engine/", Shell(
        "docker exec {} sh -c {} 2>/dev/null; true", name, live), sectioned=True)
    if head:
        found["sparkpair/launch-state.json"] = _ask("sparkpair/launch-state.json", Shell.compose(
            [expanded_path(paths.LAUNCH_STATE), Shell('cat "$p" 2>/dev/null; true')], ""))
    return found


def collect_node(connection: Node, inventory: Inventory, head: bool) -> tuple[list[Collected], list[str]]:
    """Everything the bundle holds from one node (one round trip), and what could not be read, with why."""
    asked = node_probes(inventory, connection.name, head)
    facts = probes.gather(connection, list(asked.values()), timeout=ROUND_TIMEOUT_S, cap=ROUND_CAP)
    files, missing = [], []
    for path, probe in asked.items():
        value = facts.get(probe)
        where = f"{connection.name}/{path}"
        if isinstance(value, ProbeFailure) or value is None:
            missing.append(f"{where}: {value}")
        elif isinstance(value, dict):
            for name, text in value.items():
                if member_path(name) is None:
                    missing.append(f"{where}{name!r}: refused: not a plain relative file name")
                else:
                    files.append(Collected(f"{where}{name}", text, f"{connection.name}: {probe.label}"))
        else:
            files.append(Collected(where, str(value), f"{connection.name}: {probe.command.text[:200]}"))
    return files, missing


def bundle(pair: Pair, inventory: Inventory, out: Path, inventory_file: Path | None, doctor_json: Callable[[], str],
           progress: Progress, lock_files: Callable[[], tuple[list[Collected], list[str]]] | None = None) -> BundleResult:
    """Collect from both nodes at once, add doctor's findings, the lock and the diff (lock_files: the files and
    what could not be collected) and the inventory, redact, write out (a new 0600 file renamed over it)."""
    result = BundleResult(path=str(out))
    progress(Event("", "collecting from both nodes (read-only)"))
    collected = pair.each(lambda connection: collect_node(connection, inventory, connection.name == pair.head.name))
    files: list[Collected] = []
    for name in [node.name for node in inventory.nodes]:
        if name in collected.failed:
            result.missing.append(f"{name}: nothing collected ({collected.failed[name]})")
            result.unreached.append(name)
            continue
        node_files, missing = collected.values[name]
        files += node_files
        result.missing += missing
    progress(Event("", "running doctor (read-only)"))
    files.append(Collected("doctor.json", doctor_json(), "sparkpair doctor --json"))
    if lock_files is not None:
        progress(Event("", "comparing the nodes and the lock (read-only)"))
        more, missing = lock_files()
        files += more
        result.missing += missing
    if inventory_file is not None and inventory_file.is_file():
        files.append(Collected("inventory.yaml", inventory_file.read_text(encoding="utf-8", errors="replace"),
                               str(inventory_file)))
    _write(result, files, out, inventory.cluster.name, credentials.known(inventory))
    return result


def _write(result: BundleResult, files: list[Collected], out: Path, cluster: str, secrets: list[str] | None = None) -> None:
    """Redact files into the archive at out, under one top directory (secrets: the engine's, by value; every runtime's
    secret options by name); a file whose path is not a plain relative path (`member_path`), or is one already
    written, is left out and listed as not collected."""
    token, options = hftoken.find_token(), credentials.secret_option_names()
    top = out.name.removesuffix(".tar.gz").removesuffix(".tgz")
    top = top if member_path(top) == top else "sparkpair-bundle"
    entries: dict[str, bytes] = {}
    for item in files:
        path = member_path(item.path)
        if path is None or path in entries or path == "MANIFEST.txt":
            result.missing.append(f"{item.path!r} (from {item.source}): refused: not a plain relative file name, "
                                  "or one already in the bundle")
            continue
        text, counts = redact(item.text, [token, *(secrets or [])] if token else secrets or [], options)
        entries[path] = text.encode("utf-8", "replace")
        result.files.append((path, len(entries[path]), item.source, counts))
    manifest = _manifest(result, cluster).encode()
    try:
        _write_new(out, [("MANIFEST.txt", manifest), *entries.items()], top)
    except OSError as error:
        raise SparkpairError(f"cannot write the bundle {out}: {error.strerror or error}",
                             hint="choose another --out") from None


def _write_new(out: Path, entries: list[tuple[str, bytes]], top: str) -> None:
    """A tar.gz of entries under top, written to a new 0600 file beside out (O_EXCL, O_NOFOLLOW: no file or link
    an other user placed is written through) and renamed over out: an existing file or symlink there is
    replaced, never followed or kept with its old mode."""
    out.parent.mkdir(parents=True, exist_ok=True)
    temp = out.with_name(f".{out.name}.{secrets.token_hex(6)}.tmp")
    descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as handle, tarfile.open(fileobj=handle, mode="w:gz") as archive:
            os.fchmod(handle.fileno(), 0o600)  # whatever the umask
            for path, data in entries:
                info = tarfile.TarInfo(f"{top}/{path}")
                info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
                archive.addfile(info, io.BytesIO(data))
        os.replace(temp, out)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def _manifest(result: BundleResult, cluster: str) -> str:
    lines = [f"sparkpair {__version__} bundle of {cluster}, {time.strftime('%Y-%m-%d %H:%M:%S %z')}",
             "Never collected: " + "; ".join(NEVER) + ".",
             f"Redacted values are replaced by [REDACTED]: {result.redactions} in all.", "", "Files:"]
    for path, size, source, counts in result.files:
        redacted = ", ".join(f"{count} {kind}" for kind, count in sorted(counts.items())) or "nothing"
        lines.append(visible(f"  {path}  ({size} bytes; from {source}; redacted: {redacted})", lines=False))
    lines += ["", "Not collected:"] + [visible(f"  {item}", lines=False) for item in result.missing or ["nothing"]]
    return "\n".join(lines) + "\n"  # what a node said is shown inert: `cat MANIFEST.txt` acts on nothing
