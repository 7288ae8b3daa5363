#!/usr/bin/env bash
# `sparkpair launch gpt-oss-120b --runtime vllm` as shell commands: a runbook generated from inventory.example.yaml.
# GPT-OSS-120B + Eagle3 on one Spark on vLLM
# Each step names the node it runs on; run it there as the inventory's user. sparkpair runs the same
# commands over SSH, `docker run` with exactly the settings shown here.
# Secrets: no token is ever written here. sparkpair copies the HF token to
# ~/.sparkpair/secrets/hf_token (mode 0600) on each node; the container reads it read-only through
# HF_TOKEN_PATH=/sparkpair/secrets/hf_token, so it never appears in argv, `ps` or `docker inspect`.
set -euo pipefail

# 1. Preflight: the launch-critical checks  [on this machine]
sparkpair doctor gpt-oss-120b --runtime vllm

# 2. Files: the rendered config in ~/.sparkpair/config, the HF token in ~/.sparkpair/secrets (0600)  [on spark-a]
mkdir -p ~/.sparkpair/config ~/.sparkpair/secrets && chmod 700 ~/.sparkpair/secrets
# then copy, from the folder `sparkpair render` wrote (a node's own copy under its name when there is one):
#   ~/.sparkpair/config/container.env

# 3. Engine container  [on spark-a]
docker run -d --name vllm-multinode --network host --shm-size 10.24g --ulimit=memlock=-1 --ulimit=stack=67108864 --gpus all --device /dev/infiniband:/dev/infiniband --label sparkpair.cluster=spark-pair --label sparkpair.node=spark-a --env-file "$HOME/.sparkpair/config/container.env" -v "$HOME/.sparkpair/config:/sparkpair/config:ro" -v "$HOME/.sparkpair/secrets:/sparkpair/secrets:ro" -v "$HOME/.ssh:/sparkpair/ssh:ro" -v "$HOME/.cache/huggingface:/sparkpair/hf:rw" -v sparkpair-engine-cache:/sparkpair/cache:rw nvcr.io/nvidia/vllm:26.05-py3 sleep infinity

# 4. Models into the HF cache (the hub on for the download; the container keeps it off)  [on spark-a]
docker exec -u "$(id -u):$(id -g)" -e HOME=/tmp -e HF_HUB_OFFLINE=0 vllm-multinode hf download openai/gpt-oss-120b
docker exec -u "$(id -u):$(id -g)" -e HOME=/tmp -e HF_HUB_OFFLINE=0 vllm-multinode hf download nvidia/gpt-oss-120b-Eagle3

# 5. Stable model paths: each repo's downloaded snapshot  [on spark-a]
mkdir -p "$HOME/.cache/huggingface/sparkpair-models"
ln -sfn "../hub/models--openai--gpt-oss-120b/snapshots/$(cat "$HOME/.cache/huggingface/hub/models--openai--gpt-oss-120b/refs/main")" "$HOME/.cache/huggingface/sparkpair-models/openai--gpt-oss-120b"
ln -sfn "../hub/models--nvidia--gpt-oss-120b-Eagle3/snapshots/$(cat "$HOME/.cache/huggingface/hub/models--nvidia--gpt-oss-120b-Eagle3/refs/main")" "$HOME/.cache/huggingface/sparkpair-models/nvidia--gpt-oss-120b-Eagle3"

# 6. Serve (detached; rank output in the container)  [on spark-a]
docker exec -d vllm-multinode sh -c 'mkdir -p /var/log/sparkpair && exec vllm serve /sparkpair/hf/sparkpair-models/openai--gpt-oss-120b --served-model-name openai/gpt-oss-120b --host 0.0.0.0 --port 8355 --tensor-parallel-size 1 --speculative-config '"'"'{"method":"eagle3","model":"/sparkpair/hf/sparkpair-models/nvidia--gpt-oss-120b-Eagle3","num_speculative_tokens":3}'"'"' --max-model-len 8192 --gpu-memory-utilization 0.8 > /var/log/sparkpair/serve.log 2>&1'

# 7. Readiness: /health, /v1/models, /v1/chat/completions  [on spark-a]
for try in $(seq 360); do curl -sf http://localhost:8355/health >/dev/null && break; sleep 5; done  # up to 30 minutes
curl -sf -w '\n' http://localhost:8355/health
curl -sf -w '\n' http://localhost:8355/v1/models
curl -sf -w '\n' http://localhost:8355/v1/chat/completions -H 'Content-Type: application/json' -d '{"model": "openai/gpt-oss-120b", "messages": [{"role": "user", "content": "Reply with one word: ready"}], "max_tokens": 8, "temperature": 0}'

# 8. Stop  [on spark-a]
docker rm -f vllm-multinode
