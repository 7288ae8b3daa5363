"""Whether `hf` can reach the hub: the revision lookup huggingface_hub makes before any download.

Only when ``HF_ENDPOINT`` names a hub (the testbed's stand-in hub, ``hub_server``): then the
lookup is a real HTTP request and an unreachable or absent hub fails like the real client.
Without it the simulator makes no network request at all (nothing is fetched; see README).
"""

import json
import urllib.error
import urllib.parse
import urllib.request

from .hf_download import HubError

TIMEOUT_S = 10


def reachable(env, repo_id, revision, token):
    """False when HF_ENDPOINT is set and nothing answers there; True otherwise (any HTTP answer)."""
    base = (env.get("HF_ENDPOINT") or "").rstrip("/")
    if not base:
        return True
    url = f"{base}/api/models/{repo_id}/revision/{urllib.parse.quote(revision or 'main', safe='')}"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            json.loads(response.read() or b"{}")
    except urllib.error.HTTPError:
        return True  # the hub answered (401, 404, ...): check_access says what that means
    except (OSError, ValueError):
        return False
    return True


def unreachable_error():
    """huggingface_hub's error when the hub cannot be reached and no snapshot is cached."""
    return HubError(
        "huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate the files on "
        "the Hub and we cannot find the appropriate snapshot folder for the specified revision on the local disk. "
        "Please check your internet connection and try again.")
