"""What train-draft's training image holds on a node, and what it can train on there. A probe is a throw-away
container of the image without a network: `image_packages` reads the installed versions of ModelOpt and what
its `hf` extra needs (package metadata only, nothing imported: doctor asks it); `torch_device` asks torch inside
the image, given the node's GPUs (`--gpus all`, as the engine containers get them, when the node's Docker has
the NVIDIA runtime), whether CUDA is usable. nvidia-smi on the node says a GPU exists; only the image's torch
says it can train on it (a CPU build of torch, as on the simulated pair, cannot).

Output is hostile: only the one line after the marker counts, read as capped JSON, every field typed.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkpair import boundedjson
from sparkpair.probes import Probe, printable
from sparkpair.transport import Shell

# NVIDIA's PyTorch container, as ModelOpt's speculative decoding example names it; it needs nvidia-modelopt[hf]
# added (`pip install -U "nvidia-modelopt[hf]"`: docs/runbooks.md#train-draft-image).
DEFAULT_IMAGE = "nvcr.io/nvidia/pytorch:25.06-py3"
MARKER = "sparkpair-image"
ABSENT = "absent"
PACKAGES = ("nvidia-modelopt", "transformers", "accelerate", "torch", "safetensors")
LINE_CAP = 4096
_PACKAGES_SCRIPT = (
    "import importlib.metadata as m, json\n"
    "def v(n):\n"
    "    try: return m.version(n)\n"
    "    except Exception: return ''\n"
    f"print('{MARKER} ' + json.dumps({{n: v(n) for n in {PACKAGES!r}}}))\n")
_DEVICE_SCRIPT = (
    "import json, torch\n"
    "ok = torch.cuda.is_available()\n"
    f"print('{MARKER} ' + json.dumps({{'device': 'cuda' if ok else 'cpu', "
    "'gpu': torch.cuda.get_device_name(0) if ok else '', 'torch': torch.__version__, "
    "'cuda': torch.version.cuda or ''}))\n")


def _marked(text: str) -> dict[str, object] | None:
    """The JSON object after the marker on the last such line (None when there is none); ABSENT -> {}."""
    found = None
    for line in text.splitlines():
        if line.startswith(MARKER + " "):
            found = line[len(MARKER) + 1:][:LINE_CAP]
    if found is None:
        return None
    if found.strip() == ABSENT:
        return {}
    try:
        value = boundedjson.loads(found)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _text(value: object, limit: int = 64) -> str:
    return value[:limit] if isinstance(value, str) and printable(value) else ""


@dataclass(frozen=True)
class ImagePackages:
    """The image on the node (False: the node's Docker has no such image) and its packages' versions ('' when
    missing)."""

    present: bool
    versions: dict[str, str]

    @property
    def missing(self) -> list[str]:
        return [name for name in PACKAGES if not self.versions.get(name)]


def parse_packages(text: str) -> ImagePackages | None:
    """What image_packages printed (None: not the probe's answer)."""
    found = _marked(text)
    if found is None:
        return None
    return ImagePackages(bool(found), {name: _text(found.get(name)) for name in PACKAGES})


def _absent_or(image: str, command: Shell) -> Shell:
    return Shell.compose([Shell("docker image inspect {} >/dev/null 2>&1 || { echo {}; exit 0; };", image,
                                f"{MARKER} {ABSENT}"), command], " ")


def image_packages(image: str) -> Probe[ImagePackages | None]:
    """The training image's ModelOpt, transformers, accelerate, torch and safetensors versions (metadata only)."""
    run = Shell("docker run --rm --network none {} python -c {} 2>&1 | tail -c 16384", image, _PACKAGES_SCRIPT)
    return Probe("training image", (image,), _absent_or(image, run), parse_packages)


@dataclass(frozen=True)
class TorchDevice:
    """What torch inside the image trains on here: cuda (with the GPU's name) or cpu; its version and CUDA's."""

    device: str
    gpu: str = ""
    torch: str = ""
    cuda: str = ""


def parse_device(text: str) -> TorchDevice | None:
    """What torch_device printed (None: not the probe's answer, or the image is absent)."""
    found = _marked(text)
    if not found or found.get("device") not in ("cuda", "cpu"):
        return None
    return TorchDevice(str(found["device"]), _text(found.get("gpu")), _text(found.get("torch")),
                       _text(found.get("cuda")))


def torch_device(image: str, gpus: bool) -> Probe[TorchDevice | None]:
    """Whether torch in IMAGE sees a usable CUDA device, the container given the node's GPUs when GPUS."""
    gpu = "--gpus all " if gpus else ""
    run = Shell(f"docker run --rm --network none {gpu}{{}} python -c {{}} 2>&1 | tail -c 16384", image, _DEVICE_SCRIPT)
    return Probe("training device", (image, gpus), _absent_or(image, run), parse_device)
