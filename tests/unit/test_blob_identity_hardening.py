"""A blob swapped or written while it is verified is never recorded as verified (issue 33, item 2).

Anyone who can write the HF cache (the engine container mounts it read-write as root) could wait until a blob
had been hashed, then put another file of the same size at its path while a larger blob still hashed: the
verified-blobs record was taken after all hashing had ended, from whatever was at the path then, so every later
verify reported the swapped blob cached and good. Now each file is recorded as it finishes, by the identity
(device, inode, size, mtime_ns, ctime_ns) of the descriptor that was read. The copy's receiver renamed a part
file by name after verifying it: a part file swapped in between landed in blobs/ as verified; now what lands must
be the very inode that was hashed.

The node program runs here in-process (its modules are standard-library Python), with its digest function
wrapped to do the swap at the worst moment: right after the hash, before the record.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

MODELNODE = Path(__file__).resolve().parents[2] / "sparkpair" / "data" / "modelnode"
REPO = "models--org--model"


@pytest.fixture()
def node_program(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[object, object]]:
    monkeypatch.syspath_prepend(str(MODELNODE))
    import mn_blobs
    import mn_receive

    yield mn_blobs, mn_receive
    for name in ("mn_blobs", "mn_receive", "mn_links", "mn_wire"):
        sys.modules.pop(name, None)


def _blob(hub: Path, content: bytes) -> Path:
    path = hub / REPO / "blobs" / hashlib.sha256(content).hexdigest()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def _swapping(module: object, target: Path, how: str) -> Callable[[int, str], str]:
    """fd_digest that hashes, then puts a same-size other content at target (a new file renamed over it, or a
    write into the same inode) once, before the caller records anything."""
    real = module.fd_digest  # type: ignore[attr-defined]
    done: list[bool] = []

    def digest(fd: int, name: str) -> str:
        found = real(fd, name)
        if target.name.startswith(name) and not done:
            done.append(True)
            size = target.stat().st_size
            if how == "renamed over it":
                other = target.with_name("planted")
                other.write_bytes(b"\0" * size)
                os.replace(other, target)
            else:
                with target.open("r+b") as handle:
                    handle.write(b"\0" * size)
        return found

    return digest


def _verify(mn_blobs: object, hub: Path, cache: Path) -> dict:
    out: list[str] = []
    mn_blobs.emit = lambda kind, value: out.append(f"{kind} {json.dumps(value)}")  # type: ignore[attr-defined]
    mn_blobs.verify({"hub": str(hub), "repos": [REPO], "cache": str(cache), "workers": 2})  # type: ignore[attr-defined]
    return json.loads(next(line for line in out if line.startswith("result ")).split(" ", 1)[1])


@pytest.mark.parametrize("how", ["renamed over it", "written in place"])
def test_a_blob_swapped_while_another_still_hashes_is_not_recorded_as_verified(
        tmp_path: Path, node_program: tuple[object, object], monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    mn_blobs, _ = node_program
    hub, cache = tmp_path / "hub", tmp_path / "verified.json"
    small = _blob(hub, os.urandom(64 << 10))
    _blob(hub, os.urandom(4 << 20))  # the large one, still hashing on the other worker
    monkeypatch.setattr(mn_blobs, "fd_digest", _swapping(mn_blobs, small, how))
    first = _verify(mn_blobs, hub, cache)
    assert first["repos"][REPO]["bad"] == {}  # what was read was good
    monkeypatch.setattr(mn_blobs, "fd_digest", _swapping(mn_blobs, tmp_path / "nothing", how))
    second = _verify(mn_blobs, hub, cache)
    assert list(second["repos"][REPO]["bad"]) == [small.name], second  # hashed again, found swapped
    assert second["hashed_bytes"] == small.stat().st_size


def test_a_blob_written_while_it_is_read_is_unverified_not_recorded(
        tmp_path: Path, node_program: tuple[object, object], monkeypatch: pytest.MonkeyPatch) -> None:
    mn_blobs, _ = node_program
    hub, cache = tmp_path / "hub", tmp_path / "verified.json"
    blob = _blob(hub, os.urandom(64 << 10))
    real = mn_blobs.fd_digest  # type: ignore[attr-defined]

    def written_meanwhile(fd: int, name: str) -> str:
        found = real(fd, name)
        with blob.open("r+b") as handle:  # the same bytes again: only its mtime and ctime tell
            handle.write(blob.read_bytes()[:1])
        return found

    monkeypatch.setattr(mn_blobs, "fd_digest", written_meanwhile)
    assert _verify(mn_blobs, hub, cache)["repos"][REPO]["unverified"] == [blob.name]
    assert json.loads(cache.read_text()) == {} if cache.exists() else True


def test_a_blob_that_is_a_fifo_or_a_symlink_is_refused_without_waiting(
        tmp_path: Path, node_program: tuple[object, object]) -> None:
    mn_blobs, _ = node_program
    hub, cache = tmp_path / "hub", tmp_path / "verified.json"
    good = _blob(hub, b"x" * 100)
    fifo = good.with_name("a" * 64)
    os.mkfifo(fifo)
    link = good.with_name("b" * 64)
    link.symlink_to(good)
    signal.alarm(30)  # opening a FIFO for reading waits for a writer: before, verify waited forever
    try:
        bad = _verify(mn_blobs, hub, cache)["repos"][REPO]["bad"]
    finally:
        signal.alarm(0)
    assert set(bad) == {fifo.name, link.name}, bad
    assert all(reason.startswith("unreadable") for reason in bad.values()), bad


def test_the_receiver_keeps_only_the_part_file_it_hashed(
        tmp_path: Path, node_program: tuple[object, object], monkeypatch: pytest.MonkeyPatch) -> None:
    """A part file renamed over by another of the same size after its hash: the copy reports it bad, nothing stays
    under the blob's name and nothing is recorded."""
    _, mn_receive = node_program
    content = os.urandom(256 << 10)
    name = hashlib.sha256(content).hexdigest()
    job = {"secret": "11" * 32, "hub": str(tmp_path / "hub"), "cache": str(tmp_path / "verified.json"),
           "files": [{"id": 0, "repo": REPO, "blob": name, "size": len(content)}], "listen": [], "peers": []}
    receiver = mn_receive.Receiver(job)  # type: ignore[attr-defined]
    entry = receiver.files[0]
    fd = receiver.open_part(entry, os.O_WRONLY)
    os.pwrite(fd, content, 0)
    os.close(fd)
    blobs = tmp_path / "hub" / REPO / "blobs"
    monkeypatch.setattr(mn_receive, "fd_digest", _swapping(mn_receive, blobs / (name + mn_receive.PART),
                                                           "renamed over it"))
    assert receiver.settle(entry) is False
    assert not (blobs / name).exists() and receiver.cache.entries == {}
    receiver.cache.save()
    assert not (tmp_path / "verified.json").exists() or json.loads((tmp_path / "verified.json").read_text()) == {}


def test_the_receiver_records_what_it_hashed(tmp_path: Path, node_program: tuple[object, object]) -> None:
    _, mn_receive = node_program
    content = os.urandom(256 << 10)
    name = hashlib.sha256(content).hexdigest()
    job = {"secret": "11" * 32, "hub": str(tmp_path / "hub"), "cache": str(tmp_path / "verified.json"),
           "files": [{"id": 0, "repo": REPO, "blob": name, "size": len(content)}], "listen": [], "peers": []}
    receiver = mn_receive.Receiver(job)  # type: ignore[attr-defined]
    fd = receiver.open_part(receiver.files[0], os.O_WRONLY)
    os.pwrite(fd, content, 0)
    os.close(fd)
    assert receiver.settle(receiver.files[0]) is True
    blob = tmp_path / "hub" / REPO / "blobs" / name
    assert blob.read_bytes() == content and receiver.cache.holds(str(blob))
