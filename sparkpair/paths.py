"""Every path sparkpair uses on a node and inside the engine container, in one place.

Paths on a node starting with `~/` are under the login user's home; absolute ones are system
paths (written with sudo). Container paths are mounted from the node. A leaf module: it imports
nothing, so every package may use it, and the tests hand these same values to the testbed to
say what a reset must remove.
"""

from __future__ import annotations

# On each node, under the login user's home.
STATE_DIR = "~/.sparkpair"
CONFIG_DIR = f"{STATE_DIR}/config"                 # rendered engine files, mounted read-only
SECRETS_DIR = f"{STATE_DIR}/secrets"               # hf_token (0600), mounted read-only
JOURNAL_DIR = f"{STATE_DIR}/journal"               # what each apply did, for rollback and --restore --last
USER_BACKUPS = f"{STATE_DIR}/backups"              # user files replaced by an apply
USER_FIRST_TOUCH = f"{STATE_DIR}/first-touch"      # user files as they were before sparkpair first changed them,
                                                   # and the QSFP twins then (twins.json): for --restore
LAUNCH_STATE = f"{STATE_DIR}/state/launch.json"    # the launch's typed state, on the head
FAILED_LAUNCH_LOGS = f"{STATE_DIR}/logs/failed-launch"  # the ranks' output of the last failed launch, kept on
                                                   # the head when its containers are removed (sparkpair bundle)
DRAFT_STATE_DIR = f"{STATE_DIR}/state/drafts"      # train-draft's record per trained draft, on the head
DRAFT_WORK_DIR = f"{STATE_DIR}/drafts"             # train-draft's data, training output and staging, on the head
GUARD_DIR = f"{STATE_DIR}/guard"                   # the memory guard beside a running engine: its program, pid,
                                                   # settings, log and, once it stopped the engine, stop.json
LOCK = f"{STATE_DIR}/lock"                         # one changing sparkpair run per pair, on the head
DOCTOR_DIR = f"{STATE_DIR}/doctor"                 # doctor --deep's private copy of the config
VERIFIED_BLOBS = f"{STATE_DIR}/state/verified-blobs.json"  # blobs whose content was verified: path -> stat
VERIFIED_RESULT = f"{STATE_DIR}/state/verified-result"  # doctor's last clean verdict, under the listing it held for
NODE_KEY = "~/.ssh/id_ed25519"                     # the node's own key for node-to-node SSH (mpirun)
KNOWN_HOSTS = "~/.ssh/known_hosts"
AUTHORIZED_KEYS = "~/.ssh/authorized_keys"

# On each node, system paths (sudo).
NETPLAN_FILE = "40-sparkpair-cx7.yaml"
NETPLAN_PATH = f"/etc/netplan/{NETPLAN_FILE}"
SYSTEM_BACKUPS = "/var/backups/sparkpair"          # system files replaced by an apply
SYSTEM_FIRST_TOUCH = f"{SYSTEM_BACKUPS}/first-touch"  # system files before sparkpair first changed them (root, 0700)
WATCHDOG_DIR = "/run/sparkpair-watchdog"           # setup-network's watchdog while armed: its script, the files
                                                   # before the apply, its deadline (root; gone once it ends)
WATCHDOG_SCRIPT = f"{WATCHDOG_DIR}/watchdog"       # `sudo sh WATCHDOG_SCRIPT confirm|revert` by hand
WATCHDOG_LOG = "/var/log/sparkpair-watchdog.log"   # what every watchdog did (root 0644, kept)
WATCHDOG_UNIT = "sparkpair-watchdog"               # transient systemd timer/service name prefix (systemd nodes)

# Inside the engine container (all mounted from the node).
CONTAINER_CONFIG = "/sparkpair/config"
CONTAINER_SECRETS = "/sparkpair/secrets"
CONTAINER_SSH = "/sparkpair/ssh"                   # the node user's ~/.ssh, read-only
CONTAINER_HF_HOME = "/sparkpair/hf"                # the node's HF cache
CONTAINER_HOST_KEY = "/sparkpair/ssh_host_ed25519_key"  # the node's host key, for the in-container sshd
CONTAINER_LOGS = "/var/log/sparkpair"              # mpirun and rank output
CONTAINER_ENGINE_CACHE = "/sparkpair/cache"        # the engine's compile caches (ENGINE_CACHE_VOLUME)
MODEL_LINKS = "sparkpair-models"                   # stable names for snapshots, inside the HF cache
HIDDEN_STATES = "sparkpair-hidden"                 # train-draft's offline hidden states as the engine writes them,
                                                   # inside the HF cache (the engine container's one writable mount
                                                   # from the user's home)
# On each node, a Docker volume (not a path): what the engines compile at a start (vLLM's model inspections and
# torch.compile artifacts, Inductor's kernels, the Triton compiler's), kept across containers so the next start
# loads them instead; Docker owns it, so nothing root-owned lands in the user's home. `docker volume rm` drops it.
ENGINE_CACHE_VOLUME = "sparkpair-engine-cache"


def node_key_comment(node: str) -> str:
    """The comment of the key sparkpair makes on a node (how its authorized_keys lines are recognised)."""
    return f"sparkpair@{node}"


def under_home(path: str, home: str) -> str:
    """A node path with a leading `~/` made absolute under home; other paths unchanged."""
    return home + path[1:] if path.startswith("~/") else path
