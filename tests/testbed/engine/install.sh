#!/bin/sh
# Install sparkpair's simulated TensorRT-LLM engine (simengine) into an image or a root filesystem.
#
#   sh install.sh [ALLOWLIST_JSON]        (or SIM_ALLOWLIST_SOURCE=ALLOWLIST_JSON sh install.sh)
#
# Places the package in $SIMENGINE_PREFIX (default /opt/simengine), the executables in
# $SIMENGINE_PREFIX/bin with symlinks `hf`, `trtllm-serve`, `trtllm-llmapi-launch` in
# $SIMENGINE_BINDIR (default /usr/local/bin), and the allow-list at
# $SIMENGINE_PREFIX/trtllm_allowlist.json (the engine's default; SIM_ALLOWLIST overrides it).
# ALLOWLIST_JSON defaults to $SIM_ALLOWLIST_SOURCE, else ./trtllm_allowlist.json next to this
# script, else the repository copy sparkpair/data/trtllm_allowlist.json.
# Needs: python3 (3.11), python3-yaml, python3-mpi4py, openmpi-bin (mpirun).
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
PREFIX=${SIMENGINE_PREFIX:-/opt/simengine}
BINDIR=${SIMENGINE_BINDIR:-/usr/local/bin}
TOOLS="hf trtllm-serve trtllm-llmapi-launch"

if [ $# -ge 1 ]; then
    ALLOWLIST=$1
elif [ -n "${SIM_ALLOWLIST_SOURCE:-}" ]; then
    ALLOWLIST=$SIM_ALLOWLIST_SOURCE
elif [ -f "$HERE/trtllm_allowlist.json" ]; then
    ALLOWLIST=$HERE/trtllm_allowlist.json
else
    ALLOWLIST=$HERE/../../../sparkpair/data/trtllm_allowlist.json
fi
[ -f "$ALLOWLIST" ] || { echo "install.sh: allow-list not found: $ALLOWLIST" >&2; exit 1; }

python3 -c 'import yaml' 2>/dev/null || { echo "install.sh: python3-yaml is missing" >&2; exit 1; }
python3 -c 'import mpi4py' 2>/dev/null || echo "install.sh: warning: python3-mpi4py is missing (needed under mpirun)" >&2

rm -rf "$PREFIX/simengine" "$PREFIX/bin"
mkdir -p "$PREFIX/bin" "$BINDIR"
cp -R "$HERE/simengine" "$PREFIX/simengine"
find "$PREFIX/simengine" -name '__pycache__' -type d -prune -exec rm -rf {} +
rm -f "$PREFIX/simengine/testing.py"
cp "$ALLOWLIST" "$PREFIX/trtllm_allowlist.json"
for tool in $TOOLS; do
    install -m 0755 "$HERE/bin/$tool" "$PREFIX/bin/$tool"
    ln -sf "$PREFIX/bin/$tool" "$BINDIR/$tool"
done
chmod -R a+rX "$PREFIX"
python3 -m compileall -q "$PREFIX/simengine"
echo "simengine installed in $PREFIX; tools linked in $BINDIR: $TOOLS"
