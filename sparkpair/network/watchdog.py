"""setup-network's watchdog: a root job left on a node before its network changes, which puts the
network back as it was and re-applies it unless sparkpair confirms in time (what `netplan try`
does at a console, here for two machines over SSH).

`script` renders the node-side shell script. It is self-contained (it needs nothing from sparkpair
or the operator machine): the files the apply changes are copied beside it when it is armed, and
the QSFP twins' previous state is written into it. `arm` installs it under /run/sparkpair-watchdog
and starts its timer: a transient systemd timer (`systemd-run --on-active`) where systemd runs
(pid 1 is systemd and `/run/systemd/system` exists: `netplan generate` makes that directory even
where systemd does not run), else a detached process (`setsid`, `sleep`, then the script).
`confirm` keeps the new network and disarms it; `revert` runs it now; `state` reads where it is.
Each is one round trip over an open connection; the script logs to /var/log/sparkpair-watchdog.log
and removes its directory when it ends, whichever way.

A reboot inside the confirm window empties /run and ends the timer, while the new netplan file in
/etc/netplan stays: so `arm` also keeps a copy of the directory on disk (`BOOT_DIR`, synced before
any change) and, where systemd runs, enables a boot unit (`BOOT_UNIT`) that runs the copy's
`boot` at the next boot: it puts the directory back in /run and reverts, as if the timer had fired.
Every end of the watchdog (confirm, cancel, revert, fire) removes the copy and the unit first.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

from sparkpair import paths, transport
from sparkpair.errors import SparkpairError, last_line
from sparkpair.inventory import Node
from sparkpair.network import rollback
from sparkpair.transport import Shell

DIR, SCRIPT, LOG = paths.WATCHDOG_DIR, paths.WATCHDOG_SCRIPT, paths.WATCHDOG_LOG
NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NETPLAN_TIMEOUT_S = 120  # the script's own bound on `netplan apply` (it must end, and remove itself)
CONFIRM = f"sudo sh {SCRIPT} confirm"
REVERT = f"sudo sh {SCRIPT} revert"
BOOT_DIR = "/var/backups/sparkpair-watchdog"  # the armed directory's copy that survives a reboot
BOOT_SCRIPT = f"{BOOT_DIR}/watchdog"
BOOT_UNIT = "sparkpair-watchdog-boot.service"
BOOT_UNIT_FILE = f"/etc/systemd/system/{BOOT_UNIT}"
BOOT_WANTS = f"/etc/systemd/system/multi-user.target.wants/{BOOT_UNIT}"


def unit_name(stamp: str) -> str:
    """The transient systemd unit (`.timer` and `.service`) of one run's watchdog."""
    return f"{paths.WATCHDOG_UNIT}-{stamp}"


def _saved(path: str) -> str:
    return f"{DIR}/before/{quote(path, safe='')}"


def script(node: Node, stamp: str, seconds: int, files: Sequence[str], twins_before: str) -> str:
    """The watchdog script for node: put files and twins back as before the apply of run stamp."""
    q = shlex.quote
    lines = [
        "#!/bin/sh",
        f"# sparkpair setup-network watchdog on {node.name} (run {stamp}), armed for {seconds} s before the",
        "# network changed. Unless confirmed by then it puts back, as root, the files below as they were",
        "# before that apply, re-applies netplan, puts the QSFP twins back, logs to",
        f"# {LOG} and removes {DIR}.",
        f"#   keep the new network (confirm): {CONFIRM}",
        f"#   undo it now (revert):           {REVERT}",
        f"PATH={NODE_PATH}; export PATH",
        "trap '' HUP",
        f"dir={q(DIR)}; log={q(LOG)}; boot={q(BOOT_DIR)}",
        f"say() {{ printf '%s %s: %s\\n' \"$(date '+%Y-%m-%d %H:%M:%S')\" {q(node.name)} \"$*\" >>\"$log\"; }}",
        'fail() { say "failed: $*"; failed=1; }',
        # the detached timer is a process group (setsid); dash's own kill cannot signal a group: procps' can
        "disarm() {",
        '    if [ -s "$dir/unit" ]; then systemctl stop "$(cat "$dir/unit").timer" >/dev/null 2>&1; fi',
        '    if [ -s "$dir/pid" ]; then env kill -s TERM -- "-$(cat "$dir/pid")" >/dev/null 2>&1; fi',
        "    return 0",
        "}",
        # the copy that reverts at the next boot: forgotten when the watchdog ends (confirmed, cancelled, reverted)
        f'forget() {{ rm -f {q(BOOT_WANTS)} {q(BOOT_UNIT_FILE)}; rm -rf "$boot"; sync; }}',
        'case "$1" in',
        "boot)",
        '    if [ ! -e "$boot/armed" ]; then echo "nothing to revert at boot"; exit 0; fi',
        '    rm -rf "$dir" && cp -a "$boot" "$dir" || { say "failed: cannot put $boot back in $dir"; exit 1; }',
        f'    exec /bin/sh "$dir/watchdog" fire {q(stamp)} boot',
        "    ;;",
        "confirm|cancel)",
        '    if ! mv "$dir/armed" "$dir/confirmed" 2>/dev/null; then echo "not armed (it reverted already)"; exit 3; fi',
        "    forget",
        "    disarm",
        f'    if [ "$1" = confirm ]; then say "confirmed: the network sparkpair applied (run {stamp}) stays"; '
        "echo confirmed; "
        f'else say "cancelled before sparkpair changed anything (run {stamp})"; echo cancelled; fi',
        '    rm -rf "$dir"',
        "    ;;",
        "fire|revert)",
        f'    if [ "$1" = fire ] && [ "$2" != {q(stamp)} ]; then echo "a timer of another run"; exit 0; fi',
        '    if ! mv "$dir/armed" "$dir/reverting" 2>/dev/null; then echo "not armed (confirmed, or reverted)"; exit 0; fi',
        "    failed=0",
        '    if [ "$1" = revert ]; then disarm; why="revert asked"; '
        'elif [ "$3" = boot ]; then why="the node restarted before the network was confirmed"; '
        f'else why="not confirmed within {seconds} s"; fi',
        f'    say "$why: putting the network back as it was before sparkpair\'s apply (run {stamp})"',
    ]
    for path in files:
        saved, target = q(_saved(path)), q(path)
        lines.append(f"    if [ -e {saved} ]; then cp -a {saved} {target} || fail restore {target}; "
                     f"else rm -f {target} || fail remove {target}; fi")
    steps = [Shell("netplan generate"), Shell("timeout {} netplan apply", NETPLAN_TIMEOUT_S)]
    steps += rollback.twin_commands(node, twins_before)
    lines += [f'    {step.text} >>"$log" 2>&1 || fail {q(step.text)}' for step in steps]
    lines += [
        '    if [ "$failed" = 0 ]; then',
        f'        say {q("reverted: " + (rollback.describe_twins(node, twins_before) or "no QSFP twin recorded"))}',
        '    else say "reverted, with the failures above"; fi',
        "    forget",  # only now: a reboot while it reverted reverts again at boot
        '    rm -rf "$dir"',
        '    echo "reverted"',
        "    ;;",
        '*) echo "usage: sudo sh $0 confirm|revert|boot" >&2; exit 2 ;;',
        "esac",
    ]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Armed:
    """A watchdog left on a node: how it runs and when it fires (this machine's monotonic clock)."""

    node: str
    how: str           # "a transient systemd timer sparkpair-watchdog-STAMP.timer" or "a detached process (pid N)"
    seconds: float
    earliest: float    # time.monotonic() before which it cannot fire (confirm before this)
    latest: float      # time.monotonic() by which it has fired

    def describe(self) -> str:
        clock = time.strftime("%H:%M:%S", time.localtime(time.time() + self.earliest - time.monotonic()))
        return (f"watchdog armed as root ({self.how}): unless confirmed by {clock} ({self.seconds:g} s), it puts "
                "the network back as it was and re-applies it")


def arm_command(stamp: str, seconds: int, files: Sequence[str], staged: str) -> Shell:
    """The root command that installs the script (uploaded to staged), copies the files as they are
    before the apply beside it, and starts its timer."""
    unit = unit_name(stamp)
    parts = [Shell("trap 'rm -f {}' EXIT", staged),
             Shell('d={}; if [ -e "$d/armed" ] || [ -e "$d/reverting" ]; then echo "an earlier watchdog is pending '
                   'in $d (deadline $(cat "$d/deadline" 2>/dev/null))" >&2; exit 3; fi', DIR),
             Shell("if [ -e {} ]; then echo {} >&2; exit 3; fi", f"{BOOT_DIR}/armed",
                   f"an earlier watchdog's node restarted before its network was confirmed, and nothing reverted it: "
                   f"put that network back with: sudo sh {BOOT_SCRIPT} boot (or keep it: sudo rm -rf {BOOT_DIR})"),
             Shell('rm -rf "$d" && mkdir -m 755 "$d" && mkdir -m 700 "$d/before" && install -m 700 -o root -g root {} '
                   "{} || exit 1", staged, SCRIPT)]
    parts += [Shell("if [ -e {} ]; then cp -a {} {} || exit 1; fi", path, path, _saved(path)) for path in files]
    parts.append(Shell('echo $(( $(date +%s) + {} )) > "$d/deadline" && : > "$d/armed" || exit 1', seconds))
    parts.append(boot_revert_command(stamp))
    parts.append(Shell(
        'if [ -d /run/systemd/system ] && [ "$(cat /proc/1/comm 2>/dev/null)" = systemd ] && '
        "command -v systemd-run >/dev/null 2>&1; then "
        "systemd-run --quiet --collect --unit={} --on-active={} --timer-property=AccuracySec=1s /bin/sh {} fire {} "
        '</dev/null >/dev/null || { rm -rf "$d" {} {} {}; exit 1; }; echo {} > "$d/unit"; echo "systemd {}"; '
        "else setsid /bin/sh -c {} </dev/null >/dev/null 2>&1 & "
        'echo $! > "$d/pid"; echo "detached $!"; fi',
        unit, f"{seconds}s", SCRIPT, stamp, BOOT_DIR, BOOT_UNIT_FILE, BOOT_WANTS, unit, unit,
        f"sleep {seconds}; exec /bin/sh {SCRIPT} fire {stamp}"))
    return Shell.compose(parts, "\n")


def boot_unit(stamp: str) -> str:
    """The systemd unit that reverts, at the next boot, the network of run stamp if it was never confirmed."""
    return "\n".join([
        "[Unit]",
        f"Description=sparkpair setup-network watchdog: revert run {stamp}'s network, not confirmed before a reboot",
        f"ConditionPathExists={BOOT_DIR}/armed",
        "After=network.target",
        "",
        "[Service]",
        "Type=oneshot",
        f"ExecStart=/bin/sh {BOOT_SCRIPT} boot",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        ""])


def boot_revert_command(stamp: str) -> Shell:
    """The root command (part of arming, once the directory is whole) that keeps a copy of it on disk and,
    where systemd runs, enables the boot unit that reverts from it; synced, so that a reboot or a power
    cut right after the apply finds it."""
    undo = Shell('rm -rf "$d" {} {} {}; exit 1', BOOT_DIR, BOOT_UNIT_FILE, BOOT_WANTS)
    return Shell.compose([
        Shell('rm -rf {} && cp -a "$d" {} || {', BOOT_DIR, BOOT_DIR), undo, Shell("}"),
        Shell('if [ -d /run/systemd/system ] && [ "$(cat /proc/1/comm 2>/dev/null)" = systemd ]; then '
              "printf %s {} > {} && mkdir -p {} && ln -sf {} {} || {", boot_unit(stamp), BOOT_UNIT_FILE,
              BOOT_WANTS.rsplit("/", 1)[0], BOOT_UNIT_FILE, BOOT_WANTS), undo, Shell("}; fi"),
        Shell("sync")], "\n")


def arm(connection: transport.Node, node: Node, stamp: str, seconds: int, files: Sequence[str],
        twins_before: str) -> Armed:
    """Leave the watchdog on a node (as root); raises when it could not be armed (nothing changed then)."""
    staged = f"{paths.under_home(paths.UPLOAD_PREFIX, connection.home)}watchdog-{stamp}"
    connection.put(script(node, stamp, seconds, files, twins_before), staged, mode=0o600)
    started = time.monotonic()
    result = connection.run(arm_command(stamp, seconds, files, staged), sudo=True)
    if not result.ok:
        raise SparkpairError(f"cannot arm the watchdog: {last_line(result.stderr, f'exit {result.exit_code}')}",
                             node=connection.name, hint=f"if an earlier watchdog is pending, wait for it or: {CONFIRM}")
    kind, _, detail = last_line(result.stdout, "").partition(" ")
    how = f"a transient systemd timer {detail}.timer" if kind == "systemd" else f"a detached process (pid {detail})"
    return Armed(connection.name, how, seconds, started + seconds, time.monotonic() + seconds)


def state(connection: transport.Node) -> str:
    """Where a node's watchdog is: armed, reverting, confirmed, or gone (ended, or never armed)."""
    out = connection.check(Shell('d={}; for s in armed reverting confirmed; do [ -e "$d/$s" ] && echo $s && exit 0; '
                                 "done; echo gone", DIR))
    return out.strip() or "gone"


def confirm(connection: transport.Node, cancel: bool = False) -> bool:
    """Keep the new network (or, with cancel, disarm before any change): False when the watchdog had
    fired already (it reverts) or is not there."""
    result = connection.run(Shell("sh {} {}", SCRIPT, "cancel" if cancel else "confirm"), sudo=True, timeout=30)
    return result.ok and result.stdout.strip().endswith(("confirmed", "cancelled"))


def revert(connection: transport.Node) -> None:
    """Start the watchdog's revert now, detached from this SSH session (which its `netplan apply` may
    cut); `state` says `gone` once it has ended."""
    connection.check(Shell("if [ -e {} ]; then setsid /bin/sh {} revert </dev/null >/dev/null 2>&1 & fi",
                           SCRIPT, SCRIPT), sudo=True)


def log_tail(connection: transport.Node, lines: int = 1) -> list[str]:
    """The last lines the watchdogs logged on a node."""
    return connection.run(Shell("tail -n {} {} 2>/dev/null", lines, LOG)).stdout.splitlines()
