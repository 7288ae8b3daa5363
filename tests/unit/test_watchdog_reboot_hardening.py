"""setup-network's watchdog across a reboot: the armed directory lives in /run (emptied by a reboot) and
its timer ends with the boot, while the new netplan file stays in /etc/netplan. So arming also keeps a
synced copy on disk and, where systemd runs, enables a boot unit that reverts from it; every end of the
watchdog forgets both. Running it across a (simulated) reboot is the integration tests' job
(tests/integration/test_setup_network.py::test_a_reboot_inside_the_confirm_window_reverts_...)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sparkpair.network import watchdog
from sparkpair.transport import root

HELPER = root.helper_text()  # the watchdog is the root helper itself, copied beside its data


def _function(name: str) -> str:
    """The body of one shell function of the helper."""
    start = HELPER.index(f"\n{name}() {{") + 1
    return HELPER[start:HELPER.index("\n}\n", start)]


def _verb(label: str) -> list[str]:
    """The lines of one verb's `case` branch of the helper."""
    lines = HELPER.splitlines()
    start = lines.index(label)
    return lines[start:next(i for i in range(start, len(lines)) if lines[i].endswith(";;")) + 1]


def test_arming_keeps_a_synced_copy_on_disk_and_enables_the_boot_unit_where_systemd_runs() -> None:
    subprocess.run(["sh", "-n"], input=HELPER, text=True, check=True)
    text = _function("arm")
    armed, copied = text.index(': >"$d/armed"'), text.index('cp -a "$d" "$boot"')
    unit, synced = text.index('boot_unit "$stamp" >"$unit_file"'), text.index("\n    sync\n")
    timer = text.index("systemd-run ")
    assert armed < copied < unit < synced < timer  # whole before the copy; on disk before any timer (and change)
    assert 'ln -sf "$unit_file" "$wants"' in text
    assert text.count('[ "$(cat /proc/1/comm 2>/dev/null)" = systemd ]') == 2  # the unit only where systemd runs
    # a failed arm leaves nothing for the next boot to revert
    assert text.count('rm -rf "$d" "$boot" "$unit_file" "$wants"') == 2 and text.count("|| undo") == 2
    assert f"unit_file={watchdog.BOOT_UNIT_FILE}" in HELPER and f"wants={watchdog.BOOT_WANTS}" in HELPER
    assert f"boot={watchdog.BOOT_DIR} " in HELPER


def test_an_earlier_watchdog_never_reverted_after_a_reboot_stops_a_new_arm() -> None:
    text = _function("arm")
    check = text.index('if [ -e "$boot/armed" ]; then')
    assert check < text.index('rm -rf "$d" && mkdir')
    assert "sudo sh $boot/watchdog boot" in text[check:text.index("exit 3", check)]


def test_the_boot_unit_reverts_from_the_copy_after_the_network_is_up() -> None:
    unit = _function("boot_unit")
    for line in ('"ConditionPathExists=$boot/armed"', '"After=network.target"', '"Type=oneshot"',
                 '"ExecStart=/bin/sh $boot/watchdog boot"', '"WantedBy=multi-user.target"'):
        assert line in unit, line
    assert watchdog.BOOT_EXEC == f"/bin/sh {watchdog.BOOT_SCRIPT} boot"


def test_the_script_reverts_at_boot_and_forgets_the_copy_whichever_way_it_ends() -> None:
    boot = _verb("boot)")
    assert '    rm -rf "$dir" && cp -a "$boot" "$dir" || { say "failed: cannot put $boot back in $dir"; exit 1; }' in boot
    assert boot[-1] == '    exec /bin/sh "$dir/watchdog" fire "$(cat "$dir/stamp")" boot ;;'
    confirm = _function("confirm").splitlines()
    assert confirm.index("    forget") == 3  # right after it is confirmed: a reboot then keeps the network
    revert = _function("fire").splitlines()
    assert revert.index("    forget  # only now: a reboot while it reverted reverts again at boot") > max(
        i for i, line in enumerate(revert) if "reverted" in line and "say" in line)
    assert 'elif [ "${3:-}" = boot ]; then why="the node restarted before the network was confirmed"' in "\n".join(revert)
    forget = next(line for line in HELPER.splitlines() if line.startswith("forget()"))
    assert '"$wants" "$unit_file"' in forget and 'rm -rf "$boot"' in forget


@pytest.mark.skipif(Path(watchdog.BOOT_DIR).exists(), reason="this machine holds a watchdog's boot copy")
def test_a_boot_with_nothing_armed_does_nothing(tmp_path: Path) -> None:
    script = tmp_path / "watchdog"
    script.write_text(HELPER)
    done = subprocess.run(["sh", str(script), "boot"], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "nothing to revert at boot\n")
