"""The command line (`python -m sparkpair_testbed`, `scripts/testbed`): a simulated pair of
DGX Sparks on this machine (see docs/testbed.md).

    testbed up [--nodes N --topology pair|ring|switch] | down | status | inventory
    testbed exec NODE [--user nvidia] -- CMD...
    testbed fault NAME [--node NODE] [--port N] [--gib G] [--pressure PCT]
    testbed heal [NAME]
    testbed reset --spec FILE.json | --spec-json JSON
    testbed vllm [--wheelhouse-only]
    testbed modelopt
    testbed sglang
    testbed triton

Needs root and Linux.  Standard library only.
"""
from __future__ import annotations

import argparse
import fcntl
import os
import sys

from . import (
    faults,
    lifecycle,
    modelopt_pair,
    reset,
    reshape,
    sglang_image,
    sglang_pair,
    shape,
    triton_image,
    triton_pair,
    vllm_pair,
    vllm_ray,
    vllm_wheels,
)
from .faults import FAULTS
from .hostexec import CommandError, node_prefix
from .layout import CACHE_DIR, INVENTORY, NODES, USER, node

NODE_NAMES = [n.name for n in shape.every_possible_node()]  # whether the running shape has it: layout.node()


def log(message: str) -> None:
    """One progress line on stdout."""
    print(f"testbed: {message}", flush=True)


def parser() -> argparse.ArgumentParser:
    """The command line."""
    top = argparse.ArgumentParser(prog="scripts/testbed", description=__doc__.split("\n")[0])
    sub = top.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="bring the pair up (idempotent), or a larger shape: a ring of 3, a switch "
                                   "of 2-4 (plain `up` brings back the pair)")
    up.add_argument("--nodes", type=int, help="how many Sparks (pair: 2, ring: 3, switch: 2 to 4)")
    up.add_argument("--topology", choices=shape.TOPOLOGIES, help="how they are cabled (default: pair)")
    sub.add_parser("down", help="remove everything up made (the image cache stays)")
    sub.add_parser("status", help="what runs; exit 0 when all up")
    sub.add_parser("inventory", help="print the path of the inventory file")
    run = sub.add_parser("exec", help="run a command inside a node")
    run.add_argument("node", choices=NODE_NAMES)
    run.add_argument("--user", choices=[USER, "root"], default=None)
    run.add_argument("cmd", nargs="*", help="the command, after --")
    fault = sub.add_parser("fault", help="inject a fault",
                           epilog="faults: " + ", ".join(FAULTS))
    fault.add_argument("name", choices=sorted(FAULTS), metavar="NAME")
    fault.add_argument("--node", choices=NODE_NAMES)
    fault.add_argument("--port", type=int)
    fault.add_argument("--gib", type=float, help="memory-low, memory-exhausted: MemAvailable left; disk-low: free "
                                                 "space left")
    fault.add_argument("--pressure", type=float, help="memory-exhausted: PSI full avg10 %% of the node's memory")
    heal = sub.add_parser("heal", help="undo all active faults, or those called NAME")
    heal.add_argument("name", nargs="?", choices=sorted(FAULTS), metavar="NAME")
    reset_cmd = sub.add_parser("reset", help="take back on both nodes what the spec lists (containers, files, "
                                             "authorized keys, interface settings): see reset.py")
    source = reset_cmd.add_mutually_exclusive_group(required=True)
    source.add_argument("--spec", metavar="FILE.json", help="the reset spec, a JSON file")
    source.add_argument("--spec-json", metavar="JSON", help="the reset spec as JSON text")
    vllm = sub.add_parser("vllm", help="the real vLLM (CPU build) on the running pair: wheelhouses, images (vLLM, "
                                       "vLLM+Ray) in both nodes, tiny models on the head (idempotent, cached; see "
                                       "vllm_pair.py)")
    vllm.add_argument("--wheelhouse-only", action="store_true",
                      help="only fill the wheelhouse cache (pip download; needs no pair)")
    sub.add_parser("modelopt", help="NVIDIA ModelOpt's training image (sparkpair train-draft) in both nodes, after "
                                    "`vllm` (idempotent, cached; see modelopt_pair.py)")
    sub.add_parser("sglang", help="the stand-in SGLang image in every node and its models on the head (idempotent, "
                                  "cached; see sglang_pair.py)")
    sub.add_parser("triton", help="the real Triton Inference Server with the stand-in vllm backend, layered on the "
                                  "vLLM image, in every node (does `vllm` first; idempotent, cached; see triton_pair.py)")
    return top


def do_sglang() -> int:
    """The stand-in SGLang: the download outside the testbed lock, the pair's part under it."""
    sglang_image.ensure_wheelhouse(log)
    with locked():
        setup = sglang_pair.ensure_sglang(log)
    log(f"SGLang {setup.sglang_version}: {setup.image} on {lifecycle.on_every_node()}; {setup.target_repo} and "
        f"{setup.draft_repo} in {setup.head}'s HF cache; record: {sglang_pair.RECORD}")
    return 0


def do_triton() -> int:
    """The Triton image: the downloads outside the testbed lock, the pair's part under it."""
    vllm_ray.ensure_wheelhouse(vllm_wheels.ensure_wheelhouse(log), log)
    triton_image.ensure_wheelhouse(log)
    with locked():
        setup = triton_pair.ensure_triton(log)
    log(f"Triton {setup.triton_version}: {setup.image} on {lifecycle.on_every_node()}; record: {triton_pair.RECORD}")
    return 0


def do_modelopt() -> int:
    """The ModelOpt image: the download outside the testbed lock, the pair's part under it."""
    house = modelopt_pair.ensure_wheelhouse(log)
    with locked():
        setup = modelopt_pair.ensure_modelopt(house, log)
    log(f"ModelOpt {setup['modelopt_version']}: {setup['image']} on both nodes; record: {modelopt_pair.RECORD}")
    return 0


def do_vllm(args) -> int:
    """The vLLM setup: the download outside the testbed lock, the pair's part under it."""
    vllm_ray.ensure_wheelhouse(vllm_wheels.ensure_wheelhouse(log), log)
    if args.wheelhouse_only:
        log(f"wheelhouse: {vllm_wheels.wheelhouse_dir()}")
        return 0
    with locked():
        setup = vllm_pair.ensure_vllm(log)
    log(f"vLLM {setup.vllm_version}: {setup.image} on {lifecycle.on_every_node()}, {setup.ray_image} on "
        f"{vllm_pair.RAY_NODES}; "
        f"{setup.target_repo} and {setup.draft_repo} in {setup.head}'s HF cache; record: {vllm_pair.RECORD}")
    return 0


def locked():
    """Hold the testbed lock (one up/down/fault/heal at a time)."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    handle = open(CACHE_DIR / ".lock", "w")
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


def do_exec(args) -> int:
    """Replace this process with CMD run inside the node; its exit status is ours."""
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
    if args.command == "exec":
        return do_exec(args)
    if args.command == "inventory":
        print(INVENTORY)
        return 0 if INVENTORY.exists() else 1
    if args.command == "status":
        return 0 if lifecycle.status(log) else 1
    if args.command == "vllm":
        return do_vllm(args)
    if args.command == "modelopt":
        return do_modelopt()
    if args.command == "sglang":
        return do_sglang()
    if args.command == "triton":
        return do_triton()
    with locked():
        if args.command == "up":
            reshape.reshape(args.shape, log)
            lifecycle.up(log)
        elif args.command == "down":
            lifecycle.down(log)
        elif args.command == "fault":
            log(faults.inject(args.name, args.node, port=args.port, gib=args.gib, pressure=args.pressure))
        elif args.command == "heal":
            healed = faults.heal(args.name)
            log(f"healed: {', '.join(healed)}" if healed else "no active fault to heal")
        elif args.command == "reset":
            spec = reset.load_spec(args.spec, args.spec_json)
            reset.reset(spec, NODES)
            log(f"reset {', '.join(n.name for n in NODES)}: took back {spec.summary()}")
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
    if args.command == "up":
        try:
            args.shape = shape.parse(args.nodes, args.topology)
        except CommandError as exc:  # a usage error: nothing has been touched
            print(f"scripts/testbed up: {exc}", file=sys.stderr)
            return 2
    try:
        return dispatch(args)
    except (CommandError, KeyError, reset.SpecError) as exc:
        print(f"scripts/testbed {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
