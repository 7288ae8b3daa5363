"""vLLM's own hidden-state capture for train-draft's offline mode, on any device; runs INSIDE the vLLM engine
container (imported by `vllm serve` through `--kv-transfer-config`'s kv_connector_module_path, this file in
the node's sparkpair config folder on PYTHONPATH), never imported by sparkpair itself.

vLLM captures the target's hidden states with its `extract_hidden_states` speculative method and writes them
with its ExampleHiddenStatesConnector: one safetensors file per request ({"hidden_states": [tokens, layers,
hidden], "token_ids": [tokens]}), written by tensor-parallel rank 0, its path returned to the client in the
answer's kv_transfer_params. That connector copies the states off the GPU on a CUDA stream with CUDA events;
vLLM's CPU build has neither. This subclass keeps vLLM's connector as it is on a GPU and, where the cache
lives in host memory, writes the same file synchronously (to a temporary name, then renamed), so the same
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
    """ExampleHiddenStatesConnector, writing synchronously when the KV cache is in host memory."""

    def _submit_async_write(self, pending):
        if self._kv_cache is None or self._kv_cache.is_cuda:
            super()._submit_async_write(pending)
            return
        if not self._is_tp_rank_zero:
            return
        blocks = torch.tensor(pending.block_ids, dtype=torch.long)
        offsets = torch.arange(0, self._block_size, dtype=torch.long)
        slots = (offsets.reshape((1, self._block_size)) + blocks.reshape((-1, 1)) * self._block_size).flatten()
        states = extract_from_kv_cache(self._kv_cache, slots, pending.token_ids.shape[0]).clone()
        os.makedirs(os.path.dirname(pending.filename), exist_ok=True)
        partial = pending.filename + ".partial"
        lock_fd = self._lock_fds.pop(pending.req_id, None)
        try:
            save_file({"hidden_states": states, "token_ids": pending.token_ids.clone()}, partial)
            os.replace(partial, pending.filename)
        finally:
            if lock_fd is not None:
                os.close(lock_fd)
        self._req_copy_events[pending.req_id] = _Written()
