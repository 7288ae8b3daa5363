"""The copy's receiver on a node with a hostile cache or a busy link (issue 24, item 2 and the connection bound).

A symlink planted where a partial file goes (`blobs/<hash>.sparkpair-part`, in a cache the engine container
can write) is removed, not written through: the partial file is made afresh (O_CREAT|O_EXCL|O_NOFOLLOW, mode
0600) and the file the link named keeps its bytes. The receiver serves at most `max_connections` streams at
once; the others wait their turn (in the listen backlog) instead of each getting a thread.
"""

from __future__ import annotations

import json
import socket
import stat
import subprocess
from pathlib import Path

from test_model_node import REPO, TWINS, Copy, job_files, make_repo, records, start

from sparkpair.engine import modelcopy

MAGIC = b"SPKPAIR1"


def receiver(tmp_path: Path, files: dict[str, tuple[str, int]], **extra: object) -> tuple[subprocess.Popen[str], list]:
    """A receiver listening on the loopback twins with files to expect: (process, [[address, port], ...])."""
    process = start("recv")
    job = {"secret": "11" * 32, "listen": [[twin, 0] for twin in TWINS], "peers": TWINS, "hub": str(tmp_path / "b"),
           "cache": "", "files": job_files(files), "repos": {}, **extra}
    process.stdin.write(json.dumps(job) + "\n")  # type: ignore[union-attr]
    process.stdin.flush()  # type: ignore[union-attr]
    line = process.stdout.readline()  # type: ignore[union-attr]
    assert line.startswith("listening "), process.stderr.read()  # type: ignore[union-attr]
    return process, json.loads(line.split(" ", 1)[1])["addresses"]


def test_a_planted_symlink_at_a_partial_file_is_replaced_not_written_through(tmp_path: Path) -> None:
    files = make_repo(tmp_path / "a", {"model.safetensors": 1 << 20})
    blob = files["model.safetensors"][0]
    victim = tmp_path / "authorized_keys"
    victim.write_text("ssh-ed25519 AAAA owner\n")
    blobs = tmp_path / "b" / REPO / "blobs"
    blobs.mkdir(parents=True)
    (blobs / f"{blob}.sparkpair-part").symlink_to(victim)
    process, _ = receiver(tmp_path, files)
    part = (blobs / f"{blob}.sparkpair-part").lstat()
    assert stat.S_ISREG(part.st_mode) and stat.S_IMODE(part.st_mode) == 0o600 and part.st_size == 1 << 20
    out, _ = process.communicate("abort\n", timeout=60)
    assert records(out, "result")[0]["missing"] == [blob]
    assert victim.read_text() == "ssh-ed25519 AAAA owner\n" and not victim.is_symlink()
    assert not list(blobs.iterdir())


def test_a_whole_copy_through_a_planted_symlink_lands_in_blobs_readable_as_hf_makes_it(tmp_path: Path) -> None:
    files = make_repo(tmp_path / "a", {"model.safetensors": 1 << 20})
    blob = files["model.safetensors"][0]
    victim = tmp_path / "victim"
    victim.write_text("keep")
    blobs = tmp_path / "b" / REPO / "blobs"
    blobs.mkdir(parents=True)
    (blobs / f"{blob}.sparkpair-part").symlink_to(victim)
    copy = Copy(tmp_path, files)
    assert copy.sent()["ok"]
    assert copy.received()["verified"] == [blob]
    landed = (blobs / blob).lstat()
    assert stat.S_ISREG(landed.st_mode) and stat.S_IMODE(landed.st_mode) & 0o044 == 0o044  # others read it, as HF's
    assert victim.read_text() == "keep"


def hello(connection: socket.socket, seconds: float) -> bytes:
    """What the receiver says first on a connection within seconds (b"" when it says nothing: not served)."""
    connection.settimeout(seconds)
    try:
        return connection.recv(len(MAGIC) + 16)
    except TimeoutError:
        return b""


def test_the_receiver_serves_at_most_max_connections_and_the_next_waits_its_turn(tmp_path: Path) -> None:
    files = make_repo(tmp_path / "a", {"model.safetensors": 1 << 10})
    process, addresses = receiver(tmp_path, files, max_connections=2)
    address, port = addresses[0]
    streams = [socket.create_connection((address, port), timeout=5) for _ in range(3)]
    try:
        served = [hello(stream, 5.0) for stream in streams[:2]]
        assert all(reply.startswith(MAGIC) for reply in served)
        assert hello(streams[2], 1.0) == b""           # a third is not served while two are
        streams[0].close()                             # one ends: the waiting one is served now
        assert hello(streams[2], 10.0).startswith(MAGIC)
    finally:
        for stream in streams:
            stream.close()
        out, _ = process.communicate("abort\n", timeout=60)
    assert records(out, "result")[0]["missing"] == [files["model.safetensors"][0]]


def test_a_connection_that_never_proves_the_secret_gives_its_slot_up(tmp_path: Path) -> None:
    """A peer that connects and says nothing holds a slot for the handshake's deadline only."""
    files = make_repo(tmp_path / "a", {"model.safetensors": 1 << 10})
    process, addresses = receiver(tmp_path, files, max_connections=1, handshake_timeout=1.0)
    address, port = addresses[0]
    silent = socket.create_connection((address, port), timeout=5)
    waiting = socket.create_connection((address, port), timeout=5)
    try:
        assert hello(silent, 5.0).startswith(MAGIC)
        assert hello(waiting, 10.0).startswith(MAGIC)  # served once the silent one's deadline passed
        silent.settimeout(5.0)
        assert silent.recv(1) == b""                    # closed by the receiver (a timeout would raise)
    finally:
        silent.close()
        waiting.close()
        process.communicate("abort\n", timeout=60)


def test_the_copy_gives_the_receiver_room_for_every_stream_and_a_reconnect(example_inventory_path: Path) -> None:
    from sparkpair.inventory import read_inventory
    inventory = read_inventory(example_inventory_path)
    source, dest = (node.name for node in inventory.nodes)
    for transport in modelcopy.TRANSPORTS:
        job = modelcopy.receiver_job(inventory, source, dest, [], {}, transport, "00" * 32)
        sender = modelcopy.sender_job(inventory, source, dest, [], transport, "00" * 32,
                                      [[address, 1] for address, _ in job["listen"]])
        streams = len(sender["targets"]) * sender["streams"]
        assert streams >= 2 and job["max_connections"] >= 2 * streams
