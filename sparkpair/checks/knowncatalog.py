"""The known-bad catalog: versions of a Spark's kernel, driver, NCCL or engine image that users lost days to, as
data with sources (`sparkpair/data/known_bad.json`; `doctor --catalog FILE` reads a newer one).

Pure: text in, a `Catalog` out, every field checked; a catalog is hostile input like anything sparkpair did
not write itself (at most CATALOG_CAP bytes and MAX_DEPTH levels of nesting, known keys only, one printable
line per text, https sources with a date). `CatalogError` names the first field that is wrong. Each entry
names the component whose version it matches (`COMPONENTS`) and, where a fact on the node shows the failure
or its workaround, that fact (`PROOFS`); `checks.known` judges every node against the entries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from sparkpair import boundedjson

DATA = "known_bad.json"
CATALOG_CAP = 256 * 1024
MAX_DEPTH = 6
MAX_ENTRIES = 200
COMPONENTS = ("kernel", "driver", "nccl", "image")
# What a proof says when it holds: `symptom` shows the failure itself (whatever the version), `condition` is what
# must also hold for the version to fail (its workaround is not in effect).
PROOFS = {"cma-free-exceeds-total": "symptom", "nvls-enabled": "condition"}
SEVERITIES = ("FAIL", "WARN")
ENTRY_KEYS = {"id", "component", "versions", "severity", "symptom", "proof", "fix", "sources"}
ENTRY_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,47}")
DATE = re.compile(r"20[0-9]{2}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])")
URL = re.compile(r"https://[A-Za-z0-9.-]{1,100}/[!-~]{0,400}")
VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_~:/@-]{0,199}")
UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


class CatalogError(ValueError):
    """A catalog that is not one sparkpair reads: the message names the field and what it must be."""


@dataclass(frozen=True)
class Source:
    url: str
    date: str


@dataclass(frozen=True)
class Versions:
    """Which versions an entry matches: from `first` on, before `before`, or one of `exactly` (versions compare as
    their numbers, `7.0.0-1019-nvidia` as 7.0.0.1019; `exactly` matches a version that starts with one of them;
    an image is its reference, compared whole)."""

    first: str = ""
    before: str = ""
    exactly: tuple[str, ...] = ()


@dataclass(frozen=True)
class Entry:
    id: str
    component: str
    versions: Versions
    severity: str
    symptom: str
    proof: str
    fix: str
    sources: tuple[Source, ...]

    def cited(self) -> str:
        """The entry's sources in one line: `url (date)`, ..."""
        return "; ".join(f"{source.url} ({source.date})" for source in self.sources)


@dataclass(frozen=True)
class Catalog:
    updated: str
    origin: str           # "sparkpair's" or the file it was read from
    entries: tuple[Entry, ...]


def version_key(text: str) -> tuple[int, ...]:
    """A version's numbers, in order (at most 8): 7.0.0-1019-nvidia -> (7, 0, 0, 1019); 2.28.9-1 -> (2, 28, 9, 1)."""
    return tuple(int(number[:9]) for number in re.findall(r"[0-9]+", text)[:8])


def matches(versions: Versions, component: str, found: str) -> bool:
    """Whether the version found on a node is one the entry names."""
    if component == "image":
        return found in versions.exactly
    key = version_key(found)
    if not key:
        return False
    if versions.exactly:
        return any(key[:len(version_key(item))] == version_key(item) for item in versions.exactly)
    return ((not versions.first or key >= version_key(versions.first))
            and (not versions.before or key < version_key(versions.before)))


def _text(value: Any, where: str, limit: int = 600) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > limit or UNPRINTABLE.search(value):
        raise CatalogError(f"{where}: one printable line of at most {limit} characters")
    return value


def _versions(value: Any, where: str, component: str) -> Versions:
    if not isinstance(value, dict) or not value or set(value) - {"from", "before", "is"}:
        raise CatalogError(f"{where}: an object of from, before and/or is")
    exactly = value.get("is", [])
    if not isinstance(exactly, list) or len(exactly) > 20 or not all(
            isinstance(item, str) and VERSION.fullmatch(item) for item in exactly):
        raise CatalogError(f"{where}.is: a list of at most 20 versions")
    bounds = {key: value.get(key, "") for key in ("from", "before")}
    for key, bound in bounds.items():
        if not isinstance(bound, str) or (bound and not (VERSION.fullmatch(bound) and version_key(bound))):
            raise CatalogError(f"{where}.{key}: a version with numbers, e.g. 7.0.0")
    if component == "image" and (bounds["from"] or bounds["before"] or not exactly):
        raise CatalogError(f"{where}: an image entry names its references in `is`")
    if exactly and (bounds["from"] or bounds["before"]):
        raise CatalogError(f"{where}: either is, or from/before")
    return Versions(bounds["from"], bounds["before"], tuple(exactly))


def _sources(value: Any, where: str) -> tuple[Source, ...]:
    if not isinstance(value, list) or not 1 <= len(value) <= 8:
        raise CatalogError(f"{where}: a list of one to eight sources")
    sources = []
    for index, item in enumerate(value):
        at = f"{where}[{index}]"
        if not isinstance(item, dict) or set(item) != {"url", "date"}:
            raise CatalogError(f"{at}: an object with url and date")
        if not isinstance(item["url"], str) or not URL.fullmatch(item["url"]):
            raise CatalogError(f"{at}.url: an https URL")
        if not isinstance(item["date"], str) or not DATE.fullmatch(item["date"]):
            raise CatalogError(f"{at}.date: a date as YYYY-MM-DD")
        sources.append(Source(item["url"], item["date"]))
    return tuple(sources)


def _entry(value: Any, where: str) -> Entry:
    if not isinstance(value, dict):
        raise CatalogError(f"{where}: an object")
    unknown, missing = set(value) - ENTRY_KEYS, ENTRY_KEYS - {"proof"} - set(value)
    if unknown or missing:
        raise CatalogError(f"{where}: unknown key {sorted(unknown)[0]}" if unknown else
                           f"{where}: no {sorted(missing)[0]}")
    if not isinstance(value["id"], str) or not ENTRY_ID.fullmatch(value["id"]):
        raise CatalogError(f"{where}.id: lowercase letters, digits and '-', at most 48")
    if value["component"] not in COMPONENTS:
        raise CatalogError(f"{where}.component: one of {', '.join(COMPONENTS)}")
    if value["severity"] not in SEVERITIES:
        raise CatalogError(f"{where}.severity: FAIL or WARN")
    proof = value.get("proof", "")
    if proof and proof not in PROOFS:
        raise CatalogError(f"{where}.proof: one of {', '.join(PROOFS)} (the facts sparkpair reads), or none")
    return Entry(value["id"], value["component"], _versions(value["versions"], f"{where}.versions", value["component"]),
                 value["severity"], _text(value["symptom"], f"{where}.symptom"), proof,
                 _text(value["fix"], f"{where}.fix"), _sources(value["sources"], f"{where}.sources"))


def parse_catalog(text: str, origin: str) -> Catalog:
    """A catalog from its JSON text; CatalogError naming the first field that is wrong."""
    if len(text.encode("utf-8", "replace")) > CATALOG_CAP:
        raise CatalogError(f"larger than {CATALOG_CAP // 1024} KiB")
    try:
        data = boundedjson.loads(text, cap=CATALOG_CAP, depth=MAX_DEPTH)
    except boundedjson.Refused as error:
        raise CatalogError(str(error)[:120]) from None
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise CatalogError("an object with `entries`, a list")
    if not isinstance(data.get("updated"), str) or not DATE.fullmatch(data["updated"]):
        raise CatalogError("updated: a date as YYYY-MM-DD")
    if len(data["entries"]) > MAX_ENTRIES:
        raise CatalogError(f"entries: at most {MAX_ENTRIES}")
    entries = tuple(_entry(item, f"entries[{index}]") for index, item in enumerate(data["entries"]))
    ids = [entry.id for entry in entries]
    duplicate = next((item for item in ids if ids.count(item) > 1), None)
    if duplicate:
        raise CatalogError(f"entries: the id {duplicate} is given twice")
    return Catalog(data["updated"], origin, entries)


@cache
def packaged() -> Catalog:
    """sparkpair's own catalog, as packaged."""
    return parse_catalog(resources.files("sparkpair.data").joinpath(DATA).read_text(encoding="utf-8"), "sparkpair's")
