"""Per-rank checks that the model weights exist on this rank's own node.

Each TensorRT-LLM rank loads its shard of the target (and the draft head) from its own
disk, so a model present only on the head node fails on the worker. Messages follow
transformers' wording and always start with ``OSError: rank N on HOST:`` and name the
missing path.
"""

import os

from . import hub_layout

OFFLINE_HINT = ("Check your internet connection or see how to run the library in offline mode at "
                "'https://huggingface.co/docs/transformers/installation#offline-mode'.")


def _prefix(rank, host):
    return f"OSError: rank {rank} on {host}:"


def _check_local_dir(path, what, rank, host):
    expanded = os.path.expanduser(path)
    if not os.path.isdir(expanded):
        return (f"{_prefix(rank, host)} {what} {path} does not exist on this node, and we couldn't find "
                f"them in the cached files either (missing path: {expanded}). The weights must be present "
                "on every node, since each rank loads its own shard.")
    config = os.path.join(expanded, "config.json")
    if not os.path.isfile(config):
        return (f"{_prefix(rank, host)} {path} does not appear to have a file named config.json "
                f"(missing path: {config}).")
    return None


def _check_hub_id(repo_id, revision, what, rank, host, env):
    cache = hub_layout.hub_cache_dir(env)
    found, missing = hub_layout.find_cached_file(cache, repo_id, "config.json", revision or "main")
    if found is not None:
        return None
    return (f"{_prefix(rank, host)} We couldn't connect to 'https://huggingface.co' to load the files of "
            f"{what} {repo_id} (revision {revision or 'main'}), and couldn't find them in the cached files. "
            f"{OFFLINE_HINT} Looked in the Hugging Face cache {cache} (missing path: {missing}).")


def check_model(name, revision, what, rank, host, env=None):
    """None when ``name`` (hub id or local directory) is loadable on this node, else the message."""
    env = os.environ if env is None else env
    if hub_layout.looks_like_local_path(name):
        return _check_local_dir(name, what, rank, host)
    return _check_hub_id(name, revision, what, rank, host, env)


def _interface_matches(spec, names):
    """NCCL_SOCKET_IFNAME semantics: comma list of prefixes; `=` exact names; `^` excludes."""
    exclude = spec.startswith("^")
    exact = spec.lstrip("^").startswith("=")
    wanted = [w for w in spec.lstrip("^").lstrip("=").split(",") if w]
    hit = [n for n in names if any(n == w if exact else n.startswith(w) for w in wanted)]
    return [n for n in names if n not in hit and n != "lo"] if exclude else hit


def check_socket_interfaces(rank, host, env=None):
    """None when NCCL's bootstrap finds an interface NCCL_SOCKET_IFNAME allows, else NCCL's failure.

    Real NCCL gives up at bootstrap when the variable matches no interface of the rank's node.
    """
    env = os.environ if env is None else env
    spec = env.get("NCCL_SOCKET_IFNAME", "")
    if not spec:
        return None
    import socket
    names = [name for _, name in socket.if_nameindex()]
    if _interface_matches(spec, names):
        return None
    return (f"{host}:{os.getpid()}:{os.getpid()} [{rank}] NCCL WARN Bootstrap : no socket interface found\n"
            f"RuntimeError: rank {rank} on {host}: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO "
            f"for details); NCCL_SOCKET_IFNAME={spec} matches none of {', '.join(names)}")


def check_node(config, rank, host, env=None):
    """All problems of this rank: the NCCL interfaces, the target model and, when speculation needs one,
    the draft model."""
    problems = []
    interfaces = check_socket_interfaces(rank, host, env)
    if interfaces:
        problems.append(interfaces)
    target = check_model(config.model, config.revision, "model", rank, host, env)
    if target:
        problems.append(target)
    spec = config.speculative
    if spec and spec.draft_model:
        draft = check_model(spec.draft_model, None, "speculative model directory", rank, host, env)
        if draft:
            problems.append(draft)
    return problems


def model_config_path(name, revision, env=None):
    """Path of the model's config.json on this node, or None."""
    env = os.environ if env is None else env
    if hub_layout.looks_like_local_path(name):
        path = os.path.join(os.path.expanduser(name), "config.json")
        return path if os.path.isfile(path) else None
    found, _missing = hub_layout.find_cached_file(hub_layout.hub_cache_dir(env), name, "config.json",
                                                  revision or "main")
    return str(found) if found else None
