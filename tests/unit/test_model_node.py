"""sparkpair's node program for models (sparkpair/data/model_node.py), run as the nodes run it
(`python3 -c SOURCE ...`), on loopback: 127.0.0.1 and 127.0.0.2 stand for the two twins.

A copy lands every file whole, verified and linked, over both "twins"; a sender without the one-time
secret or from another address is refused and nothing is linked; a file whose bytes do not hash to
its name is never moved into blobs/ nor linked; an aborted copy keeps whole verified files and leaves
no partial one; verification hashes once, then trusts its cache until a file changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from sparkpair.probes import models

REPO = "models--org--model"
REVISION = "3c1f" * 10
TWINS = ["127.0.0.1", "127.0.0.2"]


def program(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-c", models.node_program(), *args], input=stdin, capture_output=True,
                            text=True, timeout=120)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def start(command: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", models.node_program(), command], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def records(text: str, kind: str) -> list[dict]:
    return [json.loads(line.split(" ", 1)[1]) for line in text.splitlines() if line.startswith(kind + " ")]


def blob(content: bytes, lfs: bool) -> str:
    return hashlib.sha256(content).hexdigest() if lfs else \
        hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def make_repo(hub: Path, sizes: dict[str, int]) -> dict[str, tuple[str, int]]:
    """A repo's blobs (no snapshot yet) in hub: file name -> (blob name, size); .json files git-tracked."""
    blobs = hub / REPO / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, size in sizes.items():
        content = os.urandom(size)
        files[name] = (blob(content, not name.endswith(".json")), size)
        (blobs / files[name][0]).write_bytes(content)
    return files


def link_snapshot(hub: Path, files: dict[str, tuple[str, int]]) -> Path:
    snapshot = hub / REPO / "snapshots" / REVISION
    snapshot.mkdir(parents=True, exist_ok=True)
    for name, (blob_name, _) in files.items():
        (snapshot / name).symlink_to(f"../../blobs/{blob_name}")
    (hub / REPO / "refs").mkdir(exist_ok=True)
    (hub / REPO / "refs" / "main").write_text(REVISION)
    return snapshot


def job_files(files: dict[str, tuple[str, int]]) -> list[dict]:
    return [{"id": i, "repo": REPO, "blob": b, "size": s} for i, (b, s) in enumerate(files.values())]


class Copy:
    """A receiver and a sender on loopback, with a job each; `run` waits for both results."""

    def __init__(self, tmp_path: Path, files: dict[str, tuple[str, int]], *, peers: list[str] | None = None,
                 sender_secret: str | None = None, streams: int = 3, chunk: int = 1 << 20,
                 sender_files: list[dict] | None = None, links: dict[str, str] | None = None,
                 max_connections: int | None = None) -> None:
        self.source, self.dest = tmp_path / "a", tmp_path / "b"
        self.secret = secrets.token_hex(32)
        self.files = files
        self.receiver = start("recv")
        job = {"secret": self.secret, "listen": [[twin, 0] for twin in TWINS], "peers": peers or TWINS,
               "hub": str(self.dest), "cache": str(tmp_path / "b-verified.json"), "files": job_files(files),
               "repos": {REPO: {"revision": REVISION,
                                "links": links or {name: b for name, (b, _) in files.items()}}}}
        if max_connections is not None:
            job["max_connections"] = max_connections
        self.receiver.stdin.write(json.dumps(job) + "\n")  # type: ignore[union-attr]
        self.receiver.stdin.flush()  # type: ignore[union-attr]
        listening = self.receiver.stdout.readline()  # type: ignore[union-attr]
        self.addresses = json.loads(listening.split(" ", 1)[1])["addresses"]
        self.sender = start("send")
        self.sender.stdin.write(json.dumps({  # type: ignore[union-attr]
            "secret": sender_secret or self.secret, "hub": str(self.source),
            "files": job_files(files) if sender_files is None else sender_files,
            "streams": streams, "chunk": chunk,
            "targets": [{"name": f"twin{k}", "bind": a, "connect": [a, p]} for k, (a, p) in enumerate(self.addresses)]})
            + "\n")
        self.sender.stdin.flush()  # type: ignore[union-attr]

    def sent(self) -> dict:
        out = ""
        for line in self.sender.stdout:  # type: ignore[union-attr]
            out += line
            if line.startswith("result "):
                break
        self.sender.stdin.close()  # type: ignore[union-attr]
        self.sender.wait(timeout=30)
        return records(out, "result")[0]

    def received(self, word: str = "end") -> dict:
        out, _ = self.receiver.communicate(word + "\n", timeout=60)
        return records(out, "result")[0]


def test_a_copy_lands_every_file_whole_verified_and_linked_over_both_twins(tmp_path: Path) -> None:
    files = make_repo(tmp_path / "a", {"model-00001.safetensors": 5 << 20, "model-00002.safetensors": 3 << 20,
                                       "config.json": 700, "empty.json": 0})
    copy = Copy(tmp_path, files)
    sent = copy.sent()
    assert sent["ok"] and sent["chunks_left"] == 0 and sent["streams"] == 6
    assert sum(sent["sent"].values()) == sum(size for _, size in files.values())
    assert all(count > 0 for count in sent["sent"].values()), sent["sent"]  # both twins carried bytes
    got = copy.received()
    assert sorted(got["verified"]) == sorted(b for b, _ in files.values()) and not got["bad"] and not got["missing"]
    snapshot = tmp_path / "b" / REPO / "snapshots" / REVISION
    for name, (blob_name, _) in files.items():
        assert os.readlink(snapshot / name) == f"../../blobs/{blob_name}"
        assert (snapshot / name).read_bytes() == (tmp_path / "a" / REPO / "blobs" / blob_name).read_bytes()
    assert (tmp_path / "b" / REPO / "refs" / "main").read_text() == REVISION
    assert not list((tmp_path / "b").rglob("*.sparkpair-part"))


@pytest.mark.parametrize("case", ["wrong secret", "not the peer"])
def test_a_sender_without_the_secret_or_from_elsewhere_is_refused(tmp_path: Path, case: str) -> None:
    files = make_repo(tmp_path / "a", {"model.safetensors": 1 << 20})
    copy = Copy(tmp_path, files, sender_secret=secrets.token_hex(32) if case == "wrong secret" else None,
                peers=["127.0.0.9"] if case == "not the peer" else None)
    sent = copy.sent()
    assert not sent["ok"] and sum(sent["sent"].values()) == 0
    got = copy.received("abort")
    reason = "did not prove the one-time secret" if case == "wrong secret" else "(not the peer)"
    assert got["refused"] and all(reason in refused for refused in got["refused"])
    assert not got["verified"] and not (tmp_path / "b" / REPO / "snapshots").exists()
    assert not list((tmp_path / "b").rglob("*.sparkpair-part"))
    assert copy.secret not in json.dumps(got) + json.dumps(sent)


def test_bytes_that_do_not_hash_to_their_name_are_never_linked(tmp_path: Path) -> None:
    files = make_repo(tmp_path / "a", {"model.safetensors": 2 << 20, "config.json": 300})
    shard = tmp_path / "a" / REPO / "blobs" / files["model.safetensors"][0]
    data = bytearray(shard.read_bytes())
    data[12345] ^= 0xFF  # the source itself is damaged: the receiver must notice from the name alone
    shard.write_bytes(bytes(data))
    copy = Copy(tmp_path, files)
    assert copy.sent()["ok"]
    got = copy.received()
    assert got["bad"] == [files["model.safetensors"][0]] and got["verified"] == [files["config.json"][0]]
    assert not (tmp_path / "b" / REPO / "blobs" / files["model.safetensors"][0]).exists()
    snapshot = tmp_path / "b" / REPO / "snapshots" / REVISION
    assert not (snapshot / "model.safetensors").is_symlink() and (snapshot / "config.json").is_symlink()
    assert not (tmp_path / "b" / REPO / "refs" / "main").exists()  # the snapshot is not complete
    assert got["linked"] == {REPO: ["model.safetensors"]}


def test_an_aborted_copy_keeps_whole_verified_files_and_no_partial_one(tmp_path: Path) -> None:
    files = make_repo(tmp_path / "a", {"model-1.safetensors": 6 << 20, "model-2.safetensors": 5 << 20,
                                       "config.json": 900})
    whole, cut, _ = job_files(files)
    # the sender is cut off mid-way: it sends the first file whole and only the first 3 MiB of the second
    copy = Copy(tmp_path, files, streams=2, chunk=1 << 20, sender_files=[whole, {**cut, "size": 3 << 20}])
    assert copy.sent()["ok"]
    got = copy.received("abort")
    assert got["verified"] == [whole["blob"]]
    assert sorted(got["missing"]) == sorted([cut["blob"], files["config.json"][0]])
    assert (tmp_path / "b" / REPO / "blobs" / whole["blob"]).is_file()  # kept: the next copy skips it
    assert not list((tmp_path / "b").rglob("*.sparkpair-part"))  # the partial one is gone
    assert not (tmp_path / "b" / REPO / "snapshots").exists()  # an aborted copy links nothing
    assert not (tmp_path / "b" / REPO / "refs").exists()


def test_verification_hashes_once_then_trusts_its_cache_until_a_file_changes(tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    files = make_repo(hub, {"model.safetensors": 3 << 20, "config.json": 500})
    snapshot = link_snapshot(hub, files)
    (snapshot / "stray.txt").write_text("a regular file where a link belongs")
    options = {"hub": str(hub), "repos": [REPO], "cache": str(tmp_path / "verified.json")}
    first = records(program("verify", json.dumps(options)).stdout, "result")[0]
    assert first["hashed_bytes"] == (3 << 20) + 500 and first["repos"][REPO]["bad"] == {}
    assert first["repos"][REPO]["links"] == [[f"{REVISION}/stray.txt", "not a link to a blob"]]
    second = records(program("verify", json.dumps(options)).stdout, "result")[0]
    assert second["hashed_bytes"] == 0 and second["cached"] == 2
    shard = hub / REPO / "blobs" / files["model.safetensors"][0]
    with shard.open("r+b") as handle:  # one byte changed in place: same size
        handle.seek(1000)
        byte = handle.read(1)[0]
        handle.seek(1000)
        handle.write(bytes([byte ^ 1]))
    third = records(program("verify", json.dumps({**options, "remove_bad": True})).stdout, "result")[0]
    assert list(third["repos"][REPO]["bad"]) == [files["model.safetensors"][0]]
    assert third["hashed_bytes"] == 3 << 20  # only the changed file was read again
    assert [f"{REVISION}/model.safetensors", "its blob is corrupt"] in third["repos"][REPO]["links"]
    assert not shard.exists() and (snapshot / "model.safetensors").is_symlink()  # dangling: the repo is incomplete
    assert (snapshot / "config.json").is_symlink()


def test_a_verification_budget_leaves_the_rest_unverified(tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    make_repo(hub, {f"model-{i}.safetensors": 1 << 20 for i in range(6)})
    options = {"hub": str(hub), "repos": [REPO], "cache": "", "budget": 1e-9, "workers": 1}
    found = models.parse_content(program("verify", json.dumps(options)).stdout)
    content = found.repos[REPO]
    assert content.unverified and not content.bad and not content.verified


def test_doctor_probe_repeats_a_clean_verdict_without_python_until_a_file_changes(tmp_path: Path) -> None:
    """models.content's probe, run as a node runs it (HOME holds the cache): once a run found everything good,
    the next ones print that verdict without starting Python, for as long as find lists the same repos and
    the same cache file; an empty listing never matches; a byte changed in place (same size, mtime put back:
    ctime still moves) runs the node program again, which names the blob and forgets the verdict."""
    home = tmp_path / "home"
    hub = home / "hf" / "hub"
    files = make_repo(hub, {"model.safetensors": 1 << 20, "config.json": 300})
    link_snapshot(hub, files)
    command = models.content("~/hf", ("org/model",), 20.0).command.text
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    (fake / "python3").write_text(f"#!/bin/sh\ntouch {tmp_path}/python-started\nexit 99\n")
    (fake / "python3").chmod(0o755)
    real = Path(sys.executable).parent

    def probe(path: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60,
                              env={"HOME": str(home), "PATH": f"{path}:/usr/bin:/bin"})

    for _ in range(2):  # the first run writes the cache of verified blobs, the second finds it unchanged
        assert models.parse_content(probe(f"{real}").stdout).of("org/model").verified
    again = probe(f"{fake}:{real}")
    assert again.returncode == 0 and not (tmp_path / "python-started").exists(), again.stderr
    found = models.parse_content(again.stdout)
    assert found.of("org/model").verified and found.of("org/model").blobs == 2 and found.hashed_bytes == 0
    (fake / "find").write_text("#!/bin/sh\nexit 1\n")  # a find that lists nothing (no -printf): never a match
    (fake / "find").chmod(0o755)
    assert probe(f"{fake}:{real}").returncode == 99 and (tmp_path / "python-started").exists()
    (fake / "find").unlink()
    (tmp_path / "python-started").unlink()

    shard = hub / REPO / "blobs" / files["model.safetensors"][0]
    before = shard.stat()
    with shard.open("r+b") as handle:
        handle.seek(10)
        byte = handle.read(1)[0]
        handle.seek(10)
        handle.write(bytes([byte ^ 1]))
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert probe(f"{fake}:{real}").returncode == 99 and (tmp_path / "python-started").exists()
    bad = models.parse_content(probe(f"{real}").stdout).of("org/model").bad
    assert list(bad) == [files["model.safetensors"][0]]
    assert not (home / ".sparkpair" / "state" / "verified-result").exists()
