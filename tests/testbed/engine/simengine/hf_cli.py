"""The `hf` command: ``hf download``, ``hf version`` and ``hf --help``.

Progress goes to stderr, the resulting path to stdout (as the real CLI prints it), errors
to stderr with exit status 1, usage errors click-style with exit status 2. The token is
used to decide access and is never printed.
"""

import fnmatch
import os
import sys

from . import HUGGINGFACE_HUB_VERSION, hub_layout, synthetic_model
from .clickish import Arg, Command, Opt, parse_or_exit
from .hf_download import (FailureBudget, HubError, check_access, download_to_cache,
                          download_to_local_dir, offline_local_dir, offline_snapshot,
                          resolve_token, select_files)

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


def _progress_printer(quiet):
    def progress(message):
        if not quiet:
            print(message, file=sys.stderr, flush=True)
    return progress


def _remove_for_force(files, args, cache_dir):
    """--force-download: drop existing copies so they are written again."""
    for repo_file in files:
        if args["local_dir"]:
            target = os.path.join(args["local_dir"], repo_file.name)
        else:
            target = hub_layout.repo_dir(cache_dir, args["repo_id"]) / "blobs" / repo_file.sha256
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
    progress = _progress_printer(args["quiet"])
    if hub_layout.is_offline(env):
        if args["local_dir"]:
            return offline_local_dir(args["local_dir"], files)
        return _single_or_folder(offline_snapshot(repo_id, revision, cache_dir, files), args)
    check_access(repo_id, commit, resolve_token(args["token"], env), env)
    if args["dry_run"]:
        for repo_file in files:
            progress(f"would download {repo_file.name} ({len(repo_file.content)} bytes)")
        return None
    if args["force_download"]:
        _remove_for_force(files, args, cache_dir)
    progress(f"Fetching {len(files)} files for {repo_id} at {commit}")
    budget = FailureBudget(env)
    if args["local_dir"]:
        return download_to_local_dir(repo_id, revision, args["local_dir"], files, budget, env, progress)
    return _single_or_folder(download_to_cache(repo_id, revision, cache_dir, files, budget, env, progress), args)


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
