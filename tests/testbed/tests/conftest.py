"""Helpers the testbed's own tests share: an archive laid out as `docker save` lays out one image."""
from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest


def add_member(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    """Add a regular file NAME holding DATA to ARCHIVE."""
    member = tarfile.TarInfo(name)
    member.size = len(data)
    archive.addfile(member, io.BytesIO(data))


def write_saved_image(path: Path, layers: list[str]) -> None:
    """An archive laid out as Docker 20.10's `docker save` lays one image out: a folder per layer (VERSION,
    json, layer.tar holding the layer's name repeated), the config, the manifest naming the layers in order."""
    with tarfile.open(path, "w") as archive:
        for layer in layers:
            add_member(archive, f"{layer}/VERSION", b"1.0")
            add_member(archive, f"{layer}/json", b"{}")
            add_member(archive, f"{layer}/layer.tar", layer.encode() * 1000)
        add_member(archive, "cfg.json", b'{"rootfs": {}}')
        add_member(archive, "manifest.json", json.dumps([{"Config": "cfg.json", "RepoTags": ["t:1"],
                                                          "Layers": [f"{layer}/layer.tar" for layer in layers]}]).encode())


@pytest.fixture
def saved_image():
    """write_saved_image(path, layers), for tests that need a `docker save` archive."""
    return write_saved_image
