"""Checks of what the engine needs: Docker, the image on both nodes, free ports, models and disk."""

from __future__ import annotations

from collections.abc import Iterable

from sparkpair.checks import Facts, Finding, fail, ok, per_node, skip, unreachable_skips, warn
from sparkpair.probes import ProbeFailure

GIB = 1024 ** 3
MIN_FREE = GIB  # below this a full cache breaks even a launch with nothing to download


def check_docker(facts: Facts) -> Iterable[Finding]:
    """Proves dockerd answers, the user may use it, the NVIDIA runtime is there, the image is present."""
    user = facts.inventory.cluster.user
    image = facts.inventory.container.image
    for check in ("docker.daemon", "docker.image"):
        yield from unreachable_skips(facts, check)
    for name, node_facts in per_node(facts):
        identity, info = node_facts.get("identity"), node_facts.get("docker_info")
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
        image_id = node_facts.get("image_id")
        yield (ok("docker.image", name, f"{image} {image_id[:19]}") if isinstance(image_id, str) else
               fail("docker.image", name, f"{image} is not on this node", f"docker pull {image} (on {name})"))
    yield from _image_match(facts)


def _image_match(facts: Facts) -> Iterable[Finding]:
    ids = {name: f.get("image_id") for name, f in facts.nodes.items() if name not in facts.unreachable}
    if len(ids) < 2 or not all(isinstance(i, str) for i in ids.values()):
        yield skip("docker.image-match", "pair", "needs the image on both nodes")
        return
    detail = ", ".join(f"{name}: {image_id[:19]}" for name, image_id in ids.items())
    yield ok("docker.image-match", "pair", f"same image ID ({detail})") if len(set(ids.values())) == 1 else \
        fail("docker.image-match", "pair", f"different image IDs under one tag ({detail})",
             f"docker pull {facts.inventory.container.image} on both nodes (or docker save | docker load from the head)")


def check_container(facts: Facts) -> Iterable[Finding]:
    """Finds a container with the engine's name that would block or confuse a launch."""
    container = facts.inventory.container.name
    for name, state in per_node(facts, "container"):
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
    """Proves the serving port is free on the head, and sshd_port on both for the sshd transport."""
    inventory = facts.inventory
    wanted = {facts.rank_nodes()[0]: [("ports.serving", inventory.server.port)]}
    if inventory.container.mpi_transport == "sshd":
        for node in inventory.nodes:
            wanted.setdefault(node.name, []).append(("ports.sshd", inventory.container.sshd_port))
    for name, node_facts in per_node(facts):
        listeners, ours = node_facts.get("listeners"), facts.container_running(name)
        for check, port in wanted.get(name, []):
            holders = [] if isinstance(listeners, ProbeFailure) else [l for l in listeners or [] if l.port == port]
            if isinstance(listeners, ProbeFailure):
                yield skip(check, name, str(listeners))
            elif not holders:
                yield ok(check, name, f"port {port} free")
            elif ours:
                yield ok(check, name, f"port {port} held by the running engine ({holders[0].process})")
            else:
                yield fail(check, name, f"port {port} held by {holders[0].process}",
                           f"stop {holders[0].process} on {name}, or change "
                           f"{'server.port' if check == 'ports.serving' else 'container.sshd_port'}")


def check_models(facts: Facts) -> Iterable[Finding]:
    """Proves target and draft are complete and identical on the nodes, the cache is writable,
    disk suffices for what is missing, and a token exists when something must be downloaded."""
    profile = facts.inventory.profile(facts.profile)
    nodes = facts.rank_nodes()
    missing_anywhere = False
    for name, node_facts in per_node(facts):
        if name not in nodes:
            continue
        missing_bytes = 0.0
        for repo, estimate in ((profile.target, profile.target_gib), (profile.draft, profile.draft_gib)):
            if repo is None:
                continue
            manifest = node_facts.get(f"model {repo}")
            if isinstance(manifest, ProbeFailure):
                yield fail("models.present", name, f"{repo}: {manifest}")
            elif manifest.complete:
                yield ok("models.present", name, f"{repo} @ {manifest.revision[:12]}, {len(manifest.files)} files, "
                                                 f"{manifest.size / GIB:.2f} GiB")
                continue
            else:
                state = "partly downloaded" if manifest.present or manifest.incomplete else "not in the HF cache"
                yield warn("models.present", name, f"{repo} {state}; launch downloads it", "sparkpair launch")
            missing_anywhere = True
            missing_bytes += estimate * GIB
        yield from _cache_findings(name, node_facts, missing_bytes)
    yield from _model_match(facts, nodes)
    yield _token(facts, missing_anywhere)


def _cache_findings(name: str, node_facts: dict, missing_bytes: float) -> Iterable[Finding]:
    access = node_facts.get("cache_access")
    free = next((value for key, value in node_facts.items() if key.startswith("free ")), None)
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
    if len(nodes) < 2:
        return
    profile = facts.inventory.profile(facts.profile)
    for repo in profile.repos:
        manifests = [facts.nodes.get(n, {}).get(f"model {repo}") for n in nodes]
        if any(m is None or isinstance(m, ProbeFailure) or not m.complete for m in manifests):
            yield skip("models.match", "pair", f"{repo}: not complete on both nodes yet")
            continue
        differences = manifests[0].differences(manifests[1])
        yield ok("models.match", "pair", f"{repo}: same revision, blobs and sizes on both") if not differences else \
            fail("models.match", "pair", f"{repo} differs between {nodes[0]} and {nodes[1]}: {differences[0]}",
                 "sparkpair launch (re-syncs the worker from the head over the QSFP link)")


def _token(facts: Facts, needed: bool) -> Finding:
    on_nodes = any(f.get("token_on_node") is True for f in facts.nodes.values())
    if not needed:
        return ok("models.token", "pair", "nothing to download")
    if facts.operator_token or on_nodes:
        where = "this machine" if facts.operator_token else "the nodes"
        return ok("models.token", "pair", f"HF token available on {where} (not shown)")
    return warn("models.token", "pair", "no HF token: downloads of gated repos will fail",
                "export HF_TOKEN=... (or HF_TOKEN_PATH=FILE) before sparkpair launch; it travels as a 0600 file")
