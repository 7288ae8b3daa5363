"""A hostile HF cache cannot steer the model copy outside the cache (issue 24, item 1).

Whoever writes the head's cache (the engine container mounts it read-write; a `local:PATH` source; the worker
in --split-download) controls refs/main's bytes and every symlink's target. The manifest probe's listing is
NUL-delimited and base64-framed, so no byte of a name or a ref forges a record (of the manifest or of the
probe batch); the parser takes only a 40-hex revision, relative normalised snapshot paths without control
characters, and links of HF's own form to a blob named by its hash; launch refuses to copy from a manifest with
a refused entry, in one line naming the repo, the entry and the fix; and the node program, given the same
entries anyway, links nothing outside the snapshot: not through `..`, not through a planted symlinked folder.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

import pytest
from fakenode import FakeNode
from test_model_node import REPO, REVISION, Copy, make_repo, program, records

from sparkpair import probes
from sparkpair.engine import modelcopy, modelsync
from sparkpair.errors import SparkpairError
from sparkpair.probes import models

BLOB = "b" * 64
ESCAPE = "../../../../.ssh/authorized_keys"   # from hub/REPO/snapshots/REV: out of the hub, into the home


def cache(tmp_path: Path) -> tuple[Path, Path, str]:
    """A home with an HF cache at ~/hf holding org/model (one blob, linked) and a ~/.ssh/authorized_keys."""
    home = tmp_path / "home"
    hub = home / "hf" / "hub"
    files = make_repo(hub, {"model.safetensors": 4096})
    blob = files["model.safetensors"][0]
    snapshot = hub / REPO / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    (snapshot / "model.safetensors").symlink_to(f"../../blobs/{blob}")
    (hub / REPO / "refs").mkdir()
    (hub / REPO / "refs" / "main").write_text(REVISION)
    (home / ".ssh").mkdir()
    (home / ".ssh" / "authorized_keys").write_text("ssh-ed25519 AAAA owner\n")
    return home, hub / REPO, blob


def probe_output(home: Path) -> str:
    """The manifest probe's stdout, run as a node runs it (HOME set, ~ expanded by the probe)."""
    command = models.manifest("~/hf", "org/model").command.text
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60, env={
        "HOME": str(home), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return done.stdout


def read(home: Path) -> models.RepoManifest:
    return models.parse_manifest(probe_output(home))


def test_an_honest_cache_reads_as_before(tmp_path: Path) -> None:
    home, _, blob = cache(tmp_path)
    manifest = read(home)
    assert manifest.revision == REVISION and manifest.files == {"model.safetensors": blob}
    assert manifest.complete and not manifest.unsafe and manifest.blobs == {blob: 4096}


def test_a_refs_main_with_a_newline_forges_no_snapshot_entry(tmp_path: Path) -> None:
    home, repo, blob = cache(tmp_path)
    forged = f"l\t52\tsnapshots/{REVISION}/{ESCAPE}\t../../blobs/{blob}"
    (repo / "refs" / "main").write_text(f"{REVISION}\n{forged}\n")
    manifest = read(home)
    assert ESCAPE not in manifest.files and all(".." not in path for path in manifest.files)
    assert manifest.revision is None and not manifest.complete
    assert manifest.unsafe and "refs/main" in manifest.unsafe[0]
    assert "\n" not in manifest.unsafe[0] and "\t" not in manifest.unsafe[0]


def test_a_link_target_with_a_newline_forges_no_snapshot_entry(tmp_path: Path) -> None:
    home, repo, blob = cache(tmp_path)
    link = repo / "snapshots" / REVISION / "config.json"
    link.symlink_to(f"../../blobs/{blob}\nl\t52\tsnapshots/{REVISION}/{ESCAPE}\t../../blobs/{blob}")
    manifest = read(home)
    assert set(manifest.files) == {"model.safetensors"}
    assert len(manifest.unsafe) == 1 and "config.json" in manifest.unsafe[0] and not manifest.complete


@pytest.mark.parametrize("target", [
    "/elsewhere/blobs/" + "c" * 64,               # absolute: outside the repo
    "../../../../elsewhere/blobs/" + "c" * 64,    # out of the repo, into another blobs/
    "../../blobs/../../x/blobs/" + "c" * 64,      # `..` after blobs/
    "../../blobs/not-a-hash",                     # a blob that is not named by its hash
    "../../blobs/" + "C" * 64,                    # upper-case hex: not HF's form
    "../blobs/" + "c" * 64,                       # the wrong depth: resolves under snapshots/
])
def test_a_link_that_leaves_hf_s_form_is_refused(tmp_path: Path, target: str) -> None:
    home, repo, _ = cache(tmp_path)
    (repo / "snapshots" / REVISION / "tokenizer.json").symlink_to(target)
    manifest = read(home)
    assert "tokenizer.json" not in manifest.files and not manifest.complete
    assert [entry for entry in manifest.unsafe if "tokenizer.json" in entry]


@pytest.mark.parametrize("name", ["con\x1bfig.json", "a\x1eforged", "x\x7fy", "tab\there", "bidi\u202egnp.json"])
def test_control_characters_in_a_snapshot_path_are_refused_and_frame_nothing(tmp_path: Path, name: str) -> None:
    home, repo, blob = cache(tmp_path)
    (repo / "snapshots" / REVISION / name).symlink_to(f"../../blobs/{blob}")
    output = probe_output(home)
    assert set(output) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=\n")
    manifest = models.parse_manifest(output)
    assert name not in manifest.files and len(manifest.unsafe) == 1 and not manifest.complete
    assert all(ch.isprintable() and ch not in "\u202e" for ch in manifest.unsafe[0])


def test_a_symlinked_refs_main_is_refused(tmp_path: Path) -> None:
    home, repo, _ = cache(tmp_path)
    (repo / "refs" / "main").unlink()
    (repo / "refs" / "main").symlink_to(home / ".ssh" / "authorized_keys")
    manifest = read(home)
    assert manifest.revision is None and manifest.unsafe and "refs/main" in manifest.unsafe[0]


def test_a_listing_cut_short_is_an_error_not_a_smaller_repo(tmp_path: Path) -> None:
    home, repo, _ = cache(tmp_path)
    raw = base64.b64decode("".join(probe_output(home).split()))
    with pytest.raises(ValueError, match="cut short"):
        models.parse_manifest(base64.b64encode(raw[: raw.index(b"end\0")]).decode())


def test_launch_refuses_a_manifest_with_a_refused_entry_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    example_inventory_path: Path) -> None:
    from sparkpair.inventory import read_inventory
    inventory = read_inventory(example_inventory_path)
    home, repo, _ = cache(tmp_path)
    (repo / "refs" / "main").write_text(f"{REVISION}\nl\t1\tsnapshots/{REVISION}/{ESCAPE}\t../../blobs/{BLOB}")
    parsed = read(home)
    monkeypatch.setattr(probes, "gather", lambda connection, asked: {probe: parsed for probe in asked})

    with pytest.raises(SparkpairError) as raised:
        modelsync.read_manifests(FakeNode("spark-a"), inventory, ["org/model"])
    (line,) = raised.value.lines()
    assert line.startswith("spark-a: org/model:") and "refs/main" in line and "fix: " in line
    assert "models--org--model" in line and "\n" not in line and "\t" not in line


@pytest.mark.parametrize("revision, links", [
    (REVISION, {ESCAPE: BLOB}),
    (REVISION, {"/home/nvidia/.ssh/authorized_keys": BLOB}),
    (REVISION, {"config.json": "../x"}),
    (f"{REVISION}\n", {"config.json": BLOB}),
    ("../../..", {"config.json": BLOB}),
])
def test_a_copy_is_never_started_from_an_unsafe_snapshot(monkeypatch: pytest.MonkeyPatch, revision: str,
                                                         links: dict[str, str]) -> None:
    def never(*args: object) -> None:
        raise AssertionError("the node program was started")

    monkeypatch.setattr(modelcopy, "RemoteProcess", never)
    with pytest.raises(SparkpairError) as raised:
        modelcopy.copy(FakeNode("spark-a"), FakeNode("spark-b"), object(), [],  # type: ignore[arg-type]
                       {"org/model": modelcopy.Snapshot(revision, links)},
                       "tcp", lambda event: None)
    (line,) = raised.value.lines()
    assert line.startswith("spark-b: org/model: unsafe entry in the snapshot to link on spark-b: ")
    assert "fix: remove models--org--model" in line and all(ch.isprintable() for ch in line)


def test_the_node_program_links_nothing_outside_the_snapshot(tmp_path: Path) -> None:
    """The receiver given a forged entry (as the old parser passed it on): the copy lands, the forged link is
    refused by name, ~/.ssh/authorized_keys is untouched and no refs/main is written."""
    home = tmp_path / "b-home"
    (home / ".ssh").mkdir(parents=True)
    keys = home / ".ssh" / "authorized_keys"
    keys.write_text("ssh-ed25519 AAAA owner\n")
    files = make_repo(tmp_path / "a", {"model.safetensors": 1 << 16})
    blob = files["model.safetensors"][0]
    escape = "../" * 4 + "b-home/.ssh/authorized_keys"   # from b/REPO/snapshots/REV: tmp_path/b-home/...
    copy = Copy(tmp_path, files, links={"model.safetensors": blob, escape: blob})
    assert copy.sent()["ok"]
    got = copy.received()
    assert got["verified"] == [blob]
    assert not keys.is_symlink() and keys.read_text() == "ssh-ed25519 AAAA owner\n"
    assert got["refused_links"] == {REPO: [[escape, "not a relative path inside the snapshot"]]}
    assert not (tmp_path / "b" / REPO / "refs" / "main").exists()


def link(hub: Path, revision: str, links: dict[str, str]) -> dict:
    """The node program's link_repos on hub (run through `recv` with no files and `end` at once)."""
    job = {"secret": "00" * 32, "listen": [], "peers": [], "hub": str(hub), "cache": "", "files": [],
           "repos": {REPO: {"revision": revision, "links": links}}}
    out = program("recv", stdin=json.dumps(job) + "\nend\n").stdout
    return records(out, "result")[0]


@pytest.mark.parametrize("revision, entry, refused", [
    (REVISION, "../../../outside", ["../../../outside", "not a relative path inside the snapshot"]),
    (REVISION, "TMP/outside", ["TMP/outside", "not a relative path inside the snapshot"]),
    (REVISION, "a/./b", ["a/./b", "not a relative path inside the snapshot"]),
    (REVISION, "a\nb", ["a\nb", "holds a control character"]),
    ("../../..", "config.json", ["revision", "not 40 hex digits"]),
    (REVISION + "\n", "config.json", ["revision", "not 40 hex digits"]),
])
def test_link_repos_refuses_entries_that_leave_the_snapshot(tmp_path: Path, revision: str, entry: str,
                                                            refused: list[str]) -> None:
    """Any such entry: nothing of the repo is linked, no refs/main is written."""
    entry, refused = entry.replace("TMP", str(tmp_path)), [refused[0].replace("TMP", str(tmp_path)), refused[1]]
    hub = tmp_path / "hub"
    files = make_repo(hub, {"model.safetensors": 100})
    blob = files["model.safetensors"][0]
    got = link(hub, revision, {"model.safetensors": blob, entry: blob})
    assert refused in got["refused_links"][REPO]
    assert not (tmp_path / "outside").exists() and not (tmp_path / "outside").is_symlink()
    assert not (hub / REPO / "refs").exists() and not (hub / REPO / "snapshots").exists()


def test_link_repos_refuses_a_blob_not_named_by_its_hash(tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    make_repo(hub, {})
    (hub / REPO / "blobs" / "x").write_text("not a blob")
    got = link(hub, REVISION, {"config.json": "x"})
    assert got["refused_links"][REPO] == [["config.json", "its blob is not named by a hash"]]


def test_link_repos_never_follows_a_planted_symlinked_folder(tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    files = make_repo(hub, {"model.safetensors": 100})
    blob = files["model.safetensors"][0]
    outside = tmp_path / "outside"
    outside.mkdir()
    snapshot = hub / REPO / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    (snapshot / "sub").symlink_to(outside)            # a folder of the snapshot, swapped for a link
    (hub / REPO / "refs").symlink_to(outside)          # refs/ swapped for a link
    got = link(hub, REVISION, {"sub/model.safetensors": blob, "model.safetensors": blob})
    assert got["refused_links"][REPO] == [["sub/model.safetensors", "a folder on its way is a symlink"]]
    assert os.readlink(snapshot / "model.safetensors") == f"../../blobs/{blob}"
    assert got["linked"][REPO] == ["sub/model.safetensors"]
    got = link(hub, REVISION, {"model.safetensors": blob})   # every file linked: refs/main is due
    assert got["refused_links"][REPO] == [["refs/main", "a folder on its way is a symlink"]]
    assert list(outside.iterdir()) == []
