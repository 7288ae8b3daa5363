"""The lock (issue 27): its record and stable JSON, read as hostile input; the comparison with a lock and of the
two nodes; the probes it adds; one node's lock from its facts; the lock file on disk; the CLI's refusals."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from sparkpair.cli import main
from sparkpair.engine import lockflow
from sparkpair.engine.launch import LaunchOptions, resolve
from sparkpair.errors import SparkpairError, UsageError
from sparkpair.inventory import read_inventory
from sparkpair.lockfile import Lock, ModelLock, NodeLock
from sparkpair.lockfile.compare import ABSENT, compare, differences_json, fields, rows_json, side_by_side
from sparkpair.lockfile.record import LOCK_CAP
from sparkpair.lockfile.store import default_path, read_lock, write_lock
from sparkpair.probes import NodeFacts, ProbeFailure, docker, format_sections, host, models, net, rdma
from sparkpair.report.lock import difference_line

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "probes"
IMAGE_A = "sha256:" + "a" * 64
IMAGE_B = "sha256:" + "b" * 64
BLOB = "0" * 64
REVISION = "1" * 40


def node(**changes: object) -> NodeLock:
    base = NodeLock(image_id=IMAGE_A, runtime_version="1.3.0rc12", driver="580.95.05", cuda="13.0",
                    kernel="6.11.0-1016-nvidia", firmware={"rocep1s0f1": "28.45.4028"},
                    mtu={"enp1s0f1np1": "9000", "enP2p1s0f1np1": "9000"}, netplan={"/etc/netplan/40-x.yaml": "c" * 64},
                    environment={"NCCL_IB_HCA": "rocep1s0f1"}, rendered={"container.env": "d" * 64},
                    models={"o/model": ModelLock(REVISION, {"config.json": BLOB, "model.safetensors": "e" * 64})})
    return replace(base, **changes)  # type: ignore[arg-type]


def lock(**nodes: NodeLock) -> Lock:
    return Lock(sparkpair="0.1.0", inventory_sha256="f" * 64, profile="qwen3-235b", runtime="trtllm",
                image="sparkpair/trtllm-sim:1.3.0rc12", nodes=nodes or {"spark-a": node(), "spark-b": node()},
                written="2026-11-26T00:00:00Z")


# --- the record and its JSON ---------------------------------------------------------------------------------

def test_a_lock_reads_back_as_written_and_its_json_is_stable() -> None:
    written = lock()
    text = written.to_json()
    assert Lock.from_json(text.encode()) == written
    assert Lock.from_json(text.encode()).to_json() == text
    data = json.loads(text)
    assert list(data) == sorted(data) and data["format"] == 1
    assert data["nodes"]["spark-a"]["models"]["o/model"]["files"]["config.json"] == BLOB


@pytest.mark.parametrize("mutate,named", [
    (lambda d: d["nodes"]["spark-a"].__setitem__("kernel", "6.11\x1b[2J"), "nodes.spark-a.kernel"),
    (lambda d: d["nodes"]["spark-a"].__setitem__("kernel", 6), "nodes.spark-a.kernel: expected a string"),
    (lambda d: d["nodes"]["spark-b"]["mtu"].__setitem__("enp1s0f1np1", ["9000"]), "nodes.spark-b.mtu.enp1s0f1np1"),
    (lambda d: d["nodes"]["spark-a"].__setitem__("extra", "x"), "nodes.spark-a: unknown field 'extra'"),
    (lambda d: d["nodes"]["spark-a"]["models"]["o/model"]["files"].__setitem__("a\nb", BLOB),
     "nodes.spark-a.models.o/model.files: a name"),
    (lambda d: d.__setitem__("format", 2), "format: expected 1"),
    (lambda d: d.__setitem__("nodes", []), "nodes: expected an object"),
])
def test_a_lock_that_is_not_one_is_refused_in_one_line_naming_the_field(mutate, named: str) -> None:
    data = json.loads(lock().to_json())
    mutate(data)
    with pytest.raises(UsageError) as raised:
        Lock.from_json(json.dumps(data).encode(), "sparkpair.lock")
    assert named in raised.value.message and "\n" not in raised.value.message
    assert raised.value.message.startswith("sparkpair.lock: ")


def test_a_lock_over_the_cap_or_not_json_is_refused_without_parsing() -> None:
    with pytest.raises(UsageError, match="over 16 MiB"):
        Lock.from_json(b" " * (LOCK_CAP + 1))
    with pytest.raises(UsageError, match="not JSON"):
        Lock.from_json(b"\xff\xfe")


# --- the comparison -----------------------------------------------------------------------------------------

def test_nothing_changed_is_no_difference() -> None:
    assert compare(lock(), lock()) == []


def test_another_image_on_one_node_names_the_node_and_both_digests() -> None:
    found = lock(**{"spark-a": node(), "spark-b": node(image_id=IMAGE_B)})
    differences = compare(lock(), found)
    assert [(d.node, d.field, d.locked, d.found) for d in differences] == [("spark-b", "image_id", IMAGE_A, IMAGE_B)]
    assert "docker tag" in differences[0].fix and "without --locked" in differences[0].fix
    line = difference_line(differences[0])
    assert line.startswith(f"spark-b: image_id: locked {IMAGE_A}, found {IMAGE_B}; fix: ")


def test_a_changed_model_file_names_the_repo_and_the_file() -> None:
    bad = ModelLock(REVISION, {"config.json": BLOB, "model.safetensors": "content hashes to 9f86d081884c"})
    differences = compare(lock(), lock(**{"spark-a": node(models={"o/model": bad}), "spark-b": node()}))
    assert [(d.node, d.field, d.found) for d in differences] == [
        ("spark-a", "model o/model file model.safetensors", "content hashes to 9f86d081884c")]


def test_a_field_only_one_side_has_is_a_difference_and_pair_fields_come_first() -> None:
    found = replace(lock(**{"spark-a": node(netplan={}), "spark-b": node()}), inventory_sha256="0" * 64)
    differences = compare(lock(), found)
    assert [(d.node, d.field, d.found) for d in differences] == [
        ("", "inventory_sha256", "0" * 64), ("spark-a", "netplan /etc/netplan/40-x.yaml", ABSENT)]
    assert differences[0].as_dict()["node"] == "pair"


def test_a_node_the_lock_does_not_have_is_named() -> None:
    found = lock(**{"spark-a": node()})
    assert [(d.node, d.field, d.found) for d in compare(lock(), found)] == [("spark-b", "node", ABSENT)]


def test_side_by_side_puts_the_differences_first() -> None:
    found = lock(**{"spark-a": node(), "spark-b": node(kernel="6.11.0-1099-nvidia-drifted",
                                                        mtu={"enp1s0f1np1": "1500", "enP2p1s0f1np1": "9000"})})
    rows = side_by_side(found, "spark-a", "spark-b")
    assert [row.field for row in rows[:2]] == ["kernel", "mtu enp1s0f1np1"]
    assert all(row.same for row in rows[2:]) and len(rows) == len(fields(node()))
    data = rows_json(rows, ("spark-a", "spark-b"))
    assert data["differing"] == 2
    assert data["fields"][0] == {"field": "kernel", "same": False,  # type: ignore[index]
                                 "values": {"spark-a": "6.11.0-1016-nvidia", "spark-b": "6.11.0-1099-nvidia-drifted"}}
    assert side_by_side(lock(), "spark-a", "spark-b")[0].same
    assert differences_json([], "x.lock") == {"lock": "x.lock", "differing": 0, "differences": []}


# --- the probes it adds ---------------------------------------------------------------------------------------

def test_kernel_is_one_printable_line_or_a_failure() -> None:
    assert host.parse_kernel("6.11.0-1016-nvidia\n") == "6.11.0-1016-nvidia"
    for hostile in ("6.11\nspark-b: image_id: locked", "6.11\x1b[31m", "x" * 300, ""):
        with pytest.raises(ValueError):
            host.parse_kernel(hostile)


def test_driver_and_cuda_come_from_nvidia_smi_s_header() -> None:
    versions = host.parse_gpu_versions((FIXTURES / "real" / "nvidia-smi__1.txt").read_text())
    assert (versions.driver, versions.cuda) == ("580.159.03", "13.0")
    with pytest.raises(ValueError):
        host.parse_gpu_versions("No devices were found\n")


def test_firmware_per_device_and_a_forged_name_is_refused() -> None:
    assert rdma.parse_firmware(format_sections({"rocep1s0f1": "28.45.4028\n", "roceP2p1s0f1": "28.45.4028\n"})) == {
        "rocep1s0f1": "28.45.4028", "roceP2p1s0f1": "28.45.4028"}
    with pytest.raises(ValueError):
        rdma.parse_firmware(format_sections({"../x": "1"}))
    with pytest.raises(ValueError):
        rdma.parse_firmware(format_sections({"rocep1s0f1": "28.45\x1b[2J"}))


def test_image_config_and_the_runtime_version_the_image_states() -> None:
    config = docker.parse_api_image_config((FIXTURES / "docker-api-image.txt").read_text())
    assert config is not None and config.image_id.startswith("sha256:5ddb5a60")
    assert lockflow.runtime_version(config, "trtllm") == "1.3.0rc12"
    assert lockflow.runtime_version(config, "vllm") == "not stated by the image"
    vllm = replace(config, env={"VLLM_VERSION": "0.11.0"})
    assert lockflow.runtime_version(vllm, "vllm") == "0.11.0"
    forged = replace(config, env={"TRTLLM_VERSION": "1.3\nspark-b: kernel"})
    assert lockflow.runtime_version(forged, "trtllm") == "not stated by the image"
    assert docker.parse_api_image_config("{}\n404\n") is None
    with pytest.raises(ValueError):
        docker.parse_api_image_config('{"Id": "../../etc"}\n200\n')


# --- one node's lock from its facts (pure) ------------------------------------------------------------------

@pytest.fixture
def launched(example_inventory_path: Path):  # type: ignore[no-untyped-def]
    return resolve(read_inventory(example_inventory_path), LaunchOptions(profile="qwen3-235b"))


def test_node_lock_from_facts_and_unreadable_where_a_probe_failed(launched) -> None:  # type: ignore[no-untyped-def]
    inventory, profile = launched
    cache = inventory.container.hf_cache
    target, draft = profile.repos
    manifest = models.RepoManifest(REVISION, {BLOB: 10, "e" * 64: 20}, {"config.json": BLOB, "w.safetensors": "e" * 64})
    content = models.ContentCheck({models.repo_dirname(target): models.RepoContent(2, {"e" * 64: "content hashes to 9f8"})})
    interfaces = {"enp1s0f1np1": net.Interface("enp1s0f1np1", "", 9000, True, True, ())}
    facts = NodeFacts({host.KERNEL: "6.11.0-1016-nvidia", host.GPU_VERSIONS: host.GpuVersions("580.95.05", "13.0"),
                       rdma.FIRMWARE: ProbeFailure("rdma firmware", 1, "no"), net.INTERFACES: interfaces,
                       net.NETPLAN_FILES: {}, docker.image_config(inventory.container.image): None,
                       models.manifest(cache, target): manifest, models.manifest(cache, draft): models.RepoManifest(None),
                       models.content(cache, tuple(profile.repos), lockflow.HASH_BUDGET_S): content})
    found = lockflow.node_lock(inventory, profile, "spark-a", facts)
    assert (found.kernel, found.driver, found.cuda, found.image_id) == ("6.11.0-1016-nvidia", "580.95.05", "13.0", ABSENT)
    assert found.firmware == {lockflow.WHOLE: "unreadable"}
    assert found.mtu == {"enp1s0f1np1": "9000", "enP2p1s0f1np1": ABSENT}
    assert found.models[target] == ModelLock(REVISION, {"config.json": BLOB, "w.safetensors": "content hashes to 9f8"})
    assert found.models[draft] == ModelLock(None, {})
    assert set(found.rendered) >= {"container.env"} and all(len(v) == 64 for v in found.rendered.values())
    assert all(key.startswith(lockflow.ENV_PREFIXES) for key in found.environment)
    assert fields(found)[f"model {draft} revision"] == ABSENT


def test_no_secret_reaches_the_locked_environment(launched) -> None:  # type: ignore[no-untyped-def]
    inventory, profile = launched
    container = replace(inventory.container, env={"NCCL_DEBUG": "INFO", "NCCL_SOCKET_TOKEN": "s3cret", "HF_TOKEN": "x"})
    found = lockflow.node_lock(replace(inventory, container=container), profile, "spark-a", NodeFacts())
    assert found.environment.get("NCCL_DEBUG") == "INFO"
    assert "s3cret" not in json.dumps(found.environment) and "HF_TOKEN" not in found.environment


# --- the lock file --------------------------------------------------------------------------------------------

def test_the_lock_is_written_whole_and_a_link_at_its_place_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    path = tmp_path / "sparkpair.lock"
    path.symlink_to(victim)
    write_lock(path, lock())
    assert victim.read_text() == "keep" and not path.is_symlink()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert read_lock(path) == lock() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_reading_refuses_a_link_and_a_missing_lock_is_none(tmp_path: Path) -> None:
    assert read_lock(tmp_path / "none.lock") is None
    real = tmp_path / "real.lock"
    write_lock(real, lock())
    (tmp_path / "link.lock").symlink_to(real)
    with pytest.raises(UsageError, match="symbolic link"):
        read_lock(tmp_path / "link.lock")
    os.mkfifo(tmp_path / "fifo.lock")
    with pytest.raises(UsageError, match="not a regular file"):
        read_lock(tmp_path / "fifo.lock")
    with pytest.raises(UsageError, match="not a regular file"):
        read_lock(tmp_path)  # `--lock ''` names the working directory
    assert default_path(tmp_path / "inventory.yaml") == tmp_path / "sparkpair.lock"


def test_a_lock_that_cannot_be_written_is_one_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(SparkpairError, match="cannot write the lock"):
        write_lock(tmp_path / "missing-dir" / "sparkpair.lock", lock())


# --- the CLI: refused before any node is asked ---------------------------------------------------------------

def test_launch_locked_without_a_lock_is_a_usage_error_before_any_node(example_inventory_path: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["-i", str(example_inventory_path), "launch", "--locked", "--lock", str(tmp_path / "none.lock")])
    assert code == 2
    assert "no lock at" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["launch", "--locked"], ["diff"]])
def test_a_hostile_lock_is_refused_in_one_line_before_any_node(example_inventory_path: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str],
                                                               command: list[str]) -> None:
    bad = tmp_path / "bad.lock"
    data = json.loads(lock().to_json())
    data["nodes"]["spark-b"]["kernel"] = "6.11\x1b]0;pwned\x07"
    bad.write_text(json.dumps(data))
    code = main(["-i", str(example_inventory_path), *command, "--lock", str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and "nodes.spark-b.kernel" in err and "\x1b" not in err and len(err.strip().splitlines()) <= 2


def test_bundle_lists_a_bad_lock_as_not_collected(launched, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    inventory, profile = launched
    bad = tmp_path / "bad.lock"
    bad.write_text("{")

    class Unreachable:
        def each(self, *args: object, **kwargs: object) -> object:
            raise SparkpairError("spark-a: unreachable")

    files, missing = lockflow.bundle_files(Unreachable(), inventory, profile, None, bad)  # type: ignore[arg-type]
    assert files == [] and missing[0].startswith("sparkpair.lock: ") and "diff.json: not collected" in missing[1]
    write_lock(bad, lock())
    files, _ = lockflow.bundle_files(Unreachable(), inventory, profile, None, bad)  # type: ignore[arg-type]
    assert [item.path for item in files] == ["sparkpair.lock"] and Lock.from_json(files[0].text.encode()) == lock()


def test_netplan_hashes_alike_across_nodes_when_only_their_own_words_differ(launched) -> None:  # type: ignore[no-untyped-def]
    inventory, _ = launched
    a, b = inventory.nodes[0], inventory.nodes[1]

    def netplan(node, gateway: str = "198.18.0.1") -> str:  # type: ignore[no-untyped-def]
        twins = "".join(f"    {twin}:\n      addresses: [{address}]\n" for twin, address in node.links.items())
        return f"# for {node.name}\nnetwork:\n  ethernets:\n    enP7s7:\n      addresses: [{node.host}/24]\n" \
               f"      routes: [{{to: default, via: {gateway}}}]\n{twins}"

    masked = lockflow.own_addresses_masked
    assert masked(inventory, a.name, netplan(a)) == masked(inventory, b.name, netplan(b))
    assert masked(inventory, a.name, netplan(a)) != masked(inventory, b.name, netplan(b, gateway="198.18.0.254"))
    twin = str(next(iter(a.links.values())).ip)
    assert masked(inventory, a.name, f"- {twin}1/24") == f"- {twin}1/24"  # a longer address is not the node's
    assert masked(inventory, a.name, f"{a.host} {a.name}") == "{host} {node}"


def test_a_node_that_cannot_be_asked_is_one_difference_not_a_crash(example_inventory_path: Path) -> None:
    class Unreachable:
        def each(self, *args: object, **kwargs: object) -> object:
            raise SparkpairError("cannot connect: Connection refused\nsecond line", node="spark-b")

    inventory = read_inventory(example_inventory_path)
    found = lockflow.drift(Unreachable(), inventory, LaunchOptions(profile="qwen3-235b"), lock(), None)  # type: ignore[arg-type]
    assert [(d.node, d.field, d.found) for d in found] == [("spark-b", "node", "unreadable")]
    assert "Connection refused" in found[0].fix and "\n" not in difference_line(found[0])


def test_side_by_side_of_three_nodes_puts_first_what_any_node_holds_differently(
        capsys: pytest.CaptureFixture[str]) -> None:
    from sparkpair.report.lock import node_rows

    drifted = node(kernel="6.11.0-1099-nvidia", mtu={"enp1s0f1np1": "9000"})
    found = lock(**{"spark-a": node(), "spark-b": node(), "spark-c": drifted})
    rows = side_by_side(found, "spark-a", "spark-b", "spark-c")
    assert [(row.field, row.values) for row in rows[:2]] == [
        ("kernel", ("6.11.0-1016-nvidia", "6.11.0-1016-nvidia", "6.11.0-1099-nvidia")),
        ("mtu enP2p1s0f1np1", ("9000", "9000", ABSENT))]
    assert all(row.same for row in rows[2:]) and len(rows) == len(fields(node()))
    data = rows_json(rows, ["spark-a", "spark-b", "spark-c"])
    assert data["nodes"] == ["spark-a", "spark-b", "spark-c"] and data["differing"] == 2
    assert data["fields"][1] == {"field": "mtu enP2p1s0f1np1", "same": False,  # type: ignore[index]
                                 "values": {"spark-a": "9000", "spark-b": "9000", "spark-c": ABSENT}}
    node_rows(rows, ["spark-a", "spark-b", "spark-c"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["field", "spark-a", "spark-b", "spark-c"]
    assert lines[1].split() == ["≠", "kernel", "6.11.0-1016-nvidia", "6.11.0-1016-nvidia", "6.11.0-1099-nvidia"]
    assert [lines[0].index(name) for name in ("spark-b", "spark-c")] == \
        [lines[1].index("6.11.0-1016-nvidia", lines[1].index("6.11.0-1016-nvidia") + 1),
         lines[1].index("6.11.0-1099-nvidia")]  # one column per node
    assert lines[-1] == "2 field(s) differ among spark-a, spark-b and spark-c"
    node_rows(side_by_side(lock(**{name: node() for name in ("a", "b", "c")}), "a", "b", "c"), ["a", "b", "c"])
    assert capsys.readouterr().out.splitlines()[-1] == f"a, b and c agree on all {len(fields(node()))} fields"


def test_two_nodes_side_by_side_print_as_they_always_did(capsys: pytest.CaptureFixture[str]) -> None:
    from sparkpair.report.lock import node_rows

    found = lock(**{"spark-a": node(), "spark-b": node(kernel="6.11.0-1099-nvidia-drifted")})
    node_rows(side_by_side(found, "spark-a", "spark-b"), ("spark-a", "spark-b"))
    lines = capsys.readouterr().out.splitlines()
    width = max(len(name) for name in fields(node()))
    column = max(len(value) for value in fields(node()).values())
    assert lines[0] == f"  {'field':<{width}}  {'spark-a':<{column}}  spark-b"
    assert lines[1] == f"≠ {'kernel':<{width}}  {'6.11.0-1016-nvidia':<{column}}  6.11.0-1099-nvidia-drifted"
    assert lines[-1] == "1 field(s) differ between spark-a and spark-b"
    node_rows(side_by_side(lock(), "spark-a", "spark-b"), ("spark-a", "spark-b"))
    assert capsys.readouterr().out.splitlines()[-1] == f"spark-a and spark-b agree on all {len(fields(node()))} fields"
