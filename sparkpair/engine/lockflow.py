"""The lock of a pair, gathered now: one probe round per node, turned into a `lockfile.Lock`.

`lock_probes` are what a lock holds, asked of one node in one round trip: the kernel, nvidia-smi's driver
and CUDA, the ConnectX-7 firmware, the twins' MTU, the netplan files, the engine image's ID, digests and
environment, each node's RoCE devices and GID index (the NCCL settings its container gets), and the models'
manifests and content, every file hashed (the node's cache of verified blobs keeps that cheap). `gather_lock`
runs them on the named nodes at once; `node_lock` turns one node's facts into its `NodeLock` (pure).
`launch_lock` and `drift` are launch's (`--locked` refuses on any difference, before anything changes);
`sparkpair diff` and `sparkpair bundle` share the rest.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from sparkpair import __version__, probes
from sparkpair.checks import roce
from sparkpair.engine import fabric
from sparkpair.engine.bundle import Collected
from sparkpair.engine.launch import LaunchOptions, resolve
from sparkpair.errors import SparkpairError
from sparkpair.inventory import Inventory
from sparkpair.inventory.messages import one_line
from sparkpair.inventory.profiles import Profile
from sparkpair.lockfile import Lock, ModelLock, NodeLock
from sparkpair.lockfile.compare import ABSENT, PAIR, UNREADABLE, Difference, compare, differences_json, rows_json, side_by_side
from sparkpair.lockfile.store import read_lock
from sparkpair.probes import NodeFacts, Probe, ProbeFailure, docker, host, models, net, rdma
from sparkpair.runtimes import rank_nodes, runtime_of
from sparkpair.transport import Node, Pair

LOCK_ROUND_S = 900.0  # one node's round: hashing model files the node's cache does not vouch for yet takes long
HASH_BUDGET_S = 780.0  # seconds of hashing in that round; what is left is `not verified`
ENV_PREFIXES = ("NCCL_", "UCX_", "OMPI_", "OPAL_", "PMIX_", "GLOO_", "TORCH_NCCL_", "MPI_")
SECRET_WORDS = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL", re.IGNORECASE)
VERSION_VALUE = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_~-]{0,99}")
OCI_VERSION = "org.opencontainers.image.version"
WHOLE = "*"  # the key of a map whose probe failed: `netplan *: unreadable`


def lock_probes(inventory: Inventory, profile: Profile) -> list[Probe[Any]]:
    """Every probe a lock needs on one node (one round trip); model files are hashed without a budget."""
    cache = inventory.container.hf_cache
    return [host.KERNEL, host.GPU_VERSIONS, rdma.FIRMWARE, net.INTERFACES, net.NETPLAN_FILES,
            docker.image_config(inventory.container.image), *roce.roce_probes(),
            *(models.manifest(cache, repo) for repo in profile.repos),
            models.content(cache, tuple(profile.repos), HASH_BUDGET_S)]


def gather_lock(pair: Pair, inventory: Inventory, profile: Profile, nodes: list[str],
                inventory_file: Path | None, timeout: float = LOCK_ROUND_S) -> Lock:
    """The lock of what the named nodes hold now (one probe round each, all at once); an unreachable node
    raises its SparkpairError (`PairError`)."""
    asked = lock_probes(inventory, profile)

    def gather(connection: Node) -> NodeFacts:
        return probes.gather(connection, asked, timeout=timeout)

    found = pair.each(gather, names=nodes).raise_failures()
    return Lock(sparkpair=__version__, inventory_sha256=file_sha256(inventory_file), profile=profile.name,
                runtime=profile.runtime, image=inventory.container.image,
                nodes={name: node_lock(inventory, profile, name, found[name]) for name in nodes},
                written=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


def file_sha256(path: Path | None) -> str:
    """sha256 of the file's bytes (the inventory as the operator wrote it); ABSENT without one."""
    if path is None or not path.is_file():
        return ABSENT
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 16), b""):
            digest.update(chunk)
    return digest.hexdigest()


def node_lock(inventory: Inventory, profile: Profile, name: str, facts: NodeFacts) -> NodeLock:
    """One node's lock from its facts (pure): UNREADABLE wherever a probe failed."""
    image = facts.get(docker.image_config(inventory.container.image))
    versions = facts.value(host.GPU_VERSIONS)
    node_fabric = roce.node_fabric(inventory, name, facts)
    runtime = runtime_of(profile)
    rendered = fabric.node_files(inventory, profile, {name: node_fabric})[name]
    environment = runtime.container_env(inventory, inventory.node(name), node_fabric)
    return NodeLock(
        image_id=_image_value(image, lambda config: config.image_id),
        image_digests=image.repo_digests if isinstance(image, docker.ImageConfig) else (),
        runtime_version=_image_value(image, lambda config: runtime_version(config, runtime.name)),
        driver=versions.driver if versions else None, cuda=versions.cuda if versions else None,
        kernel=facts.value(host.KERNEL),
        firmware=_or_unreadable(facts.get(rdma.FIRMWARE), lambda found: dict(found)),
        mtu=_mtus(inventory, name, facts),
        netplan=_or_unreadable(facts.get(net.NETPLAN_FILES), lambda found: {
            path: sha256(own_addresses_masked(inventory, name, item.content)) for path, item in found.items()}),
        environment={key: value for key, value in sorted(environment.items())
                     if key.startswith(ENV_PREFIXES) and not SECRET_WORDS.search(key)},
        rendered={item.path: sha256(item.content) for item in rendered},
        models=_models(inventory, profile, facts))


def own_addresses_masked(inventory: Inventory, name: str, text: str) -> str:
    """text (a netplan file) with the node's own words the inventory gives it (its name, its management host and
    its twins' addresses) written as `{node}`, `{host}`, `{link TWIN}`: both nodes' files then hash alike when they
    differ only in those, and any other change (an address the inventory does not name) still shows."""
    node = inventory.node(name)
    own = {name: "{node}", node.host: "{host}",
           **{str(address.ip): f"{{link {twin}}}" for twin, address in node.links.items()}}
    for word, placeholder in sorted(own.items(), key=lambda item: -len(item[0])):  # `spark-a.lan` before `spark-a`
        text = re.sub(rf"(?<![0-9A-Za-z_.:-]){re.escape(word)}(?![0-9A-Za-z_-])", placeholder, text)
    return text


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def _image_value(image: object, read: Any) -> str | None:
    """read(image) for an image the node has; ABSENT when it has none; None (unreadable) when the probe failed."""
    if isinstance(image, docker.ImageConfig):
        value: str | None = read(image)
        return value
    return ABSENT if image is None else None


def runtime_version(image: docker.ImageConfig, runtime: str) -> str:
    """The engine's version as the image states it: an environment variable `..._VERSION` naming the runtime
    (`TRTLLM_VERSION`, `TRT_LLM_VERSION`, `VLLM_VERSION`), else the OCI version label; `not stated by the image`
    otherwise (sparkpair starts no container to ask). A value that is not a plain version is not taken."""
    word = runtime.upper().replace("_", "")
    named = [value for key, value in sorted(image.env.items())
             if key.endswith("_VERSION") and word in key.removesuffix("_VERSION").replace("_", "")]
    for value in [*named, image.labels.get(OCI_VERSION, "")]:
        if VERSION_VALUE.fullmatch(value):
            return value
    return "not stated by the image"


def _or_unreadable(found: object, read: Any) -> dict[str, str]:
    if found is None or isinstance(found, ProbeFailure):
        return {WHOLE: UNREADABLE}
    value: dict[str, str] = read(found)
    return value


def _mtus(inventory: Inventory, name: str, facts: NodeFacts) -> dict[str, str]:
    """Each QSFP twin the inventory names on the node -> its MTU now (ABSENT: no such interface)."""
    interfaces = facts.get(net.INTERFACES)
    if not isinstance(interfaces, dict):
        return {WHOLE: UNREADABLE}
    return {twin: str(interfaces[twin].mtu) if twin in interfaces else ABSENT
            for twin in inventory.node(name).links}


def _models(inventory: Inventory, profile: Profile, facts: NodeFacts) -> dict[str, ModelLock]:
    """Each repo: the revision refs/main names, and each snapshot file's content hash as verified."""
    cache = inventory.container.hf_cache
    content = facts.get(models.content(cache, tuple(profile.repos), HASH_BUDGET_S))
    locked = {}
    for repo in profile.repos:
        manifest = facts.get(models.manifest(cache, repo))
        if not isinstance(manifest, models.RepoManifest):
            locked[repo] = ModelLock(None, {WHOLE: UNREADABLE})
            continue
        checked = content.of(repo) if isinstance(content, models.ContentCheck) else None
        locked[repo] = ModelLock(manifest.revision, {
            path: file_hash(blob, manifest, checked) for path, blob in sorted(manifest.files.items())})
    return locked


def file_hash(blob: str, manifest: models.RepoManifest, checked: models.RepoContent | None) -> str:
    """A snapshot file's content hash: its blob's name once verification found the content hashes to it;
    otherwise what was found instead (`content hashes to ...`, `missing`, `not verified`)."""
    if blob not in manifest.blobs:
        return "missing (its blob is not in the cache)"
    if checked is None:
        return "not verified (the verification did not answer)"
    if blob in checked.bad:
        return models.shown(checked.bad[blob])
    if blob in checked.unverified:
        return "not verified"
    return blob


def launch_lock(pair: Pair, inventory: Inventory, options: LaunchOptions, inventory_file: Path | None) -> Lock:
    """The lock of what this launch runs (or would run) on its rank nodes: the profile on the runtime asked."""
    view, profile = resolve(inventory, options)
    return gather_lock(pair, view, profile, rank_nodes(view, profile, options.node), inventory_file)


def drift(pair: Pair, inventory: Inventory, options: LaunchOptions, locked: Lock,
          inventory_file: Path | None) -> list[Difference]:
    """Every difference between locked and what the launch's rank nodes hold now (read-only: one round each).
    A node that cannot be asked is one difference (`node`: found `unreadable`, the reason in its fix): --locked
    refuses it; without, it is a warning and launch's preflight says what is wrong."""
    try:
        return compare(locked, launch_lock(pair, inventory, options, inventory_file))
    except SparkpairError as error:
        return [Difference(error.node or PAIR, "node", "locked", UNREADABLE,
                           f"{one_line(error.lines()[0])}: sparkpair doctor says why")]


def bundle_files(pair: Pair, inventory: Inventory, profile: Profile, inventory_file: Path | None,
                 lock_file: Path) -> tuple[list[Collected], list[str]]:
    """What `sparkpair bundle` holds of the lock: the lock at lock_file (validated, then written again: no byte of
    the raw file), every node side by side (diff.json) and the nodes against the lock (diff-lock.json); and what
    could not be collected, with why."""
    files, missing = [], []
    try:
        locked = read_lock(lock_file)
    except SparkpairError as error:
        locked, missing = None, [f"sparkpair.lock: {error.lines()[0]}"]
    if locked is not None:
        files.append(Collected("sparkpair.lock", locked.to_json(), str(lock_file)))
    names = [node.name for node in inventory.nodes]
    try:
        found = gather_lock(pair, inventory, profile, names, inventory_file)
    except SparkpairError as error:
        return files, [*missing, f"diff.json: not collected ({error.lines()[0]})"]
    rows = side_by_side(found, *names)
    files.append(Collected("diff.json", json.dumps(rows_json(rows, names), indent=2),
                           "sparkpair diff --json"))
    if locked is not None:
        locked_nodes = replace(found, nodes={name: lock for name, lock in found.nodes.items() if name in locked.nodes})
        differences = compare(locked, locked_nodes)  # a single-node profile's lock names its one node
        files.append(Collected("diff-lock.json", json.dumps(differences_json(differences, str(lock_file)), indent=2),
                               f"sparkpair diff --lock {lock_file} --json"))
    return files, missing
