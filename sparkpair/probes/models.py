"""Model facts: what a repo's Hugging Face cache holds on a node, as a manifest."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sparkpair.probes import Probe, expanded_path
from sparkpair.transport import Shell

BLOB_NAME = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


@dataclass(frozen=True)
class RepoManifest:
    """A repo in the hub cache: its main revision, blobs (name -> size) and snapshot files."""

    revision: str | None
    blobs: dict[str, int] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)      # snapshot path -> blob name
    incomplete: tuple[str, ...] = ()
    broken: tuple[str, ...] = ()                             # snapshot files whose blob is missing

    @property
    def present(self) -> bool:
        return bool(self.revision and self.files)

    @property
    def complete(self) -> bool:
        """The main revision is fully there: every snapshot file has its blob, nothing half-written."""
        return self.present and not self.broken and not self.incomplete

    @property
    def size(self) -> int:
        return sum(self.blobs.values())

    def differences(self, other: RepoManifest) -> list[str]:
        """What differs from other: revision, missing or extra blobs, sizes."""
        problems = []
        if self.revision != other.revision:
            problems.append(f"revision {self.revision} vs {other.revision}")
        for name in sorted(set(self.blobs) | set(other.blobs)):
            mine, theirs = self.blobs.get(name), other.blobs.get(name)
            if mine != theirs:
                problems.append(f"blob {name[:12]}: {_size(mine)} vs {_size(theirs)}")
        return problems


def _size(value: int | None) -> str:
    return "missing" if value is None else f"{value} bytes"


def parse_manifest(text: str) -> RepoManifest:
    """Parse the manifest listing: `f<TAB>size<TAB>path<TAB>target` lines plus `ref<TAB>name<TAB>commit`.

    Sample: f\t12345\tblobs/9f86d08...\t
            l\t52\tsnapshots/3c1f.../config.json\t../../blobs/9f86d08...
            ref\trefs/main\t3c1f...
    """
    refs, blobs, links, incomplete = {}, {}, {}, []
    for line in text.splitlines():
        kind, *rest = line.split("\t")
        if kind == "ref" and len(rest) >= 2:
            refs[rest[0].removeprefix("refs/")] = rest[1].strip()
        elif kind == "f" and len(rest) >= 2 and rest[1].startswith("blobs/"):
            name = rest[1].removeprefix("blobs/")
            if BLOB_NAME.fullmatch(name):
                blobs[name] = int(rest[0])
            elif name.endswith(".incomplete"):
                incomplete.append(name)
        elif kind == "l" and len(rest) >= 3 and rest[1].startswith("snapshots/"):
            links[rest[1].removeprefix("snapshots/")] = rest[2].rsplit("/", 1)[-1]
    revision = refs.get("main")
    prefix = f"{revision}/"
    files = {path.removeprefix(prefix): blob for path, blob in links.items() if path.startswith(prefix)}
    broken = tuple(sorted(path for path, blob in files.items() if blob not in blobs))
    return RepoManifest(revision, blobs, files, tuple(incomplete), broken)


def manifest(hf_cache: str, repo: str) -> Probe[RepoManifest]:
    """The manifest of repo in the node's HF cache (an absent repo gives an empty manifest)."""
    directory = f"{hf_cache.rstrip('/')}/hub/models--{repo.replace('/', '--')}"
    command = Shell.compose([expanded_path(directory), Shell(
        'cd "$p" 2>/dev/null || exit 0; '
        "find . -mindepth 2 \\( -type f -o -type l \\) -printf '%y\\t%s\\t%P\\t%l\\n'; "
        'for r in refs/*; do [ -f "$r" ] && printf "ref\\t%s\\t%s\\n" "$r" "$(cat "$r")"; done; true')], "")
    return Probe(f"model {repo}", command, parse_manifest)


def cache_access(hf_cache: str) -> Probe[tuple[bool, str]]:
    """Whether the user can write the HF cache, and the first path in it owned by someone else."""
    command = Shell.compose([expanded_path(hf_cache), Shell(
        'q="$p"; while [ ! -e "$q" ]; do q=$(dirname "$q"); done; '
        '[ -w "$q" ] && echo writable || echo read-only; '
        '[ -d "$p" ] && find "$p" -maxdepth 4 ! -user "$(id -u)" -print -quit 2>/dev/null; true')], "")
    return Probe("cache_access", command, _parse_access)


def _parse_access(text: str) -> tuple[bool, str]:
    lines = text.strip().splitlines()
    return (bool(lines) and lines[0] == "writable", lines[1] if len(lines) > 1 else "")
