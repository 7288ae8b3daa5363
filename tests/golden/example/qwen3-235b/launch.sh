#!/usr/bin/env bash
# `sparkpair launch qwen3-235b --runtime trtllm` as shell commands: a runbook generated from inventory.example.yaml.
# Qwen3-235B-A22B NVFP4 + Eagle3, TP=2 across both Sparks (NVIDIA two-Spark recipe)
# Each step names the node it runs on; run it there as the inventory's user. sparkpair runs the same
# commands over SSH, `docker run` with exactly the settings shown here.
# Secrets: no token is ever written here. sparkpair copies the HF token to
# ~/.sparkpair/secrets/hf_token (mode 0600) on each node; the container reads it read-only through
# HF_TOKEN_PATH=/sparkpair/secrets/hf_token, so it never appears in argv, `ps` or `docker inspect`.
set -euo pipefail

# 1. Preflight: the launch-critical checks  [on this machine]
sparkpair doctor qwen3-235b --runtime trtllm

# 2. Files: the rendered config in ~/.sparkpair/config, the HF token in ~/.sparkpair/secrets (0600)  [on spark-a and spark-b]
mkdir -p ~/.sparkpair/config ~/.sparkpair/secrets && chmod 700 ~/.sparkpair/secrets
# then copy, from the folder `sparkpair render` wrote (a node's own copy under its name when there is one):
#   ~/.sparkpair/config/container.env
#   ~/.sparkpair/config/extra-llm-api-config.yml
#   ~/.sparkpair/config/openmpi-hostfile
#   ~/.sparkpair/config/mpi-rsh-agent

# 3. Engine container  [on spark-a]
docker run -d --name trtllm-multinode --network host --ipc host --ulimit=memlock=-1 --ulimit=stack=67108864 --gpus all --device /dev/infiniband:/dev/infiniband --label sparkpair.cluster=spark-pair --label sparkpair.node=spark-a --env-file "$HOME/.sparkpair/config/container.env" -v "$HOME/.sparkpair/config:/sparkpair/config:ro" -v "$HOME/.sparkpair/secrets:/sparkpair/secrets:ro" -v "$HOME/.ssh:/sparkpair/ssh:ro" -v "$HOME/.cache/huggingface:/sparkpair/hf:rw" -v sparkpair-engine-cache:/sparkpair/cache:rw nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12 sleep infinity

# 4. Engine container  [on spark-b]
docker run -d --name trtllm-multinode --network host --ipc host --ulimit=memlock=-1 --ulimit=stack=67108864 --gpus all --device /dev/infiniband:/dev/infiniband --label sparkpair.cluster=spark-pair --label sparkpair.node=spark-b --env-file "$HOME/.sparkpair/config/container.env" -v "$HOME/.sparkpair/config:/sparkpair/config:ro" -v "$HOME/.sparkpair/secrets:/sparkpair/secrets:ro" -v "$HOME/.ssh:/sparkpair/ssh:ro" -v "$HOME/.cache/huggingface:/sparkpair/hf:rw" -v sparkpair-engine-cache:/sparkpair/cache:rw nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12 sleep infinity

# 5. Models into the HF cache (the hub on for the download; the container keeps it off)  [on spark-a]
docker exec -u "$(id -u):$(id -g)" -e HOME=/tmp -e HF_HUB_OFFLINE=0 trtllm-multinode hf download nvidia/Qwen3-235B-A22B-FP4
docker exec -u "$(id -u):$(id -g)" -e HOME=/tmp -e HF_HUB_OFFLINE=0 trtllm-multinode hf download nvidia/Qwen3-235B-A22B-Eagle3

# 6. Models to spark-b over the QSFP link  [on spark-a]
rsync -a --partial --mkpath -e 'ssh -o BatchMode=yes -o StrictHostKeyChecking=yes' "$HOME/.cache/huggingface/hub/models--nvidia--Qwen3-235B-A22B-FP4" 192.168.100.11:.cache/huggingface/hub/
rsync -a --partial --mkpath -e 'ssh -o BatchMode=yes -o StrictHostKeyChecking=yes' "$HOME/.cache/huggingface/hub/models--nvidia--Qwen3-235B-A22B-Eagle3" 192.168.100.11:.cache/huggingface/hub/

# 7. Stable model paths: each repo's downloaded snapshot  [on spark-a and spark-b]
mkdir -p "$HOME/.cache/huggingface/sparkpair-models"
ln -sfn "../hub/models--nvidia--Qwen3-235B-A22B-FP4/snapshots/$(cat "$HOME/.cache/huggingface/hub/models--nvidia--Qwen3-235B-A22B-FP4/refs/main")" "$HOME/.cache/huggingface/sparkpair-models/nvidia--Qwen3-235B-A22B-FP4"
ln -sfn "../hub/models--nvidia--Qwen3-235B-A22B-Eagle3/snapshots/$(cat "$HOME/.cache/huggingface/hub/models--nvidia--Qwen3-235B-A22B-Eagle3/refs/main")" "$HOME/.cache/huggingface/sparkpair-models/nvidia--Qwen3-235B-A22B-Eagle3"

# 8. Serve (detached; rank output in the container)  [on spark-a]
docker exec -d trtllm-multinode sh -c 'mkdir -p /var/log/sparkpair && exec mpirun -np 2 --hostfile /sparkpair/config/openmpi-hostfile --mca plm_rsh_agent /sparkpair/config/mpi-rsh-agent --output-filename /var/log/sparkpair/ranks -x CPATH -x TRITON_PTXAS_PATH -x HF_HOME -x HF_TOKEN_PATH -x HF_HUB_OFFLINE -x TORCHINDUCTOR_CACHE_DIR -x TRITON_CACHE_DIR -x NCCL_SOCKET_IFNAME -x UCX_NET_DEVICES trtllm-llmapi-launch trtllm-serve nvidia/Qwen3-235B-A22B-FP4 --backend pytorch --max_num_tokens 1024 --tp_size 2 --extra_llm_api_options /sparkpair/config/extra-llm-api-config.yml --port 8355 --host 0.0.0.0 > /var/log/sparkpair/serve.log 2>&1'

# 9. Readiness: /health, /v1/models, /v1/chat/completions  [on spark-a]
for try in $(seq 360); do curl -sf http://localhost:8355/health >/dev/null && break; sleep 5; done  # up to 30 minutes
curl -sf -w '\n' http://localhost:8355/health
curl -sf -w '\n' http://localhost:8355/v1/models
curl -sf -w '\n' http://localhost:8355/v1/chat/completions -H 'Content-Type: application/json' -d '{"model": "nvidia/Qwen3-235B-A22B-FP4", "messages": [{"role": "user", "content": "Reply with one word: ready"}], "max_tokens": 8, "temperature": 0}'

# 10. Stop  [on spark-a and spark-b]
docker rm -f trtllm-multinode
