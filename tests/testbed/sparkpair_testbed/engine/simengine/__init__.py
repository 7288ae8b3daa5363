"""simengine: a small stand-in for TensorRT-LLM's serving tools on the simulated Spark pair.

It provides the command-line tools the NVIDIA two-Spark recipe uses (`hf download`,
`trtllm-llmapi-launch`, `trtllm-serve`) with the same flags, the same configuration
strictness and the same HTTP API, but generates deterministic pseudo-text with known,
configurable timing instead of running a model. Every generation step is a real MPI
collective across all ranks, so the server genuinely depends on every node.
"""

TRTLLM_VERSION = "1.3.0rc12"
HUGGINGFACE_HUB_VERSION = "1.0.1"
