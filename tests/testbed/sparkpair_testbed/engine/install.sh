#!/bin/sh
# Install sparkpair's simulated TensorRT-LLM engine (simengine) into an image or a root filesystem.
#
#   sh install.sh
#
# Places the package (with the NVIDIA files its option check reads, see README.md) in
# $SIMENGINE_PREFIX (default /opt/simengine) and puts that directory on the system Python's path
# (simengine.pth in its first site-packages directory); the executables go to
# $SIMENGINE_PREFIX/bin with symlinks `hf`, `trtllm-serve`, `trtllm-llmapi-launch` in
# $SIMENGINE_BINDIR (default /usr/local/bin).
# Needs: python3 (3.11), python3-yaml, python3-mpi4py, openmpi-bin (mpirun).
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
PREFIX=${SIMENGINE_PREFIX:-/opt/simengine}
BINDIR=${SIMENGINE_BINDIR:-/usr/local/bin}
TOOLS="hf trtllm-serve trtllm-llmapi-launch"

python3 -c 'import yaml' 2>/dev/null || { echo "install.sh: python3-yaml is missing" >&2; exit 1; }
python3 -c 'import mpi4py' 2>/dev/null || echo "install.sh: warning: python3-mpi4py is missing (needed under mpirun)" >&2

rm -rf "$PREFIX/simengine" "$PREFIX/bin"
mkdir -p "$PREFIX/bin" "$BINDIR"
cp -R "$HERE/simengine" "$PREFIX/simengine"
find "$PREFIX/simengine" -name '__pycache__' -type d -prune -exec rm -rf {} +
rm -f "$PREFIX/simengine/testing.py"
SITE=$(python3 -c 'import site; print(site.getsitepackages()[0])')
mkdir -p "$SITE"
echo "$PREFIX" > "$SITE/simengine.pth"
for tool in $TOOLS; do
    install -m 0755 "$HERE/bin/$tool" "$PREFIX/bin/$tool"
    ln -sf "$PREFIX/bin/$tool" "$BINDIR/$tool"
done
chmod -R a+rX "$PREFIX"
python3 -m compileall -q "$PREFIX/simengine"
python3 -c 'import simengine' || { echo "install.sh: simengine is not importable from $SITE" >&2; exit 1; }
echo "simengine installed in $PREFIX (on python3's path via $SITE/simengine.pth); tools linked in $BINDIR: $TOOLS"
