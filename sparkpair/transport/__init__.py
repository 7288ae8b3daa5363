"""How sparkpair talks to nodes: SSH (paramiko), Docker and HTTP over that one connection.

Holds `shell` (commands, quoting), `ssh` (one verified connection per node), `tcp` (the socket
under it: Nagle off, quick ACKs), `lines` (output cut into lines), `pair` (both nodes in parallel,
`PairResult`), `docker` (Docker actions through the docker CLI over that same connection), `lock`
(one changing run per pair), `httpio` (every HTTP request: one deadline, a byte cap on the answer)
and `jsonfields` (typed reads of a JSON answer: a malformed one is one ShapeError). The only
package that imports paramiko, runs docker or speaks HTTP, and the only place a value is put into a
remote shell. Takes plain
connection parameters (`SshTarget`); imports nothing of sparkpair but `errors` and `paths`.
"""

from sparkpair.transport.pair import Pair, PairResult
from sparkpair.transport.shell import PATH_PREFIX, Command, Shell, command_text
from sparkpair.transport.ssh import (
    TIMED_OUT,
    CommandResult,
    NodeConnection,
    SshTarget,
    fingerprint,
    known_hosts_name,
)

__all__ = ["PATH_PREFIX", "TIMED_OUT", "Command", "CommandResult", "NodeConnection", "Pair", "PairResult", "Shell", "SshTarget",
           "command_text", "fingerprint", "known_hosts_name"]
