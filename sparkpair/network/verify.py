"""setup-network's verification: doctor's own link and trust checks, over facts probed after the apply.

There is one judge of a link (`sparkpair.checks.links`); this module only gathers what it needs
from both nodes, polls until the link passes or a deadline ends, and turns what the judge found
into problems: every FAIL, and every WARN that setup-network itself should have fixed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace

from sparkpair import probes, transport
from sparkpair.checks import SETUP_NETWORK, CheckFunction, Finding, Status, judge, links
from sparkpair.inventory import Inventory, Node
from sparkpair.probes import NodeFacts, net
from sparkpair.transport import Pair, Shell

LINK_CHECKS: list[tuple[str, CheckFunction]] = [("links", links.check_links), ("links", links.check_pair_links),
                                                ("path", links.check_path)]
TRUST_CHECKS: list[tuple[str, CheckFunction]] = [("trust", links.check_trust)]


def problems(findings: Iterable[Finding]) -> list[str]:
    """`node: detail` for every FAIL, and every WARN that setup-network is there to fix; `(fix: ...)` follows
    when the fix is the operator's hands (a cable, a switch port), not another run of setup-network."""
    return [f"{finding.node}: {finding.detail}" + (f" (fix: {finding.fix})" if _by_hand(finding) else "")
            for finding in findings
            if finding.status is Status.FAIL or (finding.status is Status.WARN and finding.fixed_by == SETUP_NETWORK)]


def _by_hand(finding: Finding) -> bool:
    """Whether the finding's fix is something other than setup-network itself (which just ran)."""
    return bool(finding.fix) and finding.fixed_by != SETUP_NETWORK and "setup-network" not in finding.fix


def _gather_and_judge(pair: Pair, inventory: Inventory, probes_of: object, checks: list[tuple[str, CheckFunction]],
                      only: Iterable[str]) -> list[str]:
    result = pair.each(lambda c: probes.gather(c, probes_of(inventory, inventory.node(c.name))))  # type: ignore[operator]
    unreachable = {name: str(error) for name, error in result.failed.items()}
    nodes = {name: result.values.get(name, NodeFacts()) for name in result}
    return result.error_lines() + problems(judge(inventory, nodes, checks, only, unreachable))


def verification_probes(inventory: Inventory, node: Node) -> list[probes.Probe[object]]:
    """What the VERIFIED link checks need from node: interfaces, the crossing test, both pings per twin."""
    return links.link_probes(inventory, node, verify_only=True)


def state_probes(inventory: Inventory, with_trust: bool = True) -> dict[str, list[probes.Probe[object]]]:
    """Node -> what the link checks (and the trust checks) judge: asked in the planning round, so that a run
    with nothing to change is verified without probing again.

    Each runs only where the node's twins already hold their inventory addresses: on a node still to be
    set up, a ping or an ssh to the peer would wait for its timeout (seconds) for an answer that cannot come,
    and the run verifies after its apply anyway."""
    guarded = {}
    for node in inventory.nodes:
        ready = Shell.compose([net.holds_address(twin, str(address)) for twin, address in node.links.items()], " && ")
        asked = [*verification_probes(inventory, node), *(links.trust_probes(inventory, node) if with_trust else [])]
        guarded[node.name] = [replace(probe, command=Shell.compose(
            [Shell("{ "), ready, Shell(" || { echo 'the twins are not configured yet' >&2; exit 125; }; }; "),
             probe.command], "")) for probe in asked]
    return guarded


def _judged(inventory: Inventory, facts: dict[str, NodeFacts], checks: list[tuple[str, CheckFunction]],
            only: Iterable[str]) -> list[str]:
    """The problems the judge finds in facts gathered earlier; a problem too when they are missing."""
    if len(facts) < len(inventory.nodes):
        return ["the planning round did not probe the link"]
    return problems(judge(inventory, facts, checks, only))


def judge_link(inventory: Inventory, facts: dict[str, NodeFacts]) -> list[str]:
    """The link problems in facts probed before (state_probes); empty when the link verifies."""
    return _judged(inventory, facts, LINK_CHECKS, links.VERIFIED)


def judge_trust(inventory: Inventory, facts: dict[str, NodeFacts]) -> list[str]:
    """The trust problems in facts probed before (state_probes); empty when trust verifies."""
    return _judged(inventory, facts, TRUST_CHECKS, ["trust.ssh"])


def verify_link(pair: Pair, inventory: Inventory, deadline_s: float = 20.0) -> list[str]:
    """Poll both nodes until the link verifies or the deadline passes; the remaining problems."""
    end = time.monotonic() + deadline_s
    while True:
        found = _gather_and_judge(pair, inventory, verification_probes, LINK_CHECKS, links.VERIFIED)
        if not found or time.monotonic() >= end:
            return found
        time.sleep(1.0)


def verify_trust(pair: Pair, inventory: Inventory) -> list[str]:
    """ssh -o BatchMode=yes from each node to every QSFP address of the other; the failures."""
    return _gather_and_judge(pair, inventory, links.trust_probes, TRUST_CHECKS, ["trust.ssh"])


def node_state(connection: transport.Node, node: Node) -> str:
    """One line describing a node's twins now (for reports after a failure)."""
    interfaces = probes.gather(connection, [net.INTERFACES]).get(net.INTERFACES)
    if not isinstance(interfaces, dict):
        return str(interfaces)
    parts = []
    for name in node.links:
        interface = interfaces.get(name)
        parts.append(f"{name} absent" if interface is None else
                     f"{name} {'up' if interface.admin_up else 'down'} mtu {interface.mtu} "
                     f"{','.join(interface.ipv4) or 'no address'}")
    return "; ".join(parts)
