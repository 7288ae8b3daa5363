"""The launch as a list of human-readable steps: what `sparkpair render` writes to launch.sh."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from sparkpair.inventory import Inventory
from sparkpair.inventory.profiles import Profile
from sparkpair.render import recipe

HOME = "$HOME"


@dataclass(frozen=True)
class Step:
    """One block of the runbook: a title, the node(s) it runs on, and its shell lines."""

    title: str
    where: str
    lines: tuple[str, ...]


def shell_words(argv: list[str]) -> str:
    """Join argv for a shell, leaving $HOME expandable (it is quoted with double quotes)."""
    return " ".join(f'"{arg}"' if HOME in arg else shlex.quote(arg) for arg in argv)


def launch_steps(inventory: Inventory, profile: Profile, config_files: list[str],
                 starts: list[recipe.Start], spec: recipe.ContainerSpec) -> list[Step]:
    """Every step of `sparkpair launch PROFILE`, in order; config_files: what launch puts in ~/.sparkpair/config;
    starts: the runtime's commands that start the engine, each on its node; spec: the runtime's engine container
    on the head (its home as $HOME)."""
    nodes = inventory.nodes if profile.is_pair else [inventory.head]
    where_all = " and ".join(node.name for node in nodes)
    name = inventory.container.name
    steps = [
        Step("Preflight: the launch-critical checks", "this machine", ("sparkpair doctor",)),
        Step("Files: rendered config in ~/.sparkpair/config, token in ~/.sparkpair/secrets (0600)", where_all,
             tuple(f"# ~/{recipe.NODE_CONFIG_DIR}/{file}" for file in config_files)),
        Step("Engine container", where_all, (shell_words(recipe.docker_run_argv(spec)),)),
        Step("Models into the HF cache, verified by manifest", inventory.head.name,
             tuple(_download_lines(name, profile))),
    ]
    if profile.is_pair:
        steps.append(Step(f"Models to {inventory.worker.name} over the QSFP link", inventory.head.name,
                          tuple(shell_words(recipe.sync_argv(inventory, repo, HOME)) for repo in profile.repos)))
    steps += [
        *(Step("Serve (detached; rank output in the container)", start.node, (_serve_line(inventory, start),))
          for start in starts),
        Step("Readiness: port, /health, /v1/models, one completion", inventory.head.name,
             tuple(_readiness_lines(inventory, profile))),
        Step("Stop", where_all, (f"docker rm -f {shlex.quote(name)}",)),
    ]
    return steps


def _download_lines(container: str, profile: Profile) -> list[str]:
    lines = []
    for repo in profile.repos:
        argv = ["docker", "exec", "-u", "$(id -u):$(id -g)", container] + recipe.download_argv(repo)
        lines.append(" ".join(shlex.quote(a) if not a.startswith("$(") else f'"{a}"' for a in argv))
    if profile.draft:
        _, target = recipe.snapshot_link(profile.draft, "$(cat refs/main)")
        lines.append(f"# stable draft path: {recipe.model_link(profile.draft)} -> {target}")
    return lines


def _serve_line(inventory: Inventory, start: recipe.Start) -> str:
    command = recipe.shell_line(start.argv)
    inner = (f"mkdir -p {recipe.LOG_DIR} && {recipe.secret_exports(start.secret_env)}exec {command} "
             f"> {recipe.LOG_DIR}/serve.log 2>&1")  # an engine secret comes from its file in secrets, never argv
    return f"docker exec -d {shlex.quote(inventory.container.name)} sh -c {shlex.quote(inner)}"


def _readiness_lines(inventory: Inventory, profile: Profile) -> list[str]:
    base = f"http://localhost:{inventory.server.port}"
    body = json.dumps({"model": profile.target, "messages": [{"role": "user", "content": "Paris is great because"}],
                       "max_tokens": 64})
    return [f"curl -sf {base}/health", f"curl -s {base}/v1/models",
            f"curl -s {base}/v1/chat/completions -H 'Content-Type: application/json' -d {shlex.quote(body)}"]
