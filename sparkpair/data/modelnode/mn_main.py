"""sparkpair's program on a node for the models: verify blobs, send and receive them over the QSFP twins.

Shipped as package data (the mn_*.py modules here) and run with the node's own python3 as
`python3 -c BOOTSTRAP COMMAND ...`: the bootstrap (`sparkpair.probes.models.node_program`) carries
every module's source and loads them, so nothing is installed on the node. Never imported by
sparkpair; standard library only (Python 3.8+; DGX OS has 3.12). Commands:

  verify JSON   hash the blobs of the named repos in parallel (an LFS blob's sha256, a git-tracked
                file's git blob sha1, must equal its name) unless the per-node cache says the same
                (path, size, mtime, ctime, inode) was verified before; check every snapshot link.
  recv          (job on stdin, with the one-time secret) listen on the given addresses, accept only
                the given peers that prove the secret, write the chunks they send into partial files,
                verify each whole file, move it into blobs/, link the snapshots (mn_links: only inside
                each snapshot, only after checking every entry of the job); `end` on stdin
                finishes, end of stdin aborts (whole, verified files are kept; partial ones removed).
  send          (job on stdin) send the files as chunks over several streams per twin, largest file
                first, a failed stream's chunk going to another; raw TCP or `ssh -W` per stream.
  watch JSON    print the bytes under the given blob directories every second (download progress).

Output: one record per line, `KIND JSON` (progress, listening, result, note). Never prints the secret.
"""

import json
import sys


def main(argv):
    """Run one command; each imports only its own modules (the bootstrap loaded no others, see
    sparkpair.probes.models.NODE_NEEDS)."""
    command = argv[1] if len(argv) > 1 else ""
    if command in ("verify", "watch"):
        from mn_blobs import verify, watch
        (verify if command == "verify" else watch)(json.loads(argv[2]))
    elif command == "recv":
        from mn_receive import receive
        receive(json.loads(sys.stdin.readline()))
    elif command == "send":
        from mn_send import Sender
        Sender(json.loads(sys.stdin.readline())).run()
    else:
        sys.stderr.write("usage: python3 -S -c PROGRAM verify JSON | recv | send | watch JSON (PROGRAM: sparkpair's "
                         "model node program, sparkpair/data/modelnode)\n")
        return 2
    return 0
