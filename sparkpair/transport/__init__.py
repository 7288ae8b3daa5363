"""How sparkpair talks to nodes: SSH (paramiko), Docker and HTTP over that one connection.

Holds `node` (`Node`: what every flow asks of a node's connection, a protocol; tests satisfy it with
scripted nodes), `shell` (commands, quoting), `root` (every root action: one verb of sparkpair's root
helper, `Root`), `ssh` (one verified connection per node, the real `Node`), `sftpread` (a node's file
read with a byte cap and a deadline), `tcp` (the socket under it: Nagle off, quick ACKs), `lines` (output
cut into lines), `session` (a node
program on its own SSH channel), `pair` (both nodes in parallel, `PairResult`), `docker_cli` (Docker
actions: run, exec, rm through the docker CLI over that same connection), `lock` (one changing run per
pair) and `httpio` (every HTTP request: one deadline, a byte cap on the answer; its answers are read typed
with the leaf module `sparkpair.jsonfields`). The only package that imports paramiko or
speaks HTTP, and the only place a value is put into a remote shell (`Shell`). Docker actions run through
`docker_cli`; Docker facts are probes like any other (`probes.docker` asks the Engine API with curl
inside the batched probe round). Takes plain connection parameters (`SshTarget`), never the inventory.
May import: only the layers below its own in pyproject.toml's `[tool.importlinter]` (`errors`, `paths`).
"""

from sparkpair.transport import root
from sparkpair.transport.node import Node
from sparkpair.transport.pair import Pair, PairResult
from sparkpair.transport.root import HELPER_PATH, Root
from sparkpair.transport.shell import PATH_PREFIX, Command, Shell, command_text, shown_text
from sparkpair.transport.ssh import (
    TIMED_OUT,
    CommandResult,
    NodeConnection,
    SshTarget,
    fingerprint,
    known_hosts_name,
)

__all__ = ["HELPER_PATH", "PATH_PREFIX", "TIMED_OUT", "Command", "CommandResult", "Node", "NodeConnection", "Pair",
           "PairResult", "Root", "Shell", "SshTarget", "root",
           "command_text", "shown_text", "fingerprint", "known_hosts_name"]
