"""Target and draft on every node that runs a rank, content-verified, reached through stable links.

Each launch: read every node's cache (manifests), verify every node's files in parallel (a blob's
content must hash to its name; the node keeps a cache of what it verified, so a warm launch reads
nothing again), remove what is corrupt, fetch what the head lacks (`modelfetch`: a download, a
staged cache, or with --split-download half on each node), copy what the worker lacks or holds
differently over both QSFP twins (`modelcopy`), then link HF_HOME/sparkpair-models/org--name to the
verified snapshot on every node so the engine config never names a revision.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from sparkpair import boundedjson, probes
from sparkpair.checks.engine import hub_probe, hub_verdict
from sparkpair.engine import modelcopy, modelfetch
from sparkpair.engine.meter import Meter, size
from sparkpair.errors import SparkpairError
from sparkpair.inventory import Inventory
from sparkpair.probes import models
from sparkpair.progress import Event, Progress
from sparkpair.render import recipe
from sparkpair.transport import Node, Pair, Shell

Manifests = dict[str, models.RepoManifest]


@dataclass(frozen=True)
class ModelOptions:
    """How launch gets the models: the source (hub, cached, local:PATH), the copy's transport, and
    whether both nodes download half each when both reach the hub."""

    source: str = "hub"
    transport: str = "tcp"
    split_download: bool = False


def read_manifests(connection: Node, inventory: Inventory, repos: list[str]) -> Manifests:
    """Each repo's manifest in the node's HF cache (one round trip). A manifest with an unsafe entry (a refs/main
    that is no commit, a snapshot path or link not of huggingface_hub's form) raises: nothing is fetched into,
    copied from or linked after such a cache."""
    cache = inventory.container.hf_cache
    asked = {repo: models.manifest(cache, repo) for repo in repos}
    facts = probes.gather(connection, list(asked.values()))
    manifests = {}
    for repo, probe in asked.items():
        value = facts.get(probe)
        if not isinstance(value, models.RepoManifest):
            raise SparkpairError(f"cannot read the HF cache for {repo}: {value}", node=connection.name)
        if value.unsafe:
            more = f" (and {len(value.unsafe) - 1} more)" if len(value.unsafe) > 1 else ""
            raise SparkpairError(f"{repo}: unsafe entry in the HF cache: {value.unsafe[0]}{more}; sparkpair "
                                 "copies nothing from it", node=connection.name,
                                 hint=f"check who wrote it, remove {cache.rstrip('/')}/hub/{models.repo_dirname(repo)} "
                                      f"on {connection.name} and rerun sparkpair launch")
        manifests[repo] = value
    return manifests


def verify(connection: Node, inventory: Inventory, repos: list[str], progress: Progress,
           remove_bad: bool) -> models.ContentCheck:
    """Hash every file of repos on the node the node's cache does not vouch for, in parallel; with
    remove_bad, a corrupt blob is removed (to be fetched again); its snapshot links stay, dangling, so the repo's
    manifest reads incomplete (those files missing) until the fetch or the copy puts the blob back."""
    options = models.verify_options(inventory.container.hf_cache, repos, remove_bad=remove_bad, progress=True)
    meter = Meter(progress, connection.name, f"verify:{connection.name}", f"verifying {connection.name}'s model files",
                  None)
    lines: list[str] = []

    def seen(line: str) -> None:
        lines.append(line)
        kind, _, rest = line.partition(" ")
        if kind == "progress":
            value = boundedjson.loads(rest)
            if value.get("total"):
                meter.total = float(value["total"])
                meter.update(float(value.get("done", 0)))

    code = connection.stream(models.node_command("verify", options), seen)
    try:
        found = models.parse_content("\n".join(lines))
    except (ValueError, KeyError) as error:
        raise SparkpairError(f"verifying the model files failed (exit {code}): {lines[-1] if lines else error}",
                             node=connection.name) from None
    if meter.total:
        meter.finish(f"{size(found.hashed_bytes)} hashed in {found.seconds:.1f} s, "
                     f"{sum(len(r.bad) for r in found.repos.values())} corrupt")
    return found


def link(connection: Node, inventory: Inventory, revisions: dict[str, str]) -> None:
    """Point HF_HOME/sparkpair-models/org--name at each repo's verified snapshot (one round trip)."""
    cache = recipe.hf_cache_on_node(inventory, connection.home)
    commands = [Shell("mkdir -p {}", f"{cache}/{recipe.MODEL_LINKS}")]
    for repo, revision in revisions.items():
        name, target = recipe.snapshot_link(repo, revision)
        commands.append(Shell("ln -sfn {} {}", target, f"{cache}/{name}"))
    connection.check(Shell.compose(commands, " && "))


@dataclass
class ModelsSynced:
    """What getting the models did: the verified revision of each repo, and every copy between nodes."""

    revisions: dict[str, str] = field(default_factory=dict)
    copies: list[modelcopy.CopyResult] = field(default_factory=list)


def ensure_models(pair: Pair, inventory: Inventory, repos: list[str], nodes: list[str], source: str,
                  progress: Progress, options: ModelOptions | None = None) -> dict[str, str]:
    """Make every repo complete, verified and identical on every node; the verified revision of each."""
    return sync(pair, inventory, repos, nodes, progress, options or ModelOptions(source)).revisions


def sync(pair: Pair, inventory: Inventory, repos: list[str], nodes: list[str], progress: Progress,
         options: ModelOptions) -> ModelsSynced:
    """ensure_models, saying what it copied (scripts/bench/model_copy.py measures the copy with it)."""
    source, done = options.source, ModelsSynced()
    head = pair.nodes[nodes[0]]
    held = dict(pair.each(lambda c: read_manifests(c, inventory, repos), names=nodes).raise_failures().values)
    checked = dict(pair.each(lambda c: verify(c, inventory, repos, progress, source != "cached"),
                             names=nodes).raise_failures().values)
    repaired = [name for name in nodes if _corrupt(name, held[name], checked[name], nodes, source, progress)]
    for name in repaired:
        held[name] = read_manifests(pair.nodes[name], inventory, repos)
    fetched = [repo for repo in repos if not held[head.name][repo].complete]
    if fetched and options.split_download and source == "hub" and len(nodes) == 2 and \
            _both_reach(pair, inventory, fetched[0], nodes, progress):
        for repo in fetched:
            done.copies += _split(pair, inventory, repo, nodes, options.transport, progress)
        held.update({name: read_manifests(pair.nodes[name], inventory, repos) for name in nodes})
    else:
        for repo in fetched:
            modelfetch.fetch_on_head(head, inventory, repo, source, progress)
        if fetched:  # verify what was fetched; what was complete already needs no second look
            held[head.name].update(read_manifests(head, inventory, fetched))
            verify(head, inventory, fetched, progress, remove_bad=True)
    for repo in fetched:
        if not held[head.name][repo].complete:
            raise SparkpairError(f"{repo} is still incomplete after fetching ({len(held[head.name][repo].broken)} "
                                 "files missing)", node=head.name, hint="rerun sparkpair launch to resume")
    done.copies += _fan_out(pair, inventory, nodes, held, options, progress)
    done.revisions = {repo: str(manifest.revision) for repo, manifest in held[head.name].items()}
    pair.each(lambda connection: link(connection, inventory, done.revisions), names=nodes).raise_failures()
    return done


def _corrupt(name: str, held: Manifests, found: models.ContentCheck, nodes: list[str], source: str,
             progress: Progress) -> bool:
    """Report the node's corrupt files; True when any was removed (to be fetched again)."""
    problems = []
    for repo, manifest in held.items():
        for blob, reason in sorted(found.of(repo).bad.items()):
            paths = sorted(path for path, target in manifest.files.items() if target == blob) or [f"blob {blob}"]
            problems += [(repo, path, reason) for path in paths]
    if not problems:
        return False
    if source == "cached":
        repo, path, reason = problems[0]
        raise SparkpairError(f"{repo}: {path} is corrupt on {name} ({reason}); --model-source cached repairs "
                             "nothing", node=name, hint="drop --model-source cached to fetch it again")
    again = "downloading it again" if name == nodes[0] else f"copying it again from {nodes[0]}"
    for repo, path, reason in problems:
        progress(Event(name, f"{repo}: {path} is corrupt ({reason}); removed, {again}", "warning"))
    return True


def _both_reach(pair: Pair, inventory: Inventory, repo: str, nodes: list[str], progress: Progress) -> bool:
    """doctor's models.hub judge over fresh probes: can both nodes download?"""
    probe = hub_probe(inventory, repo)
    reach = {name: probes.gather(pair.nodes[name], [probe]).get(probe) for name in nodes}
    both, detail = hub_verdict(inventory, reach)
    if not both:
        progress(Event(nodes[0], f"--split-download: {detail}; {nodes[0]} downloads alone", "warning"))
    return both


def _split(pair: Pair, inventory: Inventory, repo: str, nodes: list[str], transport: str,
           progress: Progress) -> list[modelcopy.CopyResult]:
    """Half the files downloaded on each node, then each half copied to the other over the QSFP twins."""
    split = modelfetch.split_download(pair, inventory, repo, nodes, progress)
    held = {name: read_manifests(pair.nodes[name], inventory, [repo])[repo] for name in nodes}
    pair.each(lambda c: verify(c, inventory, [repo], progress, remove_bad=True), names=nodes).raise_failures()
    revisions = {manifest.revision for manifest in held.values()}
    if len(revisions) != 1:
        raise SparkpairError(f"{repo}: the hub's main moved between the two downloads ({', '.join(map(str, revisions))})",
                             hint="launch again without --split-download")
    files = {path: blob for manifest in held.values() for path, blob in manifest.files.items()}
    lost = sorted(set(split.everything) - set(files))
    if lost:
        raise SparkpairError(f"{repo}: {lost[0]} was downloaded on neither node", hint="rerun sparkpair launch")
    snapshot = {repo: modelcopy.Snapshot(str(revisions.pop()), files)}
    cancel = threading.Event()

    def exchange(connection: Node) -> modelcopy.CopyResult:
        mine = held[connection.name]
        peer = next(name for name in nodes if name != connection.name)
        blobs = [modelcopy.Blob(repo, blob, mine.blobs[blob]) for blob in sorted(set(mine.files.values()))
                 if blob not in held[peer].blobs]
        return modelcopy.copy(connection, pair.nodes[peer], inventory, blobs, snapshot, transport, progress, cancel)

    copies = pair.each(exchange, names=nodes, cancel=cancel).raise_failures().values
    for result in copies.values():
        _require(result, repo, progress)
    moved = sum(result.bytes for result in copies.values())
    slowest = max(result.seconds for result in copies.values())
    parts = ", ".join(f"{name} fetched {len(split.files[name])} files ({size(split.bytes[name])}) in "
                      f"{split.seconds.get(name, 0.0):.1f} s" for name in nodes)
    progress(Event("", f"split download of {repo}: {parts}; exchanged {size(moved)} over QSFP in {slowest:.1f} s"))
    return list(copies.values())


def _require(result: modelcopy.CopyResult, repo: str, progress: Progress) -> None:
    """Raise when a copy left files behind: which, why, and that a rerun sends only those. A stream that
    failed while the others carried its chunks to the end (every file arrived, verified, linked) is a
    warning naming the twin, not a failed copy."""
    if result.ok and not result.unlinked:
        for error in result.errors:
            progress(Event(result.dest, f"a stream of the copy from {result.source} gave up ({error}); the other "
                                        "streams carried its chunks: every file arrived and was verified", "warning"))
        return
    refused = [f"{repo}: {entry}" for repo, entries in result.refused_links.items() for entry in entries]
    problem = (f"the node refused to link {refused[0]}" if refused else
               result.errors[0] if result.errors else
               f"{len(result.bad)} files arrived corrupt" if result.bad else
               f"{len(result.missing)} files did not arrive" if result.missing else
               f"{sum(map(len, result.unlinked.values()))} snapshot files have no blob")
    raise SparkpairError(f"copying {repo} to {result.dest} stopped: {problem}; {len(result.verified)} files arrived "
                         "whole and verified and stay, a rerun of sparkpair launch sends the rest",
                         node=result.dest, hint="sparkpair doctor --only links,path")


def _fan_out(pair: Pair, inventory: Inventory, nodes: list[str], held: dict[str, Manifests], options: ModelOptions,
             progress: Progress) -> list[modelcopy.CopyResult]:
    """Every worker matched to the head's verified models: a pair's worker from the head, as always. With more
    nodes the copies fan out in rounds: each node holding a verified copy (the head, a worker that matched it
    already or received it in an earlier round) sends to one linked node still lacking it, all at once, so each
    node receives from a holder one cable away and the head's twins are not the only ones busy."""
    head, mine = nodes[0], held[nodes[0]]
    if len(nodes) == 2:
        return _match_worker(inventory, pair.nodes[head], pair.nodes[nodes[1]], mine, held[nodes[1]], options,
                             options.source, progress)
    holders = [head, *(name for name in nodes[1:] if _same(mine, held[name]))]
    waiting = [name for name in nodes[1:] if name not in holders]
    copies: list[modelcopy.CopyResult] = []
    while waiting:
        senders: dict[str, str] = {}  # receiving node -> the holder sending to it this round
        for name in waiting:
            linked = {node.name for node in inventory.neighbours(inventory.node(name))}
            sender = next((holder for holder in holders if holder in linked and holder not in senders.values()), None)
            if sender is not None:
                senders[name] = sender
        if not senders:
            raise SparkpairError(f"no node holding the verified models shares a link with {waiting[0]}",
                                 node=waiting[0], hint="sparkpair doctor --only links,path")
        copies += _copy_round(pair, inventory, senders, held, options, progress, mine)
        holders += list(senders)
        waiting = [name for name in waiting if name not in senders]
    return copies


def _copy_round(pair: Pair, inventory: Inventory, senders: dict[str, str], held: dict[str, Manifests],
                options: ModelOptions, progress: Progress, mine: Manifests) -> list[modelcopy.CopyResult]:
    """One round of the fan-out: each receiving node matched to mine from its sender, all at once; every
    node's failure raised together (PairError)."""
    done = pair.each(lambda c: _match_worker(inventory, pair.nodes[senders[c.name]], c, mine, held[c.name], options,
                                             options.source, progress), names=list(senders)).raise_failures()
    return [result for name in senders for result in done[name]]


def _same(mine: Manifests, theirs: Manifests) -> bool:
    """Whether a node holds every repo complete as the head's manifests say (nothing to copy to it)."""
    return all(theirs[repo].complete and theirs[repo].revision == manifest.revision and
               theirs[repo].files == manifest.files and not _missing(repo, manifest, theirs[repo])
               for repo, manifest in mine.items())


def _match_worker(inventory: Inventory, head: Node, worker: Node, mine: Manifests,
                  theirs: Manifests, options: ModelOptions, source: str,
                  progress: Progress) -> list[modelcopy.CopyResult]:
    """Copy what the worker lacks or holds differently from the head (one copy for all repos), verified."""
    wanted: dict[str, list[modelcopy.Blob]] = {}
    for repo, manifest in mine.items():
        differences = manifest.differences(theirs[repo])
        if theirs[repo].complete and theirs[repo].revision == manifest.revision and \
                theirs[repo].files == manifest.files and not _missing(repo, manifest, theirs[repo]):
            continue
        state = "missing" if not theirs[repo].present else \
            f"different ({differences[0] if differences else 'incomplete'})"
        if source == "cached":
            raise SparkpairError(f"{repo} is {state} on {worker.name}; --model-source cached copies nothing",
                                 node=worker.name, hint="drop --model-source cached to copy it from the head")
        progress(Event(worker.name, f"{repo} {state}; copying from {head.name}"))
        wanted[repo] = _missing(repo, manifest, theirs[repo])
    if not wanted:
        return []
    snapshots = {repo: modelcopy.Snapshot(str(mine[repo].revision), mine[repo].files) for repo in wanted}
    blobs = [blob for repo_blobs in wanted.values() for blob in repo_blobs]
    results = [modelcopy.copy(head, worker, inventory, blobs, snapshots, options.transport, progress)]
    if not results[-1].ok and not results[-1].errors:  # arrived corrupt or lost on the way: send those once more
        again = [blob for blob in blobs if blob.name in set(results[-1].bad) | set(results[-1].missing)]
        results.append(modelcopy.copy(head, worker, inventory, again, snapshots, options.transport, progress))
    _require(results[-1], ", ".join(wanted), progress)
    after = read_manifests(worker, inventory, list(wanted))
    for repo in wanted:
        differences = mine[repo].differences(after[repo])
        if differences or not after[repo].complete or after[repo].files != mine[repo].files:
            raise SparkpairError(f"{repo} still differs from {head.name} after copying: "
                                 f"{differences[0] if differences else 'incomplete'}", node=worker.name)
    return results


def _missing(repo: str, mine: models.RepoManifest, theirs: models.RepoManifest) -> list[modelcopy.Blob]:
    """The blobs of the head's snapshot that the worker lacks or holds at another size."""
    return [modelcopy.Blob(repo, blob, mine.blobs[blob]) for blob in sorted(set(mine.files.values()))
            if theirs.blobs.get(blob) != mine.blobs.get(blob)]
