"""The stand-in Hugging Face hub on the management network (simengine.hub_server), so that
"does this node reach the hub" is a real HTTP question on the simulated pair.

It runs on this machine, in the root namespace, bound to the management gateway address (the
operator's side, as the internet is on a real pair), so only the nodes and loopback-range tools
reach it. The inventory points the engine container's HF_ENDPOINT at it; the stand-in `hf` asks it
for the revision before it makes any file, as huggingface_hub does. `up` starts it, `down` stops it.
`serve_folders` names the repos it serves whole, from folders on this machine, to the real
huggingface_hub (the tiny vLLM models: `scripts/testbed vllm` calls it once they exist); the hub
reads that catalogue (HUB_CATALOGUE) again whenever it changes.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from .hostexec import CommandError
from .layout import ENGINE_DIR, HUB_CATALOGUE, HUB_PIDFILE, HUB_PORT, HUB_URL, MGMT_GATEWAY, STATE_DIR


def answering(timeout: float = 1.0) -> bool:
    """True when the hub answers HTTP (any status) at HUB_URL."""
    try:
        with urllib.request.urlopen(f"{HUB_URL}/api/models/none/none", timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def _pid() -> int | None:
    try:
        pid = int(HUB_PIDFILE.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def running() -> bool:
    """True when the hub process of the pidfile lives and answers."""
    return _pid() is not None and answering()


def start() -> None:
    """Start the hub unless it runs; wait until it answers."""
    if running():
        return
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    log = open(STATE_DIR / "hub.log", "ab")  # noqa: SIM115 (the child keeps it)
    env = {**os.environ, "PYTHONPATH": str(ENGINE_DIR)}
    argv = [sys.executable, "-m", "simengine.hub_server", "--host", MGMT_GATEWAY, "--port", str(HUB_PORT),
            "--catalogue", str(HUB_CATALOGUE)]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True,
                            cwd="/")
    log.close()
    HUB_PIDFILE.write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + 15
    while not answering(0.5):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise CommandError(f"the stand-in hub did not answer at {HUB_URL}; see {STATE_DIR / 'hub.log'}")
        time.sleep(0.1)


def serve_folders(folders: dict) -> None:
    """Have the hub serve each repo id of FOLDERS ({repo id: folder}) from its folder (simengine.hub_repos)."""
    from simengine import hub_repos

    STATE_DIR.mkdir(parents=True, exist_ok=True)
    try:
        hub_repos.write_catalogue(HUB_CATALOGUE, folders)
    except (OSError, hub_repos.CatalogueError) as error:
        raise CommandError(f"the stand-in hub cannot serve {', '.join(folders)}: {error}") from None


def stop() -> None:
    """Stop the hub (SIGTERM, then SIGKILL after 5 s); nothing when it is not running."""
    pid = _pid()
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except OSError:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
    HUB_PIDFILE.unlink(missing_ok=True)
