#!/bin/sh
# Installs the simulated TensorRT-LLM tools into the image (run by the Dockerfile).
# The engine's own install.sh is used when it has one (`install.sh ALLOWLIST_JSON`:
# /opt/simengine, tools linked into /usr/local/bin); otherwise the engine tree
# goes to /opt/trtllm-sim with hf, trtllm-serve and trtllm-llmapi-launch linked
# into /usr/local/bin and the allow-list next to the package.
set -eu
src=/tmp/engine
if [ -f "$src/install.sh" ]; then
    SIM_ALLOWLIST_SOURCE=/tmp/trtllm_allowlist.json sh "$src/install.sh" /tmp/trtllm_allowlist.json
else
    mkdir -p /opt/trtllm-sim
    cp -a "$src/." /opt/trtllm-sim/
    cp /tmp/trtllm_allowlist.json /opt/trtllm-sim/trtllm_allowlist.json
    for tool in hf trtllm-serve trtllm-llmapi-launch; do
        if [ -f "/opt/trtllm-sim/bin/$tool" ]; then
            chmod 755 "/opt/trtllm-sim/bin/$tool"
            ln -sf "/opt/trtllm-sim/bin/$tool" "/usr/local/bin/$tool"
        fi
    done
fi
# No nvidia-smi in the image: like the NVIDIA container toolkit, the node's
# nvidia-container-runtime-hook injects it into containers started with --gpus.
rm -f /usr/bin/nvidia-smi /usr/local/bin/nvidia-smi
mkdir -p /workspace /var/run/sshd
