"""Secrets on the simulated pair: the HF token reaches the nodes only as one 0600 file.

A full launch downloads a gated model (so the token must travel end to end and be used), once with
HF_TOKEN and once with HF_TOKEN_PATH. Then the token's text is searched for everywhere it could
have leaked: processes (arguments and environments) on both nodes, `docker inspect`, container
logs and /var/log/sparkpair, every file on both nodes (sparkpair's state, netplan, journals,
backups, the HF cache, the Docker engines' data), sparkpair's own output at -vv and its debug log.
The token is never put on a command line here either: the searches on the nodes read it from the
token file itself (`grep -f`), and the other searches happen in this process.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest
import yaml
from conftest import run_sparkpair
from sparkpair_testbed.layout import STATE_DIR  # the nodes' private files: STATE_DIR/nodes/NODE

MODELS = ("nvidia/Qwen3-235B-A22B-FP4", "nvidia/Qwen3-235B-A22B-Eagle3")
CONTAINER = "trtllm-multinode"
TOKEN_FILE = "/home/nvidia/.sparkpair/secrets/hf_token"
NODES = ("spark-a", "spark-b")


@pytest.fixture
def gated(networked, tmp_path: Path):
    """The pair with no engine, no token file and no models; an inventory whose models are gated."""
    def clean() -> None:
        run_sparkpair(networked.inventory, "stop")
        for node in NODES:
            networked.exec(node, f"rm -f {TOKEN_FILE}; rm -rf /home/nvidia/.cache/huggingface/hub/models--nvidia--"
                                 "Qwen3-235B-A22B-*")
    clean()
    data = yaml.safe_load(Path(networked.inventory).read_text())
    data["container"]["env"] = {"SIM_HF_GATED": ",".join(MODELS)}  # hf download refuses them without a token
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data))
    yield networked, path
    clean()


def _clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """An operator environment whose only token is the one given (no stored huggingface token)."""
    return {"HF_TOKEN": "", "HF_TOKEN_PATH": "", "HF_HOME": str(tmp_path / "hf-home"),
            "XDG_CACHE_HOME": str(tmp_path / "cache"), **extra}


def _sparkpair(inventory: Path, env: dict[str, str], *args: str):
    return run_sparkpair(inventory, "-vv", *args, env=env)


def _leaks_on_nodes(bed) -> list[str]:
    """Where on the nodes the token file's content appears, besides the token file itself."""
    found = []
    for node in NODES:
        search = bed.exec(node, f"""
            t={TOKEN_FILE}
            test -s $t || {{ echo "NO TOKEN FILE"; exit 0; }}
            grep -lsF -f $t /proc/[0-9]*/environ /proc/[0-9]*/cmdline | sed 's/^/process: /'
            ps -eww -o args | grep -sF -f $t | sed 's/^/ps: /'
            ps eww -e | grep -sF -f $t >/dev/null && echo "ps e: some process environment"
            for c in $(docker ps -aq); do
              docker inspect $c | grep -sqF -f $t && echo "docker inspect: $c"
              docker logs $c 2>&1 | grep -sqF -f $t && echo "docker logs: $c"
              docker exec $c sh -c 'cat /var/log/sparkpair/* /var/log/sparkpair/*/*/* /var/log/sparkpair/*/*/*/* \\
                2>/dev/null' | grep -sqF -f $t && echo "/var/log/sparkpair in $c"
            done
            grep -rlsF -D skip -f $t /home /root /etc /tmp /var/tmp /run /var/log /var/backups/sparkpair \\
              | grep -vxF $t | sed 's/^/file: /'
            true
        """)
        found += [f"{node}: {line}" for line in search.stdout.splitlines() if line.strip()]
    return found


def _image_layers(bed) -> list[str]:
    """grep options that skip the nodes' image layers: read-only content built before any test made a secret (the
    vLLM images are GBs); containers' own layers, logs and configs are still searched."""
    found: set[str] = set()
    for node in NODES:
        listed = bed.exec(node, "ids=$(docker image ls -q); [ -z \"$ids\" ] || docker image inspect $ids -f "
                                "'{{.GraphDriver.Data.LowerDir}}:{{.GraphDriver.Data.UpperDir}}'", check=False).stdout
        found |= {path.rstrip("/").split("/")[-2] for path in listed.replace(":", "\n").split() if path.endswith("/diff")}
    return [f"--exclude-dir={name}" for name in sorted(found)]


def _leaks_in_node_state(token: str, tmp_path: Path, bed=None) -> list[str]:
    """Every file the simulated nodes hold (homes, /etc overlays, Docker data), searched from outside."""
    patterns = tmp_path / "patterns"
    patterns.write_text(token + "\n")
    roots = [str(STATE_DIR / "nodes" / node) for node in NODES] + ["/var/backups/sparkpair"]
    skip = _image_layers(bed) if bed is not None else []
    grep = subprocess.run(["grep", "-rlsF", "-D", "skip", *skip, "-f", str(patterns),
                           *[r for r in roots if Path(r).exists()]], capture_output=True, text=True)
    return [path for path in grep.stdout.splitlines() if not path.endswith("/home/.sparkpair/secrets/hf_token")]


def _assert_token_only_in_its_file(bed, token: str, tmp_path: Path, runs: list) -> None:
    for run in runs:
        assert token not in run.out + run.err, "sparkpair printed the token"
    for log in (tmp_path / "cache").rglob("*"):
        assert log.is_dir() or token not in log.read_text(errors="replace"), f"token in {log}"
    default_log = Path.home() / ".cache" / "sparkpair" / "debug.log"
    assert not default_log.exists() or token not in default_log.read_text(errors="replace")
    for node in NODES:
        assert bed.exec(node, f"cat {TOKEN_FILE}").stdout == token + "\n"
        mode = bed.exec(node, f"stat -c '%a %U %G' {TOKEN_FILE} $(dirname {TOKEN_FILE})").stdout.split("\n")
        assert mode[:2] == ["600 nvidia nvidia", "700 nvidia nvidia"], (node, mode)
        leftovers = bed.exec(node, "ls -a $(dirname " + TOKEN_FILE + ")").stdout.split()
        assert sorted(leftovers) == [".", "..", "hf_token"], (node, leftovers)  # no temp file beside it
    assert _leaks_on_nodes(bed) == []
    assert _leaks_in_node_state(token, tmp_path, bed) == []


def _full_cycle(bed, inventory: Path, env: dict[str, str]) -> list:
    launch = _sparkpair(inventory, env, "launch", "--timeout", "120")
    assert launch.code == 0, launch.text
    assert any(f"{MODELS[0]}: " in line and "downloaded" in line for line in launch.err.splitlines()), \
        f"the gated model was not downloaded with the token:\n{launch.err}"
    status = _sparkpair(inventory, env, "status")
    assert status.code == 0 and "serving" in status.out, status.text
    return [launch, status]


def test_hf_token_from_the_environment_reaches_only_its_file(gated, tmp_path: Path) -> None:
    bed, inventory = gated
    token = f"hf_SparkpairCanary{uuid.uuid4().hex}"
    env = _clean_env(tmp_path, HF_TOKEN=token)
    runs = _full_cycle(bed, inventory, env)
    _assert_token_only_in_its_file(bed, token, tmp_path, runs)
    stop = _sparkpair(inventory, env, "stop")
    assert stop.code == 0 and token not in stop.text


def test_hf_token_from_a_file_reaches_only_its_file(gated, tmp_path: Path) -> None:
    bed, inventory = gated
    token = f"hf_SparkpairCanaryPath{uuid.uuid4().hex}"
    token_path = tmp_path / "operator-token"
    token_path.write_text(token + "\n")
    token_path.chmod(0o600)
    runs = _full_cycle(bed, inventory, _clean_env(tmp_path, HF_TOKEN_PATH=str(token_path)))
    _assert_token_only_in_its_file(bed, token, tmp_path, runs)


def test_private_keys_never_leave_the_node_that_made_them(networked, tmp_path: Path) -> None:
    """Each node's own key (made there by setup-network) is found nowhere else: not on the peer, not
    in /var/backups, not on this machine's side of anything sparkpair wrote."""
    run = run_sparkpair(networked.inventory, "-vv", "setup-network", "--yes")
    assert run.code == 0, run.text
    layers = _image_layers(networked)
    for node, peer in (("spark-a", "spark-b"), ("spark-b", "spark-a")):
        key = networked.exec(node, "cat /home/nvidia/.ssh/id_ed25519").stdout
        body = [line for line in key.splitlines() if line and not line.startswith("-----")]
        assert body and all(line not in run.text for line in body)
        patterns = tmp_path / f"{node}.patterns"
        patterns.write_text("\n".join(body[1:]) + "\n")  # line 1 is a header every OpenSSH key shares
        holders = subprocess.run(["grep", "-rlsF", "-D", "skip", *layers, "-f", str(patterns),
                                  str(STATE_DIR / "nodes" / peer), "/var/backups"],
                                 capture_output=True, text=True).stdout.splitlines()
        assert holders == [], f"{node}'s private key found in {holders}"
        own = subprocess.run(["grep", "-rlsF", "-D", "skip", *layers, "-f", str(patterns),
                              str(STATE_DIR / "nodes" / node)],
                             capture_output=True, text=True).stdout.splitlines()
        assert str(STATE_DIR / "nodes" / node / "home" / ".ssh" / "id_ed25519") in own  # the search works
        mode = networked.exec(node, "stat -c '%a %U' /home/nvidia/.ssh/id_ed25519").stdout.strip()
        assert mode == "600 nvidia", mode
