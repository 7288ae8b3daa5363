"""Probe parsers on what real machines printed (tests/fixtures/probes/real, sources in its SOURCES.md),
on what the simulated pair's stand-ins print (standin/), and on real tools run on this machine or the
pair (the top level; SOURCES.md says which file is which)."""

from __future__ import annotations

import base64
import re
import subprocess
from pathlib import Path

import pytest
from fakenode import TIMES_OUT, FakeNode, Reply, in_local_shell

from sparkpair.errors import ConnectError, ConnectionLost
from sparkpair.probes import (
    Probe,
    ProbeFailure,
    batch_script,
    docker,
    format_sections,
    gather,
    host,
    models,
    net,
    parse_batch,
    round_lost,
)
from sparkpair.probes import judge as probes_judge
from sparkpair.transport import TIMED_OUT, CommandResult, Shell

CAPTURED = Path(__file__).parent.parent / "fixtures" / "probes"
GIB_KB = 1024 * 1024


def captured(name: str) -> str:
    return (CAPTURED / name).read_text()


def real(name: str) -> str:
    """A real machine's output (tests/fixtures/probes/real)."""
    return (CAPTURED / "real" / name).read_text()


def standin(name: str) -> str:
    """What a stand-in of the simulated pair printed (tests/fixtures/probes/standin)."""
    return (CAPTURED / "standin" / name).read_text()


def test_interfaces_fresh_node_has_twins_down_without_addresses() -> None:
    interfaces = net.parse_interfaces(captured("ip-addr-fresh.json"))
    twin = interfaces["enp1s0f1np1"]
    assert not twin.admin_up and not twin.carrier and twin.ipv4 == [] and twin.mtu == 1500
    management = interfaces["enP7s7"]
    assert management.admin_up and management.carrier and management.ipv4 == ["198.18.0.11/24"]


def test_default_route_and_ssh_session() -> None:
    assert net.parse_default_routes(captured("ip-route-default.json")) == ["enP7s7"]
    assert net.parse_ssh_session("198.18.0.1 51022 198.18.0.11 22") == "198.18.0.11"
    assert net.parse_ssh_session("") == ""


def test_ethtool_speed_and_link_on_real_sparks() -> None:
    assert net.parse_ethtool(real("ethtool-grep-speed__1.txt")) == net.Ethtool(200000, True)  # spaces as published
    assert net.parse_ethtool(real("ethtool-grep-speed__3.txt")).speed_mbps == 200000            # TAB, as ethtool prints
    assert net.parse_ethtool(real("ethtool-grep-speed-100g.txt")).speed_mbps == 100000          # a switch at 100G


def test_ethtool_on_the_standin() -> None:
    assert net.parse_ethtool(standin("ethtool-linked.txt")) == net.Ethtool(200000, True)
    assert net.parse_ethtool(standin("ethtool-no-link.txt")) == net.Ethtool(None, False)


def test_ping_summaries() -> None:
    ok = net.parse_ping(captured("ping-ok.txt"))
    assert ok.ok and ok.received == 2 and ok.avg_ms is not None and ok.avg_ms < 10
    lost = net.parse_ping(captured("ping-lost.txt"))
    assert not lost.ok and lost.sent == 2 and lost.received == 0
    assert not net.parse_ping(captured("ping-df-too-big.txt")).ok


def test_a_jumbo_ping_on_real_sparks_and_one_refused_by_the_local_mtu() -> None:
    jumbo = net.parse_ping(real("ping-M-do-s8972__1.txt"))  # an excerpt: one reply, no statistics
    assert jumbo == net.PingResult(1, 1, 0.644) and jumbo.ok
    refused = net.parse_ping(captured("ping-local-mtu-error.txt"))  # `3 packets transmitted, 0 received, +3 errors`
    assert refused == net.PingResult(3, 0, None) and not refused.ok and refused.lost == 3


def ip_text(text: str) -> dict[str, tuple[frozenset[str], int, str, list[str]]]:
    """What `ip a` text says of each interface: flags, MTU, MAC, IPv4 addresses (to check the JSON
    transcriptions of the real samples against the text they came from)."""
    found: dict[str, tuple[frozenset[str], int, str, list[str]]] = {}
    name = ""
    for line in text.splitlines():
        if header := re.match(r"^\s*\d+: (\S+): <([^>]*)> mtu (\d+)", line):
            name = header.group(1)
            found[name] = (frozenset(header.group(2).split(",")), int(header.group(3)), "", [])
        elif mac := re.match(r"\s+link/\S+ (\S+)", line):
            flags, mtu, _, addresses = found[name]
            found[name] = (flags, mtu, mac.group(1), addresses)
        elif inet := re.match(r"\s+inet (\S+)", line):
            found[name][3].append(inet.group(1))
    return found


def test_interfaces_of_real_sparks() -> None:
    for sample in ("ip-addr__1", "ip-addr-show-enP7s7__1", "ip-addr-show-enp1s0f0np0__1"):
        parsed = net.parse_interfaces(real(f"{sample}.json"))
        text = ip_text(real(f"{sample}.txt"))
        assert set(parsed) == set(text), sample
        for name, (flags, mtu, mac, ipv4) in text.items():
            interface = parsed[name]
            assert (interface.mtu, interface.mac, interface.ipv4) == (mtu, mac, ipv4), name
            assert interface.admin_up == ("UP" in flags)
            assert interface.carrier == ("LOWER_UP" in flags and "NO-CARRIER" not in flags)
    unplugged = net.parse_interfaces(real("ip-addr__1.json"))
    for twin in ("enp1s0f0np0", "enp1s0f1np1", "enP2p1s0f0np0", "enP2p1s0f1np1"):
        assert unplugged[twin].admin_up and not unplugged[twin].carrier and unplugged[twin].ipv4 == []
    wifi = unplugged["wlP9s9"].addresses[0]
    assert str(wifi) == "192.168.111.87/24" and wifi.dynamic
    cabled = net.parse_interfaces(real("ip-addr-show-enp1s0f0np0__1.json"))["enp1s0f0np0"]
    assert cabled.carrier and cabled.ipv4 == ["10.0.1.1/24"] and cabled.mtu == 1500


def test_netplan_owners_include_match_names() -> None:
    text = format_sections({"/etc/netplan/50-cloud-init.yaml": captured("netplan-cloud-init.yaml"),
                            "/etc/netplan/60-x.yaml": "network:\n  ethernets:\n    cx:\n      match: {name: enp1s0f1np1}\n",
                            "/etc/netplan/70-broken.yaml": "network: [\n"})
    files = net.parse_netplan_files(text)
    assert files["/etc/netplan/50-cloud-init.yaml"].interfaces == {"enP7s7"}
    assert files["/etc/netplan/60-x.yaml"].interfaces == {"cx", "enp1s0f1np1"}
    assert files["/etc/netplan/70-broken.yaml"].interfaces == frozenset()


def test_netplan_addresses_are_read_once_per_file_by_the_parser() -> None:
    """links.persistent looks the twin's addresses up in the parsed file: each document is read by the probe's
    parser, not once more per twin by the judge."""
    ours = ("network:\n  version: 2\n  ethernets:\n    enp1s0f1np1:\n      addresses: [198.19.1.11/24]\n"
            "      mtu: 9000\n    enP2p1s0f1np1:\n      addresses:\n        - 198.19.2.11/24\n"
            "  bonds:\n    bond0:\n      addresses: [10.9.9.9/24]\n")
    text = format_sections({"/etc/netplan/50-cloud-init.yaml": captured("netplan-cloud-init.yaml"),
                            "/etc/netplan/40-sparkpair-cx7.yaml": ours, "/etc/netplan/70-broken.yaml": "network: [\n"})
    files = net.parse_netplan_files(text)
    assert files["/etc/netplan/50-cloud-init.yaml"].addresses == {"enP7s7": ("198.18.0.11/24",)}
    assert files["/etc/netplan/40-sparkpair-cx7.yaml"].addresses == {"enp1s0f1np1": ("198.19.1.11/24",),
                                                                     "enP2p1s0f1np1": ("198.19.2.11/24",)}
    assert files["/etc/netplan/70-broken.yaml"].addresses == {}


def test_gpu_query_on_real_gb10s() -> None:
    first = host.parse_gpu_query(real("nvidia-smi-query-gpu__1.txt"),
                                 ("name", "compute_cap", "driver_version", "memory.total"))
    assert first == [{"name": "NVIDIA GB10", "compute_cap": "12.1", "driver_version": "580.159.03",
                      "memory.total": None}]
    second = host.parse_gpu_query(real("nvidia-smi-query-gpu__2.txt"),
                                  ("name", "memory.used", "memory.total", "utilization.gpu"))
    assert second == [{"name": "NVIDIA GB10", "memory.used": None, "memory.total": None, "utilization.gpu": "0"}]
    four_nodes = host.parse_gpu_query(real("nvidia-smi-query-gpu__3.txt"), ("name", "memory.total", "memory.free"))
    assert four_nodes == [{"name": "NVIDIA GB10", "memory.total": None, "memory.free": None}] * 4  # headers skipped


def test_gpus_on_the_standin_and_on_a_gpu_with_its_own_memory() -> None:
    assert host.parse_gpus(standin("nvidia-smi-query.csv")) == [host.Gpu(0, "NVIDIA GB10", "580.95.05", None)]
    header = host.parse_gpu_query(standin("nvidia-smi-query-header.csv"), ("name", "memory.total", "memory.free"))
    assert header == [{"name": "NVIDIA GB10", "memory.total": None, "memory.free": None}]
    # hand-made: a discrete GPU's row, with and without units
    assert host.parse_gpus("0, NVIDIA H100 80GB HBM3, 580.95.05, 81559\n1, NVIDIA H100 80GB HBM3, 580.95.05, 81559 MiB\n") \
        == [host.Gpu(0, "NVIDIA H100 80GB HBM3", "580.95.05", 81559), host.Gpu(1, "NVIDIA H100 80GB HBM3", "580.95.05", 81559)]
    assert host.parse_gpus("") == []


def test_dgx_release_in_every_real_layout() -> None:
    ota = host.parse_dgx_release(real("dgx-release__1.txt"))
    assert (ota.name, ota.pretty_name, ota.version, ota.factory_version, ota.ota_versions) == \
        ("DGX Spark", "NVIDIA DGX Spark", "7.5.0", "7.2.3", ("7.5.0",)) and ota.is_spark
    factory = host.parse_dgx_release(real("dgx-release-factory.txt"))
    assert (factory.version, factory.factory_version, factory.ota_versions) == ("7.2.3", "7.2.3", ())
    history = host.parse_dgx_release(real("dgx-release-ota-history.txt"))
    assert (history.version, history.ota_versions, history.platform) == \
        ("7.6.0", ("7.3.1", "7.4.0", "7.5.0", "7.6.0"), "GX10")
    bare = host.parse_dgx_release(real("dgx-release-unquoted.txt"))
    assert (bare.name, bare.platform, bare.version, bare.factory_version) == \
        ("DGX Spark", "HP ZGX Nano G1n AI Station", "7.5.0", "7.2.3") and bare.is_spark
    assert host.parse_key_values(real("dgx-release-unquoted.txt"))["DGX_OTA_DATE"] == "Fri Jun 19 14:17:10 EDT 2026"
    node = host.parse_dgx_release(standin("dgx-release.txt"))
    assert (node.name, node.version, node.factory_version) == ("DGX Spark", "7.5.0", "7.2.3")
    assert not host.parse_dgx_release("").is_spark


def test_meminfo_of_a_simulated_gb10_and_of_this_machine() -> None:
    gb10 = host.parse_meminfo(standin("meminfo.txt"))
    assert 119 * GIB_KB < gb10["MemTotal"] < 122 * GIB_KB and gb10["MemTotal"] > gb10["MemAvailable"] > gb10["MemFree"]
    assert gb10["Active(anon)"] > 0 and gb10["HugePages_Total"] == 0
    machine = host.parse_meminfo(captured("meminfo.txt"))
    assert machine["MemAvailable"] > 0 and machine["MemTotal"] >= machine["MemAvailable"]


def test_free_space_from_df() -> None:
    assert host.parse_int(captured("df-avail.txt")) == 82809729024  # GNU coreutils: header, then the number
    assert host.parse_int(standin("df-avail.txt")) > 3000 * 1024 ** 3  # the simulated Spark's 3.7T NVMe


def test_identity() -> None:
    identity = host.parse_identity("1000\nnvidia\nnvidia sudo docker\nspark-a\n")
    assert identity.uid == 1000 and "docker" in identity.groups and identity.hostname == "spark-a"


def test_listeners_name_the_process() -> None:
    line = 'LISTEN 0 128 0.0.0.0:8355 0.0.0.0:* users:(("python3",pid=4242,fd=5))\nLISTEN 0 5 [::]:2233 [::]:*\n'
    assert host.parse_listeners(line) == [host.Listener("0.0.0.0", 8355, "python3 (pid 4242)"),
                                          host.Listener("::", 2233, "unknown process")]


def test_manifest_of_a_hub_cache_repo() -> None:
    sha = "a" * 64
    listing = (f"f\0{10}\0blobs/{sha}\0\0f\0{3}\0blobs/{'b' * 64}.incomplete\0\0"
               f"l\0{52}\0snapshots/{'c' * 40}/config.json\0../../blobs/{sha}\0"
               f"l\0{52}\0snapshots/{'c' * 40}/model.safetensors\0../../blobs/{'d' * 64}\0"
               f"ref\0{'c' * 40}\0end\0")
    manifest = models.parse_manifest(base64.encodebytes(listing.encode()).decode())
    assert manifest.revision == "c" * 40 and manifest.blobs == {sha: 10} and not manifest.unsafe
    assert manifest.broken == ("model.safetensors",) and manifest.incomplete and not manifest.complete
    assert models.parse_manifest("") == models.RepoManifest(None)
    with pytest.raises(ValueError, match="cut short"):
        models.parse_manifest(base64.b64encode(listing.encode()[:-5]).decode())


def test_batch_runs_probes_concurrently_and_keeps_failures(tmp_path: Path) -> None:
    probes = [Probe("sleep-a", (), Shell("sleep 0.5; echo {}", "a b"), str),
              Probe("sleep-b", (), Shell("sleep 0.5; echo oops >&2; exit 4"), str, ok_codes=(0,))]
    result = subprocess.run(["sh", "-c", batch_script(probes).text], capture_output=True, text=True, timeout=5)
    raw = parse_batch(result.stdout)
    assert raw == {0: (0, "a b\n", ""), 1: (4, "", "oops\n")}
    assert str(ProbeFailure("sleep-b", 4, "oops\n")) == "sleep-b: oops"


def test_waiting_probes_start_first_at_normal_priority_and_the_rest_at_nice_10() -> None:
    """Each probe reports the niceness it runs at (field 19 of /proc/self/stat, read by the probe's own
    process): the waiting ones keep the batch's, the others run 10 lower; answers keep their order."""
    niceness = Shell("read -r line </proc/self/stat; set -- ${line##*) }; shift 16; echo $1")
    probes = [Probe("heavy", (1,), niceness, str), Probe("login", (), niceness, str, waits=True),
              Probe("heavy", (2,), niceness, str), Probe("ping", (), niceness, str, waits=True)]
    script = batch_script(probes).text
    assert script.index("renice -n 10") > script.index('"$d/3.o"') and script.index("renice -n 10") < script.index(
        '"$d/0.o"')
    own = int(subprocess.run(["sh", "-c", niceness.text], capture_output=True, text=True).stdout)
    raw = parse_batch(subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=10).stdout)
    assert {index: int(raw[index][1]) for index in raw} == {0: min(own + 10, 19), 1: own, 2: min(own + 10, 19), 3: own}


def test_a_batch_of_one_kind_is_not_reniced() -> None:
    assert "renice" not in batch_script([Probe("ping", (), Shell("true"), str, waits=True)]).text
    assert "renice" not in batch_script([Probe("identity", (), Shell("true"), str)]).text


def test_docker_engine_api_answers_of_a_real_engine() -> None:
    info = docker.DOCKER_INFO.parse(captured("docker-api-info.txt"))
    assert info.server_version.startswith("20.10") and {"nvidia", "runc"} <= info.runtimes
    image = docker.image_id("sparkpair/trtllm-sim:1.3.0rc12").parse(captured("docker-api-image.txt"))
    assert image is not None and re.fullmatch(r"sha256:[0-9a-f]{64}", image)
    assert docker.image_id("nvcr.io/x:1").parse(captured("docker-api-image-missing.txt")) is None
    state = docker.container("sp-fixture").parse(captured("docker-api-container.txt"))
    assert state is not None and state.name == "sp-fixture" and state.running and state.status == "running"
    assert state.labels["sparkpair.node"] == "spark-a" and state.image_id.startswith("sha256:")
    assert docker.container("trtllm-multinode").parse(captured("docker-api-container-missing.txt")) is None


def test_docker_probes_refuse_an_answer_that_is_not_the_asked_object() -> None:
    for probe in (docker.DOCKER_INFO, docker.image_id("x"), docker.container("x")):
        failed = probes_judge(probe, 0, '{"message":"client version 1.99 is too new"}\n400\n', "")
        assert isinstance(failed, ProbeFailure) and "HTTP 400" in failed.stderr


def test_docker_probes_on_a_node_without_the_daemon_or_its_group(tmp_path: Path) -> None:
    """The socket checks ahead of curl, run by a real shell: no socket, and a socket this user may not use."""
    missing = tmp_path / "none.sock"
    run = subprocess.run(["sh", "-c", docker.DOCKER_INFO.command.text], capture_output=True, text=True,
                         env={"DOCKER_HOST": f"unix://{missing}", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 1 and "no socket" in run.stderr


def test_hub_reach_from_curls_answers() -> None:
    """curl 7.88's own lines on this machine: an answer, a refused connection, an unknown host."""
    assert models.parse_hub("http 200\n") == models.HubReach(True, "HTTP 200")
    assert models.parse_hub("http 401\n").reachable
    refused = "curl: (7) Failed to connect to 198.18.0.1 port 8791 after 0 ms: Couldn't connect to server\nhttp 000\nexit 7\n"
    assert models.parse_hub(refused) == models.HubReach(False, refused.splitlines()[0])
    unknown = models.parse_hub("curl: (6) Could not resolve host: huggingface.co\nhttp 000\nexit 6\n")
    assert not unknown.reachable and "Could not resolve host" in unknown.detail


def test_known_host_pins_from_ssh_keygen(tmp_path: Path) -> None:
    """Real ssh-keygen -F on a known_hosts with a hashed and a plain entry, and on an address it lacks."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    key = "AAAAC3NzaC1lZDI1NTE5AAAAIKWoQFZFH5Ld"
    (home / ".ssh" / "known_hosts").write_text(f"198.19.1.12 ssh-ed25519 {key}\n198.19.2.12 ssh-rsa AAAAB3rsa\n")
    subprocess.run(["ssh-keygen", "-H", "-f", str(home / ".ssh" / "known_hosts")], capture_output=True, check=True)
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    for address, expected in (("198.19.1.12", (("ssh-ed25519", key),)), ("198.19.2.12", (("ssh-rsa", "AAAAB3rsa"),)),
                              ("198.19.9.9", ())):
        probe = net.known_host(address)
        run = subprocess.run(["sh", "-c", probe.command.text], capture_output=True, text=True, env=env)
        assert run.returncode in probe.ok_codes and probe.parse(run.stdout) == expected


def _scripted(*replies: Reply | Exception | None) -> FakeNode:
    """A node whose rounds answer from a script: each run takes the next reply; a reply of None runs the
    batch with the local sh, as a node would."""
    node = FakeNode("spark-a")
    for reply in replies:
        node.on(lambda text: True, in_local_shell() if reply is None else reply, times=1)
    return node


ECHO = Probe("echo", (), Shell("echo {}", "here"), str)
FAILING = Probe("failing", (), Shell("echo broken >&2; exit 3"), str)


def test_a_round_whose_connection_ended_under_it_is_asked_once_more_on_a_new_one() -> None:
    lost = ConnectionLost("connection lost while running `...`: Unable to open channel.", node="spark-a")
    node = _scripted(lost, None)
    facts = gather(node, [ECHO], timeout=60)
    assert len(node.calls) == 2 and facts[ECHO] == "here\n"
    with pytest.raises(ConnectionLost):  # dropped twice: the node's problem, said by reach.ssh
        gather(_scripted(lost, lost), [ECHO], timeout=60)
    never = _scripted(ConnectError("no answer from nvidia@198.18.0.12:22 (timed out)"), None)
    with pytest.raises(ConnectError):  # never connected: not asked twice (that would double the wait)
        gather(never, [ECHO])
    assert len(never.calls) == 1


def test_a_round_whose_session_died_before_any_probe_is_asked_once_more() -> None:
    node = _scripted(Reply(exit_code=-1), None)
    facts = gather(node, [ECHO, FAILING], timeout=60)
    assert len(node.calls) == 2
    assert facts[ECHO] == "here\n"
    assert str(facts[FAILING]) == "failing: broken"


def test_a_round_lost_twice_says_so_instead_of_blaming_each_probe() -> None:
    died = Reply(exit_code=-1)
    node = _scripted(died, died)
    facts = gather(node, [ECHO], timeout=60)
    assert len(node.calls) == 2
    assert str(facts[ECHO]) == "echo: the node's probe round ended without this probe's answer (exit -1)"


def test_a_round_that_timed_out_is_not_asked_again_and_says_it_timed_out() -> None:
    node = _scripted(TIMES_OUT)
    facts = gather(node, [ECHO, FAILING], timeout=60)
    assert len(node.calls) == 1
    assert str(facts[ECHO]) == "echo: the node's probe round did not finish within 60 s"
    over = CommandResult("spark-a", "", 125, "", "printed more than 100 bytes; the rest was not read", over_cap=True)
    assert round_lost(over, 60) == "the node's probe round printed more than 100 bytes; the rest was not read"


def test_a_round_that_exits_124_itself_is_not_a_timeout() -> None:
    """Only the transport says a round timed out (`timed_out`): a round whose own script exits 124 (a probe's
    `timeout`, or a hostile node forging the words) is a round that ended without the probes' records."""
    forged = Reply(stderr="timed out after 60 s", exit_code=TIMED_OUT)
    node = _scripted(forged, forged)
    facts = gather(node, [ECHO], timeout=60)
    assert len(node.calls) == 2  # asked once more, as any round that died before its probes
    assert str(facts[ECHO]) == "echo: timed out after 60 s"


def test_the_ssh_trust_probe_is_bounded_and_says_when_the_login_hung(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text("#!/bin/sh\nexec sleep 30\n")  # a peer whose sshd accepts, then hangs
    (bin_dir / "ssh").chmod(0o755)
    # coreutils timeout, but after 0.3 s instead of SSH_PROBE_S
    (bin_dir / "timeout").write_text('#!/bin/sh\nshift\n"$@" & pid=$!\nsleep 0.3\nkill $pid\nexit 124\n')
    (bin_dir / "timeout").chmod(0o755)
    probe = net.ssh_batch("198.18.99.2")
    assert probe.command.text.startswith(f"timeout {net.SSH_PROBE_S} ssh ")
    done = subprocess.run(["sh", "-c", probe.command.text], capture_output=True, text=True, timeout=10,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    assert done.returncode == TIMED_OUT
    assert done.stderr.strip() == f"the login did not finish within {net.SSH_PROBE_S} s"


def test_blobs_only_an_older_snapshot_uses_make_no_difference() -> None:
    """A model updated on the hub leaves the old snapshot's blobs on the head; the worker needs only the main
    revision's, and a copy of those is not 'still different' (seen on the simulated pair's vLLM models)."""
    from sparkpair.probes.models import RepoManifest

    rev, old, new, weights = "a" * 40, "1" * 40, "2" * 40, "3" * 64
    head = RepoManifest(rev, {old: 908, new: 909, weights: 5000}, {"config.json": new, "model.safetensors": weights})
    worker = RepoManifest(rev, {new: 909, weights: 5000}, {"config.json": new, "model.safetensors": weights})
    assert head.differences(worker) == [] and worker.differences(head) == []
    smaller = RepoManifest(rev, {new: 900, weights: 5000}, {"config.json": new, "model.safetensors": weights})
    assert head.differences(smaller) == [f"blob {new[:12]}: 909 bytes vs 900 bytes"]
