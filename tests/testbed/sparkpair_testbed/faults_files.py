"""Faults in what a node stores: the engine image, the model cache, the disk.

Each one changes the node for real (an image removed from its engine, a
directory moved away or chowned, a full filesystem mounted); apply(node,
options) returns what heal(node, data, others) needs to restore it exactly.
"""
from __future__ import annotations

import json

from .daemons import docker_running
from .hostexec import CommandError, node_run, node_sh
from .image import load_image, local_image_id
from .layout import HF_CACHE, IMAGE_TAG, QWEN_REPO_DIR, USER, Node

# Run inside the node with the system python: ownership of every path under a tree.
OWNERS_SCRIPT = """
import json, os, sys
root = sys.argv[1]
out = [[root, os.lstat(root).st_uid, os.lstat(root).st_gid]]
for base, dirs, files in os.walk(root):
    for name in dirs + files:
        path = os.path.join(base, name)
        st = os.lstat(path)
        out.append([path, st.st_uid, st.st_gid])
print(json.dumps(out))
"""
RESTORE_OWNERS_SCRIPT = """
import json, os, sys
for path, uid, gid in json.load(sys.stdin):
    if os.path.lexists(path):
        os.lchown(path, uid, gid)
"""


def require_engine(node: Node) -> None:
    """Image faults need the node's Docker engine running."""
    if not docker_running(node):
        raise CommandError(f"{node.name}'s Docker engine is not running (heal docker-down first)")


def image_missing_apply(node: Node, options) -> dict:
    """Remove the engine image from the node's Docker engine."""
    require_engine(node)
    if not local_image_id(node):
        raise CommandError(f"{node.name} has no {IMAGE_TAG} to remove")
    node_run(node, ["docker", "rmi", "-f", IMAGE_TAG])
    return {}


def image_restore(node: Node, data, others) -> None:
    """Load the cached image back into the node's engine."""
    load_image(node)


def image_mismatch_apply(node: Node, options) -> dict:
    """Build a different image under the same tag on the node (the original stays, untagged)."""
    require_engine(node)
    original = local_image_id(node)
    if not original:
        raise CommandError(f"{node.name} has no {IMAGE_TAG} to replace")
    dockerfile = (f"FROM {IMAGE_TAG}\n"
                  "RUN echo 'not the image the head node runs' > /etc/sparkpair-testbed-mismatch\n"
                  "LABEL sparkpair-testbed.mismatch=1\n")
    node_run(node, ["docker", "build", "-q", "--network", "none", "-t", IMAGE_TAG, "-"],
             input=dockerfile, timeout=300)
    return {"original": original, "mismatch": local_image_id(node)}


def image_mismatch_heal(node: Node, data, others) -> None:
    """Point the tag at the original image again and drop the impostor."""
    if node_run(node, ["docker", "tag", data["original"], IMAGE_TAG], check=False).returncode:
        load_image(node)
    if data["mismatch"] and data["mismatch"] != local_image_id(node):
        node_run(node, ["docker", "rmi", data["mismatch"]], check=False)


def model_apply(node: Node, options) -> dict:
    """Move the target model out of the node's HF cache (to the node dir, same filesystem)."""
    source = HF_CACHE / "hub" / QWEN_REPO_DIR
    stash = node.dir / "stash-model"
    present = node_run(node, ["test", "-e", str(source)], check=False).returncode == 0
    if present:
        node_sh(node, f"rm -rf '{stash}' && mv '{source}' '{stash}'")
    return {"present": present, "source": str(source), "stash": str(stash)}


def model_heal(node: Node, data, others) -> None:
    """Move the model back where it was."""
    if data["present"]:
        node_sh(node, f"rm -rf '{data['source']}' && mv '{data['stash']}' '{data['source']}'")


def hf_root_apply(node: Node, options) -> dict:
    """chown -R root the node's HF cache (made if missing), recording every owner."""
    created = node_run(node, ["test", "-d", str(HF_CACHE)], check=False).returncode != 0
    if created:
        node_run(node, ["mkdir", "-p", str(HF_CACHE)])
    owners = json.loads(node_run(node, ["/usr/bin/python3", "-c", OWNERS_SCRIPT, str(HF_CACHE)]).stdout)
    node_run(node, ["chown", "-R", "root:root", str(HF_CACHE)])
    return {"created": created, "owners": owners}


def hf_root_heal(node: Node, data, others) -> None:
    """Give every path its recorded owner back (and remove the dir if the fault made it)."""
    if data["created"]:
        node_run(node, ["rm", "-rf", str(HF_CACHE)])
        return
    node_run(node, ["/usr/bin/python3", "-c", RESTORE_OWNERS_SCRIPT], input=json.dumps(data["owners"]))


def disk_full_apply(node: Node, options) -> dict:
    """Put the HF cache on a tiny tmpfs that is full: its content copied in, then filled up.

    The real directory stays untouched underneath and reappears on heal."""
    hf = str(HF_CACHE)
    node_run(node, ["mkdir", "-p", hf], user=USER)
    used_kib = int(node_run(node, ["du", "-sk", hf]).stdout.split()[0])
    size_kib = used_kib + 1024
    under = "/run/sparkpair-testbed/hf-underneath"
    script = f"""set -e
mkdir -p {under}
mount --bind {hf} {under}
mount -t tmpfs -o size={size_kib}k,mode=755,uid=$(id -u {USER}),gid=$(id -g {USER}) sparkpair-disk-full {hf}
cp -a {under}/. {hf}/
umount {under}
rmdir {under}
dd if=/dev/zero of={hf}/.filler bs=64k 2>/dev/null || true
"""
    node_sh(node, script)
    return {"mount": hf, "size_kib": size_kib}


def disk_full_heal(node: Node, data, others) -> None:
    """Unmount the full tmpfs: the untouched HF cache is back."""
    mounts = node_run(node, ["findmnt", "-n", "-o", "SOURCE", data["mount"]], check=False).stdout
    if "sparkpair-disk-full" in mounts:
        node_run(node, ["umount", "-l", data["mount"]])
