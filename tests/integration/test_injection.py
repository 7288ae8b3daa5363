"""Shell injection on the simulated pair: refused where a value could reach a shell, inert everywhere else.

Every injected command touches a canary file whose name is unique to the run, in /tmp and (through a
relative path) in the working directory of whatever ran it. After each scenario the canaries are
searched for on both nodes, inside both engine containers while they run, and on this machine.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest
import yaml
from conftest import run_sparkpair

MODEL = "nvidia/Qwen3-235B-A22B-FP4"
CONTAINER = "trtllm-multinode"
TAG = f"sparkpair-canary-{uuid.uuid4().hex[:8]}"


def _payloads(label: str) -> dict[str, str]:
    """The same injected command in every quoting context a careless tool could get wrong."""
    return {
        "semicolon": f"x; touch /tmp/{TAG}-{label}-semicolon; touch {TAG}-{label}-semicolon-rel",
        "substitution": f"$(touch /tmp/{TAG}-{label}-substitution)$(touch {TAG}-{label}-substitution-rel)",
        "backticks": f"`touch /tmp/{TAG}-{label}-backticks`",
        "single-quote": f"'; touch /tmp/{TAG}-{label}-single-quote; '",
        "double-quote": f'"; touch /tmp/{TAG}-{label}-double-quote; "',
        "space": f"x touch /tmp/{TAG}-{label}-space",
        "newline": f"x\ntouch /tmp/{TAG}-{label}-newline\n",
    }


def _canaries(bed, where: Path | None = None) -> list[str]:
    """Every canary file on both nodes, in their running engine containers, and on this machine."""
    found = []
    for node in ("spark-a", "spark-b"):
        search = bed.exec(node, f"find /tmp /home /root /var/tmp /run /etc -name '{TAG}*' 2>/dev/null; "
                                f"docker exec {CONTAINER} find / -xdev -name '{TAG}*' 2>/dev/null; true")
        found += [f"{node}: {line}" for line in search.stdout.split("\n") if line.strip()]
    local = [Path("/tmp"), Path.cwd(), Path.home()] + ([where] if where else [])
    found += [f"operator: {path}" for base in local for path in base.glob(f"{TAG}*")]
    return found


def _inventory(bed, tmp_path: Path) -> tuple[dict, Path]:
    """The pair's inventory as data, and where a variant of it goes."""
    return yaml.safe_load(Path(bed.inventory).read_text()), tmp_path / "inventory.yaml"


def _write(data: dict, path: Path) -> Path:
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    return path


# --- refused: every value that reaches a shell on a node ----------------------------------------

def _set(data: dict, field: str, value: str) -> str:
    """Put value into field of the inventory; the field path sparkpair must name."""
    if field == "interface":
        for node in data["nodes"]:
            node["links"] = {value: node["links"].pop("enp1s0f1np1"), **node["links"]}
        return "nodes[0].links"
    if field in ("target", "draft"):
        data.setdefault("models", {}).setdefault("qwen3-235b", {})[field] = value
        return f"models.qwen3-235b.{field}"
    if field == "env-name":
        data["container"]["env"] = {value: "1"}
        return "container.env"
    if field == "mpi-env-value":
        data["container"]["env"] = {"OMPI_MCA_btl_tcp_if_include": "enp1s0f1np1" + value}
        return "container.env.OMPI_MCA_btl_tcp_if_include"
    section, _, key = field.partition(".")
    holder = data["nodes"][0] if section == "node" else data[section]
    holder[key] = value
    return f"nodes[0].{key}" if section == "node" else field


REFUSED_FIELDS = ["cluster.user", "cluster.name", "node.host", "node.name", "interface", "container.image",
                  "container.name", "container.hf_cache", "target", "draft", "env-name", "mpi-env-value",
                  "server.profile"]


@pytest.mark.parametrize("field", REFUSED_FIELDS)
def test_shell_text_in_a_field_that_reaches_a_node_is_refused(testbed, tmp_path: Path, field: str) -> None:
    for kind, value in _payloads(field.replace(".", "-")).items():
        if field == "mpi-env-value" and kind == "space":
            continue  # a space is harmless inside OpenMPI's double quotes, and allowed there
        data, path = _inventory(testbed, tmp_path)
        named = _set(data, field, value)
        run = run_sparkpair(_write(data, path), "setup-network", "--yes")
        assert run.code == 2, (kind, run.text)
        lines = [line for line in run.err.splitlines() if line]
        assert lines and all(line.startswith("error: ") for line in lines), (kind, run.err)
        assert any(named in line for line in lines), (kind, run.err)
    assert _canaries(testbed, tmp_path) == []


def test_operator_side_paths_refuse_only_newlines(testbed, tmp_path: Path) -> None:
    """ssh_key and known_hosts stay on this machine (never in a shell); a newline is still refused."""
    for field in ("ssh_key", "known_hosts"):
        data, path = _inventory(testbed, tmp_path)
        data["cluster"][field] = f"/tmp/x\ntouch /tmp/{TAG}-{field}"
        run = run_sparkpair(_write(data, path), "status")
        assert run.code == 2 and f"cluster.{field}" in run.err, run.text
    assert _canaries(testbed, tmp_path) == []


# --- inert: valid but unusual values, through a whole setup-network, launch, status and stop ------

def _hostile_but_valid(bed, tmp_path: Path) -> Path:
    """The pair's inventory with shell text wherever the schema allows free text.

    - container.env values: they reach the container through the Docker API (no shell);
    - a trtllm-serve flag value: one argv element of the serve command (quoted where a shell runs it);
    - an LLM-API option value and a profile description: YAML and comments in generated files;
    - the operator's key and known_hosts under directory names full of shell text: never in a shell.
    """
    data, path = _inventory(bed, tmp_path)
    env = {f"SPARKPAIR_TEST_{index}": value for index, value in enumerate(_payloads("env").values())
           if "\n" not in value}
    data["container"]["env"] = env
    profile = data.setdefault("models", {}).setdefault("qwen3-235b", {})
    profile["serve_args"] = {"chat_template": " ".join(v for v in _payloads("serve").values() if "\n" not in v)}
    profile["llm_api"] = {"otlp_traces_endpoint": "http://collector/" + " ".join(_payloads("llmapi").values())}
    profile["description"] = _payloads("description")["newline"] + _payloads("description")["substitution"]
    keys = tmp_path / f"keys $(touch {TAG}-keydir) ; `touch {TAG}-keydir2` '\" x"
    keys.mkdir()
    for field in ("ssh_key", "known_hosts"):
        copy_ = keys / Path(data["cluster"][field]).name
        shutil.copyfile(data["cluster"][field], copy_)
        copy_.chmod(0o600)
        data["cluster"][field] = str(copy_)
    return _write(data, path)


def test_hostile_but_valid_values_travel_intact_and_run_nothing(stopped, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    inventory = _hostile_but_valid(stopped, tmp_path)
    monkeypatch.chdir(tmp_path)  # relative canaries of anything run on this machine would land here
    setup = run_sparkpair(inventory, "setup-network", "--yes")
    assert setup.code == 0, setup.text
    launch = run_sparkpair(inventory, "launch", "--timeout", "120")
    assert launch.code == 0, launch.text
    status = run_sparkpair(inventory, "status", "--json")
    assert status.code == 0 and '"state": "serving"' in status.out, status.text
    assert _canaries(stopped, tmp_path) == [], "an injected command ran"

    # The values arrived as data, byte for byte.
    data = yaml.safe_load(inventory.read_text())
    inspect = stopped.exec("spark-b", f"docker inspect --format '{{{{json .Config.Env}}}}' {CONTAINER}").stdout
    for name, value in data["container"]["env"].items():
        assert yaml.safe_load(inspect).count(f"{name}={value}") == 1, (name, inspect)
    config = stopped.exec("spark-a", "cat /home/nvidia/.sparkpair/config/extra-llm-api-config.yml").stdout
    assert yaml.safe_load(config)["otlp_traces_endpoint"] == data["models"]["qwen3-235b"]["llm_api"][
        "otlp_traces_endpoint"]
    for node in ("spark-a", "spark-b"):
        argv = stopped.exec(node, f"docker exec {CONTAINER} sh -c "
                                  "'for p in /proc/[0-9]*; do tr \"\\0\" \"\\n\" < $p/cmdline; echo; done'").stdout
        assert data["models"]["qwen3-235b"]["serve_args"]["chat_template"] in argv.split("\n"), node

    stop = run_sparkpair(inventory, "stop")
    assert stop.code == 0, stop.text
    assert _canaries(stopped, tmp_path) == [], "an injected command ran"


def test_mpi_parameter_values_are_refused_before_openmpi_can_run_them(testbed, tmp_path: Path) -> None:
    """OpenMPI copies OMPI_MCA_* values into the orted command line a shell runs on the worker."""
    data, path = _inventory(testbed, tmp_path)
    data["container"]["env"] = {"OMPI_MCA_btl_tcp_if_include": f"enp1s0f1np1$(touch /tmp/{TAG}-mca)",
                                "OMPI_MCA_sparkpair_x": f'1"; touch /tmp/{TAG}-mca2; "'}
    for command in (["launch", "--timeout", "30"], ["inventory", "check"], ["doctor"]):
        run = run_sparkpair(_write(data, path), *command)
        assert run.code == 2, run.text
        assert "container.env.OMPI_MCA_btl_tcp_if_include" in run.err and "container.env.OMPI_MCA_sparkpair_x" \
            in run.err
    fine = copy.deepcopy(data)
    fine["container"]["env"] = {"OMPI_MCA_btl_tcp_if_include": "^lo,docker0", "OMPI_MCA_pml": "ob1"}
    assert run_sparkpair(_write(fine, path), "inventory", "check").code == 0
    assert _canaries(testbed) == []


def test_a_rendered_runbook_keeps_free_text_in_its_comments(testbed, tmp_path: Path) -> None:
    """The description and the inventory's own file name cannot end a comment line of launch.sh."""
    data, _ = _inventory(testbed, tmp_path)
    data.setdefault("models", {}).setdefault("qwen3-235b", {})["description"] = \
        f"x\ntouch /tmp/{TAG}-runbook\n# "
    path = _write(data, tmp_path / f"inv\ntouch {TAG}-runbook-name\n#.yaml")
    out = tmp_path / "rendered"
    run = run_sparkpair(path, "render", "--out", out)
    assert run.code == 0, run.text
    script = (out / "qwen3-235b" / "launch.sh").read_text()
    assert not [line for line in script.splitlines() if "touch" in line and not line.startswith("#")], script
    netplan = (out / "spark-a" / "40-sparkpair-cx7.yaml").read_text()
    assert not [line for line in netplan.splitlines() if "touch" in line and not line.startswith("#")], netplan
    subprocess.run(["bash", "-n", str(out / "qwen3-235b" / "launch.sh")], check=True)


def test_a_staged_model_path_full_of_shell_text_is_one_argument(stopped, tmp_path: Path) -> None:
    """--model-source local:PATH reaches the head's shell: a hostile PATH stays one quoted argument."""
    staged = f"/home/nvidia/staged $(touch {TAG}-staged) `touch {TAG}-staged2`; '\" x"
    if stopped.exec("spark-a", f"test -d /home/nvidia/.cache/huggingface/hub/models--{MODEL.replace('/', '--')}",
                    check=False).returncode != 0:  # the models must be there to be staged
        assert run_sparkpair(stopped.inventory, "launch", "--timeout", "120").code == 0
        assert run_sparkpair(stopped.inventory, "stop").code == 0
    stopped.exec("spark-a", ["sh", "-c", 'rm -rf "$1" && mkdir -p "$1" && mv /home/nvidia/.cache/huggingface/hub/'
                                         'models--nvidia--Qwen3-235B-A22B-* "$1"/ && chown -R nvidia: "$1"', "-",
                             staged])
    try:
        run = run_sparkpair(stopped.inventory, "launch", "--model-source", f"local:{staged}", "--timeout", "120")
        assert run.code == 0, run.text
        assert f"copied from {staged}/models--nvidia--Qwen3-235B-A22B-FP4" in run.err
        assert _canaries(stopped, tmp_path) == []
    finally:
        stopped.exec("spark-a", ["rm", "-rf", staged])
    missing = run_sparkpair(stopped.inventory, "launch", "no$(touch /tmp/x);profile")
    assert missing.code == 2 and "no profile 'no$(touch /tmp/x);profile'" in missing.err


# --- a hostile engine: what it writes cannot act on the terminal, flood a read or hold one forever ------------

# Terminal escapes an engine can print: retitle, clear, recolour, a C1 CSI, a right-to-left override (printf text).
HOSTILE = r"\033]0;owned\007\033[2J\033[31mFAKE: all checks passed\302\233" + r"31m\342\200\256evil\342\200\217"
ACTING = ("\x1b", "\x9b", "\u202e", "\u200f", "\x07")
RANK_LOGS = ("/var/log/sparkpair/ranks/1/rank.0/stdout", "/var/log/sparkpair/ranks/1/rank.1/stdout",
             "/var/log/sparkpair/serve.log")


def _acting(text: str) -> list[str]:
    return [repr(char) for char in ACTING if char in text]


def test_a_hostile_engines_output_is_shown_inert_capped_and_never_waited_on(stopped, tmp_path: Path) -> None:
    """Issue 33, items 3 and 6: the running engine writes terminal escapes into its logs and 10 MiB in 20 lines
    after them, then makes its exit_code a FIFO. `logs`, `logs --diagnose`, `bundle` and `status` each finish in
    time, print nothing that acts on a terminal, and bring back no more than their caps."""
    launch = run_sparkpair(stopped.inventory, "launch", "--timeout", "120")
    assert launch.code == 0, launch.text
    flood = (f"for f in {' '.join(RANK_LOGS)}; do [ -e \"$f\" ] || continue\n"
             f"printf '{HOSTILE} [E] CUDA out of memory\\n' >> \"$f\"\n"
             "for i in $(seq 20); do head -c 524288 /dev/zero | tr '\\0' y; echo; done >> \"$f\"\n"
             f"printf '{HOSTILE} the last line\\n' >> \"$f\"\ndone")
    for node in ("spark-a", "spark-b"):
        stopped.exec(node, f"docker exec -i {CONTAINER} sh -s <<'SPARKPAIR_EOF'\n{flood}\nSPARKPAIR_EOF\n", timeout=120)
    logs = run_sparkpair(stopped.inventory, "logs", "--tail", "400", timeout=120)
    assert logs.code == 0 and "FAKE: all checks passed" in logs.out and not _acting(logs.text), logs.err[-2000:]
    assert len(logs.out.encode()) <= 3 * (2 << 20), len(logs.out)  # each rank's tail at most 2 MiB
    diagnosed = run_sparkpair(stopped.inventory, "logs", "--diagnose", timeout=120)
    assert not _acting(diagnosed.text), diagnosed.text[-2000:]
    bundled = run_sparkpair(stopped.inventory, "bundle", "--out", str(tmp_path / "b.tar.gz"), timeout=600)
    assert bundled.code == 0 and not _acting(bundled.text), bundled.text[-2000:]
    with tarfile.open(tmp_path / "b.tar.gz") as archive:
        sizes = {member.name: member.size for member in archive.getmembers()}
        manifest = archive.extractfile(next(name for name in sizes if name.endswith("MANIFEST.txt")))
        assert manifest is not None and not _acting(manifest.read().decode())
    assert max(sizes.values()) <= 8 << 20 and any(name.endswith("rank.0/stdout") for name in sizes), sizes
    stopped.exec("spark-a", f"docker exec {CONTAINER} sh -c 'rm -f /var/log/sparkpair/exit_code && "
                            "mkfifo /var/log/sparkpair/exit_code'")
    status = run_sparkpair(stopped.inventory, "status", timeout=180)  # before: exit_code() waited on the FIFO forever
    assert "state:" in status.out and not _acting(status.text), status.text
