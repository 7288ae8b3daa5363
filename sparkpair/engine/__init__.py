"""The engine: TensorRT-LLM at TP=2 across both nodes, from containers to a ready endpoint.

Holds `containers` (the engine container per node), `modelsync` (models on every rank node,
verified), `lifecycle` (start, stop, logs, status), `readiness` (port, /health, /v1/models, a
completion), `stages` (the stages of a multi-node start and the last one a log reached),
`signatures` (failure causes, their fixes and the lines that show them), `diagnose` (causes from
logs, pure), `fabric` (each node's NCCL settings, the fabric proof) and `launch` (the flow). May import
inventory, render, probes, apply, checks, transport, errors and paths.
"""
