"""up, down and status of the simulated pair."""
from __future__ import annotations

import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import access, faults, hub, image, inventory, network, nodefs
from .daemons import docker_running, rdma_running, sshd_running, start_dockerd, start_rdma, start_sshd, stop_dockerd
from .holders import kill_netns_stragglers, start_holder, stop_holder
from .hostexec import CommandError, holder_pid
from .layout import CABLE_NS, CACHE_DIR, HUB_URL, INVENTORY, NODES, STATE_DIR
from .packages import ensure_packages
from .shape import every_possible_node, load

INFINIBAND = Path("/dev/infiniband")
INFINIBAND_MARKER = STATE_DIR / "made-dev-infiniband"
NETNS_MOUNT_MARKER = STATE_DIR / "made-run-netns-mount"


def each(function, nodes=NODES) -> list:
    """Run FUNCTION for every node in parallel; re-raises the first failure."""
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        return list(pool.map(function, nodes))


def prepare_host(log) -> None:
    """Packages, the nvidia user, sudo rule, operator key, node files, known_hosts."""
    installed = ensure_packages()
    if installed:
        log(f"installed Debian packages: {' '.join(installed)}")
    STATE_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    CACHE_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    if access.ensure_user():
        log("created user nvidia (stays after down)")
    access.ensure_sudoers()
    operator_pub = access.ensure_operator_key()
    for node in NODES:
        nodefs.prepare(node, operator_pub)
    access.write_known_hosts()
    if not network.netns_dir_mounted():
        NETNS_MOUNT_MARKER.write_text("`ip netns add` made the /run/netns mount; down removes it\n")
    if not INFINIBAND.exists():
        INFINIBAND.mkdir(mode=0o755)
        INFINIBAND_MARKER.write_text("made by scripts/testbed up; removed by down\n")


def start_node(node) -> bool:
    """Namespaces and holder of NODE; True when the holder had to be started."""
    network.ensure_netns(node.netns)
    started = holder_pid(node) is None
    if started:
        start_holder(node)
    network.ensure_wires(node)
    return started


def up(log) -> None:
    """Bring the pair up, or notice that it is up; prints how long it took."""
    begin = time.monotonic()
    prepare_host(log)
    network.ensure_mgmt_bridge()
    network.ensure_cable_ns()
    hub.start()
    started = [node.name for node in NODES if start_node(node)]
    each(nodefs.mount_node_facts)
    network.apply_cabling(crossed=faults.crossed_active(), crossed_at=faults.crossed_ring_nodes())
    log(f"nodes: {', '.join(started) + ' started' if started else 'already running'}")
    each(start_sshd)
    each(start_dockerd)
    each(start_rdma)
    log(f"sshd, dockerd and the RDMA driver serving on {on_every_node()}")
    build_begin = time.monotonic()
    outcome = image.ensure_image(NODES, log)
    took = time.monotonic() - build_begin
    log({"built": f"engine image built, cached and loaded in {took:.1f}s",
         "loaded": f"engine image loaded from the cache in {took:.1f}s",
         "present": f"engine image already present on {on_every_node()}"}[outcome])
    inventory.write()
    log(f"up in {time.monotonic() - begin:.1f}s; inventory: {INVENTORY}")


def on_every_node() -> str:
    """'both nodes' for a pair, 'all N nodes' for a larger shape: how the log lines say it."""
    return "both nodes" if len(NODES) == 2 else f"all {len(NODES)} nodes"


def stop_node(node) -> None:
    """Stop NODE's engine gracefully, then kill its pid 1 and anything left in its netns."""
    if holder_pid(node) is not None:
        try:
            stop_dockerd(node)
        except CommandError:
            pass  # the holder's death below takes it down anyway
        stop_holder(node)
    if node.netns in network.netns_list():
        kill_netns_stragglers(node.netns)


def down(log) -> None:
    """Remove everything `up` made except the cache and the nvidia user."""
    begin = time.monotonic()
    each(stop_node, every_possible_node())
    hub.stop()
    network.teardown()
    log("nodes stopped, namespaces and links removed")
    if INFINIBAND_MARKER.exists() and INFINIBAND.is_dir() and not any(INFINIBAND.iterdir()):
        INFINIBAND.rmdir()
    if NETNS_MOUNT_MARKER.exists():
        network.unmount_netns_dir()
    access.remove_sudoers()
    shutil.rmtree(STATE_DIR, ignore_errors=True)
    shutil.rmtree(CACHE_DIR / "rootfs.tmp", ignore_errors=True)
    if STATE_DIR.exists():
        raise CommandError(f"could not remove {STATE_DIR}")
    log(f"down in {time.monotonic() - begin:.1f}s (cache kept: {CACHE_DIR})")


def image_state(node) -> str:
    """'up' when NODE's engine has the image the current sources make, 'stale' when it has
    another image under the tag, 'DOWN' when it has none (or no engine)."""
    if not docker_running(node):
        return "DOWN"
    local = image.local_image_id(node)
    if not local:
        return "DOWN"
    return "up" if local == image.expected_image_id() else "stale"


def node_status(node) -> dict:
    """What runs on NODE, as words ('up' when healthy)."""
    running = holder_pid(node) is not None
    word = {True: "up", False: "DOWN"}
    return {
        "netns": word[node.netns in network.netns_list()],
        "holder": word[running],
        "sshd": word[running and sshd_running(node)],
        "dockerd": word[running and docker_running(node)],
        "rdma": word[running and rdma_running(node)],
        "image": image_state(node) if running else "DOWN",
    }


def cabling_word() -> str:
    """How the cables run now: the pair's 'straight' or 'crossed'; a larger shape's label, with the ring
    nodes whose cables are crossed."""
    shape = load()
    if shape.topology == "pair":
        return "crossed" if network.is_crossed() else "straight"
    crossed = sorted(network.crossed_ring_nodes())
    return shape.label + (f" (crossed at {', '.join(crossed)})" if crossed else "")


def status(log) -> bool:
    """Print what runs; True when everything is up."""
    healthy = True
    for node in NODES:
        state = node_status(node)
        healthy = healthy and all(value == "up" for value in state.values())
        log(f"{node.name:8} " + "  ".join(f"{key}:{value}" for key, value in state.items()))
    cable = CABLE_NS in network.netns_list()
    healthy = healthy and cable
    cabling = cabling_word() if cable else "-"
    log(f"{'cable':8} netns:{'up' if cable else 'DOWN'}  cabling:{cabling}")
    hub_up = hub.running()
    healthy = healthy and hub_up
    log(f"{'hub':8} {HUB_URL}:{'up' if hub_up else 'DOWN'}")
    active = [record["key"] for record in faults.active()]
    log(f"{'faults':8} {', '.join(active) if active else 'none'}")
    return healthy
