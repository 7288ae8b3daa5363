"""Checks of what the engine needs: Docker, the image on every node, free ports, models and disk."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sparkpair import paths
from sparkpair.checks import (
    Facts,
    Finding,
    every_node,
    fail,
    ok,
    per_node,
    reachable_nodes,
    skip,
    unreachable_skips,
    warn,
)
from sparkpair.inventory import Inventory
from sparkpair.inventory.profiles import Profile
from sparkpair.probes import NodeFacts, Probe, ProbeFailure, docker, drafts, host, models
from sparkpair.runtimes import runtime_of

GIB = 1024 ** 3
MIN_FREE = GIB  # below this a full cache breaks even a launch with nothing to download
TOKEN_ON_NODE = host.file_nonempty(f"{paths.SECRETS_DIR}/hf_token")
VERIFY_BUDGET_S = 20.0  # doctor hashes model files for at most this long per node and run; the cache keeps the rest


def hub_endpoint(inventory: Inventory) -> str:
    """The hub the engine container downloads from: its HF_ENDPOINT, else huggingface.co."""
    return inventory.container.env.get("HF_ENDPOINT", models.DEFAULT_HUB)


def hub_probe(inventory: Inventory, repo: str) -> Probe[models.HubReach]:
    """Whether a node reaches the hub, asked about repo (never with a token)."""
    return models.hub(hub_endpoint(inventory), repo)


def engine_probes(inventory: Inventory, profile: Profile, verify_budget: float = VERIFY_BUDGET_S) -> list[Probe[Any]]:
    """The probes these checks judge, on one node."""
    cache = inventory.container.hf_cache
    repos = profile.repos
    needs = runtime_of(profile).image_needs(inventory)
    return [host.LISTENERS, host.INFINIBAND_DEVICES, docker.DOCKER_INFO, docker.image_id(inventory.container.image),
            docker.container(inventory.container.name), models.cache_access(cache), host.free_bytes(cache),
            TOKEN_ON_NODE, *(models.manifest(cache, repo) for repo in repos),
            models.content(cache, tuple(repos), verify_budget), hub_probe(inventory, repos[0]),
            *([docker.image_commands(inventory.container.image, needs)] if needs else []),
            *([drafts.training_record(cache, profile.draft)] if profile.draft else [])]


def check_docker(facts: Facts) -> Iterable[Finding]:
    """Proves dockerd answers, the user may use it, the NVIDIA runtime is there, the image is present."""
    user = facts.inventory.cluster.user
    image = facts.inventory.container.image
    for check in ("docker.daemon", "docker.image"):
        yield from unreachable_skips(facts, check)
    for name, node_facts in reachable_nodes(facts):
        identity, info = node_facts.get(host.IDENTITY), node_facts.get(docker.DOCKER_INFO)
        in_group = not isinstance(identity, ProbeFailure) and identity is not None and "docker" in identity.groups
        yield (ok("docker.group", name, f"{user} is in group docker") if in_group else
               fail("docker.group", name, f"{user} is not in group docker",
                    "sudo usermod -aG docker $USER, then log in again"))
        if isinstance(info, ProbeFailure) or info is None:
            denied = "permission denied" in str(info).lower()
            yield fail("docker.daemon", name, f"cannot reach dockerd: {info}",
                       f"sudo usermod -aG docker $USER on {name}, then log in again" if denied else
                       f"sudo systemctl start docker (on {name})")
            yield skip("docker.nvidia-runtime", name, "dockerd unreachable")
            yield skip("docker.image", name, "dockerd unreachable")
            continue
        yield ok("docker.daemon", name, f"Docker {info.server_version}")
        yield (ok("docker.nvidia-runtime", name, "runtime nvidia registered") if "nvidia" in info.runtimes else
               fail("docker.nvidia-runtime", name, f"no nvidia runtime (runtimes: {', '.join(sorted(info.runtimes))})",
                    "sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker"))
        image_id = node_facts.get(docker.image_id(image))
        yield (ok("docker.image", name, f"{image} {image_id[:19]}") if isinstance(image_id, str) else
               fail("docker.image", name, f"{image} is not on this node", f"docker pull {image} (on {name})"))
    yield from _image_match(facts)
    yield from _image_mode(facts)


def _image_mode(facts: Facts) -> Iterable[Finding]:
    """Proves the image has what the runtime's mode runs (vLLM: vllm; in Ray mode ray too)."""
    runtime = runtime_of(facts.profile)
    needs = runtime.image_needs(facts.inventory)
    if not needs:
        return
    image = facts.inventory.container.image
    for name, found in per_node(facts, docker.image_commands(image, needs)):
        missing = [command for command in needs if not isinstance(found, frozenset) or command not in found]
        if isinstance(found, ProbeFailure) or found is None:
            yield skip("docker.image-mode", name, f"cannot look inside {image} ({found})")
        elif missing:
            mode, fix = runtime.image_needs_fix(facts.inventory, missing)
            yield fail("docker.image-mode", name, f"{image} has no {', '.join(missing)} on its PATH ({mode})", fix)
        else:
            yield ok("docker.image-mode", name, f"{image} has {', '.join(needs)}")


def _image_match(facts: Facts) -> Iterable[Finding]:
    probe = docker.image_id(facts.inventory.container.image)
    found: dict[str, object] = {name: node_facts.get(probe) for name, node_facts in reachable_nodes(facts)}
    ids = {name: value for name, value in found.items() if isinstance(value, str)}
    if len(found) < 2 or len(ids) < len(found):
        yield skip("docker.image-match", facts.whole, f"needs the image on {facts.every}")
        return
    detail = ", ".join(f"{name}: {image_id[:19]}" for name, image_id in ids.items())
    yield ok("docker.image-match", facts.whole, f"same image ID ({detail})") if len(set(ids.values())) == 1 else \
        fail("docker.image-match", facts.whole, f"different image IDs under one tag ({detail})",
             f"docker pull {facts.inventory.container.image} on {facts.every} (or docker save | docker load from "
             "the head)")


def check_container(facts: Facts) -> Iterable[Finding]:
    """Finds a container with the engine's name that would block or confuse a launch."""
    container = facts.inventory.container.name
    for name, state in per_node(facts, docker.container(container)):
        if isinstance(state, ProbeFailure):
            yield skip("docker.container", name, str(state))
        elif state is None:
            yield ok("docker.container", name, f"no container named {container}")
        elif "sparkpair.node" not in state.labels:
            yield warn("docker.container", name, f"{container} exists ({state.status}) and was not started by "
                                                 "sparkpair", f"docker rm -f {container} (on {name})")
        elif not state.running:
            yield warn("docker.container", name, f"stale {container} ({state.status})", "sparkpair stop")
        else:
            yield ok("docker.container", name, f"engine container {container} running since {state.started_at[:19]}")


def check_ports(facts: Facts) -> Iterable[Finding]:
    """Proves the serving port (and the engine's metrics port when it has its own, and any other port it binds:
    Triton's gRPC) is free on the head, and sshd_port on both for the sshd transport."""
    inventory = facts.inventory
    runtime = runtime_of(facts.profile)
    metrics = runtime.metrics_port(inventory)
    serving = [("ports.serving", inventory.server.port, "server.port")]
    if metrics != inventory.server.port:
        serving.append(("ports.serving", metrics, f"the metrics port in engines.{facts.profile.runtime}.options"))
    serving += [("ports.serving", port, setting) for port, setting in runtime.other_ports(inventory).items()]
    wanted = {facts.rank_nodes()[0]: serving}
    if inventory.container.mpi_transport == "sshd":
        for node in inventory.nodes:
            wanted.setdefault(node.name, []).append(("ports.sshd", inventory.container.sshd_port, "container.sshd_port"))
    for name, node_facts in reachable_nodes(facts):
        listeners, ours = node_facts.get(host.LISTENERS), facts.container_running(name)
        for check, port, setting in wanted.get(name, []):
            holders = [] if isinstance(listeners, ProbeFailure) else [held for held in listeners or [] if held.port == port]
            if isinstance(listeners, ProbeFailure):
                yield skip(check, name, str(listeners))
            elif not holders:
                yield ok(check, name, f"port {port} free")
            elif ours:
                yield ok(check, name, f"port {port} held by the running engine ({holders[0].process})")
            else:
                yield fail(check, name, f"port {port} held by {holders[0].process}",
                           f"stop {holders[0].process} on {name}, or change {setting}")


def check_models(facts: Facts) -> Iterable[Finding]:
    """Proves target and draft are complete and identical on the nodes, the cache is writable,
    disk suffices for what is missing, and a token exists when something must be downloaded."""
    profile = facts.profile
    nodes = facts.rank_nodes()
    missing_anywhere = False
    cache = facts.inventory.container.hf_cache
    for name, node_facts in reachable_nodes(facts):
        if name not in nodes:
            continue
        missing_bytes = 0.0
        for repo, estimate in ((profile.target, profile.target_gib), (profile.draft, profile.draft_gib)):
            if repo is None:
                continue
            manifest = node_facts.get(models.manifest(cache, repo))
            if isinstance(manifest, ProbeFailure) or manifest is None:
                yield fail("models.present", name, f"{repo}: {manifest}")
            elif manifest.unsafe:
                yield fail("models.present", name, f"{repo}: the cache holds an entry sparkpair refuses to use: "
                                                   f"{manifest.unsafe[0]}",
                           f"remove {cache}/hub/{models.repo_dirname(repo)} on {name}, then sparkpair launch")
                continue
            elif manifest.complete:
                yield ok("models.present", name, f"{repo} @ {str(manifest.revision)[:12]}, {len(manifest.files)} files, "
                                                 f"{manifest.size / GIB:.2f} GiB")
                continue
            else:
                state = "partly downloaded" if manifest.present or manifest.incomplete else "not in the HF cache"
                yield warn("models.present", name, f"{repo} {state}; launch downloads it", "sparkpair launch")
            missing_anywhere = True
            missing_bytes += estimate * GIB
        yield from _cache_findings(name, node_facts, cache, missing_bytes)
    yield from _model_match(facts, nodes)
    yield from _content(facts, nodes)
    yield from _trained_draft(facts, nodes)
    unjudged = [name for name in nodes if name in facts.unreachable]
    if unjudged and not missing_anywhere:   # "nothing to download" is unknown until every rank node answers
        because = f"depends on models.present, which {', '.join(unjudged)} (unreachable) could not answer"
        yield skip("models.token", facts.whole, because)
        yield skip("models.hub", facts.whole, because)
        return
    yield _token(facts, missing_anywhere)
    yield _hub(facts, nodes, missing_anywhere)


def _trained_draft(facts: Facts, nodes: list[str]) -> Iterable[Finding]:
    """models.draft-record: a draft `sparkpair train-draft` made says what it was trained from; WARN when that
    is not the profile's target at the revision the node holds (nothing for drafts without a record)."""
    profile, cache = facts.profile, facts.inventory.container.hf_cache
    if profile.draft is None:
        return
    for name, node_facts in reachable_nodes(facts):
        record = node_facts.get(drafts.training_record(cache, profile.draft))
        if name not in nodes or record is None or isinstance(record, ProbeFailure):
            continue
        target = node_facts.get(models.manifest(cache, profile.target))
        revision = "" if isinstance(target, ProbeFailure) or target is None else str(target.revision or "")
        trained = f"{record.base_model} @ {record.base_revision[:12] or '?'}"
        if record.base_model != profile.target or (revision and record.base_revision != revision):
            yield warn("models.draft-record", name, f"{profile.draft} was trained for {trained}, but the target here "
                       f"is {profile.target} @ {revision[:12] or '?'}: its acceptance may be far lower",
                       f"sparkpair train-draft {profile.name} --name {profile.draft} (trains it again for this target)")
        else:
            how = f", {record.mode} on {record.device} in {record.precision}" if record.mode else ""
            vocab = f", draft vocabulary {record.draft_vocab_size} of {record.vocab_size}" \
                if 0 < record.draft_vocab_size < record.vocab_size else \
                (f", vocabulary {record.vocab_size}" if record.vocab_size else "")
            yield ok("models.draft-record", name, f"{profile.draft}: trained by sparkpair train-draft for {trained}, "
                     f"{record.steps} steps{how}{vocab}, ModelOpt {record.modelopt_version or '?'}, "
                     f"data {record.data_sha256[:12]}")


def _cache_findings(name: str, node_facts: NodeFacts, cache: str, missing_bytes: float) -> Iterable[Finding]:
    access, free = node_facts.get(models.cache_access(cache)), node_facts.get(host.free_bytes(cache))
    if isinstance(access, ProbeFailure) or access is None:
        yield fail("models.writable", name, f"cannot inspect the HF cache ({access})")
    elif not access[0] or access[1]:
        owner = f"; {access[1]} belongs to another user" if access[1] else ""
        yield fail("models.writable", name, f"HF cache not writable by the user{owner}",
                   "sudo chown -R $USER: ~/.cache/huggingface (on " + name + ")")
    else:
        yield ok("models.writable", name, "HF cache writable, files owned by the user")
    if isinstance(free, ProbeFailure) or free is None:
        yield skip("models.disk", name, f"free space unknown ({free})")
    elif free < missing_bytes:
        yield fail("models.disk", name, f"{free / GIB:.2f} GiB free, {missing_bytes / GIB:.2f} GiB to download",
                   f"free disk space under the HF cache on {name}, or point container.hf_cache at a bigger disk")
    elif free < MIN_FREE:
        yield warn("models.disk", name, f"{free / GIB:.2f} GiB free under the HF cache (nothing to download): "
                                        "HF locks, sparkpair's model links and a new revision cannot be written",
                   f"free disk space under the HF cache on {name}")
    else:
        yield ok("models.disk", name, f"{free / GIB:.1f} GiB free, {missing_bytes / GIB:.2f} GiB to download")


def _model_match(facts: Facts, nodes: list[str]) -> Iterable[Finding]:
    """models.match across the rank nodes: every node's manifest of each repo against the first's (the serving
    node's); one FAIL per node that differs, naming it. Two nodes say it as they always did."""
    if len(nodes) < 2:
        return
    profile = facts.profile
    two = len(nodes) == 2
    whole, every = facts.whole, every_node(len(nodes))
    for repo in profile.repos:
        manifests = [facts.fact(n, models.manifest(facts.inventory.container.hf_cache, repo)) for n in nodes]
        if any(m is None or isinstance(m, ProbeFailure) or not m.complete for m in manifests):
            yield skip("models.match", whole, f"{repo}: not complete on {every} yet")
            continue
        differing = [(name, found) for name, manifest in zip(nodes[1:], manifests[1:], strict=True)
                     if (found := manifests[0].differences(manifest))]
        if not differing:
            yield ok("models.match", whole, f"{repo}: same revision, blobs and sizes on {'both' if two else every}")
        for name, differences in differing:
            yield fail("models.match", whole, f"{repo} differs between {nodes[0]} and {name}: {differences[0]}",
                       "sparkpair launch (re-syncs the worker from the head over the QSFP link)" if two else
                       f"copy {repo} to {name} again from {nodes[0]} (launch over more than two nodes is not done yet: "
                       "docs/cluster.md)")


def _content(facts: Facts, nodes: list[str]) -> Iterable[Finding]:
    """models.match per node: every file's content is what its blob name says (sha256 for LFS files,
    the git blob sha1 for the others), and every snapshot entry is a link to such a blob."""
    profile = facts.profile
    cache = facts.inventory.container.hf_cache
    for name, node_facts in reachable_nodes(facts):
        found = next((value for _, value in node_facts.of_kind(models.CONTENT)), None)
        if name not in nodes or found is None:
            continue
        if isinstance(found, ProbeFailure):
            yield skip("models.match", name, f"cannot verify the model files' content: {found}")
            continue
        fix = "sparkpair launch (downloads it again)" if name == nodes[0] else \
            f"sparkpair launch (copies it again from {nodes[0]})"
        clean = []
        for repo in profile.repos:
            content, manifest = found.of(repo), node_facts.value(models.manifest(cache, repo))
            files = manifest.files if isinstance(manifest, models.RepoManifest) else {}
            for blob, reason in sorted(content.bad.items()):
                for path in sorted(path for path, target in files.items() if target == blob) or [f"blob {blob}"]:
                    yield fail("models.match", name, f"{repo}: {path} is corrupt on {name} ({reason}; its blob "
                                                     f"{blob[:12]}... must hash to its own name)", fix)
            for path, problem in content.links:
                if problem == "not a link to a blob":
                    yield fail("models.match", name, f"{repo}: snapshots/{path} is {problem} on {name}", fix)
            if content.unverified:
                yield warn("models.match", name, f"{repo}: {len(content.unverified)} of {content.blobs} files not "
                                                 f"verified yet (doctor hashes for at most {VERIFY_BUDGET_S:.0f} s "
                                                 "per run; its node cache keeps what it verified)",
                           "sparkpair launch (verifies every file), or run doctor again")
            if content.verified:
                clean.append(f"{repo.split('/')[-1]} ({content.blobs} files)")
        if clean and len(clean) == len(profile.repos):
            hashed = f"{found.hashed_bytes / GIB:.2f} GiB hashed now" if found.hashed_bytes else "all vouched for by " \
                "the node's cache of verified files"
            yield ok("models.match", name, f"content verified: {', '.join(clean)}; {hashed}")


def hub_verdict(inventory: Inventory, reach: Mapping[str, object]) -> tuple[bool, str]:
    """Whether every rank node reaches the hub (so `--split-download` can fetch half on each of two), and why
    not. Two nodes are `both nodes` (as always), every rank node of more `all N nodes`, one rank node its name."""
    endpoint = hub_endpoint(inventory)
    missing = [f"{name}: {value.detail if isinstance(value, models.HubReach) else value}"
               for name, value in reach.items() if not (isinstance(value, models.HubReach) and value.reachable)]
    if missing:
        return False, f"{endpoint} not reached from {'; '.join(missing)}"
    count = len(inventory.nodes)
    asked = every_node(count) if count == 2 or len(reach) == count else ", ".join(reach)
    return True, f"{endpoint} answers {asked}"


def _hub(facts: Facts, nodes: list[str], needed: bool) -> Finding:
    """models.hub: whether the rank nodes reach the hub (one unauthenticated request each, no token)."""
    probe = hub_probe(facts.inventory, facts.profile.repos[0])
    reach = {name: facts.fact(name, probe) for name in nodes if name not in facts.unreachable}
    if any(value is None for value in reach.values()) or not reach:
        return skip("models.hub", facts.whole, "not asked")
    both, detail = hub_verdict(facts.inventory, reach)
    if both and len(nodes) > 1 and len(facts.inventory.nodes) == 2:
        return ok("models.hub", facts.whole, f"{detail}: `launch --split-download` can fetch half the files on each")
    if both and len(nodes) > 1:  # more than two: launch refuses --split-download (cli/engine.py, docs/cluster.md)
        return ok("models.hub", facts.whole, f"{detail}: launch downloads on the head, then copies fan out to every "
                                             "node over the QSFP links (--split-download is for two nodes only)")
    if both:
        return ok("models.hub", facts.whole, detail)
    head = reach.get(nodes[0])
    if isinstance(head, models.HubReach) and head.reachable:
        return ok("models.hub", facts.whole, f"{detail}: the head downloads alone (no --split-download)")
    if needed:
        return warn("models.hub", nodes[0], f"{detail}, and a model must be downloaded",
                    f"check DNS, proxy and firewall on {nodes[0]}, or stage the models and launch with "
                    "--model-source local:PATH")
    return ok("models.hub", facts.whole, f"nothing to download ({detail})")


def _token(facts: Facts, needed: bool) -> Finding:
    on_nodes = any(node_facts.get(TOKEN_ON_NODE) is True for node_facts in facts.nodes.values())
    if not needed:
        return ok("models.token", facts.whole, "nothing to download")
    if facts.operator_token or on_nodes:
        where = "this machine" if facts.operator_token else "the nodes"
        return ok("models.token", facts.whole, f"HF token available on {where} (not shown)")
    return warn("models.token", facts.whole, "no HF token: downloads of gated repos will fail",
                "export HF_TOKEN=... (or HF_TOKEN_PATH=FILE) before sparkpair launch; it travels as a 0600 file")
