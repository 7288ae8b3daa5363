"""The node-side installer of a trained draft (data/draft_install.py, run here on temporary folders) refuses a
repo whose `blobs`, `refs` or `snapshots` folder is a symlink planted in the cache (issue 33, item 7): nothing
is written through it, the refusal is one line; and `train-draft --image` takes an image reference only."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest

from sparkpair.cli import main
from sparkpair.draft import export, train
from sparkpair.errors import UsageError


def _install(staging: Path, hub: Path, folder: str = "models--local--d") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-", str(staging), str(hub), folder], input=export.installer_text(),
                          capture_output=True, text=True, timeout=60)


def _staging(tmp_path: Path) -> Path:
    staging = tmp_path / "draft"
    staging.mkdir()
    (staging / "config.json").write_text("{}")
    (staging / "model.safetensors").write_bytes(b"\1" * 64)
    return staging


@pytest.mark.parametrize("planted", ["blobs", "refs", "snapshots"])
def test_a_symlinked_cache_folder_is_refused_and_nothing_is_written_through_it(tmp_path: Path, planted: str) -> None:
    staging, hub, elsewhere = _staging(tmp_path), tmp_path / "hub", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (hub / "models--local--d").mkdir(parents=True)
    (hub / "models--local--d" / planted).symlink_to(elsewhere)
    done = _install(staging, hub)
    assert done.returncode == 1, done.stdout
    assert done.stderr.startswith("draft-install: ") and planted in done.stderr and "symlink" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert list(elsewhere.iterdir()) == []


def test_a_symlinked_repo_folder_is_refused(tmp_path: Path) -> None:
    staging, hub, elsewhere = _staging(tmp_path), tmp_path / "hub", tmp_path / "elsewhere"
    elsewhere.mkdir()
    hub.mkdir()
    (hub / "models--local--d").symlink_to(elsewhere)
    done = _install(staging, hub)
    assert done.returncode == 1 and "symlink" in done.stderr
    assert list(elsewhere.iterdir()) == []


def test_a_symlinked_hub_is_the_operators_own_path_and_is_followed(tmp_path: Path) -> None:
    staging, real = _staging(tmp_path), tmp_path / "real-hub"
    real.mkdir()
    (tmp_path / "hub").symlink_to(real)
    done = _install(staging, tmp_path / "hub")
    assert done.returncode == 0, done.stderr
    commit, _ = export.parse_installed(done.stdout)
    assert (real / "models--local--d" / "refs" / "main").read_text() == commit


@pytest.mark.parametrize("image", ["--privileged", "-v/:/host", "img with space", "a" * 600, "img:tag\n", "",
                                   "img@sha256:zz", "-"])
def test_a_training_image_that_is_no_image_reference_is_refused(image: str) -> None:
    with pytest.raises(UsageError, match="--image"):
        train.check_image(image)


@pytest.mark.parametrize("image", ["nvcr.io/nvidia/pytorch:25.06-py3", "sparkpair/modelopt-cpu:0.47.0",
                                   "localhost:5000/team/trainer:v1", "ubuntu",
                                   "nvcr.io/nvidia/pytorch@sha256:" + "a" * 64])
def test_image_references_are_accepted(image: str) -> None:
    train.check_image(image)


def test_the_cli_refuses_an_image_option_before_any_node_is_asked(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text((Path(__file__).parents[2] / "inventory.example.yaml").read_text())
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["-i", str(inventory), "train-draft", "qwen3-235b", "--name", "local/d", "--image",
                     "--privileged", "--dry-run"])
    assert code == 2, err.getvalue()
    assert "--image" in err.getvalue() and "Traceback" not in err.getvalue()
