"""Checks of the nodes themselves: inventory, reach, platform, memory, clock."""

from __future__ import annotations

from collections.abc import Iterable

from sparkpair.checks import (
    Facts,
    Finding,
    fail,
    ok,
    per_node,
    skip,
    unreachable_skips,
    warn,
)
from sparkpair.inventory import Inventory
from sparkpair.inventory.topology import SPARK_PORTS, is_port_name
from sparkpair.probes import ProbeFailure, host, models
from sparkpair.transport import HELPER_PATH, root

GIB = 1024 ** 3


def check_inventory(facts: Facts) -> Iterable[Finding]:
    """Proves the inventory parsed; warns where a node's twins share one subnet."""
    inventory = facts.inventory
    workers = ", ".join(node.name for node in inventory.workers)
    yield ok("inventory.valid", facts.whole, f"{inventory.head.name} (head), {workers}; profile {facts.profile.name}")
    yield from inventory_warnings(inventory)


def inventory_warnings(inventory: Inventory) -> list[Finding]:
    """The inventory's own WARNs, judged without any node (doctor and `inventory check` both show them):
    an interface not named as a ConnectX-7 port is (a typo, a LAN or Wi-Fi port; a warning, since real names may
    change with an OS update), and a node whose twins share one subnet."""
    found = []
    for index, node in enumerate(inventory.nodes):
        odd = [name for name in node.links if not is_port_name(name)]
        if odd:
            found.append(warn(
                "inventory.port-names", node.name,
                f"nodes[{index}].links: {', '.join(odd)} {'is' if len(odd) == 1 else 'are'} not named as a ConnectX-7 "
                f"QSFP port (a Spark's carry {', '.join(SPARK_PORTS)}): a typo, or a LAN, Wi-Fi or USB port?",
                f"ibdev2netdev on {node.name} lists its ConnectX-7 ports; name the Up ones in nodes[{index}].links"))
    for node in inventory.nodes:
        by_subnet: dict[object, list[str]] = {}
        for twin, address in node.links.items():
            by_subnet.setdefault(address.network, []).append(twin)
        for network, twins in ((n, t) for n, t in by_subnet.items() if len(t) > 1):
            found.append(warn(
                "inventory.twin-subnets", node.name,
                f"{', '.join(twins)} share {network}: two interfaces in one subnet cause routing "
                "ambiguity (replies leave by the other twin: asymmetric routing, ARP answered by the wrong twin) "
                "and NCCL failures (NVIDIA multi-sparks guidance)",
                "give each twin its own subnet in nodes[].links, as NVIDIA's current Connect Two Sparks playbook "
                "does: 192.168.100.x/24 and 192.168.101.x/24"))
    return found


def check_reach(facts: Facts) -> Iterable[Finding]:
    """Proves SSH with a verified host key, root through sparkpair's root helper (or, warned, full sudo), and
    the same user and uid on every node."""
    cluster = facts.inventory.cluster
    for node in facts.inventory.nodes:
        if node.name in facts.unreachable:
            yield fail("reach.ssh", node.name, facts.unreachable[node.name], facts.connect_hints.get(node.name, ""))
        else:
            yield ok("reach.ssh", node.name, f"{cluster.user}@{node.host}:{node.port}, host key verified")
    for name, sudo in per_node(facts, host.SUDO):
        if isinstance(sudo, ProbeFailure):  # the question got no answer: that is not a password prompt
            yield fail("reach.sudo", name, f"could not ask whether sudo -n works ({sudo})",
                       "see the node's other rows; then sparkpair doctor again")
        else:
            yield root_access(name, sudo, cluster.user)
    identities = {name: value for name, value in per_node(facts, host.IDENTITY)
                  if not isinstance(value, ProbeFailure)}
    if len(identities) == len(facts.inventory.nodes):  # judged once every node answered
        same = len({(found.user, found.uid) for found in identities.values()}) == 1
        detail = "; ".join(f"{name}: {found.user} uid {found.uid}" for name, found in identities.items())
        yield ok("reach.same-user", facts.whole, detail) if same else \
            fail("reach.same-user", facts.whole, detail + " (mpirun and shared files need the same user and uid)")


def root_access(name: str, access: host.RootAccess, user: str) -> Finding:
    """reach.sudo for one node: OK through sparkpair's root helper; WARN with full sudo only (it works, and the
    login may run anything as root); FAIL when sudo -n runs neither. Every fix installs the helper and grants
    the login that one program."""
    fix = (f"on {name}: sparkpair root-helper > sparkpair-root, copy that file there, then "
           + "; ".join(root.install_commands(user)) + " (it grants only: " + root.sudoers_line(user)
           + "; what the helper does as root: docs/checklist.md#sudo)")
    if access.helper == "ours":
        also = "; sudo also runs anything else (a NOPASSWD: ALL rule), which sparkpair does not need" if access.full else ""
        return ok("reach.sudo", name, f"root through sparkpair's root helper {HELPER_PATH} only{also}")
    found = {"other": f"{HELPER_PATH} is not the root helper this sparkpair ships (another version)",
             "denied": f"sudo -n does not run {HELPER_PATH}", "absent": f"no root helper at {HELPER_PATH}"}[access.helper]
    if access.full:
        return warn("reach.sudo", name, f"{found}: sparkpair runs the same helper text through full sudo "
                    "(NOPASSWD: ALL), so the login may run anything as root", fix)
    return fail("reach.sudo", name, f"{found}, and sudo asks for a password: setup-network and launch need root "
                "through sudo -n", fix)


def check_platform(facts: Facts) -> Iterable[Finding]:
    """Proves DGX OS, a visible GPU on each node, and the same driver on every node."""
    for name, release in per_node(facts, host.DGX_RELEASE):
        if isinstance(release, ProbeFailure) or release is None or not release.is_spark:
            yield warn("platform.dgx-os", name, "no DGX Spark /etc/dgx-release; sparkpair is made for DGX OS on Spark")
        else:
            updated = f" (OTA update of {release.factory_version})" if release.ota_versions else ""
            yield ok("platform.dgx-os", name, f"{release.pretty_name or release.name} DGX OS "
                                              f"{release.version}{updated}".strip())
    drivers = {}
    for name, gpus in per_node(facts, host.GPUS):
        if isinstance(gpus, ProbeFailure) or not gpus:
            yield fail("platform.gpu", name, f"no GPU visible ({gpus or 'nvidia-smi lists none'})")
        else:
            drivers[name] = gpus[0].driver
            yield ok("platform.gpu", name, f"{gpus[0].name}, driver {gpus[0].driver}")
    if len(drivers) == len(facts.inventory.nodes):
        detail = ", ".join(f"{n}: {d}" for n, d in drivers.items())
        yield ok("platform.driver-match", facts.whole, detail) if len(set(drivers.values())) == 1 else \
            fail("platform.driver-match", facts.whole, f"different NVIDIA drivers ({detail})")
    else:
        yield skip("platform.driver-match", facts.whole, f"needs a GPU reading from {facts.every}")


def check_memory(facts: Facts) -> Iterable[Finding]:
    """Proves MemAvailable covers the node's weight shard, the draft and KV headroom."""
    nodes = facts.rank_nodes()
    yield from unreachable_skips(facts, "memory.available")
    for name, meminfo in per_node(facts, host.MEMINFO):
        if name not in nodes:
            continue
        if isinstance(meminfo, ProbeFailure):
            yield fail("memory.available", name, str(meminfo))
            continue
        if facts.container_running(name):
            yield skip("memory.available", name, "the engine is running and holds its memory")
            continue
        need = needed_gib(facts, name)
        available, free = meminfo.get("MemAvailable", 0) * 1024 / GIB, meminfo.get("MemFree", 0) * 1024 / GIB
        detail = f"MemAvailable {available:.1f} GiB, MemFree {free:.1f} GiB, needs {need:.1f} GiB"
        if available < need:
            yield fail("memory.available", name, detail + " (stop other GPU work or pick a smaller profile)")
        elif free < need:
            yield warn("memory.available", name, detail + ": the page cache holds the difference and the GPU "
                       "sees MemFree on unified memory", "sudo sh -c 'sync; echo 3 > /proc/sys/vm/drop_caches'")
        else:
            yield ok("memory.available", name, detail)


def needed_gib(facts: Facts, name: str) -> float:
    """The node's need: its shard of the target (one of tp_size x pp_size), the draft and the headroom; real model
    sizes from its cache when complete, else the profile's estimates."""
    profile = facts.profile
    sizes = []
    for repo, estimate in ((profile.target, profile.target_gib), (profile.draft, profile.draft_gib)):
        if repo is None:
            continue
        manifest = facts.fact(name, models.manifest(facts.inventory.container.hf_cache, repo))
        complete = manifest is not None and not isinstance(manifest, ProbeFailure) and manifest.complete
        sizes.append(manifest.size / GIB if complete else estimate)
    target = sizes[0] / profile.ranks if sizes else 0.0   # each rank holds its shard: tp_size x pp_size of them
    return target + sum(sizes[1:]) + profile.headroom_gib


def check_clock(facts: Facts) -> Iterable[Finding]:
    """Proves the nodes' clocks agree (TLS, logs and token expiry need it): the skew is the spread of every
    node's offset, and with more than two nodes the detail names the two furthest apart."""
    offsets = facts.clock_offsets
    if len(offsets) < 2:
        yield skip("clock.skew", facts.whole, "needs both nodes" if len(facts.inventory.nodes) == 2 else
                   "needs the clocks of two nodes")
        return
    early, late = min(offsets, key=offsets.__getitem__), max(offsets, key=offsets.__getitem__)
    skew = offsets[late] - offsets[early]
    two = len(facts.inventory.nodes) == 2
    detail = f"{skew:.2f} s between the nodes" if two else f"{skew:.2f} s between {early} and {late}"
    fix = f"sudo timedatectl set-ntp true (on {'both nodes' if two else 'every node'})"
    if skew < 1:
        yield ok("clock.skew", facts.whole, detail)
    elif skew < 30:
        yield warn("clock.skew", facts.whole, detail, fix)
    else:
        yield fail("clock.skew", facts.whole, detail + " (image pulls fail: validating Root CA Certificate)", fix)
