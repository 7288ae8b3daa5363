"""setup-network's watchdog across a reboot: the armed directory lives in /run (emptied by a reboot) and
its timer ends with the boot, while the new netplan file stays in /etc/netplan. So arming also keeps a
synced copy on disk and, where systemd runs, enables a boot unit that reverts from it; every end of the
watchdog forgets both. Running it across a (simulated) reboot is the integration tests' job
(tests/integration/test_setup_network.py::test_a_reboot_inside_the_confirm_window_reverts_...)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sparkpair import paths
from sparkpair.inventory import read_inventory
from sparkpair.network import watchdog

SIM = read_inventory(Path(__file__).parent.parent / "fixtures" / "inventory" / "sim.yaml")
STAMP = "20250101-120000"
TWINS = '{"enp1s0f1np1": {"mtu": 1500, "up": false, "ipv4": []}}'


def _script() -> str:
    return watchdog.script(SIM.node("spark-a"), STAMP, 60, [paths.NETPLAN_PATH], TWINS)


def _branch(text: str, label: str) -> list[str]:
    """The lines of one `case` branch of the script."""
    lines = text.splitlines()
    start = lines.index(label)
    return lines[start:lines.index("    ;;", start)]


def test_arming_keeps_a_synced_copy_on_disk_and_enables_the_boot_unit_where_systemd_runs() -> None:
    text = watchdog.arm_command(STAMP, 60, [paths.NETPLAN_PATH], "/home/nvidia/.sparkpair-upload-w").text
    subprocess.run(["sh", "-n"], input=text, text=True, check=True)
    armed, copied = text.index(': > "$d/armed"'), text.index(f'cp -a "$d" {watchdog.BOOT_DIR}')
    unit, synced = text.index(f"> {watchdog.BOOT_UNIT_FILE}"), text.index("\nsync\n")
    timer = text.index("systemd-run ")
    assert armed < copied < unit < synced < timer  # whole before the copy; on disk before any timer (and change)
    assert f"ln -sf {watchdog.BOOT_UNIT_FILE} {watchdog.BOOT_WANTS}" in text
    assert text.count('[ "$(cat /proc/1/comm 2>/dev/null)" = systemd ]') == 2  # the unit only where systemd runs
    # a failed arm leaves nothing for the next boot to revert
    assert text.count(f'rm -rf "$d" {watchdog.BOOT_DIR} {watchdog.BOOT_UNIT_FILE} {watchdog.BOOT_WANTS}') == 3


def test_an_earlier_watchdog_never_reverted_after_a_reboot_stops_a_new_arm() -> None:
    text = watchdog.arm_command(STAMP, 60, [paths.NETPLAN_PATH], "/home/nvidia/.sparkpair-upload-w").text
    check = text.index(f"if [ -e {watchdog.BOOT_DIR}/armed ]; then echo ")
    assert check < text.index('rm -rf "$d" && mkdir')
    assert f"sudo sh {watchdog.BOOT_SCRIPT} boot" in text[check:text.index("exit 3", check)]


def test_the_boot_unit_reverts_from_the_copy_after_the_network_is_up() -> None:
    unit = watchdog.boot_unit(STAMP).splitlines()
    for line in (f"ConditionPathExists={watchdog.BOOT_DIR}/armed", "After=network.target", "Type=oneshot",
                 f"ExecStart=/bin/sh {watchdog.BOOT_SCRIPT} boot", "WantedBy=multi-user.target"):
        assert line in unit, line


def test_the_script_reverts_at_boot_and_forgets_the_copy_whichever_way_it_ends() -> None:
    text = _script()
    subprocess.run(["sh", "-n"], input=text, text=True, check=True)
    boot = _branch(text, "boot)")
    assert '    rm -rf "$dir" && cp -a "$boot" "$dir" || { say "failed: cannot put $boot back in $dir"; exit 1; }' in boot
    assert boot[-1] == f'    exec /bin/sh "$dir/watchdog" fire {STAMP} boot'
    confirm = _branch(text, "confirm|cancel)")
    assert confirm.index("    forget") == 2  # right after it is confirmed: a reboot then keeps the network
    revert = _branch(text, "fire|revert)")
    assert revert.index("    forget") > max(i for i, line in enumerate(revert) if "reverted" in line and "say" in line)
    assert 'elif [ "$3" = boot ]; then why="the node restarted before the network was confirmed"' in "\n".join(revert)
    forget = next(line for line in text.splitlines() if line.startswith("forget()"))
    assert watchdog.BOOT_WANTS in forget and watchdog.BOOT_UNIT_FILE in forget and 'rm -rf "$boot"' in forget


@pytest.mark.skipif(Path(watchdog.BOOT_DIR).exists(), reason="this machine holds a watchdog's boot copy")
def test_a_boot_with_nothing_armed_does_nothing(tmp_path: Path) -> None:
    script = tmp_path / "watchdog"
    script.write_text(_script())
    done = subprocess.run(["sh", str(script), "boot"], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "nothing to revert at boot\n")
