"""The stand-in hub on loopback, asked by the real huggingface_hub (the version of the pair's vLLM and Triton
images, a test requirement): `hf download REPO` of a folder repo into an empty cache fetches every file whole
with the planted blob names and commit; into a cache the testbed planted (the head's, as `scripts/testbed vllm`
leaves it) or one the client filled, it fetches no byte. Synthetic repos answer as they did; paths are checked."""

import contextlib
import getpass
import hashlib
import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from simengine import hub_repos, hub_server, synthetic_model
from sparkpair_testbed import vllm_models

REPO = "Qwen/Qwen3-235B-A22B-GPTQ-Int4"
REAL_HF = Path(sys.executable).parent / "hf"          # huggingface_hub's own CLI, not the stand-in's
SHARD = bytes(range(256)) * 2048                        # 512 KiB: an LFS weight file


@pytest.fixture
def folder(tmp_path):
    """A small generated repo: two LFS files (weights, tokenizer.json) and two git files."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "model.safetensors").write_bytes(SHARD)
    (source / "tokenizer.json").write_text('{"model": {}}')
    (source / "config.json").write_text(json.dumps({"architectures": ["Qwen3MoeForCausalLM"]}))
    (source / "README.md").write_text("tiny\n")
    return source


class Recording(hub_server.HubHandler):
    """The hub, noting each request (method, path) on its server."""

    def _route(self, body):
        self.server.requests.append((self.command, self.path))
        super()._route(body)


@contextlib.contextmanager
def hub(catalogue=None):
    """The hub on a loopback port for the block: (its URL, the requests it got)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recording)
    server.daemon_threads = True
    server.catalogue = hub_repos.Catalogue(catalogue) if catalogue else None
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.requests
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def served(tmp_path, folder):
    """The hub serving FOLDER as REPO: (URL, requests)."""
    catalogue = tmp_path / "hub-repos.json"
    hub_repos.write_catalogue(catalogue, {REPO: folder})
    with hub(catalogue) as running:
        yield running


def real_hf_download(url, cache, repo=REPO):
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "HUGGING"))}
    env.update(HF_ENDPOINT=url, HF_HUB_CACHE=str(cache), HF_HOME=str(cache.parent / "hf-home"), HF_HUB_OFFLINE="0",
               HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1", NO_PROXY="127.0.0.1")
    return subprocess.run([str(REAL_HF), "download", repo], capture_output=True, text=True, env=env, timeout=120)


def downloaded_to(done):
    """The snapshot folder `hf download` printed (its `path:` line)."""
    return Path(next(line.split("path: ", 1)[1] for line in done.stdout.splitlines() if "path: " in line))


def asked(requests):
    """The API requests (model info, tree) among REQUESTS (the client also asks /api/agent-harnesses, and takes
    the 404 as no registry)."""
    return [(method, path) for method, path in requests if path.startswith("/api/models/")]


def fetched(requests):
    """The resolve requests (HEAD and GET) among REQUESTS."""
    return [(method, path) for method, path in requests if "/resolve/" in path]


def test_the_real_client_downloads_a_folder_repo_whole_into_an_empty_cache_and_then_fetches_nothing(tmp_path, folder,
                                                                                                     served):
    url, requests = served
    done = real_hf_download(url, tmp_path / "empty")
    assert done.returncode == 0, done.stderr
    commit = vllm_models.commit_of(REPO, vllm_models.repo_files(folder))
    snapshot = tmp_path / "empty" / "models--Qwen--Qwen3-235B-A22B-GPTQ-Int4" / "snapshots" / commit
    assert downloaded_to(done) == snapshot
    planted = vllm_models.plant_repo(tmp_path / "planted", REPO, folder, getpass.getuser())
    assert planted[0] == commit                       # the commit the testbed plants is the hub's sha
    for name in ("model.safetensors", "tokenizer.json", "config.json", "README.md"):
        assert (snapshot / name).read_bytes() == (folder / name).read_bytes()
        assert os.readlink(snapshot / name) == os.readlink(planted[1] / name)   # the same blob names
    assert (snapshot / "model.safetensors").resolve().name == hashlib.sha256(SHARD).hexdigest()
    assert asked(requests) == [("GET", f"/api/models/{REPO}/revision/main"),
                               ("GET", f"/api/models/{REPO}/tree/{commit}?recursive=true&expand=false")]
    assert sorted(fetched(requests)) == sorted((method, f"/{REPO}/resolve/{commit}/{name}")
                                               for name in os.listdir(folder) for method in ("HEAD", "GET"))
    requests.clear()
    again = real_hf_download(url, tmp_path / "empty")           # the cache the client filled: nothing fetched
    assert again.returncode == 0 and downloaded_to(again) == snapshot
    assert fetched(requests) == [] and asked(requests) == [("GET", f"/api/models/{REPO}/revision/main")]  # its tree
    # listing is cached (trees/<commit>.json)


def test_a_cache_the_testbed_planted_is_recognised_and_no_byte_is_fetched(tmp_path, folder, served):
    url, requests = served
    cache = tmp_path / "hub"
    commit, snapshot, _ = vllm_models.plant_repo(cache, REPO, folder, getpass.getuser())
    blobs = {path.name: path.stat().st_mtime_ns for path in (snapshot.parent.parent / "blobs").iterdir()}
    done = real_hf_download(url, cache)
    assert done.returncode == 0, done.stderr
    assert downloaded_to(done) == snapshot
    assert fetched(requests) == [] and len(asked(requests)) == 2        # model info and the tree, nothing else
    assert {path.name: path.stat().st_mtime_ns for path in (snapshot.parent.parent / "blobs").iterdir()} == blobs


def test_a_file_missing_from_the_cache_is_the_only_one_fetched(tmp_path, folder, served):
    url, requests = served
    cache = tmp_path / "hub"
    commit, snapshot, _ = vllm_models.plant_repo(cache, REPO, folder, getpass.getuser())
    (snapshot / "model.safetensors").resolve().unlink()
    (snapshot / "model.safetensors").unlink()
    done = real_hf_download(url, cache)
    assert done.returncode == 0, done.stderr
    assert fetched(requests) == [("HEAD", f"/{REPO}/resolve/{commit}/model.safetensors"),
                                 ("GET", f"/{REPO}/resolve/{commit}/model.safetensors")]
    assert (snapshot / "model.safetensors").read_bytes() == SHARD


def git_sha1(content):
    """git's blob id, computed here (as `git hash-object` does)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def answer(url, method="GET", headers=None):
    """(status, headers, body) of one request."""
    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def test_resolve_carries_the_headers_huggingface_hub_reads(folder, served):
    url, _ = served
    commit = vllm_models.commit_of(REPO, vllm_models.repo_files(folder))
    status, headers, body = answer(f"{url}/{REPO}/resolve/main/model.safetensors", "HEAD")
    assert status == 200 and body == b""
    assert headers["X-Repo-Commit"] == commit and headers["X-Linked-Size"] == str(len(SHARD))
    assert headers["X-Linked-Etag"] == f'"{hashlib.sha256(SHARD).hexdigest()}"'
    config = (folder / "config.json").read_bytes()
    status, headers, body = answer(f"{url}/{REPO}/resolve/{commit}/config.json")
    assert status == 200 and body == config and headers["Content-Length"] == str(len(config))
    assert headers["ETag"] == f'"{hub_repos.git_blob_sha1(config)}"' == f'"{git_sha1(config)}"'
    assert "X-Linked-Etag" not in headers and "X-Linked-Size" not in headers
    status, headers, body = answer(f"{url}/{REPO}/resolve/main/model.safetensors", headers={"Range": "bytes=1000-"})
    assert status == 206 and body == SHARD[1000:] and headers["Content-Range"] == f"bytes 1000-{len(SHARD) - 1}/{len(SHARD)}"


def test_the_tree_and_info_show_lfs_files_as_the_hub_does(folder, served):
    url, _ = served
    status, _, body = answer(f"{url}/api/models/{REPO}/tree/main?recursive=true&expand=false")
    entries = {entry["path"]: entry for entry in json.loads(body)}
    assert status == 200 and set(entries) == set(os.listdir(folder))
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{hashlib.sha256(SHARD).hexdigest()}\n" \
              f"size {len(SHARD)}\n".encode()
    assert entries["model.safetensors"] == {
        "type": "file", "oid": git_sha1(pointer), "size": len(SHARD),
        "path": "model.safetensors",
        "lfs": {"oid": hashlib.sha256(SHARD).hexdigest(), "size": len(SHARD), "pointerSize": len(pointer)}}
    assert "lfs" not in entries["config.json"]
    status, _, body = answer(f"{url}/api/models/{REPO}?blobs=true")
    siblings = {entry["rfilename"]: entry for entry in json.loads(body)["siblings"]}
    assert siblings["model.safetensors"]["lfs"]["sha256"] == hashlib.sha256(SHARD).hexdigest()
    status, _, body = answer(f"{url}/api/models/{REPO}")
    assert all(set(entry) == {"rfilename"} for entry in json.loads(body)["siblings"])


@pytest.mark.parametrize("path, code", [
    ("/api/models/Qwen/Qwen3-235B-A22B-GPTQ-Int4/revision/v9", "RevisionNotFound"),
    ("/api/models/Qwen/Qwen3-235B-A22B-GPTQ-Int4/tree/v9", "RevisionNotFound"),
    ("/Qwen/Qwen3-235B-A22B-GPTQ-Int4/resolve/main/missing.bin", "EntryNotFound"),
    ("/Qwen/Qwen3-235B-A22B-GPTQ-Int4/resolve/main/link.json", "EntryNotFound"),
    ("/Qwen/Qwen3-235B-A22B-GPTQ-Int4/resolve/main/..%2F..%2Fsecret", None),
    ("/Qwen/Qwen3-235B-A22B-GPTQ-Int4/resolve/main/%2e%2e/config.json", None),
    ("/Qwen/Qwen3-235B-A22B-GPTQ-Int4/resolve/main/con%0Afig.json", None),
    ("/Qwen/..%2F..%2Fetc/resolve/main/passwd", None),
])
def test_what_the_repo_does_not_hold_is_a_404(tmp_path, folder, served, path, code):
    (tmp_path / "secret").write_text("not served")
    (folder / "link.json").symlink_to(tmp_path / "secret")    # a symlink in the folder is not a repo file
    url, _ = served
    status, headers, body = answer(url + path)
    assert status == 404 and headers.get("X-Error-Code") == code and b"not served" not in body


def test_synthetic_repos_answer_model_info_as_before_and_nothing_else():
    with hub() as (url, _):
        status, _, body = answer(f"{url}/api/models/nvidia/Qwen3-235B-A22B-FP4/revision/main")
        info = json.loads(body)
        assert status == 200 and info["sha"] == synthetic_model.commit_for("nvidia/Qwen3-235B-A22B-FP4", "main")
        assert [s["rfilename"] for s in info["siblings"]] == [
            f.name for f in synthetic_model.repo_files("nvidia/Qwen3-235B-A22B-FP4", {})]
        assert answer(f"{url}/api/models/nvidia/Qwen3-235B-A22B-FP4/tree/main")[0] == 404
        assert answer(f"{url}/nvidia/Qwen3-235B-A22B-FP4/resolve/main/config.json")[0] == 404


def test_an_oversized_or_unreadable_catalogue_serves_no_folder_repo(tmp_path, folder):
    catalogue = tmp_path / "hub-repos.json"
    catalogue.write_text(json.dumps({"repos": {REPO: str(folder)}, "pad": "x" * hub_repos.CATALOGUE_MAX_BYTES}))
    with hub(catalogue) as (url, _):
        assert answer(f"{url}/api/models/{REPO}/tree/main")[0] == 404
        hub_repos.write_catalogue(catalogue, {REPO: folder})    # read again once it changes
        assert answer(f"{url}/api/models/{REPO}/tree/main")[0] == 200
    with pytest.raises(hub_repos.CatalogueError):
        hub_repos.write_catalogue(catalogue, {"../x": folder})
