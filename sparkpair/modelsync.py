"""Target and draft on every node that runs a rank: fetched once on the head, copied to the worker
over the QSFP link, verified on every node by manifest (blob names and sizes), and reached through
stable links so the engine config never names a revision.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable

from sparkpair import containers, probes, recipe
from sparkpair.errors import SparkpairError, last_line
from sparkpair.inventory import Inventory
from sparkpair.probes import ProbeFailure, models
from sparkpair.transport import NodeConnection, Pair, Shell

Progress = Callable[[str, str], None]


def read_manifests(connection: NodeConnection, inventory: Inventory, repos: list[str]) -> dict[str, models.RepoManifest]:
    """Each repo's manifest in the node's HF cache (one round trip)."""
    facts = probes.gather(connection, [models.manifest(inventory.container.hf_cache, repo) for repo in repos])
    manifests = {}
    for repo in repos:
        value = facts[f"model {repo}"]
        if isinstance(value, ProbeFailure):
            raise SparkpairError(f"cannot read the HF cache for {repo}: {value}", node=connection.name)
        manifests[repo] = value
    return manifests


def fetch_on_head(head: NodeConnection, inventory: Inventory, repo: str, source: str, progress: Progress) -> None:
    """Get repo into the head's cache: download (hub), copy from a staged cache (local:PATH), or refuse."""
    if source == "cached":
        raise SparkpairError(f"{repo} is not complete in {head.name}'s HF cache and --model-source cached copies "
                             "nothing", node=head.name, hint="stage it there, or drop --model-source cached")
    if source.startswith("local:"):
        staged = f"{source.removeprefix('local:').rstrip('/')}/{recipe.repo_dirname(repo)}"
        target = f"{recipe.hf_cache_on_node(inventory, head.home)}/hub/"
        result = head.run(Shell("test -d {} && rsync -a --mkpath {} {}", staged, staged, target))
        if not result.ok:
            raise SparkpairError(f"{repo} is not in the staged cache {staged} ({result.stderr.strip() or 'missing'})",
                                 node=head.name, hint="copy the models--org--name directory there first")
        progress(head.name, f"{repo}: copied from {staged}")
        return
    uid_gid = head.check(Shell('printf "%s:%s" "$(id -u)" "$(id -g)"'))
    argv = recipe.download_argv(repo)
    try:
        code = containers.stream_in(head, inventory.container.name, argv,
                                    lambda line: progress(head.name, f"{repo}: {line}"),
                                    user=uid_gid, environment={"HOME": "/tmp", "HF_HUB_OFFLINE": "0"})
    except KeyboardInterrupt:  # the exec outlives its stream: end it, so the cache holds a resumable part only
        with contextlib.suppress(Exception):
            containers.exec_in(head, inventory.container.name, ["pkill", "-INT", "-f", f"(^|/){_ere(' '.join(argv))}$"])
        raise
    if code != 0:
        raise SparkpairError(f"hf download {repo} failed (exit {code}); rerun to resume where it stopped",
                             node=head.name, hint=f"see {recipe.HF_HOME} permissions, network and the HF token")


def copy_to(head: NodeConnection, inventory: Inventory, repo: str, progress: Progress) -> None:
    """rsync repo's cache directory from the head to the worker over the first QSFP link."""
    argv = recipe.sync_argv(inventory, repo, head.home)
    progress(head.name, f"{repo}: copying to {inventory.worker.name} over {argv[-1].split(':')[0]}")
    try:
        result = head.run(argv, timeout=None)
    except KeyboardInterrupt:  # the remote rsync outlives the SSH channel: end it (--partial keeps what came)
        with contextlib.suppress(Exception):
            head.run(["pkill", "-INT", "-f", f"^{_ere(' '.join(argv))}$"])
        raise
    if not result.ok:
        raise SparkpairError(f"copying {repo} to {inventory.worker.name} failed: "
                             f"{last_line(result.stderr, f'exit {result.exit_code}')}",
                             node=head.name, hint="sparkpair doctor --only trust,path")


def _ere(text: str) -> str:
    """text as a literal in a POSIX extended regex (what pkill -f matches a command line with)."""
    return re.sub(r"([.\[\]()*+?{}|^$\\])", r"\\\1", text)


def link(connection: NodeConnection, inventory: Inventory, revisions: dict[str, str]) -> None:
    """Point HF_HOME/sparkpair-models/org--name at each repo's verified snapshot (one round trip)."""
    cache = recipe.hf_cache_on_node(inventory, connection.home)
    commands = [Shell("mkdir -p {}", f"{cache}/{recipe.MODEL_LINKS}")]
    for repo, revision in revisions.items():
        name, target = recipe.snapshot_link(repo, revision)
        commands.append(Shell("ln -sfn {} {}", target, f"{cache}/{name}"))
    connection.check(Shell.compose(commands, " && "))


def ensure_models(pair: Pair, inventory: Inventory, repos: list[str], nodes: list[str], source: str,
                  progress: Progress) -> dict[str, str]:
    """Make every repo complete and identical on every node; the verified revision of each."""
    head = pair.nodes[nodes[0]]
    on_head = read_manifests(head, inventory, repos)
    fetched = [repo for repo in repos if not on_head[repo].complete]
    for repo in fetched:
        fetch_on_head(head, inventory, repo, source, progress)
    if fetched:  # verify what was fetched; what was complete already needs no second look
        on_head.update(read_manifests(head, inventory, fetched))
    for repo in fetched:
        if not on_head[repo].complete:
            raise SparkpairError(f"{repo} is still incomplete after fetching ({len(on_head[repo].broken)} files "
                                 "missing)", node=head.name, hint="rerun sparkpair launch to resume")
    for name in nodes[1:]:
        _match_worker(inventory, head, pair.nodes[name], on_head, source, progress)
    revisions = {repo: str(manifest.revision) for repo, manifest in on_head.items()}
    for name, result in pair.each(lambda connection: link(connection, inventory, revisions), names=nodes).items():
        if isinstance(result, BaseException):
            raise result
    return revisions


def _match_worker(inventory: Inventory, head: NodeConnection, worker: NodeConnection,
                  on_head: dict[str, models.RepoManifest], source: str, progress: Progress) -> None:
    """Copy each repo the worker lacks or holds differently from the head, then verify the copies."""
    theirs = read_manifests(worker, inventory, list(on_head))
    copied = []
    for repo, manifest in on_head.items():
        differences = manifest.differences(theirs[repo])
        if not differences and theirs[repo].complete:
            continue
        state = "missing" if not theirs[repo].present else f"different ({differences[0] if differences else 'incomplete'})"
        if source == "cached":
            raise SparkpairError(f"{repo} is {state} on {worker.name}; --model-source cached copies nothing",
                                 node=worker.name, hint="drop --model-source cached to copy it from the head")
        progress(worker.name, f"{repo} {state}; copying from {head.name}")
        copy_to(head, inventory, repo, progress)
        copied.append(repo)
    after = read_manifests(worker, inventory, copied) if copied else {}
    for repo in copied:
        differences = on_head[repo].differences(after[repo])
        if differences or not after[repo].complete:
            raise SparkpairError(f"{repo} still differs from {head.name} after copying: "
                                 f"{differences[0] if differences else 'incomplete'}", node=worker.name)
