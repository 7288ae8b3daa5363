"""Option parsing shared by the commands: lists, profile names, seconds, the known-bad catalog file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:  # only click at start-up
    from sparkpair.checks.knowncatalog import Catalog
    from sparkpair.inventory import Inventory
    from sparkpair.inventory.profiles import Profile


class Seconds(click.FloatRange):
    """A number of seconds within a range (click's FloatRange lets nan through every bound)."""

    def convert(self, value: float, param: click.Parameter | None, ctx: click.Context | None) -> float:
        number = super().convert(value, param, ctx)
        if number != number:
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        return number


def split_ids(value: str | None) -> set[str] | None:
    return {part.strip() for part in value.split(",") if part.strip()} if value else None


def known_profile(inv: Inventory, name: str | None) -> str:
    """The profile to use: the one named, or the inventory's server.profile."""
    name = name or inv.server.profile
    if name not in inv.profiles:
        raise click.BadParameter(f"no profile {name!r}; known: {', '.join(sorted(inv.profiles))}",
                                 param_hint="PROFILE")
    return name


class RuntimeChoice(click.Choice[str]):
    """One of the registered runtimes (`sparkpair.registry`), read when the choices are shown or a value is
    parsed: importing the CLI reads nothing else of sparkpair (`--help` stays fast)."""

    def __init__(self) -> None:
        super().__init__(())

    @property
    def choices(self) -> tuple[str, ...]:
        from sparkpair import registry

        return registry.NAMES

    @choices.setter
    def choices(self, value: object) -> None:
        pass  # click.Choice sets them in __init__; they are the registry's


def known_node(inv: Inventory, name: str | None, option: str = "--node") -> str | None:
    """name when the inventory has such a node (None stays None); a usage error naming the nodes otherwise."""
    names = [node.name for node in inv.nodes]
    if name is not None and name not in names:
        raise click.BadParameter(f"no node {name!r} in the inventory; its nodes: {', '.join(names)}", param_hint=option)
    return name


def writable_target(path: Path, option: str, *, directory: bool = False) -> None:
    """Refuse, before any node is asked, an output path sparkpair could not write at the end of its run: a file
    (or, with directory, a folder) that cannot be created there. Proven by creating and removing a temporary
    file in the folder that would hold it, so root on a read-only mount is refused too."""
    import os
    import tempfile

    folder = path if directory and path.is_dir() else path.parent if not directory else path
    if path.exists() and (path.is_dir() != directory):
        raise click.BadParameter(f"{path} exists and is {'not a folder' if directory else 'a folder'}", param_hint=option)
    while directory and not folder.exists() and folder != folder.parent:
        folder = folder.parent   # a results folder is made with its parents: the first that exists must be writable
    try:
        descriptor, probe = tempfile.mkstemp(prefix=".sparkpair-write-test-", dir=folder or Path("."))
    except OSError as error:
        raise click.BadParameter(f"cannot write {path}: {error.strerror or error} ({folder or Path('.')})",
                                 param_hint=option) from None
    os.close(descriptor)
    os.unlink(probe)


# Every check id doctor can report (--deep's too), for `--only`; literal here so that a typo is refused before the
# checks are imported and any node is asked (tests/unit/test_runbook_coverage.py fails while this and the ids the
# checks emit differ).
CHECK_IDS: tuple[str, ...] = (
    "inventory.valid", "inventory.port-names", "inventory.twin-subnets", "reach.ssh", "reach.sudo", "reach.same-user",
    "platform.dgx-os",
    "platform.gpu", "platform.driver-match", "links.present", "links.carrier", "links.speed", "links.address",
    "links.mtu", "links.persistent", "links.rdma", "links.roce", "links.mtu-match", "links.crossed", "path.ping",
    "path.mtu", "trust.ssh", "docker.group", "docker.daemon", "docker.nvidia-runtime", "docker.image",
    "docker.image-match", "docker.image-mode", "docker.container", "ports.serving", "ports.sshd", "models.present",
    "models.match", "models.hub", "models.writable", "models.disk", "models.draft-record", "models.token",
    "memory.available", "known.catalog", "clock.skew", "draft.image", "playbook.image", "playbook.env",
    "playbook.flags", "playbook.model",
    "playbook.addressing", "deep.mpi", "deep.allreduce", "deep.token", "deep.bandwidth", "deep.nccl", "deep.cleanup",
)
GROUPS: tuple[str, ...] = tuple(dict.fromkeys(check.split(".")[0] for check in CHECK_IDS))
# known.<entry>: one id per entry of the known-bad catalog, which is data (a newer one comes with --catalog FILE)
CATALOG_ENTRY_PREFIX = "known."


def unknown_selection(only: set[str]) -> list[str]:
    """One line per --only entry that is neither a check id nor a group, with the closest known names."""
    import difflib

    known = [*GROUPS, *CHECK_IDS]
    lines = []
    for entry in sorted(only):
        if entry in known or (entry.startswith(CATALOG_ENTRY_PREFIX) and len(entry) > len(CATALOG_ENTRY_PREFIX)):
            continue
        close = difflib.get_close_matches(entry, known, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        lines.append(f"--only: no check or group {entry!r}; {hint}groups: {', '.join(GROUPS)} (or a check id, "
                     "docs/runbooks.md)")
    return lines


class StallAfterOption(click.Option):
    """`launch --stall-after`, whose help names the stages it takes: the launch watch's own and every registered
    runtime's (`engine.watch.DEFAULT_LIMITS`), read when the help is shown, so importing the CLI imports no runtime."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        from sparkpair.engine.watch import DEFAULT_LIMITS

        self.help = ("Fail early when no rank shows progress for this long (every stage, or per stage of the runtime's "
                     f"start: {', '.join(DEFAULT_LIMITS)}). Defaults per stage and runtime: "
                     "docs/runbooks.md#launch-stalled.")
        return super().get_help_record(ctx)


runtime_option = click.option(
    "--runtime", type=RuntimeChoice(), default=None,
    help="The engine (a runtime sparkpair knows, docs/profiles.md). Default: the profile's own runtime (its "
         "`runtime` field); another runtime uses the profile's variant for it.")


def resolved_profile(inv: Inventory, name: str | None, runtime: str | None) -> Profile:
    """The profile named (default: server.profile) on runtime (default: its own), as an object; a usage error
    names what is missing."""
    name = known_profile(inv, name)
    try:
        return inv.profile(name, runtime)
    except KeyError as error:
        raise click.BadParameter(str(error.args[0]), param_hint="--runtime") from None


def int_list(value: str, option: str) -> list[int]:
    try:
        numbers = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}", param_hint=option) from None
    if not numbers or any(n < 1 or n > 4096 for n in numbers):
        raise click.BadParameter(f"expected integers from 1 to 4096, got {value!r}", param_hint=option)
    return numbers


NODE_PATH = r"/[A-Za-z0-9._+/-]*"


def nccl_tests_path(value: str | None, needs: str, given: bool) -> str | None:
    """--nccl-tests PATH: an absolute path on the nodes (all_gather_perf or its build directory); only with
    the option that runs it (needs)."""
    import re

    if value is None:
        return None
    if not given:
        raise click.UsageError(f"--nccl-tests needs {needs}")
    if not re.fullmatch(NODE_PATH, value) or "/../" in f"{value}/":
        raise click.BadParameter("expected an absolute path on the nodes, e.g. /opt/nccl-tests/build",
                                 param_hint="--nccl-tests")
    return value


catalog_option = click.option(
    "--catalog", "catalog_file", type=click.Path(path_type=Path), metavar="FILE",
    help="A newer known-bad catalog (JSON, as sparkpair/data/known_bad.json) instead of sparkpair's own: "
         "doctor's known.* rows judge every node against it.")


def read_catalog(path: Path | None) -> Catalog | None:
    """--catalog FILE, read as hostile input: a regular file of at most CATALOG_CAP bytes of UTF-8, then
    every field checked (checks.knowncatalog); one line naming the file and the field, exit 2, when it is not
    one. None without the option (sparkpair's own catalog)."""
    import os
    import stat

    from sparkpair.checks.knowncatalog import CATALOG_CAP, CatalogError, parse_catalog
    from sparkpair.errors import UsageError

    if path is None:
        return None
    hint = "give a catalog in the format of sparkpair/data/known_bad.json (docs/runbooks.md#known)"
    try:
        with open(path, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise UsageError(f"--catalog {path}: not a regular file", hint=hint)
            data = handle.read(CATALOG_CAP + 1)
    except OSError as error:
        raise UsageError(f"--catalog {path}: cannot be read ({error.strerror or type(error).__name__})",
                         hint=hint) from None
    try:
        return parse_catalog(data.decode("utf-8"), str(path))
    except UnicodeDecodeError:
        raise UsageError(f"--catalog {path}: not UTF-8 text", hint=hint) from None
    except CatalogError as error:
        raise UsageError(f"--catalog {path}: {error}", hint=hint) from None
