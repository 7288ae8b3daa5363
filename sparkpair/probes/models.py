"""Model facts: what a repo's Hugging Face cache holds on a node (a manifest), whether its content is
what its blob names say (verification, by sparkpair's node program), whether a node reaches the hub,
and what `hf download --dry-run` says is left to fetch."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import zlib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

from sparkpair import boundedjson, paths
from sparkpair.probes import Probe, expanded_path
from sparkpair.transport import Shell

BLOB_NAME = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
REVISION = re.compile(r"[0-9a-f]{40}")
# Control characters (C0, DEL, C1), line and direction marks, and the bytes of a name that is not UTF-8
# (decoded as surrogates): none belongs in a snapshot path, none is printed raw.
UNSAFE_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\udc80-\udcff]")
LISTING_CAP = 16 << 20   # bytes of a repo's listing read at most (about 100 000 files)
DEFAULT_HUB = "https://huggingface.co"
CONTENT = "model content"  # the verification probe's kind (doctor looks it up by kind: its budget varies)


def shown(text: str, limit: int = 120) -> str:
    """text fit for one line of output: every unsafe character as `\\xNN` / `\\uNNNN` (a byte that is not
    UTF-8 as `\\xNN`), cut at limit characters."""
    def escape(match: re.Match[str]) -> str:
        code = ord(match[0])
        return f"\\x{code - 0xDC00:02x}" if code >= 0xDC80 else f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    safe = UNSAFE_CHARS.sub(escape, text)
    return safe if len(safe) <= limit else safe[:limit] + "..."


def snapshot_path_problem(path: str) -> str | None:
    """Why path cannot name a file of a snapshot, or None: it must be relative and normalised (no empty,
    `.` or `..` part) and hold no control character."""
    if UNSAFE_CHARS.search(path):
        return "holds a control character"
    if path.startswith("/") or any(part in ("", ".", "..") for part in path.split("/")):
        return "not a relative path inside the snapshot"
    return None


def link_problem(path: str, target: str) -> str | None:
    """Why the link at snapshot path is not of huggingface_hub's own form, or None: relative, `../` once for
    each folder up to the repo, then `blobs/` and a blob name (40 or 64 lowercase hex)."""
    name = target.removeprefix("../" * (path.count("/") + 2) + "blobs/")
    return None if name != target and BLOB_NAME.fullmatch(name) else "does not link to a blob of the repo"


def snapshot_problems(revision: str, links: dict[str, str]) -> list[str]:
    """What forbids linking a snapshot on a node (none for one parse_manifest accepted): the revision is
    40 hex digits, every path a safe relative path, every blob named by its hash. One printable line each."""
    problems = [] if REVISION.fullmatch(revision) else [f"revision '{shown(revision)}' (not 40 hex digits)"]
    for path, blob in links.items():
        problem = snapshot_path_problem(path) or (None if BLOB_NAME.fullmatch(blob) else "its blob is not a hash")
        if problem:
            problems.append(f"{shown(path)} -> {shown(blob)} ({problem})")
    return problems


@dataclass(frozen=True)
class RepoManifest:
    """A repo in the hub cache: its main revision, blobs (name -> size) and snapshot files, and the entries
    refused as unsafe (one printable line each: a refs/main that is no commit, a path or a link not of HF's form)."""

    revision: str | None
    blobs: dict[str, int] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)      # snapshot path -> blob name
    incomplete: tuple[str, ...] = ()
    broken: tuple[str, ...] = ()                             # snapshot files whose blob is missing
    unsafe: tuple[str, ...] = ()

    @property
    def present(self) -> bool:
        return bool(self.revision and self.files)

    @property
    def complete(self) -> bool:
        """The main revision is fully there: every snapshot file has its blob, nothing half-written or unsafe."""
        return self.present and not self.broken and not self.incomplete and not self.unsafe

    @property
    def size(self) -> int:
        return sum(self.blobs.values())

    def differences(self, other: RepoManifest) -> list[str]:
        """What differs from other in the main revision: the revision, missing or extra blobs of its snapshot,
        sizes. Blobs only older snapshots use (a model updated on the hub leaves them) do not count."""
        problems = []
        if self.revision != other.revision:
            problems.append(f"revision {self.revision} vs {other.revision}")
        used = set(self.files.values()) | set(other.files.values())
        for name in sorted(used):
            mine, theirs = self.blobs.get(name), other.blobs.get(name)
            if mine != theirs:
                problems.append(f"blob {name[:12]}: {_size(mine)} vs {_size(theirs)}")
        return problems


def _size(value: int | None) -> str:
    return "missing" if value is None else f"{value} bytes"


def _records(text: str) -> tuple[list[tuple[bytes, ...]], bytes | None]:
    """The listing's find records (type, size, path, link target) and refs/main's bytes, from its base64."""
    fields = base64.b64decode("".join(text.split()), validate=True).split(b"\0")
    entries, ref, index = [], None, 0
    while index < len(fields) - 1 and fields[index] != b"end":
        kind = fields[index]
        width = 4 if kind in (b"f", b"l") else 2 if kind == b"ref" else 0
        if not width:
            raise ValueError(f"an unexpected record {shown(kind.decode(errors='surrogateescape'), 20)}")
        if kind == b"ref":
            ref = fields[index + 1]
        else:
            entries.append(tuple(fields[index:index + 4]))
        index += width
    if index >= len(fields) - 1:  # no `end` followed by its NUL
        raise ValueError(f"the listing was cut short (over {LISTING_CAP >> 20} MiB, or the node stopped)")
    return entries, ref


def parse_manifest(text: str) -> RepoManifest:
    """Parse the manifest listing: base64 of NUL-separated records (no byte of a name or of refs/main frames
    anything): `f|l, size, path, link target` per find entry, `ref, bytes of refs/main`, then `end`.
    A listing without `end` (cut at LISTING_CAP, or the node stopped) raises ValueError.

    Sample (decoded): f\0 10\0 blobs/9f86d08...\0 \0 l\0 52\0 snapshots/3c1f.../config.json\0
                      ../../blobs/9f86d08...\0 ref\0 3c1f...\0 end\0
    """
    if not text.strip():
        return RepoManifest(None)
    entries, ref = _records(text)
    blobs, links, incomplete, unsafe = {}, {}, [], []
    revision = ref.removesuffix(b"\n").decode(errors="surrogateescape") if ref is not None else None
    if revision is not None and not REVISION.fullmatch(revision):
        unsafe.append(f"refs/main = '{shown(revision, 60)}' (not a 40-hex commit)")
        revision = None
    for kind, size, raw_path, raw_target in entries:
        path, target = raw_path.decode(errors="surrogateescape"), raw_target.decode(errors="surrogateescape")
        name = path.removeprefix("blobs/")
        if kind == b"f" and name != path and BLOB_NAME.fullmatch(name) and size.isdigit():
            blobs[name] = int(size)
        elif kind == b"f" and name != path and name.endswith(".incomplete"):
            incomplete.append(shown(name))
        elif kind == b"l" and path == "refs/main":
            unsafe.append("refs/main (a symlink)")
        elif kind == b"l" and revision and path.startswith(f"snapshots/{revision}/"):
            links[path.removeprefix(f"snapshots/{revision}/")] = target
    files = {}
    for path, target in links.items():
        problem = snapshot_path_problem(path) or link_problem(path, target)
        if problem:
            unsafe.append(f"snapshots/{str(revision)[:12]}/{shown(path)} -> {shown(target)} ({problem})")
        else:
            files[path] = target.rsplit("/", 1)[-1]
    broken = tuple(sorted(path for path, blob in files.items() if blob not in blobs))
    return RepoManifest(revision, blobs, files, tuple(incomplete), broken, tuple(unsafe))


def manifest(hf_cache: str, repo: str) -> Probe[RepoManifest]:
    """The manifest of repo in the node's HF cache (an absent repo gives an empty manifest): its entries
    and refs/main NUL-separated (refs/main's own NULs made newlines), capped at LISTING_CAP, in base64."""
    directory = f"{hf_cache.rstrip('/')}/hub/models--{repo.replace('/', '--')}"
    command = Shell.compose([expanded_path(directory), Shell(
        'cd "$p" 2>/dev/null || exit 0; '
        "{ find . -mindepth 2 \\( -type f -o -type l \\) -printf '%y\\0%s\\0%P\\0%l\\0'; "
        "if [ -f refs/main ] && [ ! -h refs/main ]; then "
        "printf 'ref\\000'; head -c 4096 refs/main | tr '\\000' '\\n'; printf '\\000'; fi; "
        f"printf 'end\\000'; }} | head -c {LISTING_CAP} | base64")], "")
    return Probe("model", (hf_cache, repo), command, parse_manifest)


def cache_access(hf_cache: str) -> Probe[tuple[bool, str]]:
    """Whether the user can write the HF cache, and the first path in it owned by someone else."""
    command = Shell.compose([expanded_path(hf_cache), Shell(
        'q="$p"; while [ ! -e "$q" ]; do q=$(dirname "$q"); done; '
        '[ -w "$q" ] && echo writable || echo read-only; '
        '[ -d "$p" ] && find "$p" -maxdepth 4 ! -user "$(id -u)" -print -quit 2>/dev/null; true')], "")
    return Probe("cache access", (hf_cache,), command, _parse_access)


def _parse_access(text: str) -> tuple[bool, str]:
    lines = text.strip().splitlines()
    return (bool(lines) and lines[0] == "writable", lines[1] if len(lines) > 1 else "")


NODE_MODULES = ("mn_blobs", "mn_links", "mn_wire", "mn_receive", "mn_send", "mn_main")  # in import order
# Runs the modules the command needs (NODE_NEEDS; all of them for another command), in import order,
# then mn_main: verify runs on every doctor and need not pay for the copy's sockets, subprocess and thread
# pools (its start on a node: 50 ms -> 40 ms).
BOOTSTRAP = """import binascii, json, sys, types, zlib
sources = dict(json.loads(zlib.decompress(binascii.a2b_base64("{packed}"))))
command = sys.argv[1] if len(sys.argv) > 1 else ""
needed = set({needs}.get(command, sources)) | {{"mn_main"}}
for name in [name for name in sources if name in needed]:
    module = types.ModuleType(name)
    module.__file__ = name + ".py"
    sys.modules[name] = module
    exec(compile(sources[name], name + ".py", "exec"), module.__dict__)
sys.exit(sys.modules["mn_main"].main(sys.argv))
"""
NODE_NEEDS = {"verify": ("mn_blobs",), "watch": ("mn_blobs",), "recv": ("mn_blobs", "mn_links", "mn_wire", "mn_receive"),
              "send": ("mn_blobs", "mn_wire", "mn_send")}


@cache
def node_program() -> str:
    """sparkpair's node program for models (`sparkpair/data/modelnode/mn_*.py`) as one short bootstrap
    carrying every module's source (compressed): run as `python3 -c PROGRAM COMMAND` on a node, so
    nothing is installed there."""
    folder = resources.files("sparkpair.data").joinpath("modelnode")
    modules = [(name, folder.joinpath(f"{name}.py").read_text(encoding="utf-8")) for name in NODE_MODULES]
    packed = base64.b64encode(zlib.compress(json.dumps(modules).encode(), 9)).decode()
    return BOOTSTRAP.format(packed=packed, needs=repr(NODE_NEEDS))


def node_command(command: str, *args: str) -> Shell:
    """`python3 -S -c PROGRAM command args...` as one quoted line (-S: the program uses the standard library
    only, so the node's site-packages need not be scanned at every start)."""
    return Shell(" ".join(["python3 -S -c {} {}"] + ["{}"] * len(args)), node_program(), command, *args)


def repo_dirname(repo: str) -> str:
    """The hub cache's folder of a repo id: models--org--name."""
    return "models--" + repo.replace("/", "--")


@dataclass(frozen=True)
class RepoContent:
    """What verification found in one repo on a node: blob name -> why it is bad, blobs not hashed yet
    (a budget ran out), and snapshot entries that do not resolve to a good blob (path, problem)."""

    blobs: int = 0
    bad: dict[str, str] = field(default_factory=dict)
    unverified: tuple[str, ...] = ()
    links: tuple[tuple[str, str], ...] = ()

    @property
    def verified(self) -> bool:
        return not self.bad and not self.unverified and not self.links


@dataclass(frozen=True)
class ContentCheck:
    """Verification of the repos on one node: per repo dirname its RepoContent; bytes hashed this time
    (the rest came from the node's cache of verified blobs) and how long it took."""

    repos: dict[str, RepoContent] = field(default_factory=dict)
    hashed_bytes: int = 0
    cached: int = 0
    seconds: float = 0.0

    def of(self, repo: str) -> RepoContent:
        return self.repos.get(repo_dirname(repo), RepoContent())


def parse_content(text: str) -> ContentCheck:
    """The `result {...}` line of the node program's `verify` (node_command; progress lines before it are skipped).

    Sample: result {"cached": 9, "hashed_bytes": 1508352, "repos": {"models--o--r": {"bad": {"b35a...":
            "content hashes to 0c1f33a2e9d1"}, "blobs": 11, "links": [["<rev>/x.safetensors",
            "its blob is corrupt"]], "unverified": []}}, "seconds": 0.02}
    """
    lines = [line for line in text.splitlines() if line.startswith("result ")]
    if not lines:
        raise ValueError("no result line")
    data = boundedjson.loads(lines[-1].removeprefix("result "))
    repos = {name: RepoContent(int(entry.get("blobs", 0)), dict(entry.get("bad", {})),
                               tuple(entry.get("unverified", [])),
                               tuple((shown(str(path)), shown(str(problem))) for path, problem in entry.get("links", [])))
             for name, entry in data["repos"].items()}
    return ContentCheck(repos, int(data.get("hashed_bytes", 0)), int(data.get("cached", 0)),
                        float(data.get("seconds", 0.0)))


def verify_options(hf_cache: str, repos: list[str] | tuple[str, ...], *, budget: float | None = None,
                   remove_bad: bool = False, progress: bool = False, result: str | None = None) -> str:
    """The node program's verify options (JSON): the hub dir, repo dirs, the node's cache of verified blobs
    (and where to remember a clean verdict, for the doctor's probe)."""
    options: dict[str, object] = {"hub": f"{hf_cache.rstrip('/')}/hub", "repos": [repo_dirname(r) for r in repos],
                                  "cache": paths.VERIFIED_BLOBS, "budget": budget, "remove_bad": remove_bad,
                                  "progress": progress}
    if result:
        options["result"] = result
    return json.dumps(options, sort_keys=True)


# What the verdict of a run depends on, listed by find: every entry of the repos (type, size, mtime, ctime,
# inode, link target) and the cache file of verified blobs. ctime changes with every write to a file.
LISTING_FORMAT = "%p %y %s %T@ %C@ %i %l\n"


def content(hf_cache: str, repos: tuple[str, ...], budget: float) -> Probe[ContentCheck]:
    """Verify the repos' blobs on the node, hashing for at most budget seconds (what is left is
    reported unverified); blobs the node's cache already vouches for are not read again.

    The node program remembers a clean verdict under the checksum of the repos' listing (LISTING_FORMAT)
    taken before it ran; while the listing is the same (no file written, added, removed or relinked since,
    nor the cache of verified blobs), the probe prints that verdict without starting Python: 2 ms of a
    node's CPU instead of 30 on every doctor and launch preflight."""
    options = verify_options(hf_cache, repos, budget=budget, result=paths.VERIFIED_RESULT)
    dirs = [repo_dirname(repo) for repo in repos]
    key = Shell.compose([
        expanded_path(f"{hf_cache.rstrip('/')}/hub"), Shell('h="$p"; '),
        expanded_path(paths.VERIFIED_BLOBS), Shell('c="$p"; '),
        expanded_path(paths.VERIFIED_RESULT), Shell('r="$p"; '),
        Shell('l="$(cd "$h" 2>/dev/null && find ' + "{} " * len(dirs) + '"$c" -printf {} 2>/dev/null)"; '
              'k="$(printf "%s\\n" "$l" | cksum) {}"; ', *dirs, LISTING_FORMAT, hashlib.sha256(options.encode()).hexdigest()[:16])],
        "")
    # An empty listing (no repo yet, or a find without -printf) never matches: the node program runs.
    remembered = Shell('{ [ -n "$l" ] && IFS= read -r v && [ "$v" = "$k" ] && cat; } 2>/dev/null <"$r" || '
                       'SPARKPAIR_VERIFY_KEY="$k" ')
    return Probe(CONTENT, (hf_cache, repos, budget), Shell.compose([key, remembered, node_command("verify", options)], ""),
                 parse_content)


@dataclass(frozen=True)
class HubReach:
    """Whether a node got an HTTP answer from the hub (any status: 401 still proves the way), or why not."""

    reachable: bool
    detail: str


def parse_hub(text: str) -> HubReach:
    """curl's `http 200` / `http 401` (an answer: any status but 000), else its error line and exit code.

    Samples (curl 7.88 on this machine): `http 200`; `curl: (7) Failed to connect to 198.18.0.1 port 8791 after 0 ms:
    Couldn't connect to server` then `http 000` and `exit 7`; `curl: (6) Could not resolve host: huggingface.co`.
    """
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    status = next((line.split()[1] for line in lines if line.startswith("http ") and len(line.split()) == 2), "000")
    if status != "000":
        return HubReach(True, f"HTTP {status}")
    reason = next((line for line in lines if line.startswith("curl: (")), None)
    return HubReach(False, reason or (lines[-1] if lines else "no answer"))


def hub(endpoint: str, repo: str) -> Probe[HubReach]:
    """One unauthenticated GET of the repo's model info from the node (no token is sent), 5 s timeout.
    curl, not a Python client: a Python start costs a busy node about 60 ms of CPU per doctor round."""
    url = f"{endpoint.rstrip('/')}/api/models/{repo}"
    command = Shell("curl -sS -o /dev/null --max-time 5 -w 'http %{http_code}\\n' {} 2>&1 || echo \"exit $?\"", url)
    return Probe("hub", (endpoint, repo), command, parse_hub, waits=True)


@dataclass(frozen=True)
class DryRun:
    """`hf download --dry-run`: file -> bytes still to download (about: the hub rounds to 0.1 of a unit),
    None for a file already in the cache."""

    files: dict[str, int | None]

    @property
    def to_download(self) -> dict[str, int]:
        return {name: size for name, size in self.files.items() if size is not None}

    @property
    def total(self) -> int:
        return sum(self.to_download.values())


UNITS = {"": 1, "K": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "P": 10 ** 15}
SIZE = re.compile(r"(\d+(?:\.\d+)?)([KMGTP]?)")


def parse_dry_run(text: str) -> DryRun:
    """The table `hf download --dry-run` prints (huggingface_hub 1.x): a header line, a dashed rule, then
    `name size` rows where size is `_format_size` (decimal units, `655.2M`) or `-` (cached).

    Sample: tests/fixtures/probes/hf-download-dry-run.txt
    """
    lines = text.splitlines()
    rule = next((i for i, line in enumerate(lines) if line.strip() and set(line.strip()) <= {"-", " "}
                 and "[dry-run] Will download" in "\n".join(lines[:i])), None)
    if rule is None:
        raise ValueError("no dry-run table")
    files: dict[str, int | None] = {}
    for line in lines[rule + 1:]:
        name, _, size = line.rstrip().rpartition(" ")
        match = SIZE.fullmatch(size)
        if not name.strip() or not (size == "-" or match):
            break
        files[name.strip()] = None if size == "-" else round(float(match.group(1)) * UNITS[match.group(2)]) \
            if match else None
    return DryRun(files)
