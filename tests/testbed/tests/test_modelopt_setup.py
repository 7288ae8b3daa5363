"""The parts of the ModelOpt image setup that need no pair: what its wheelhouse keeps of nvidia-modelopt's
requirements (the base ones and the `hf` extra, less deepspeed and the multimodal torch packages), and a key
that follows the pins."""
from __future__ import annotations

from sparkpair_testbed import modelopt_image, modelopt_wheels

METADATA = """Metadata-Version: 2.4
Name: nvidia-modelopt
Version: 0.47.0
Requires-Dist: ninja
Requires-Dist: torch>=2.8
Requires-Dist: cupy-cuda12x; (platform_machine != "aarch64") and extra == "onnx"
Requires-Dist: accelerate>=1.0.0; extra == "hf"
Requires-Dist: deepspeed>=0.9.6; (platform_system != "Darwin" and platform_system != "Windows") and extra == "hf"
Requires-Dist: transformers<5.15,>=4.57; extra == "hf"
Requires-Dist: torchvision; extra == "dev-test"
Requires-Dist: sphinx~=9.1.0; python_version >= "3.12" and extra == "dev-docs"

Long description:
Requires-Dist: not-a-requirement
"""


def test_the_wheelhouse_keeps_the_base_and_hf_requirements_less_deepspeed():
    kept = modelopt_wheels.requirements_with_extra(METADATA, "hf")
    assert kept == ["ninja", "torch>=2.8", "accelerate>=1.0.0", "transformers<5.15,>=4.57"]


def test_the_wheelhouse_key_follows_the_pins(monkeypatch):
    first = modelopt_wheels.wheelhouse_key()
    monkeypatch.setattr(modelopt_wheels, "MODELOPT_VERSION", "0.48.0")
    assert modelopt_wheels.wheelhouse_key() != first


def test_the_image_key_follows_the_wheels(tmp_path):
    (tmp_path / "a-1-py3-none-any.whl").write_bytes(b"x")
    first = modelopt_image.image_key(tmp_path)
    (tmp_path / "a-1-py3-none-any.whl").write_bytes(b"xy")
    assert modelopt_image.image_key(tmp_path) != first
