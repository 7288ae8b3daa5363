#!/bin/sh
# Runs once, in a container of the vLLM image with no network (triton_image.py): the Triton wheelhouse
# is mounted read-only at /wheels, this folder at /build. Lays Triton Inference Server out as NVIDIA's
# tritonserver image does (/opt/tritonserver/{bin,lib,backends/python,backends/vllm}) from NVIDIA's
# nvidia-pytriton wheel: the tritonserver binary, its libraries, the Python backend and the stub built
# for this image's Python; then numpy below 2 into the vLLM venv (the stub's Python: Triton 2.51's
# Python backend cannot unpack BYTES tensors with numpy 2), the stub's locale line (stub-locale.pth) and
# the stand-in vllm backend.
set -eu
wheel=$(ls /wheels/nvidia_pytriton-*.whl)
py=$(/opt/vllm/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
/opt/vllm/bin/python - "$wheel" "$py" <<'PY'
import shutil, sys, zipfile
from pathlib import Path

wheel, python = sys.argv[1], sys.argv[2]
root = Path("/opt/tritonserver")
places = {"pytriton/tritonserver/bin/": root / "bin", "nvidia_pytriton.libs/": root / "lib",
          "pytriton/tritonserver/backends/python/": root / "backends/python",
          "pytriton/tritonserver/caches/": root / "caches",
          f"pytriton/tritonserver/python_backend_stubs/{python}/": root / "backends/python"}
with zipfile.ZipFile(wheel) as archive:
    for name in archive.namelist():
        prefix = next((p for p in places if name.startswith(p)), None)
        if prefix is None or name.endswith("/"):
            continue
        target = places[prefix] / name[len(prefix):]
        target.parent.mkdir(parents=True, exist_ok=True)
        with archive.open(name) as source, open(target, "wb") as out:
            shutil.copyfileobj(source, out)
        executable = name.endswith(("/tritonserver", "/triton_python_backend_stub")) or ".so" in target.name
        target.chmod(0o755 if executable else 0o644)
PY
/opt/vllm/bin/pip install -q --disable-pip-version-check --no-index --no-deps --no-cache-dir /wheels/numpy-*.whl
# the stub's Python runs isolated in the C locale (ASCII): stub-locale.pth says why
site=$(/opt/vllm/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
cp /build/stub-locale.pth "$site/stub-locale.pth"
chmod 644 "$site/stub-locale.pth"
mkdir -p /opt/tritonserver/backends/vllm
cp /build/vllm_backend/*.py /opt/tritonserver/backends/vllm/
chmod 644 /opt/tritonserver/backends/vllm/*.py
# the checks: the server loads its libraries and prints its usage, the stub finds its libraries, numpy < 2
LD_LIBRARY_PATH=/opt/tritonserver/lib /opt/tritonserver/bin/tritonserver --help 2>&1 | grep -q "^Usage: tritonserver" || {
    echo "tritonserver does not run" >&2; exit 1; }
if LD_LIBRARY_PATH=/opt/tritonserver/lib ldd /opt/tritonserver/backends/python/triton_python_backend_stub | grep "not found"; then
    echo "the Python backend stub lacks libraries" >&2; exit 1
fi
/opt/vllm/bin/python -c "import numpy, vllm; assert int(numpy.__version__.split('.')[0]) < 2, numpy.__version__"
rm -rf /root/.cache
