#!/usr/bin/env bash
# `sparkpair launch qwen3-235b --runtime vllm` as shell commands: a runbook generated from inventory.example.yaml.
# Qwen3-235B-A22B GPTQ-Int4 + Eagle3, TP=2 across both Sparks on vLLM
# Each step names the node it runs on; run it there as the inventory's user. sparkpair runs the same
# commands over SSH, `docker run` with exactly the settings shown here.
# Secrets: no token is ever written here. sparkpair copies the HF token to
# ~/.sparkpair/secrets/hf_token (mode 0600) on each node; the container reads it read-only through
# HF_TOKEN_PATH=/sparkpair/secrets/hf_token, so it never appears in argv, `ps` or `docker inspect`.
set -euo pipefail

# 1. Preflight: the launch-critical checks  [on this machine]
sparkpair doctor qwen3-235b --runtime vllm

# 2. Files: the rendered config in ~/.sparkpair/config, the HF token in ~/.sparkpair/secrets (0600)  [on spark-a and spark-b]
mkdir -p ~/.sparkpair/config ~/.sparkpair/secrets && chmod 700 ~/.sparkpair/secrets
# then copy, from the folder `sparkpair render` wrote (a node's own copy under its name when there is one):
#   ~/.sparkpair/config/container.env

# 3. Engine container  [on spark-a]
docker run -d --name vllm-multinode --network host --shm-size 10.24g --ulimit=memlock=-1 --ulimit=stack=67108864 --gpus all --device /dev/infiniband:/dev/infiniband --label sparkpair.cluster=spark-pair --label sparkpair.node=spark-a --env-file "$HOME/.sparkpair/config/container.env" -v "$HOME/.sparkpair/config:/sparkpair/config:ro" -v "$HOME/.sparkpair/secrets:/sparkpair/secrets:ro" -v "$HOME/.ssh:/sparkpair/ssh:ro" -v "$HOME/.cache/huggingface:/sparkpair/hf:rw" -v sparkpair-engine-cache:/sparkpair/cache:rw nvcr.io/nvidia/vllm:26.05-py3 sleep infinity

# 4. Engine container  [on spark-b]
docker run -d --name vllm-multinode --network host --shm-size 10.24g --ulimit=memlock=-1 --ulimit=stack=67108864 --gpus all --device /dev/infiniband:/dev/infiniband --label sparkpair.cluster=spark-pair --label sparkpair.node=spark-b --env-file "$HOME/.sparkpair/config/container.env" -v "$HOME/.sparkpair/config:/sparkpair/config:ro" -v "$HOME/.sparkpair/secrets:/sparkpair/secrets:ro" -v "$HOME/.ssh:/sparkpair/ssh:ro" -v "$HOME/.cache/huggingface:/sparkpair/hf:rw" -v sparkpair-engine-cache:/sparkpair/cache:rw nvcr.io/nvidia/vllm:26.05-py3 sleep infinity

# 5. Models into the HF cache (the hub on for the download; the container keeps it off)  [on spark-a]
docker exec -u "$(id -u):$(id -g)" -e HOME=/tmp -e HF_HUB_OFFLINE=0 vllm-multinode hf download Qwen/Qwen3-235B-A22B-GPTQ-Int4
docker exec -u "$(id -u):$(id -g)" -e HOME=/tmp -e HF_HUB_OFFLINE=0 vllm-multinode hf download RedHatAI/Qwen3-235B-A22B-speculator.eagle3

# 6. Models to spark-b over the QSFP link  [on spark-a]
rsync -a --partial --mkpath -e 'ssh -o BatchMode=yes -o StrictHostKeyChecking=yes' "$HOME/.cache/huggingface/hub/models--Qwen--Qwen3-235B-A22B-GPTQ-Int4" 192.168.100.11:.cache/huggingface/hub/
rsync -a --partial --mkpath -e 'ssh -o BatchMode=yes -o StrictHostKeyChecking=yes' "$HOME/.cache/huggingface/hub/models--RedHatAI--Qwen3-235B-A22B-speculator.eagle3" 192.168.100.11:.cache/huggingface/hub/

# 7. Stable model paths: each repo's downloaded snapshot  [on spark-a and spark-b]
mkdir -p "$HOME/.cache/huggingface/sparkpair-models"
ln -sfn "../hub/models--Qwen--Qwen3-235B-A22B-GPTQ-Int4/snapshots/$(cat "$HOME/.cache/huggingface/hub/models--Qwen--Qwen3-235B-A22B-GPTQ-Int4/refs/main")" "$HOME/.cache/huggingface/sparkpair-models/Qwen--Qwen3-235B-A22B-GPTQ-Int4"
ln -sfn "../hub/models--RedHatAI--Qwen3-235B-A22B-speculator.eagle3/snapshots/$(cat "$HOME/.cache/huggingface/hub/models--RedHatAI--Qwen3-235B-A22B-speculator.eagle3/refs/main")" "$HOME/.cache/huggingface/sparkpair-models/RedHatAI--Qwen3-235B-A22B-speculator.eagle3"

# 8. Serve (detached; rank output in the container)  [on spark-a]
docker exec -d vllm-multinode sh -c 'mkdir -p /var/log/sparkpair && exec vllm serve /sparkpair/hf/sparkpair-models/Qwen--Qwen3-235B-A22B-GPTQ-Int4 --served-model-name Qwen/Qwen3-235B-A22B-GPTQ-Int4 --host 0.0.0.0 --port 8355 --tensor-parallel-size 2 --distributed-executor-backend mp --nnodes 2 --node-rank 0 --master-addr 192.168.100.10 --master-port 29501 --speculative-config '"'"'{"method":"eagle3","model":"/sparkpair/hf/sparkpair-models/RedHatAI--Qwen3-235B-A22B-speculator.eagle3","num_speculative_tokens":3}'"'"' --max-model-len 8192 --gpu-memory-utilization 0.85 --max-num-seqs 4 > /var/log/sparkpair/serve.log 2>&1'

# 9. Serve (detached; rank output in the container)  [on spark-b]
docker exec -d vllm-multinode sh -c 'mkdir -p /var/log/sparkpair && exec vllm serve /sparkpair/hf/sparkpair-models/Qwen--Qwen3-235B-A22B-GPTQ-Int4 --served-model-name Qwen/Qwen3-235B-A22B-GPTQ-Int4 --host 0.0.0.0 --port 8355 --tensor-parallel-size 2 --distributed-executor-backend mp --nnodes 2 --node-rank 1 --master-addr 192.168.100.10 --master-port 29501 --headless --speculative-config '"'"'{"method":"eagle3","model":"/sparkpair/hf/sparkpair-models/RedHatAI--Qwen3-235B-A22B-speculator.eagle3","num_speculative_tokens":3}'"'"' --max-model-len 8192 --gpu-memory-utilization 0.85 --max-num-seqs 4 > /var/log/sparkpair/serve.log 2>&1'

# 10. Readiness: /health, /v1/models, /v1/chat/completions  [on spark-a]
for try in $(seq 360); do curl -sf http://localhost:8355/health >/dev/null && break; sleep 5; done  # up to 30 minutes
curl -sf -w '\n' http://localhost:8355/health
curl -sf -w '\n' http://localhost:8355/v1/models
curl -sf -w '\n' http://localhost:8355/v1/chat/completions -H 'Content-Type: application/json' -d '{"model": "Qwen/Qwen3-235B-A22B-GPTQ-Int4", "messages": [{"role": "user", "content": "Reply with one word: ready"}], "max_tokens": 8, "temperature": 0}'

# 11. Stop  [on spark-a and spark-b]
docker rm -f vllm-multinode
