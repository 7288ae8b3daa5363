"""The stand-in `hf download`: hub cache layout (blob names as a real snapshot shows them),
determinism, gating, resume, offline mode, --dry-run, the hub lookup through HF_ENDPOINT."""

import contextlib
import hashlib
import json
import os
import threading
from pathlib import Path

import pytest
from simengine import synthetic_model
from simengine.testing import run_tool, tool_env

REPO = "nvidia/Qwen3-235B-A22B-FP4"
REAL_SNAPSHOT = Path("/work/shared/reference/realworld/outputs/ls-la-hf-snapshot__1.txt")
GATED = "meta-llama/Llama-3.1-8B-Instruct"
SECRET = "hf_simengine_SECRET_do_not_print_0123456789"


def hf(args, cache, **env):
    return run_tool(["hf", *args], tool_env(HF_HUB_CACHE=cache, **env))


@contextlib.contextmanager
def hub_server_running(module):
    """The stand-in hub on a loopback port for the block; its URL."""
    server = module.ThreadingHTTPServer(("127.0.0.1", 0), module.HubHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def snapshot_tree(snapshot):
    """{file name: content bytes} of a snapshot folder, following its symlinks."""
    return {p.name: p.read_bytes() for p in sorted(Path(snapshot).iterdir())}


def test_download_writes_the_hub_cache_layout(tmp_path):
    result = hf(["download", REPO], tmp_path)
    assert result.returncode == 0, result.stderr
    snapshot = Path(result.stdout.strip())
    repo_dir = tmp_path / "models--nvidia--Qwen3-235B-A22B-FP4"
    commit = (repo_dir / "refs" / "main").read_text()
    assert len(commit) == 40 and all(c in "0123456789abcdef" for c in commit)
    assert snapshot == repo_dir / "snapshots" / commit
    names = {p.name for p in snapshot.iterdir()}
    assert {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "model.safetensors.index.json"} <= names
    shards = sorted(n for n in names if n.endswith(".safetensors"))
    assert len(shards) >= 2 and all(n.startswith("model-0000") for n in shards)
    kinds = set()
    for entry in snapshot.iterdir():
        assert entry.is_symlink()
        target = os.readlink(entry)
        assert not os.path.isabs(target) and target.startswith("../../blobs/")
        blob = (entry.parent / target).resolve()
        content = blob.read_bytes()
        if entry.name.endswith(".safetensors") or entry.name == "tokenizer.json":  # Git LFS: sha256 of the content
            assert blob.name == hashlib.sha256(content).hexdigest()
        else:  # tracked by git itself: the git blob id
            assert blob.name == hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
        kinds.add(len(target))
    assert kinds == {52, 76}  # as `ls -l` of a real snapshot shows: ../../blobs/ + 40 or 64 hex digits
    assert ".gitattributes" in names and "*.safetensors filter=lfs" in (snapshot / ".gitattributes").read_text()
    assert not list((repo_dir / "blobs").glob("*.incomplete"))
    total = sum((snapshot / n).stat().st_size for n in shards)
    assert 2 * 1024 * 1024 <= total <= 8 * 1024 * 1024


def test_link_lengths_match_a_real_snapshot_listing():
    """The real listing (huggingface_hub's `hf`, a Mistral repo) has exactly these two kinds of links."""
    lengths = {int(line.split()[4]) for line in REAL_SNAPSHOT.read_text().splitlines() if " -> ../../blobs/" in line}
    assert lengths == {52, 76}


def test_dry_run_prints_the_real_table(tmp_path):
    fresh = hf(["download", REPO, "--dry-run"], tmp_path)
    assert fresh.returncode == 0, fresh.stderr
    lines = fresh.stdout.splitlines()
    files = synthetic_model.repo_files(REPO)
    assert lines[0].startswith(f"[dry-run] Will download {len(files)} files (out of {len(files)}) totalling ")
    assert lines[1].split() == ["File", "Bytes", "to", "download"] and set(lines[2].replace(" ", "")) == {"-"}
    assert [line.split()[0] for line in lines[3:]] == sorted(f.name for f in files)
    assert not (tmp_path / "models--nvidia--Qwen3-235B-A22B-FP4").exists()
    hf(["download", REPO, "config.json"], tmp_path)
    after = hf(["download", REPO, "--dry-run"], tmp_path).stdout.splitlines()
    assert after[0].startswith(f"[dry-run] Will download {len(files) - 1} files (out of {len(files)})")
    assert [line.split()[1] for line in after[3:] if line.startswith("config.json ")] == ["-"]


def test_download_draws_the_fetching_bar_and_prints_the_path(tmp_path):
    result = hf(["download", REPO], tmp_path)
    assert result.returncode == 0
    count = len(synthetic_model.repo_files(REPO))
    lines = [line for line in result.stderr.splitlines() if line]  # text mode reads tqdm's \r as a line end
    assert lines[0] == f"Fetching {count} files:   0%|          | 0/{count} [00:00<?, ?it/s]"
    assert lines[-1].startswith(f"Fetching {count} files: 100%|{chr(0x2588) * 10}| {count}/{count} [")
    assert result.stdout.strip().endswith("/snapshots/" + synthetic_model.commit_for(REPO))


def test_the_hub_lookup_goes_to_hf_endpoint(tmp_path):
    from simengine import hub_server

    with hub_server_running(hub_server) as url:
        through = hf(["download", REPO], tmp_path / "a", HF_ENDPOINT=url)
        assert through.returncode == 0, through.stderr
    gone = hf(["download", REPO], tmp_path / "b", HF_ENDPOINT=url)
    assert gone.returncode == 1 and "LocalEntryNotFoundError: An error happened while trying to locate" in gone.stderr
    cached = hf(["download", REPO], tmp_path / "a", HF_ENDPOINT=url)
    assert cached.returncode == 0 and cached.stdout == through.stdout  # a cached snapshot is returned as it is


def test_config_is_plausible_for_the_family(tmp_path):
    snapshot = Path(hf(["download", REPO], tmp_path).stdout.strip())
    config = json.loads((snapshot / "config.json").read_text())
    assert config["architectures"] == ["Qwen3MoeForCausalLM"] and config["num_hidden_layers"] == 94
    draft = synthetic_model.config_json("nvidia/Qwen3-235B-A22B-Eagle3")
    assert draft["architectures"] == ["LlamaForCausalLMEagle3"] and draft["num_hidden_layers"] == 1


def test_same_bytes_and_commit_in_two_caches(tmp_path):
    first = hf(["download", REPO], tmp_path / "a")
    second = hf(["download", REPO], tmp_path / "b")
    assert first.returncode == second.returncode == 0
    snap_a, snap_b = Path(first.stdout.strip()), Path(second.stdout.strip())
    assert snap_a.name == snap_b.name
    assert snapshot_tree(snap_a) == snapshot_tree(snap_b)
    other = hf(["download", "Qwen/Qwen3-8B"], tmp_path / "a")
    assert Path(other.stdout.strip()).name != snap_a.name


def test_model_size_knob(tmp_path):
    snapshot = Path(hf(["download", "org/tiny"], tmp_path, SIM_HF_MODEL_BYTES=100000).stdout.strip())
    assert sum(p.stat().st_size for p in snapshot.glob("*.safetensors")) == 100000


def test_gated_repo_refused_without_token(tmp_path):
    result = hf(["download", GATED], tmp_path)
    assert result.returncode == 1
    assert "Cannot access gated repo for url" in result.stderr and "401" in result.stderr
    assert not (tmp_path / "models--meta-llama--Llama-3.1-8B-Instruct" / "blobs").exists()


def test_gated_repo_downloads_with_token_file_and_never_prints_it(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(SECRET + "\n")
    listed = hf(["download", "org/private-model"], tmp_path / "c", SIM_HF_GATED="org/private-model,x/y")
    assert listed.returncode == 1 and "Cannot access gated repo" in listed.stderr
    result = hf(["download", GATED], tmp_path / "c", HF_TOKEN_PATH=token_file)
    assert result.returncode == 0, result.stderr
    assert (Path(result.stdout.strip()) / "config.json").is_file()
    failing = hf(["download", GATED, "--bogus"], tmp_path / "c", HF_TOKEN=SECRET)
    broken = hf(["download", GATED], tmp_path / "d", HF_TOKEN=SECRET, SIM_HF_FAIL_AFTER=1)
    with_flag = hf(["download", GATED, "--token", SECRET], tmp_path / "e")
    assert with_flag.returncode == 0 and broken.returncode == 1 and failing.returncode == 2
    for run in (result, failing, broken, with_flag):
        assert SECRET not in run.stdout + run.stderr


def test_fail_midway_then_resume_gives_identical_content(tmp_path):
    broken = hf(["download", REPO], tmp_path / "cache", SIM_HF_FAIL_AFTER=5)
    assert broken.returncode == 1
    assert "Connection broken" in broken.stderr and "SIM_HF_FAIL_AFTER" in broken.stderr
    blobs = tmp_path / "cache" / "models--nvidia--Qwen3-235B-A22B-FP4" / "blobs"
    partial = list(blobs.glob("*.incomplete"))
    assert len(partial) == 1 and partial[0].stat().st_size > 0
    complete_before = {p.name for p in blobs.iterdir() if not p.name.endswith(".incomplete")}
    assert len(complete_before) == 5
    mtimes = {p.name: p.stat().st_mtime_ns for p in blobs.iterdir() if p.name in complete_before}
    resumed = hf(["download", REPO], tmp_path / "cache")
    assert resumed.returncode == 0, resumed.stderr
    assert {p.name: p.stat().st_mtime_ns for p in blobs.iterdir() if p.name in complete_before} == mtimes
    assert not list(blobs.glob("*.incomplete"))
    clean = hf(["download", REPO], tmp_path / "clean")
    assert snapshot_tree(resumed.stdout.strip()) == snapshot_tree(clean.stdout.strip())


def test_offline_mode(tmp_path):
    missing = hf(["download", REPO], tmp_path, HF_HUB_OFFLINE=1)
    assert missing.returncode == 1 and "LocalEntryNotFoundError" in missing.stderr
    hf(["download", REPO], tmp_path, SIM_HF_FAIL_AFTER=2)
    partial = hf(["download", REPO], tmp_path, HF_HUB_OFFLINE=1)
    assert partial.returncode == 1 and "outgoing traffic has been disabled" in partial.stderr
    online = hf(["download", REPO], tmp_path)
    offline = hf(["download", REPO], tmp_path, HF_HUB_OFFLINE="1")
    assert offline.returncode == 0 and offline.stdout.strip() == online.stdout.strip()


def test_local_dir_gets_plain_files_and_resumes(tmp_path):
    target = tmp_path / "opt" / "draft"
    broken = hf(["download", "nvidia/Qwen3-235B-A22B-Eagle3", "--local-dir", str(target)], tmp_path / "c",
                SIM_HF_FAIL_AFTER=3)
    assert broken.returncode == 1
    kept = {p.name: p.stat().st_mtime_ns for p in target.iterdir() if p.is_file()}
    assert len(kept) == 3
    result = hf(["download", "nvidia/Qwen3-235B-A22B-Eagle3", "--local-dir", str(target)], tmp_path / "c")
    assert result.returncode == 0 and Path(result.stdout.strip()) == target.resolve()
    assert (target / "config.json").is_file() and not (target / "config.json").is_symlink()
    assert {name: (target / name).stat().st_mtime_ns for name in kept} == kept  # complete files are not rewritten
    expected = {f.name: f.content for f in synthetic_model.repo_files("nvidia/Qwen3-235B-A22B-Eagle3")}
    assert {n: (target / n).read_bytes() for n in expected} == expected
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("args", [["download", REPO, "--bogus"], ["download"], ["frobnicate"]])
def test_usage_errors_exit_2(tmp_path, args):
    result = hf(args, tmp_path)
    assert result.returncode == 2
    assert "Error:" in result.stderr


def test_single_file_prints_its_path_and_version_works(tmp_path):
    result = hf(["download", REPO, "config.json"], tmp_path)
    assert result.returncode == 0 and result.stdout.strip().endswith("/config.json")
    unknown = hf(["download", REPO, "nope.bin"], tmp_path)
    assert unknown.returncode == 1 and "Entry Not Found" in unknown.stderr
    assert hf(["version"], tmp_path).stdout.startswith("huggingface_hub version:")
