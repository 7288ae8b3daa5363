#!/bin/sh
# Run in a container of the engine image (sparkpair/trtllm-sim) with no network, the wheelhouse at
# /wheels and this directory at /build (both read-only): installs the real sglang package and what
# importing its launcher needs into the system Python (/usr/local/lib/python3.11/dist-packages),
# then makes `python3 -m sglang.launch_server` the stand-in: the wheel's launch_server.py kept as
# launch_server_wheel.py, /build/launch_server.py in its place (it runs the wheel's module with only
# run_server simulated, simengine/sglang_launch.py), and the triton placeholder (/build/triton).
set -eu
PIP=$(ls /wheels/pip-*.whl)
python3 "$PIP/pip" install -q --disable-pip-version-check --no-index --no-deps --no-cache-dir \
    --break-system-packages --no-compile $(ls /wheels/*.whl | grep -v '/pip-')
SITE=/usr/local/lib/python3.11/dist-packages
test -d "$SITE/sglang"
# Parts no launcher import reaches (diffusion serving, SGLang's own tests, torch's C++ headers and tests): 0.2 GB.
rm -rf "$SITE/sglang/multimodal_gen" "$SITE/sglang/test" "$SITE/torch/include" "$SITE/torch/test"
mv "$SITE/sglang/launch_server.py" "$SITE/sglang/launch_server_wheel.py"
cp /build/launch_server.py "$SITE/sglang/launch_server.py"
cp -R /build/triton "$SITE/triton"
python3 -m compileall -q "$SITE/sglang/launch_server.py" "$SITE/triton"
python3 -c 'import sglang.srt.server_args, simengine.sglang_launch' 
echo "sglang $(python3 -c 'import importlib.metadata as m; print(m.version("sglang"))') installed; python3 -m sglang.launch_server is the stand-in"
