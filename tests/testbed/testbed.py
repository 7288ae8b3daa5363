"""scripts/testbed: a simulated pair of DGX Sparks on this machine (see docs/testbed.md).

    testbed up | down | status | inventory
    testbed exec NODE [--user nvidia] -- CMD...
    testbed fault NAME [--node NODE] [--port N]
    testbed heal [NAME]
    testbed reset

Needs root and Linux.  Standard library only.
"""
from __future__ import annotations

import argparse
import fcntl
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from layout import CACHE_DIR, INVENTORY, NODES, USER  # noqa: E402

# What `reset` runs as root on each node: everything sparkpair's commands leave behind, undone.
RESET_NODE = (
    "docker rm -f trtllm-multinode >/dev/null 2>&1; "
    "rm -f /etc/netplan/40-sparkpair-cx7.yaml /etc/netplan/40-cx7.yaml; rm -rf /var/backups/sparkpair; "
    f"rm -rf /home/{USER}/.sparkpair /home/{USER}/.ssh/id_ed25519 /home/{USER}/.ssh/id_ed25519.pub "
    f"/home/{USER}/.ssh/known_hosts; sed -i '/sparkpair@/d' /home/{USER}/.ssh/authorized_keys; "
    "for i in enp1s0f1np1 enP2p1s0f1np1; do ip addr flush dev $i; ip link set dev $i down mtu 1500; done"
)


def log(message: str) -> None:
    """One progress line on stdout."""
    print(f"testbed: {message}", flush=True)


def parser() -> argparse.ArgumentParser:
    """The command line."""
    from faults import FAULTS
    top = argparse.ArgumentParser(prog="scripts/testbed", description=__doc__.split("\n")[0])
    sub = top.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="bring the pair up (idempotent)")
    sub.add_parser("down", help="remove everything up made (the image cache stays)")
    sub.add_parser("status", help="what runs; exit 0 when all up")
    sub.add_parser("inventory", help="print the path of the inventory file")
    run = sub.add_parser("exec", help="run a command inside a node")
    run.add_argument("node", choices=[n.name for n in NODES])
    run.add_argument("--user", choices=[USER, "root"], default=None)
    run.add_argument("cmd", nargs="*", help="the command, after --")
    fault = sub.add_parser("fault", help="inject a fault",
                           epilog="faults: " + ", ".join(FAULTS))
    fault.add_argument("name", choices=sorted(FAULTS), metavar="NAME")
    fault.add_argument("--node", choices=[n.name for n in NODES])
    fault.add_argument("--port", type=int)
    heal = sub.add_parser("heal", help="undo all active faults, or those called NAME")
    heal.add_argument("name", nargs="?", choices=sorted(FAULTS), metavar="NAME")
    sub.add_parser("reset", help="take back what sparkpair made on both nodes (engine, netplan, keys, addresses)")
    return top


def locked():
    """Hold the testbed lock (one up/down/fault/heal at a time)."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    handle = open(CACHE_DIR / ".lock", "w")
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def do_exec(args) -> int:
    """Replace this process with CMD run inside the node; its exit status is ours."""
    from hostexec import CommandError, node_prefix
    from layout import node
    cmd = args.cmd
    if not cmd:
        print("scripts/testbed exec: no command given", file=sys.stderr)
        return 2
    try:
        prefix = node_prefix(node(args.node), user=args.user)
    except CommandError as exc:
        print(f"scripts/testbed exec: {exc}", file=sys.stderr)
        return 1
    os.execvp(prefix[0], prefix + cmd)
    return 127


def dispatch(args) -> int:
    """Run one subcommand; returns the exit status."""
    import faults
    import lifecycle
    if args.command == "exec":
        return do_exec(args)
    if args.command == "inventory":
        print(INVENTORY)
        return 0 if INVENTORY.exists() else 1
    if args.command == "status":
        return 0 if lifecycle.status(log) else 1
    with locked():
        if args.command == "up":
            lifecycle.up(log)
        elif args.command == "down":
            lifecycle.down(log)
        elif args.command == "fault":
            log(faults.inject(args.name, args.node, port=args.port))
        elif args.command == "heal":
            healed = faults.heal(args.name)
            log(f"healed: {', '.join(healed)}" if healed else "no active fault to heal")
        elif args.command == "reset":
            from hostexec import node_sh
            for each in NODES:
                node_sh(each, RESET_NODE)
            log("both nodes as `up` left them: no sparkpair files, keys, addresses or engine")
    return 0


def main(argv=None) -> int:
    """Entry point: checks platform and root, then dispatches."""
    if not sys.platform.startswith("linux"):
        print("scripts/testbed: needs Linux (network namespaces, veths, bridges)", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("scripts/testbed: must run as root (it creates namespaces, links and daemons): "
              "sudo scripts/testbed ...", file=sys.stderr)
        return 2
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["exec"] and "--" in argv:
        split = argv.index("--")
        args = parser().parse_args(argv[:split])
        args.cmd = argv[split + 1:]
    else:
        args = parser().parse_args(argv)
    from hostexec import CommandError
    try:
        return dispatch(args)
    except (CommandError, KeyError) as exc:
        print(f"scripts/testbed {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
