"""Package data, never imported by sparkpair's own code (the `data` contract in pyproject.toml).

Holds `mpi_probe` (the program every MPI rank runs for doctor --deep, read with importlib.resources),
the node program for models in `modelnode/` (`mn_main`, `mn_blobs`, `mn_links`, `mn_receive`,
`mn_send`, `mn_wire`: run with the node's own python3), `train_eagle3` (trains an Eagle3 draft inside
the ModelOpt container), `draft_install` (puts an exported draft, or offline training's hidden states, into a node's Hugging Face
cache), `vllm_hidden_states` (vLLM's hidden-states connector for train-draft's offline capture, run inside the
vLLM container), `memguard` (the memory guard beside a running engine: run detached with the node's python3, it
stops the engine's container before unified memory runs out), and each engine's own definitions as JSON.
"""
