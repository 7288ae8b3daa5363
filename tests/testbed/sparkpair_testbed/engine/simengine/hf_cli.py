"""The `hf` command: ``hf download``, ``hf version`` and ``hf --help``.

Progress goes to stderr (huggingface_hub 1.0's tqdm bar ``Fetching N files: ...``), the
resulting path to stdout (as the real CLI prints it), ``--dry-run`` prints the real table,
errors go to stderr with exit status 1, usage errors click-style with exit status 2. The
token is used to decide access and is never printed.
"""

import fnmatch
import os
import sys
import time
from pathlib import Path

from . import HUGGINGFACE_HUB_VERSION, hub_client, hub_layout, synthetic_model
from .clickish import Arg, Command, Opt, parse_or_exit
from .hf_download import (
    FailureBudget,
    HubError,
    check_access,
    download_to_cache,
    download_to_local_dir,
    offline_local_dir,
    offline_snapshot,
    resolve_token,
    select_files,
)

DOWNLOAD_COMMAND = Command(
    prog="hf download",
    usage_tail="[OPTIONS] REPO_ID [FILENAMES]...",
    summary="Download files from the Hub (simulated: writes a deterministic synthetic model).",
    help_names=("--help", "-h"),
    options=[
        Opt(("--repo-type",), "repo_type", "choice", "model", choices=("model", "dataset", "space"),
            help="Type of the repo."),
        Opt(("--revision",), "revision", help="Git revision id: branch, tag or commit hash."),
        Opt(("--include",), "include", multiple=True, help="Glob patterns to include."),
        Opt(("--exclude",), "exclude", multiple=True, help="Glob patterns to exclude."),
        Opt(("--cache-dir",), "cache_dir", help="Directory where to save files."),
        Opt(("--local-dir",), "local_dir", help="Download files into this directory."),
        Opt(("--force-download",), "force_download", "flag", False, help="Re-download files."),
        Opt(("--token",), "token", help="A User Access Token."),
        Opt(("--quiet",), "quiet", "flag", False, help="Only print the path."),
        Opt(("--max-workers",), "max_workers", "int", 8, help="Concurrent downloads (ignored)."),
        Opt(("--dry-run",), "dry_run", "flag", False, help="List what would be downloaded."),
    ],
    arguments=[Arg("REPO_ID", "repo_id"), Arg("FILENAMES", "filenames", required=False, variadic=True)],
)

TOP_HELP = """Usage: hf [OPTIONS] COMMAND [ARGS]...

  Hugging Face Hub CLI (simulated by sparkpair's simengine).

Options:
  -h, --help  Show this message and exit.

Commands:
  download  Download files from the Hub.
  version   Print information about the hf version."""


def _filter_patterns(files, include, exclude):
    if include:
        files = [f for f in files if any(fnmatch.fnmatch(f.name, p) for p in include)]
    if exclude:
        files = [f for f in files if not any(fnmatch.fnmatch(f.name, p) for p in exclude)]
    return files


class FetchBar:
    """The ``Fetching N files`` bar huggingface_hub's snapshot download draws on stderr (tqdm,
    redrawn with carriage returns, a newline when it closes), or nothing (--quiet, one file)."""

    BAR = 10

    def __init__(self, total, shown):
        self.total, self.done, self.shown = total, 0, shown
        self.start = self.drawn = time.monotonic()
        if shown:
            self._draw(final=False)

    def _draw(self, final):
        elapsed = time.monotonic() - self.start
        fraction = self.done / self.total if self.total else 1.0
        filled = int(fraction * self.BAR)
        bar = "\u2588" * filled + " " * (self.BAR - filled)
        rate = f"{self.done / elapsed:.2f}it/s" if self.done and elapsed > 0 else "?it/s"
        remaining = "00:00" if self.done >= self.total else "?"
        line = (f"Fetching {self.total} files: {fraction * 100:3.0f}%|{bar}| {self.done}/{self.total} "
                f"[{_clock(elapsed)}<{remaining}, {rate}]")
        print("\r" + line, end="\n" if final else "", file=sys.stderr, flush=True)

    def advance(self):
        self.done += 1
        now = time.monotonic()
        if self.shown and (self.done >= self.total or now - self.drawn >= 0.1):
            self.drawn = now
            self._draw(final=self.done >= self.total)


def _clock(seconds):
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes:02d}:{seconds:02d}"


def format_size(num):
    """huggingface_hub.utils._format_size: decimal units, one digit (``655.2M``, ``5.6G``, ``0.0``)."""
    for unit in ["", "K", "M", "G", "T", "P", "E", "Z"]:
        if abs(num) < 1000.0:
            return f"{num:3.1f}{unit}"
        num /= 1000.0
    return f"{num:.1f}Y"


def tabulate(rows, headers):
    """huggingface_hub.utils.tabulate: columns padded to their widest cell, a dashed rule under the header."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(*rows, headers)]
    row_format = ("{{:{}}} " * len(headers)).format(*widths)
    lines = [row_format.format(*headers), row_format.format(*["-" * width for width in widths])]
    lines += [row_format.format(*row) for row in rows]
    return "\n".join(lines)


def _cached(repo_file, args, cache_dir, commit):
    """Whether the file is already where the download would put it (so --dry-run shows ``-``)."""
    if args["local_dir"]:
        target = Path(args["local_dir"]) / repo_file.name
    else:
        target = hub_layout.snapshot_dir(cache_dir, args["repo_id"], commit) / repo_file.name
    return target.is_file() and target.stat().st_size == repo_file.size


def dry_run_report(files, args, cache_dir, commit):
    """What ``hf download --dry-run`` prints on stdout (huggingface_hub 1.0, commands/download.py)."""
    wanted = [(f, not _cached(f, args, cache_dir, commit)) for f in files]
    total = sum(f.size for f, needed in wanted if needed)
    lines = [f"[dry-run] Will download {sum(1 for _, needed in wanted if needed)} files (out of {len(wanted)}) "
             f"totalling {format_size(total)}."]
    rows = [[f.name, format_size(f.size) if needed else "-"] for f, needed in sorted(wanted, key=lambda x: x[0].name)]
    return "\n".join(lines + [tabulate(rows, headers=["File", "Bytes to download"])])


def _remove_for_force(files, args, cache_dir):
    """--force-download: drop existing copies so they are written again."""
    for repo_file in files:
        if args["local_dir"]:
            target = os.path.join(args["local_dir"], repo_file.name)
        else:
            target = hub_layout.repo_dir(cache_dir, args["repo_id"]) / "blobs" / repo_file.blob_name
        if os.path.exists(target):
            os.remove(target)


def run_download(args, env):
    """Carry out one parsed ``hf download``; return the path to print."""
    repo_id, revision = args["repo_id"], args["revision"] or "main"
    if args["repo_type"] != "model":
        raise HubError(f"The simulator only serves model repos, not {args['repo_type']!r} ones.")
    cache_dir = args["cache_dir"] or hub_layout.hub_cache_dir(env)
    commit = synthetic_model.commit_for(repo_id, revision)
    all_files = synthetic_model.repo_files(repo_id, env)
    files = _filter_patterns(select_files(all_files, args["filenames"], env, repo_id, commit),
                             args["include"], args["exclude"])
    if hub_layout.is_offline(env):
        if args["local_dir"]:
            return offline_local_dir(args["local_dir"], files)
        return _single_or_folder(offline_snapshot(repo_id, revision, cache_dir, files), args)
    token = resolve_token(args["token"], env)
    if not hub_client.reachable(env, repo_id, revision, token):
        # huggingface_hub falls back to a snapshot it has for the revision, as it is, else gives up
        cached = hub_layout.resolve_commit(cache_dir, repo_id, revision)
        if args["local_dir"] or cached is None:
            raise hub_client.unreachable_error()
        return _single_or_folder(hub_layout.snapshot_dir(cache_dir, repo_id, cached), args)
    check_access(repo_id, commit, token, env)
    if args["dry_run"]:
        return dry_run_report(files, args, cache_dir, commit)
    if args["force_download"]:
        _remove_for_force(files, args, cache_dir)
    bar = FetchBar(len(files), shown=not args["quiet"] and len(args["filenames"]) != 1)
    budget = FailureBudget(env)
    if args["local_dir"]:
        return download_to_local_dir(repo_id, revision, args["local_dir"], files, budget, env, bar)
    return _single_or_folder(download_to_cache(repo_id, revision, cache_dir, files, budget, env, bar), args)


def _single_or_folder(snapshot, args):
    """One named file prints its own path; otherwise the snapshot folder is printed."""
    if len(args["filenames"]) == 1:
        return snapshot / args["filenames"][0]
    return snapshot


def main(argv=None, env=None):
    """Entry point of the `hf` executable; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    env = os.environ if env is None else env
    if not argv or argv[0] in ("-h", "--help"):
        print(TOP_HELP)
        return 0 if argv else 2
    if argv[0] in ("version", "--version"):
        print(f"huggingface_hub version: {HUGGINGFACE_HUB_VERSION}")
        return 0
    if argv[0] != "download":
        print("Usage: hf [OPTIONS] COMMAND [ARGS]...\nTry 'hf -h' for help.\n", file=sys.stderr)
        print(f"Error: No such command '{argv[0]}'.", file=sys.stderr)
        return 2
    try:
        args = parse_or_exit(DOWNLOAD_COMMAND, argv[1:])
    except SystemExit as stop:
        return stop.code
    try:
        path = run_download(args, env)
    except HubError as error:
        print(str(error), file=sys.stderr)
        return 1
    except OSError as error:
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        return 1
    if path is not None:
        print(str(path), flush=True)
    return 0
