"""The lock: what a successful launch ran on each node, as data, and its comparison with what runs now.

`record` holds the typed `Lock` (per node: image, runtime, driver, CUDA, kernel, firmware, MTU, netplan,
the NCCL/UCX/MPI environment, rendered files, model revisions and file hashes; for the pair: sparkpair's
version, the inventory's hash, profile, runtime, image) and its stable JSON, read as hostile input;
`compare` holds `Difference` (node, field, locked, found, fix), the comparison with a lock and the two
nodes side by side; `store` reads and writes the lock file (size cap, O_NOFOLLOW, O_EXCL temp and rename).
Pure: the flow that gathers a lock from the pair is `engine.lockflow`. May import: only the layers below its own
in pyproject.toml's `[tool.importlinter]` (the leaf modules: `sparkpair.errors`).
"""

from __future__ import annotations

from sparkpair.lockfile.record import FORMAT, Lock, ModelLock, NodeLock

__all__ = ["FORMAT", "Lock", "ModelLock", "NodeLock"]
