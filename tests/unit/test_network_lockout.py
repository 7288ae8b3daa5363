"""setup-network's lockout guard (from captured `ip -j route` output) and its watchdog script.

The guard refuses a QSFP subnet holding the operator's address as the node sees it, the
management address, or the next hop of the session's route, and warns on any other overlap with
the node's routes. The watchdog script is checked for what it restores and that `sh` parses it;
running it is the integration tests' job (tests/integration/test_setup_network.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from sparkpair import paths
from sparkpair.inventory import parse_inventory, read_inventory
from sparkpair.network import lockout, netplan, watchdog
from sparkpair.probes import net
from sparkpair.transport import root

FIXTURES = Path(__file__).parent.parent / "fixtures"
SIM_DATA = yaml.safe_load((FIXTURES / "inventory" / "sim.yaml").read_text())
INTERFACES = net.parse_interfaces((FIXTURES / "probes" / "ip-addr-fresh.json").read_text())


def routes(name: str) -> list[net.Route]:
    return net.parse_routes((FIXTURES / "probes" / name).read_text())


ONLINK, VIA, TABLE = routes("ip-route-get-onlink.json"), routes("ip-route-get-via.json"), routes("ip-route-show.json")


def node_with(twin_address: str):
    """spark-a with twin_address on enp1s0f1np1 (spark-b: the next address of that subnet)."""
    data = yaml.safe_load(yaml.safe_dump(SIM_DATA))
    ip, prefix = twin_address.split("/")
    head, last = ip.rsplit(".", 1)
    data["nodes"][0]["links"]["enp1s0f1np1"] = twin_address
    data["nodes"][1]["links"]["enp1s0f1np1"] = f"{head}.{int(last) + 1}/{prefix}"
    return parse_inventory(data).node("spark-a")


def guard(twin_address: str, session_route: list[net.Route] = ONLINK, table: list[net.Route] = TABLE[:2]):
    return lockout.guard(node_with(twin_address), INTERFACES, ["enP7s7"], "198.18.0.11", session_route, table)


def test_parse_routes_reads_route_get_and_route_show() -> None:
    assert ONLINK == [net.Route("198.18.0.1", "enP7s7", None, "198.18.0.11")]
    assert VIA == [net.Route("198.18.0.1", "enP7s7", "198.18.0.12", "198.18.0.11")]
    assert [(r.dst, r.dev, r.gateway) for r in TABLE[:3]] == [
        ("default", "enP7s7", "198.18.0.1"), ("198.18.0.0/24", "enP7s7", None), ("198.18.0.1", "enP7s7", "198.18.0.12")]
    assert net.parse_routes("") == []


def test_a_subnet_holding_the_operators_address_is_refused_naming_address_interface_and_fix() -> None:
    found = guard("198.18.0.2/29")  # the example: 198.18.0.0/29 holds the operator's 198.18.0.1
    assert found.refusals == [
        "spark-a: enp1s0f1np1's subnet 198.18.0.0/29 contains 198.18.0.1, the operator's address as this node sees "
        "the SSH session; applying it would send this SSH session through enp1s0f1np1 and cut it (lockout guard; fix: "
        "nodes[spark-a].links.enp1s0f1np1: an address in a subnet that holds none of 198.18.0.1, 198.18.0.11)"]
    assert found.warnings == []


def test_a_subnet_holding_the_management_address_is_refused() -> None:
    found = guard("198.18.0.9/29")  # 198.18.0.8/29: .8 to .15, the management address .11, not the operator's .1
    assert len(found.refusals) == 1
    assert "subnet 198.18.0.8/29 contains the management address 198.18.0.11;" in found.refusals[0]


def test_a_subnet_holding_the_next_hop_of_the_session_route_is_refused() -> None:
    found = guard("198.18.0.13/30", session_route=VIA)  # .12/30: the gateway .12 (spark-b: .14)
    assert len(found.refusals) == 1
    assert ("subnet 198.18.0.12/30 contains 198.18.0.12, the next hop of this SSH session's route (198.18.0.1 via "
            "198.18.0.12 dev enP7s7)") in found.refusals[0]
    assert guard("198.18.0.13/30").refusals == []  # on-link, that address is nothing the session needs


def test_other_overlaps_with_the_nodes_routes_are_warnings() -> None:
    found = guard("198.18.0.65/26")
    assert found.refusals == []
    assert found.warnings == [
        "spark-a: enp1s0f1np1's subnet 198.18.0.64/26 overlaps the route to 198.18.0.0/24 (dev enP7s7); once applied, "
        "some of those addresses may be reached through enp1s0f1np1 instead (check that nothing needed lies in both, "
        "or give enp1s0f1np1 another subnet)"]
    gateway = [net.Route("default", "enP7s7", "198.18.2.1", None)]
    found = guard("198.18.2.2/24", table=gateway)
    assert found.refusals == [] and len(found.warnings) == 1
    assert "contains the gateway 198.18.2.1 of the default route (via 198.18.2.1 dev enP7s7)" in found.warnings[0]


def test_routes_through_the_twins_themselves_and_a_fresh_subnet_say_nothing() -> None:
    assert guard("198.19.1.11/24", table=TABLE) == lockout.Guard()


def test_the_interface_carrying_the_session_is_refused_even_without_ssh_connection() -> None:
    data = yaml.safe_load(yaml.safe_dump(SIM_DATA))
    data["nodes"][0]["links"] = {"enP7s7": "198.19.3.11/24"}
    data["nodes"][1]["links"] = {"enP7s7": "198.19.3.12/24"}
    node = parse_inventory(data).node("spark-a")
    found = lockout.guard(node, INTERFACES, ["enP7s7"], "198.18.0.11", [], [])
    assert [line.split(";")[0] for line in found.refusals] == [
        "spark-a: enP7s7 carries this SSH session (198.18.0.11)", "spark-a: enP7s7 carries the default route"]
    assert lockout.guard(node, INTERFACES, [], "", [], []).refusals == []  # no session, no route: nothing to guard


def test_the_planner_keeps_lockouts_apart_from_other_refusals() -> None:
    from test_network_plan import _facts  # the planner's own fact set

    data = yaml.safe_load(yaml.safe_dump(SIM_DATA))
    data["nodes"][0]["links"]["enp1s0f1np1"] = "198.18.0.2/29"
    data["nodes"][1]["links"]["enp1s0f1np1"] = "198.18.0.3/29"
    plan = netplan.plan_network(parse_inventory(data), _facts())
    assert [line.split(":")[0] for line in plan.lockouts] == ["spark-a", "spark-b"]
    assert plan.refusals == [] and plan.changes == []


SIM = read_inventory(FIXTURES / "inventory" / "sim.yaml")
TWINS = '{"enp1s0f1np1": {"mtu": 1500, "up": false, "ipv4": []}, "enP2p1s0f1np1": {"mtu": 9000, "up": true, ' \
        '"ipv4": ["198.19.2.11/24"]}}'


def test_the_watchdog_is_armed_with_the_files_and_twins_to_put_back() -> None:
    """The helper's `watchdog-arm` gets the run, the files and each twin as it was; the helper checks each
    one (`check` runs only its checks) and keeps them as data beside its own copy, the watchdog."""
    command = watchdog.arm_command(SIM.node("spark-a"), "20250101-120000", 60, [paths.NETPLAN_PATH], TWINS)
    assert command.shown == ("sparkpair-root watchdog-arm 20250101-120000 60 spark-a /etc/netplan/40-sparkpair-cx7.yaml "
                             "-- enp1s0f1np1,1500,down enP2p1s0f1np1,9000,up,198.19.2.11/24")
    checked = subprocess.run(["sh", "-c", root.helper_text(), "sparkpair-root", "check", command.verb, *command.args],
                             capture_output=True, text=True, timeout=10)
    assert (checked.returncode, checked.stdout) == (0, "ok\n"), checked.stderr
    helper = root.helper_text()
    subprocess.run(["sh", "-n"], input=helper, text=True, check=True)
    for line in ('    step log netplan generate', '    step log timeout "$NETPLAN_TIMEOUT" netplan apply',
                 '    step "$how" ip link set dev "$name" mtu "$mtu" || return 1',
                 '    for address in "$@"; do step "$how" ip addr add "$address" dev "$name" || return 1; done',
                 '        if [ -e "$saved" ]; then cp -a "$saved" "$path" || fail restore "$path"',
                 '        else rm -f "$path" || fail remove "$path"; fi', '    rm -rf "$dir"', f"log={paths.WATCHDOG_LOG}",
                 '    if [ "$1" = fire ] && [ "${2:-}" != "$stamp" ]; then echo "a timer of another run"; exit 0; fi'):
        assert line in helper, line
    assert "NETPLAN_TIMEOUT=120" in helper and f"dir={paths.WATCHDOG_DIR} " in helper


def test_the_watchdog_ignores_another_runs_timer_and_a_confirm_when_not_armed(tmp_path: Path) -> None:
    """Run here: in these cases the helper stops before it touches anything."""
    assert not Path(paths.WATCHDOG_DIR).exists()
    script = tmp_path / "watchdog"
    script.write_text(root.helper_text())
    other = subprocess.run(["sh", str(script), "fire", "20240101-000000"], capture_output=True, text=True)
    assert (other.returncode, other.stdout) == (0, "a timer of another run\n")
    late = subprocess.run(["sh", str(script), "confirm"], capture_output=True, text=True)
    assert (late.returncode, late.stdout) == (3, "not armed (it reverted already)\n")
    usage = subprocess.run(["sh", str(script)], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage: sparkpair-root" in usage.stderr


def test_the_arm_uses_systemd_only_where_it_runs() -> None:
    arm = root.helper_text().split("\narm() {", 1)[1].split("\n}\n", 1)[0]
    assert '[ -d /run/systemd/system ] && [ "$(cat /proc/1/comm 2>/dev/null)" = systemd ]' in arm
    assert 'systemd-run --quiet --collect --unit="$unit" --on-active="${seconds}s" --timer-property=AccuracySec=1s \\\n' \
           '            /bin/sh "$d/watchdog" fire "$stamp"' in arm
    assert "setsid /bin/sh -c 'sleep \"$1\"; exec /bin/sh \"$2\" fire \"$3\"' sparkpair-watchdog" in arm


@pytest.mark.parametrize("seconds,expected", [(10, 5.0), (60, 20.0), (600, 30.0)])
def test_netplan_apply_is_bounded_well_inside_the_deadline(seconds: float, expected: float) -> None:
    from sparkpair.network import guarded

    assert guarded.apply_timeout(seconds) == expected
