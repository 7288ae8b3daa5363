"""A node's file read over SFTP as hostile input: at most a byte cap, within one deadline."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sparkpair.errors import RemoteCommandError

if TYPE_CHECKING:
    import paramiko

READ_CAP = 16 << 20  # the most a read takes of a node's file: launch state, journals, configs are far smaller
READ_TIMEOUT_S = 30.0
CHUNK = 1 << 16


def read_capped(sftp: paramiko.SFTPClient, node: str, path: str, cap: int, timeout: float) -> bytes | None:
    """path's content on node, or None when it does not exist; RemoteCommandError naming node and path when the
    file holds more than cap bytes or its bytes do not all come within timeout seconds. The session's own timeout
    is put back afterwards."""
    channel = sftp.get_channel()
    kept = channel.gettimeout() if channel is not None else None
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    taken = 0
    try:
        if channel is not None:
            channel.settimeout(timeout)
        with sftp.open(path, "rb") as handle:
            while chunk := handle.read(min(CHUNK, cap + 1 - taken)):
                chunks.append(bytes(chunk))
                taken += len(chunk)
                if taken > cap:
                    raise RemoteCommandError(node, f"read {path}", 1,
                                             f"{path} is larger than {cap} bytes; sparkpair reads no more")
                if time.monotonic() > deadline:
                    raise TimeoutError
    except FileNotFoundError:
        return None
    except TimeoutError:
        raise RemoteCommandError(node, f"read {path}", 1, f"no whole answer within {timeout:g} s") from None
    finally:
        if channel is not None:
            channel.settimeout(kept)
    return b"".join(chunks)
