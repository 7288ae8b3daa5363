"""Getting a repo onto a node: `hf download` in its engine container (with byte progress from the node),
a copy from a staged cache (local:PATH), or, with `--split-download`, half the files on each node.

Progress of a download is measured on the node: the node program's `watch` reports the bytes under
the repo's blobs/ every second while `hf download` runs, and `hf download --dry-run` says how many
bytes are coming (the hub rounds them to 0.1 of a unit), so the line shows bytes, rate and time left.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from sparkpair import boundedjson
from sparkpair.engine.meter import Meter, size
from sparkpair.errors import SparkpairError
from sparkpair.inventory import Inventory
from sparkpair.inventory.profiles import check_repo_id
from sparkpair.probes import models
from sparkpair.progress import Event, Progress
from sparkpair.render import recipe
from sparkpair.transport import Node, Pair, Shell, docker_cli

DOWNLOAD_ENV = recipe.DOWNLOAD_ENV
STAGED_COPY_S = 4 * 3600.0  # a local copy of a whole model (Qwen3-235B: about 130 GB) on a slow disk


def _user(node: Node) -> str:
    return node.check(Shell('printf "%s:%s" "$(id -u)" "$(id -g)"'))


def hf_download_argv(repo: str, files: list[str] | None = None) -> list[str]:
    """`hf download repo [-- files]`, repo checked to be a repo id and every file a relative path inside a repo
    (after `--`, so no name is ever read as an option); SparkpairError naming the bad one otherwise."""
    try:
        check_repo_id(repo)
    except ValueError as error:
        raise SparkpairError(f"{repo!r} is not a repo id: expected {error}") from None
    for name in files or []:
        if not hub_file_name(name):
            raise SparkpairError(f"the hub's file list for {repo} names {repr(name)[:120]}, which is not a relative "
                                 "path inside a repo; refusing to download it", hint="launch without --split-download")
    return [*recipe.download_argv(repo), *(["--", *files] if files else [])]


def hub_file_name(name: str) -> bool:
    """Whether name is a file of a repo: a relative path of printable characters, no empty, '.' or '..' part."""
    return 0 < len(name) <= 1024 and name.isprintable() and "\\" not in name and \
        all(part not in ("", ".", "..") for part in name.split("/"))


def dry_run(node: Node, inventory: Inventory, repo: str) -> models.DryRun | None:
    """What `hf download --dry-run` says is left to fetch on the node; None when it cannot say."""
    code, output = docker_cli.exec_in(node, inventory.container.name, [*hf_download_argv(repo), "--dry-run"],
                                      user=_user(node), environment=DOWNLOAD_ENV, timeout=120)
    if code != 0:
        return None
    with contextlib.suppress(ValueError):
        return models.parse_dry_run(output)
    return None


def download(node: Node, inventory: Inventory, repo: str, progress: Progress,
             files: list[str] | None = None, total: int | None = None) -> float:
    """`hf download repo [files]` in the node's engine container as the node user, with byte progress;
    the seconds it took. A failure raises with hf's last lines; Ctrl-C ends it on the node too."""
    argv = hf_download_argv(repo, files)
    blobs = f"{inventory.container.hf_cache.rstrip('/')}/hub/{models.repo_dirname(repo)}/blobs"
    watch = models.node_command("watch", json.dumps({"dirs": [blobs], "interval": 1.0}))
    script = Shell.compose([watch, Shell(" & w=$!; "),
                            docker_cli.exec_line(inventory.container.name, argv, user=_user(node),
                                                 environment=DOWNLOAD_ENV),
                            Shell("; rc=$?; kill $w 2>/dev/null; wait $w; exit $rc")], "")
    what = f"{len(files)} files of {repo}" if files else repo
    meter = Meter(progress, node.name, f"download:{node.name}:{repo}", f"downloading {what}", total)
    tail: deque[str] = deque(maxlen=12)
    base: list[int] = []

    def seen(line: str) -> None:
        kind, _, rest = line.partition(" ")
        if kind == "progress":
            with contextlib.suppress(ValueError, KeyError, TypeError):
                now = int(boundedjson.loads(rest)["bytes"])
                base[:] = base or [now]
                meter.update(max(0, now - base[0]))
        elif line.strip() and not line.lstrip().startswith(("Fetching", "[dry-run]")):
            tail.append(line.strip())

    try:
        code = node.stream(script, seen)
    except KeyboardInterrupt:  # the exec outlives its stream: end it, so the cache holds a resumable part only
        with contextlib.suppress(Exception):
            docker_cli.kill_matching(node, inventory.container.name, f"(^|/){_ere(' '.join(argv))}$")
        raise
    if code != 0:
        detail = next((line for line in reversed(tail) if "Error" in line), tail[-1] if tail else f"exit {code}")
        raise SparkpairError(f"hf download {repo} failed on {node.name}: {detail}; rerun to resume where it stopped",
                             node=node.name, hint=f"see {recipe.HF_HOME} permissions, network and the HF token")
    meter.finish(f"{size(meter.done)} in {meter.seconds():.1f} s", label=f"downloaded {what}")
    return meter.seconds()


def _ere(text: str) -> str:
    """text as a literal in a POSIX extended regex (what pkill -f matches a command line with)."""
    return re.sub(r"([.\[\]()*+?{}|^$\\])", r"\\\1", text)


def copy_staged(head: Node, inventory: Inventory, repo: str, source: str, progress: Progress) -> None:
    """Copy repo's cache directory from a staged HF cache on the head (local:PATH)."""
    staged = f"{source.removeprefix('local:').rstrip('/')}/{recipe.repo_dirname(repo)}"
    target = f"{recipe.hf_cache_on_node(inventory, head.home)}/hub/"
    result = head.run(Shell("test -d {} && rsync -a --mkpath {} {}", staged, staged, target), timeout=STAGED_COPY_S)
    if not result.ok:
        raise SparkpairError(f"{repo} is not in the staged cache {staged} ({result.stderr.strip() or 'missing'})",
                             node=head.name, hint="copy the models--org--name directory there first")
    progress(Event(head.name, f"{repo}: copied from {staged}"))


def fetch_on_head(head: Node, inventory: Inventory, repo: str, source: str, progress: Progress) -> None:
    """Get repo into the head's cache: download (hub), copy from a staged cache (local:PATH), or refuse."""
    if source == "cached":
        raise SparkpairError(f"{repo} is not complete in {head.name}'s HF cache and --model-source cached copies "
                             "nothing", node=head.name, hint="stage it there, or drop --model-source cached")
    if source.startswith("local:"):
        copy_staged(head, inventory, repo, source, progress)
        return
    plan = dry_run(head, inventory, repo)
    download(head, inventory, repo, progress, total=plan.total if plan else None)


@dataclass
class SplitPlan:
    """Which node downloads which files of a repo (largest first, to the node with fewer bytes so far)."""

    repo: str
    files: dict[str, list[str]] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    everything: tuple[str, ...] = ()     # every file of the repo, as the dry run listed it
    seconds: dict[str, float] = field(default_factory=dict)


def plan_split(repo: str, plan: models.DryRun, nodes: list[str]) -> SplitPlan:
    """Halve what is left to download by bytes: largest file first, each to the lighter node."""
    split = SplitPlan(repo, {name: [] for name in nodes}, {name: 0 for name in nodes}, tuple(plan.files))
    for name, count in sorted(plan.to_download.items(), key=lambda item: (-item[1], item[0])):
        lighter = min(nodes, key=lambda node: (split.bytes[node], nodes.index(node)))
        split.files[lighter].append(name)
        split.bytes[lighter] += count
    return split


def split_download(pair: Pair, inventory: Inventory, repo: str, nodes: list[str], progress: Progress) -> SplitPlan:
    """Each node downloads its half of repo's missing files at the same time; how long each took."""
    plan = dry_run(pair.nodes[nodes[0]], inventory, repo)
    if plan is None:
        raise SparkpairError(f"hf download --dry-run {repo} gave no file list on {nodes[0]}", node=nodes[0],
                             hint="launch without --split-download")
    hf_download_argv(repo, list(plan.files))  # every name the node listed is checked before any download starts
    split = plan_split(repo, plan, nodes)

    cancel = threading.Event()

    def fetch(connection: Node) -> float:
        files = split.files[connection.name]
        if not files:
            return 0.0
        finished = threading.Event()
        argv = hf_download_argv(repo, files)
        threading.Thread(target=_end_on_cancel, args=(cancel, finished, connection, inventory, argv),
                         daemon=True).start()
        try:
            return download(connection, inventory, repo, progress, files, split.bytes[connection.name])
        finally:
            finished.set()

    started = time.monotonic()
    split.seconds = dict(pair.each(fetch, names=nodes, cancel=cancel).raise_failures().values)
    split.seconds["both"] = time.monotonic() - started
    return split


def _end_on_cancel(cancel: threading.Event, finished: threading.Event, node: Node, inventory: Inventory,
                   argv: list[str]) -> None:
    """Ctrl-C reaches only the main thread: a download running in another one is ended on its node here."""
    while not finished.is_set():
        if cancel.wait(0.5):
            with contextlib.suppress(Exception):
                docker_cli.kill_matching(node, inventory.container.name, f"(^|/){_ere(' '.join(argv))}$")
            return
