#!/bin/sh
# Installs the simulated TensorRT-LLM tools into the image (run by the Dockerfile) with the
# engine's own install.sh: /opt/simengine (with its own allow-list), on python3's path, tools
# linked into /usr/local/bin.
set -eu
sh /tmp/engine/install.sh
# No nvidia-smi in the image: like the NVIDIA container toolkit, the node's
# nvidia-container-runtime-hook injects it into containers started with --gpus.
rm -f /usr/bin/nvidia-smi /usr/local/bin/nvidia-smi
mkdir -p /workspace /var/run/sshd
