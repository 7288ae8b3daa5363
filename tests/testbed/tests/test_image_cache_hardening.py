"""The shared cached-image and cached-wheelhouse steps (image_cache.py, vllm_wheels.cached_directory)
that need no pair: the cache keys and file names the images had before they shared one builder (so
cached images stay hits), a missing cache named with its fix before any node command, a wheelhouse
directory that exists only complete, and setup records that are JSON objects or nothing."""
from __future__ import annotations

import hashlib
import os
import stat

import pytest
from sparkpair_testbed import image_cache, modelopt_image, modelopt_pair, vllm_image, vllm_pair, vllm_wheels
from sparkpair_testbed.hostexec import CommandError
from sparkpair_testbed.image import base_key
from sparkpair_testbed.layout import CACHE_DIR, HEAD


def key_as_before(packages: list, house, input_dir) -> str:
    """The image key formula vllm_image.py and modelopt_image.py each spelled out before image_cache.py."""
    digest = hashlib.sha256(base_key(packages).encode())
    for wheel in sorted(house.glob("*.whl")):
        digest.update(f"{wheel.name}\0{wheel.stat().st_size}\0".encode())
    for path in sorted(input_dir.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(input_dir)).encode() + b"\0" + path.read_bytes() + b"\0")
            digest.update(b"x" if os.access(path, os.X_OK) else b"-")
    return digest.hexdigest()[:16]


@pytest.mark.parametrize(("module", "prefix"), [(vllm_image, "vllm-image"), (modelopt_image, "modelopt-image")])
def test_both_images_keep_their_cache_keys_and_file_names(tmp_path, module, prefix):
    (tmp_path / "a-1-py3-none-any.whl").write_bytes(b"wheel")
    (tmp_path / "b-2-py3-none-any.whl").write_bytes(b"other wheel")
    key = module.image_key(tmp_path)
    assert key == key_as_before(vllm_image.packages(), tmp_path, module.IMAGE.input_dir)
    assert module.IMAGE.tar(key) == CACHE_DIR / f"{prefix}-{key}.tar"
    assert module.IMAGE.id_file(key) == CACHE_DIR / f"{prefix}-{key}.id"
    assert module.IMAGE.base_tar() == CACHE_DIR / f"base-{base_key(vllm_image.packages())}.tar"


def test_loading_an_image_the_cache_lacks_names_the_fix_before_any_node_command(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(image_cache, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(image_cache, "node_run", lambda *args, **kwargs: ran.append(args))
    monkeypatch.setattr(image_cache, "local_image_id", lambda *args: ran.append(args) or "")
    with pytest.raises(CommandError, match=r"no cached sparkpair/modelopt-cpu:\S+ to load \(run scripts/testbed modelopt\)"):
        modelopt_image.IMAGE.load(HEAD, "0" * 16)
    assert ran == []


def test_a_filled_directory_replaces_an_incomplete_one_and_other_keys(tmp_path):
    final = tmp_path / "x-wheels-1-new"
    final.mkdir()
    (final / "left-by-hand").write_text("")          # no closure.txt: incomplete
    (tmp_path / "x-wheels-1-old").mkdir()             # another key's wheelhouse
    (tmp_path / "y-wheels-1-other").mkdir()           # another cache's, not matched by the glob

    def fill(target):
        (target / "a-1-py3-none-any.whl").write_bytes(b"wheel")
        (target / vllm_wheels.CLOSURE).write_text("a==1\n")

    assert vllm_wheels.cached_directory(final, vllm_wheels.CLOSURE, "x-wheels-*", fill) == final
    assert sorted(path.name for path in final.iterdir()) == ["a-1-py3-none-any.whl", vllm_wheels.CLOSURE]
    assert all(stat.S_IMODE(path.stat().st_mode) == 0o644 for path in final.iterdir())
    assert sorted(path.name for path in tmp_path.iterdir()) == ["x-wheels-1-new", "y-wheels-1-other"]


def test_a_fill_that_leaves_no_completion_marker_leaves_no_directory_and_is_retried(tmp_path):
    final = tmp_path / "x-wheels-1-new"
    calls = []

    def fill(target):
        calls.append(target)
        (target / "a-1-py3-none-any.whl").write_bytes(b"wheel")

    for attempt in (1, 2):
        with pytest.raises(CommandError, match=r"no closure\.txt after filling it"):
            vllm_wheels.cached_directory(final, vllm_wheels.CLOSURE, "x-wheels-*", fill)
        assert not final.exists() and len(calls) == attempt


def test_the_closure_drops_excluded_wheels_and_lists_the_rest_sorted(tmp_path):
    for name in ("torchvision-0.1-py3-none-any.whl", "zlib_ng-1-py3-none-any.whl", "Aiohttp-3-py3-none-any.whl"):
        (tmp_path / name).write_bytes(b"wheel")
    vllm_wheels.write_closure(tmp_path, vllm_wheels.EXCLUDED)
    assert not (tmp_path / "torchvision-0.1-py3-none-any.whl").exists()
    assert (tmp_path / vllm_wheels.CLOSURE).read_text() == "Aiohttp==3\nzlib_ng==1\n"


@pytest.mark.parametrize("text", ["[1, 2]", '"a string"', "null", "{not json", ""])
def test_a_setup_record_that_is_no_json_object_reads_as_none(tmp_path, monkeypatch, text):
    record = tmp_path / "modelopt.json"
    record.write_text(text)
    monkeypatch.setattr(modelopt_pair, "RECORD", record)
    assert modelopt_pair.read_record() == {} and vllm_pair.read_record(record) == {}
    assert vllm_pair.read_record(tmp_path / "missing.json") == {}
