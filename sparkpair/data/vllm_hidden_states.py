"""vLLM's own hidden-state capture for train-draft's offline mode, on any device; runs INSIDE the vLLM engine
container (imported by `vllm serve` through `--kv-transfer-config`'s kv_connector_module_path, this file in
the node's sparkpair config folder on PYTHONPATH), never imported by sparkpair itself.

vLLM captures the target's hidden states with its `extract_hidden_states` speculative method and writes them
with its ExampleHiddenStatesConnector: one safetensors file per request ({"hidden_states": [tokens, layers,
hidden], "token_ids": [tokens]}), written by tensor-parallel rank 0, its path returned to the client in the
answer's kv_transfer_params. That connector copies the states off the GPU on a CUDA stream with CUDA events
and writes the file in a background thread after the answer went out; vLLM's CPU build has neither. This
subclass writes the same file synchronously on any device (copied to host memory, written under a temporary
name, made readable by the node's user, renamed), so the file is whole when its answer arrives, and the same
path runs on a Spark and on the simulated pair.
"""
import os

import torch
from safetensors.torch import save_file
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector,
    extract_from_kv_cache,
)


class _Written:
    """Stands for the CUDA event of a copy that is already done (vLLM's get_finished polls query())."""

    @staticmethod
    def query():
        return True


class SparkpairHiddenStatesConnector(ExampleHiddenStatesConnector):
    """ExampleHiddenStatesConnector, writing each request's file before its answer goes out."""

    def _submit_async_write(self, pending):
        if not self._is_tp_rank_zero or self._kv_cache is None:
            return
        blocks = torch.tensor(pending.block_ids, dtype=torch.long)
        offsets = torch.arange(0, self._block_size, dtype=torch.long)
        slots = (offsets.reshape((1, self._block_size)) + blocks.reshape((-1, 1)) * self._block_size).flatten()
        slots = slots.to(self._kv_cache.device)
        states = extract_from_kv_cache(self._kv_cache, slots, pending.token_ids.shape[0]).to("cpu").clone()
        os.makedirs(os.path.dirname(pending.filename), exist_ok=True)
        partial = pending.filename + ".partial"
        lock_fd = self._lock_fds.pop(pending.req_id, None)
        try:
            save_file({"hidden_states": states, "token_ids": pending.token_ids.clone()}, partial)
            os.chmod(partial, 0o644)   # the engine runs as root; sparkpair moves the file as the node's user
            os.replace(partial, pending.filename)
        finally:
            if lock_fd is not None:
                os.close(lock_fd)
        self._req_copy_events[pending.req_id] = _Written()
