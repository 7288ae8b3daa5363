"""Model files from one node to the other over both QSFP twins at once, several streams per twin.

The node program (`sparkpair/data/modelnode/`) does the moving; this module starts it on both
nodes, hands each its job over its own SSH channel, turns the sender's reports into progress, and
says what arrived. The receiver writes each file beside its final name, verifies it whole (the
blob's name is its hash), only then moves it into `blobs/`, and links a snapshot file only to a
verified blob: nothing half-written is ever linked. An interrupted copy keeps its whole, verified
files; the next one sends the rest.

Transports (docs/security.md, "The model copy"): `tcp` (default), one TCP connection per stream
bound to the twins' addresses, the receiver accepting only the peer's addresses and only after the
peer proves a one-time secret; `ssh`, each stream an `ssh -c aes128-gcm@openssh.com -W` over the twin
to the receiver on the peer's loopback.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkpair import boundedjson, paths
from sparkpair.engine.meter import Meter, size
from sparkpair.errors import SparkpairError, last_line
from sparkpair.inventory import Inventory
from sparkpair.probes import models
from sparkpair.progress import Progress
from sparkpair.transport import Node
from sparkpair.transport.session import END, RemoteProcess

TRANSPORTS = ("tcp", "ssh")
STREAMS_PER_TWIN = 4
CHUNK_BYTES = 32 << 20
LISTEN_TIMEOUT_S = 30.0
QUIET_TIMEOUT_S = 60.0     # the sender reports every 0.5 s; this long without a word and it is stuck
ABORT_WAIT_S = 60.0        # after Ctrl-C, how long the receiver may take to keep what arrived whole
SSH_CIPHER = "aes128-gcm@openssh.com"


@dataclass(frozen=True)
class Blob:
    """One file of a repo's cache to copy: its blob name (its hash) and size."""

    repo: str
    name: str
    size: int


@dataclass(frozen=True)
class Snapshot:
    """What the receiver links once blobs are in place: the revision and snapshot path -> blob name."""

    revision: str
    links: Mapping[str, str]


@dataclass
class CopyResult:
    """What a copy did: bytes per twin, the transfer's time (first connection to the last byte written
    on the receiver), the verification's time apart, and the files by outcome."""

    source: str
    dest: str
    transport: str
    streams: int = 0
    by_twin: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    verify_seconds: float = 0.0
    verified: list[str] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    unlinked: dict[str, list[str]] = field(default_factory=dict)
    refused_links: dict[str, list[str]] = field(default_factory=dict)   # repo dir -> "entry: problem" lines
    errors: list[str] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(self.by_twin.values())

    @property
    def rate(self) -> float:
        """Bytes per second of the transfer (verification not counted)."""
        return self.bytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def ok(self) -> bool:
        return not self.bad and not self.missing


def twins(inventory: Inventory, source: str, dest: str) -> list[tuple[str, str, str]]:
    """(twin, source address, destination address) for each cabled twin of source, in inventory order: a pair's
    twins of one name; with more nodes each of source's twins with a link to dest (`Inventory.links`: a ring's
    cable, a switch's subnet), to the first of dest's addresses it reaches."""
    here, there = inventory.node(source), inventory.node(dest)
    if len(inventory.nodes) == 2:
        return [(twin, str(address.ip), str(there.links[twin].ip)) for twin, address in here.links.items()
                if twin in there.links]
    reached: dict[str, str] = {}
    for link in inventory.links():
        if {link.node_a, link.node_b} == {source, dest}:
            port, _, far_port = link.far_end(source)
            reached.setdefault(port, str(there.links[far_port].ip))
    return [(twin, str(address.ip), reached[twin]) for twin, address in here.links.items() if twin in reached]


def receiver_job(inventory: Inventory, source: str, dest: str, blobs: list[Blob], snapshots: Mapping[str, Snapshot],
                 transport: str, secret: str) -> dict[str, Any]:
    """The receiver's job: where to listen, whom to accept, what to expect, what to link afterwards."""
    pairs = twins(inventory, source, dest)
    if transport == "ssh":
        listen, peers = [["127.0.0.1", 0]], ["127.0.0.1"]
    else:
        listen, peers = [[there, 0] for _, _, there in pairs], [here for _, here, _ in pairs]
    # twice the sender's streams: a stream that reconnects may find its old connection not yet given up
    return {"secret": secret, "listen": listen, "peers": peers, "hub": _hub(inventory), "cache": paths.VERIFIED_BLOBS,
            "files": _files(blobs), "max_connections": 2 * STREAMS_PER_TWIN * max(1, len(pairs)),
            "repos": {models.repo_dirname(repo): {"revision": snapshot.revision, "links": dict(snapshot.links)}
                      for repo, snapshot in snapshots.items()}}


def sender_job(inventory: Inventory, source: str, dest: str, blobs: list[Blob], transport: str, secret: str,
               listening: list[list[Any]]) -> dict[str, Any]:
    """The sender's job: the files, and one target per twin (a TCP address, or the ssh line over it)."""
    targets: list[dict[str, Any]] = []
    for twin, here, there in twins(inventory, source, dest):
        if transport == "ssh":
            port = listening[0][1]
            targets.append({"name": twin, "ssh": [
                "ssh", "-c", SSH_CIPHER, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                "-o", "ConnectTimeout=5", "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
                "-b", here, "-W", f"127.0.0.1:{port}", there]})
        else:
            port = next(entry[1] for entry in listening if entry[0] == there)
            targets.append({"name": twin, "bind": here, "connect": [there, port]})
    return {"secret": secret, "hub": _hub(inventory), "files": _files(blobs), "targets": targets,
            "streams": STREAMS_PER_TWIN, "chunk": CHUNK_BYTES}


def _hub(inventory: Inventory) -> str:
    return f"{inventory.container.hf_cache.rstrip('/')}/hub"


def _files(blobs: list[Blob]) -> list[dict[str, Any]]:
    return [{"id": index, "repo": models.repo_dirname(blob.repo), "blob": blob.name, "size": blob.size}
            for index, blob in enumerate(blobs)]


def record(line: str | None) -> tuple[str, dict[str, Any]]:
    """A node program's output line as (kind, value); ("", {}) for anything else."""
    kind, _, rest = (line or "").partition(" ")
    if kind in ("progress", "listening", "result", "note"):
        with contextlib.suppress(ValueError):
            value = boundedjson.loads(rest)
            if isinstance(value, dict):
                return kind, value
    return "", {}


def copy(source: Node, dest: Node, inventory: Inventory, blobs: list[Blob],
         snapshots: Mapping[str, Snapshot], transport: str, progress: Progress,
         cancel: threading.Event | None = None) -> CopyResult:
    """Send blobs from source to dest; link dest's snapshots for every file whose blob is in place. Nothing
    starts when a snapshot or a blob name is unsafe (models.snapshot_problems)."""
    _refuse_unsafe(source.name, dest.name, blobs, snapshots)
    result = CopyResult(source.name, dest.name, transport)
    secret = secrets.token_hex(32)
    receiver = RemoteProcess(dest, models.node_command("recv"))
    sender: RemoteProcess | None = None
    try:
        receiver.send(json.dumps(receiver_job(inventory, source.name, dest.name, blobs, snapshots, transport,
                                              secret)) + "\n")
        listening = _wait_for(receiver, "listening", LISTEN_TIMEOUT_S, cancel)
        sender = RemoteProcess(source, models.node_command("send"))
        sender.send(json.dumps(sender_job(inventory, source.name, dest.name, blobs, transport, secret,
                                          list(listening["addresses"]))) + "\n")
        sent = _follow(sender, result, blobs, progress, cancel)
        result.errors = [str(error) for error in sent.get("errors", [])]
        with contextlib.suppress(SparkpairError):  # a receiver gone already is named by the wait below
            receiver.send("end\n")
        _received(result, _wait_for(receiver, "result", _verify_timeout(blobs), cancel))
    except KeyboardInterrupt:
        _abort(sender, receiver)
        raise
    finally:
        for process in (sender, receiver):
            if process is not None:
                process.close()
    return result


def _refuse_unsafe(source: str, dest: str, blobs: list[Blob], snapshots: Mapping[str, Snapshot]) -> None:
    """Raise, naming the repo and the entry, when a snapshot holds an entry that could leave it on dest or a blob
    is not named by its hash (read_manifests refuses such a manifest first: this is the copy's own guard)."""
    problems = [(repo, problem) for repo, snapshot in snapshots.items()
                for problem in models.snapshot_problems(snapshot.revision, dict(snapshot.links))]
    problems += [(blob.repo, f"blob {models.shown(blob.name)} (not a hash)") for blob in blobs
                 if not models.BLOB_NAME.fullmatch(blob.name)]
    if problems:
        repo, problem = problems[0]
        raise SparkpairError(f"{repo}: unsafe entry in the snapshot to link on {dest}: {problem}; nothing was copied",
                             node=dest,
                             hint=f"remove {models.repo_dirname(repo)} from the HF cache's hub/ on {source} and rerun "
                                  "sparkpair launch")


def _follow(sender: RemoteProcess, result: CopyResult, blobs: list[Blob], progress: Progress,
            cancel: threading.Event | None) -> dict[str, Any]:
    """Turn the sender's reports into progress (per repo and in total) until its result."""
    repos = list(dict.fromkeys(blob.repo for blob in blobs))
    totals = {repo: sum(blob.size for blob in blobs if blob.repo == repo) for repo in repos}
    node = result.dest
    pairs = f"{result.source}>{result.dest}"
    meters = {repo: Meter(progress, node, f"copy:{pairs}:{repo}", f"{repo} to {node}", totals[repo])
              for repo in repos} if len(repos) > 1 else {}
    overall = Meter(progress, node, f"copy:{pairs}", f"copy from {result.source} ({result.transport})",
                    sum(totals.values()))
    deadline = time.monotonic() + QUIET_TIMEOUT_S
    by_repo: dict[str, int] = {}
    while True:
        line = _line(sender, cancel, deadline)
        kind, value = record(line)
        if line is END:
            raise _gone(sender, "sender", "ended without a result")
        if not kind:
            continue
        deadline = time.monotonic() + QUIET_TIMEOUT_S
        by_twin = {str(k): int(v) for k, v in dict(value.get("sent", {})).items()}
        by_repo.update({str(k): int(v) for k, v in dict(value.get("repos", {})).items()})
        result.by_twin = by_twin
        if kind == "progress":
            for repo, meter in meters.items():
                meter.update(by_repo.get(models.repo_dirname(repo), 0))
            overall.update(sum(by_twin.values()))
        elif kind == "result":
            result.seconds = float(value.get("seconds", 0.0))
            result.streams = int(value.get("streams", 0))
            twins_used = sum(1 for count in by_twin.values() if count)
            for repo, meter in meters.items():
                meter.finish(f"{size(by_repo.get(models.repo_dirname(repo), 0))} sent")
            overall.finish(f"{size(result.bytes)} in {result.seconds:.1f} s, {result.rate / 1e6:.0f} MB/s over "
                           f"{result.streams} streams on {twins_used} twin{'s' if twins_used != 1 else ''}")
            return value


def _line(process: RemoteProcess, cancel: threading.Event | None, deadline: float) -> str | None:
    while True:
        if cancel is not None and cancel.is_set():
            raise KeyboardInterrupt
        try:
            return process.line(timeout=0.5)
        except TimeoutError:
            if time.monotonic() > deadline:
                raise SparkpairError(f"the model copy on {process.node} went quiet for {QUIET_TIMEOUT_S:.0f} s",
                                     node=process.node, hint="sparkpair doctor --only links,path") from None


def _wait_for(process: RemoteProcess, wanted: str, timeout: float,
              cancel: threading.Event | None) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        line = _line(process, cancel, deadline)
        if line is END:
            raise _gone(process, "receiver", "stopped")
        kind, value = record(line)
        if kind == wanted:
            return value


def _gone(process: RemoteProcess, role: str, what: str) -> SparkpairError:
    """The error for a node program that ended before its result (killed, or it failed): its last words or
    exit status, and that the files verified on arrival stay for the rerun."""
    code = process.exit_code(timeout=2.0)
    status = f"exit {code}" if code is not None else "no exit status"
    return SparkpairError(f"the model copy's {role} on {process.node} {what} "
                          f"({last_line(process.stderr_tail(), status)}); what had arrived whole and been verified "
                          "stays, a rerun of sparkpair launch sends the rest", node=process.node)


def _received(result: CopyResult, value: Mapping[str, Any]) -> None:
    def names(key: str) -> list[str]:
        return [str(item) for item in value.get(key, []) or []]

    result.verified, result.bad, result.missing, result.refused = (names("verified"), names("bad"),
                                                                   names("missing"), names("refused"))
    result.verify_seconds = float(value.get("verify_seconds", 0.0))
    linked = value.get("linked", {}) or {}
    result.unlinked = {str(repo): [str(path) for path in missing]
                       for repo, missing in dict(linked).items() if missing}
    refused = value.get("refused_links", {}) or {}
    result.refused_links = {str(repo): [f"{models.shown(str(entry))}: {models.shown(str(problem))}"
                                        for entry, problem in entries] for repo, entries in dict(refused).items()}


def _verify_timeout(blobs: list[Blob]) -> float:
    """How long the receiver may take to verify and link: generous, at 100 MB/s per file's bytes."""
    return 120.0 + sum(blob.size for blob in blobs) / 100e6


def _abort(sender: RemoteProcess | None, receiver: RemoteProcess) -> None:
    """After Ctrl-C: stop the sender at once; let the receiver keep the files that arrived whole
    (verified) and remove the partial ones, then close both."""
    if sender is not None:
        sender.close()
    with contextlib.suppress(Exception):
        receiver.send("abort\n")
        deadline = time.monotonic() + ABORT_WAIT_S
        while time.monotonic() < deadline:
            line = receiver.line(timeout=deadline - time.monotonic())
            if line is END or record(line)[0] == "result":
                break
