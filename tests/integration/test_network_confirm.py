"""setup-network's confirmation on the simulated pair: a watchdog that fires while sparkpair confirms.

One node's confirmation arrives only after its watchdog fired (the test makes that node's watchdog
fire the moment the confirmation reaches it, as a deadline passing just then would); the other node
confirmed. sparkpair must not leave the pair half-applied: the confirmed node is rolled back too,
both nodes end as before, and the report says what each node holds.
"""

from __future__ import annotations

import re

from test_interrupts import Background
from test_setup_network import NODES, network_state, nothing_left_running

from sparkpair import paths


def _fire_when_confirmed(bed, node: str) -> None:
    """Make node's armed watchdog fire (its timer stopped, its revert run) when sparkpair's confirm reaches it."""
    script = bed.exec(node, f"cat {paths.WATCHDOG_SCRIPT}").stdout  # the root helper's copy: confirm runs it
    stamp = re.fullmatch(r"[0-9-]+", bed.exec(node, f"cat {paths.WATCHDOG_DIR}/stamp").stdout.strip())
    assert stamp, script
    hook = ('if [ "$1" = confirm ]; then env kill -s TERM -- "-$(cat "${0%/*}/pid")" >/dev/null 2>&1; '
            f'sh "$0" fire {stamp.group(0)} >/dev/null 2>&1; fi\n')
    first, _, rest = script.partition("\n")
    bed.exec(node, ["sh", "-c", 'printf %s "$1" > "$2"', "-", f"{first}\n{hook}{rest}", paths.WATCHDOG_SCRIPT])


def _twins_line(state: dict) -> str:
    """A node's twins as the report words them: `enp1s0f1np1 down mtu 1500 no address; ...`."""
    return "; ".join(f"{name} {'up' if up else 'down'} mtu {mtu} {','.join(addresses) or 'no address'}"
                     for name, (mtu, up, addresses) in state["twins"].items())


def test_a_watchdog_firing_as_the_confirmation_arrives_rolls_back_the_confirmed_node_too(pristine) -> None:
    before = {node: network_state(pristine, node) for node in NODES}
    run = Background(pristine.inventory, "setup-network", "--yes", "--skip-ssh", "--confirm-timeout", "60")
    run.wait_for(r"^spark-b: watchdog armed as root")
    _fire_when_confirmed(pristine, "spark-b")
    done = run.finish()
    assert done.code == 1, done.text
    assert "error: spark-b: its watchdog fired before sparkpair could confirm" in done.err, done.err
    assert re.search(r"^warning: spark-a: confirmed, but spark-b was not: rolling spark-a back too", done.err, re.M), \
        done.err
    assert "spark-a: confirmed over a new SSH connection with the link verified" not in done.err  # never said it stays
    after = {node: network_state(pristine, node) for node in NODES}
    assert after == before  # both nodes on the same side: as before the run, files and twins
    for node in NODES:  # the report says what each node holds, as `ip addr` shows it
        assert f"{node}: now {_twins_line(after[node])}" in done.err, done.err
        assert f"{node}: back as before this run" in done.err, done.err
    log = pristine.exec("spark-b", f"cat {paths.WATCHDOG_LOG}").stdout
    assert "spark-b: not confirmed within 60 s: putting the network back" in log
    nothing_left_running(pristine)
