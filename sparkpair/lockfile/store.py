"""The lock file on the operator's machine: read capped and without following a link, written whole.

Default place: `sparkpair.lock` beside the inventory (`default_path`); `--lock PATH` names another.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

from sparkpair.errors import SparkpairError, UsageError
from sparkpair.lockfile.record import LOCK_CAP, Lock

LOCK_NAME = "sparkpair.lock"


def default_path(inventory_path: str | Path) -> Path:
    """Where the lock of the pair this inventory describes lives: beside the inventory."""
    return Path(inventory_path).parent / LOCK_NAME


def read_lock(path: Path) -> Lock | None:
    """The lock at path; None when there is no file there. UsageError (one line naming path and the problem)
    for a link, something that is not a regular file, a file over LOCK_CAP or one that is not a lock."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as error:
        why = "a symbolic link (not followed)" if error.errno == errno.ELOOP else error.strerror or str(error)
        raise UsageError(f"cannot read the lock {path}: {why}", hint="point --lock at the lock file itself") from None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise UsageError(f"the lock {path} is not a regular file", hint="point --lock at a lock file")
        with os.fdopen(descriptor, "rb", closefd=False) as handle:
            raw = handle.read(LOCK_CAP + 1)
    except OSError as error:
        raise UsageError(f"cannot read the lock {path}: {error.strerror or error}",
                         hint="point --lock at the lock file itself") from None
    finally:
        os.close(descriptor)
    return Lock.from_json(raw, str(path))


def write_lock(path: Path, lock: Lock) -> None:
    """Write lock to path: a new 0600 file beside it (O_EXCL, O_NOFOLLOW) renamed over it, so a reader sees the
    old lock or the new one whole and a link placed at path is replaced, never written through."""
    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        descriptor = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                handle.write(lock.to_json())
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, path)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
    except OSError as error:
        raise SparkpairError(f"cannot write the lock {path}: {error.strerror or error}",
                             hint="make its directory writable, or write it elsewhere with --lock PATH") from None
