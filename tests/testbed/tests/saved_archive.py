"""An archive laid out as `docker save` lays out one image, for the testbed's own tests (a module of its own, not a
conftest.py: tests/integration's `from conftest import ...` would find this directory's instead)."""
from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path


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
