#!/usr/bin/env bash
# `sparkpair launch gpt-oss-120b` as shell commands: a runbook generated from inventory.example.yaml.
# GPT-OSS-120B + Eagle3 on one Spark (NVIDIA single-Spark recipe)
# Each step names the node it runs on. sparkpair runs the same commands over SSH, `docker run` with
# exactly the settings shown here.
# Secrets: no token is ever written here. sparkpair copies the HF token to
# ~/.sparkpair/secrets/hf_token (mode 0600) on each node; the container reads it read-only through
# HF_TOKEN_PATH=/sparkpair/secrets/hf_token, so it never appears in argv, `ps` or `docker inspect`.
set -euo pipefail

# 1. Preflight: the launch-critical checks  [on this machine]
sparkpair doctor

# 2. Files: rendered config in ~/.sparkpair/config, token in ~/.sparkpair/secrets (0600)  [on spark-a]
# ~/.sparkpair/config/container.env
# ~/.sparkpair/config/extra-llm-api-config.yml

# 3. Engine container  [on spark-a]
docker run -d --name trtllm-multinode --network host --ipc host --ulimit=memlock=-1 --ulimit=stack=67108864 --gpus all --device /dev/infiniband:/dev/infiniband --label sparkpair.cluster=spark-pair --label sparkpair.node=spark-a --env-file "$HOME/.sparkpair/config/container.env" -v "$HOME/.sparkpair/config:/sparkpair/config:ro" -v "$HOME/.sparkpair/secrets:/sparkpair/secrets:ro" -v "$HOME/.ssh:/sparkpair/ssh:ro" -v "$HOME/.cache/huggingface:/sparkpair/hf:rw" nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12 sleep infinity

# 4. Models into the HF cache, verified by manifest  [on spark-a]
docker exec -u "$(id -u):$(id -g)" trtllm-multinode hf download openai/gpt-oss-120b
docker exec -u "$(id -u):$(id -g)" trtllm-multinode hf download nvidia/gpt-oss-120b-Eagle3-long-context
# stable draft path: /sparkpair/hf/sparkpair-models/nvidia--gpt-oss-120b-Eagle3-long-context -> ../hub/models--nvidia--gpt-oss-120b-Eagle3-long-context/snapshots/$(cat refs/main)

# 5. Serve (detached; rank output in the container)  [on spark-a]
docker exec -d trtllm-multinode sh -c 'mkdir -p /var/log/sparkpair && exec trtllm-serve openai/gpt-oss-120b --backend pytorch --max_batch_size 1 --tp_size 1 --extra_llm_api_options /sparkpair/config/extra-llm-api-config.yml --port 8355 --host 0.0.0.0 > /var/log/sparkpair/serve.log 2>&1'

# 6. Readiness: port, /health, /v1/models, one completion  [on spark-a]
curl -sf http://localhost:8355/health
curl -s http://localhost:8355/v1/models
curl -s http://localhost:8355/v1/chat/completions -H 'Content-Type: application/json' -d '{"model": "openai/gpt-oss-120b", "messages": [{"role": "user", "content": "Paris is great because"}], "max_tokens": 64}'

# 7. Stop  [on spark-a]
docker rm -f trtllm-multinode
