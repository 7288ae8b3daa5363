"""STAND-IN for the vLLM backend's src/model.py (triton-inference-server/vllm_backend), written for the
simulated pair's Triton image. It is NOT NVIDIA's file: NVIDIA ships that one only inside
nvcr.io/nvidia/tritonserver:<yy.mm>-vllm-python-py3, so this image carries this file in its place, at
the path NVIDIA's image uses (/opt/tritonserver/backends/vllm/model.py). Everything around it is real:
tritonserver 2.51 and its Python backend (nvidia-pytriton 0.7.0), vLLM's CPU build, the engine started
from model.json. What it keeps of the real backend's contract (sources in ../NOTES.md):

  * a Python-based backend named "vllm": a model's config.pbtxt says `backend: "vllm"`;
  * auto-complete: inputs text_input (STRING [1]), stream, exclude_input_in_output and the return_*
    flags (BOOL [1], optional), sampling_parameters (STRING [1], optional, a JSON object); outputs
    text_output (STRING [-1]), finish_reason, cumulative_logprob, num_input_tokens, num_output_tokens;
    decoupled transaction policy; max_batch_size 0;
  * <model dir>/1/model.json read whole into vLLM's AsyncEngineArgs(**json): every engine argument,
    tensor_parallel_size, nnodes, node_rank, master_addr, master_port and speculative_config included;
    the engine is vLLM's AsyncLLM made as vLLM's OpenAI server makes it;
  * sampling parameters from the sampling_parameters input, else from the request's parameters;
  * streaming: one response per engine output carrying the new text, the last one flagged final;
    without streaming one response, the prompt prepended unless exclude_input_in_output is true;
  * the real backend's assertions, errors and log lines (model.json missing, decoupled required,
    KIND_GPU with a world size above 1, "Error generating stream: ...", "[vllm] Failed to start engine");
  * parameters REPORT_CUSTOM_METRICS (vllm: counters and histograms on Triton's metrics port, see
    stat_logger.py) and ENABLE_VLLM_HEALTH_CHECK.
Left out (no test of this project needs them): the image and embedding_request inputs, the logprobs
output, LoRA (multi_lora.json) and GPU_DEVICE_IDS.
"""
from __future__ import annotations

import asyncio
import json
import os
import queue
import threading
import traceback

import numpy as np
import triton_python_backend_utils as pb_utils
from stat_logger import TritonStatLoggerFactory
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.renderers.inputs.preprocess import parse_model_prompt
from vllm.sampling_params import SamplingParams
from vllm.usage.usage_lib import UsageContext
from vllm.utils import random_uuid
from vllm.v1.engine.async_llm import AsyncLLM

ENGINE_ARGS_FILE = "model.json"
CASTS = {int: int, float: float, bool: bool, str: str, int | None: int}  # SamplingParams field type -> cast
FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
FLAGS = ("stream", "exclude_input_in_output", "return_finish_reason", "return_cumulative_logprob",
         "return_num_input_tokens", "return_num_output_tokens")
INPUTS = [{"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]},
          {"name": "sampling_parameters", "data_type": "TYPE_STRING", "dims": [1], "optional": True}]
INPUTS += [{"name": flag, "data_type": "TYPE_BOOL", "dims": [1], "optional": True} for flag in FLAGS]
OUTPUTS = [{"name": "text_output", "data_type": "TYPE_STRING", "dims": [-1]},
           {"name": "finish_reason", "data_type": "TYPE_STRING", "dims": [-1]},
           {"name": "cumulative_logprob", "data_type": "TYPE_FP32", "dims": [-1]},
           {"name": "num_input_tokens", "data_type": "TYPE_UINT32", "dims": [1]},
           {"name": "num_output_tokens", "data_type": "TYPE_UINT32", "dims": [-1]}]


class TritonPythonModel:
    """The vllm backend: one vLLM engine per model instance, requests forwarded as they arrive."""

    @classmethod
    def auto_complete_config(cls, config):
        """Add the contract's inputs and outputs the model's config.pbtxt lacks; decoupled, no batching."""
        present = config.as_dict()
        have_in = {tensor["name"] for tensor in present["input"]}
        have_out = {tensor["name"] for tensor in present["output"]}
        for tensor in INPUTS:
            if tensor["name"] not in have_in:
                config.add_input(tensor)
        for tensor in OUTPUTS:
            if tensor["name"] not in have_out:
                config.add_output(tensor)
        config.set_model_transaction_policy(dict(decoupled=True))
        config.set_max_batch_size(0)
        return config

    def initialize(self, args):
        self.args = args
        self.logger = pb_utils.Logger
        self.model_config = json.loads(args["model_config"])
        text_config = pb_utils.get_output_config_by_name(self.model_config, "text_output")
        self.output_dtype = pb_utils.triton_string_to_numpy(text_config["data_type"])
        self.health_check = self._config_flag("ENABLE_VLLM_HEALTH_CHECK")
        self.healthy = True
        self.engine_args = self._engine_args()
        self.metrics = []
        if self._config_flag("REPORT_CUSTOM_METRICS") and not self.engine_args.disable_log_stats:
            try:
                self.metrics.append(TritonStatLoggerFactory(
                    {"model": args["model_name"], "version": args["model_version"]}, self.logger))
            except pb_utils.TritonModelException as exc:
                if "metrics not supported" not in str(exc):
                    raise
                self.logger.log_info("[vllm] Metrics not supported")
        self._start_engine()
        self.responses = queue.Queue()
        self.response_thread = threading.Thread(target=self._send_responses)
        self.response_thread.start()

    def _config_flag(self, name: str) -> bool:
        """Whether config.pbtxt sets parameter NAME to the string "true"."""
        parameter = self.model_config.get("parameters", {}).get(name)
        return bool(parameter) and parameter.get("string_value", "").lower() == "true"

    def _engine_args(self) -> AsyncEngineArgs:
        """model.json from the model's version folder, whole, as vLLM's AsyncEngineArgs."""
        assert pb_utils.using_decoupled_model_transaction_policy(self.model_config), \
            "vLLM Triton backend must be configured to use decoupled model transaction policy"
        path = os.path.join(pb_utils.get_model_dir(), ENGINE_ARGS_FILE)
        assert os.path.isfile(path), \
            f"'{ENGINE_ARGS_FILE}' containing vllm engine args must be provided in '{pb_utils.get_model_dir()}'"
        with open(path) as handle:
            self.engine_config = json.load(handle)
        world = int(self.engine_config.get("tensor_parallel_size", 1)) * int(
            self.engine_config.get("pipeline_parallel_size", 1))
        if world > 1 and self.args["model_instance_kind"] == "GPU":
            raise ValueError("KIND_GPU is currently for single-GPU models, please specify KIND_MODEL "
                             "in the model's config.pbtxt for multi-GPU models")
        return AsyncEngineArgs(**self.engine_config)

    def _start_engine(self) -> None:
        """Run the engine's event loop in its own thread; wait until the engine is up or failed."""
        self.engine = None
        self.started = threading.Condition()
        self.stop = asyncio.Event()
        self.ongoing = 0
        self.loop_thread = threading.Thread(target=asyncio.run, args=(self._run_engine(),))
        self.loop_thread.start()
        with self.started:
            while self.engine is None:
                self.started.wait()
        if isinstance(self.engine, Exception):
            failure = self.engine
            self.logger.log_error(f"[vllm] Failed to start engine: "
                                  f"{''.join(traceback.format_exception(failure))}")
            self.loop_thread.join()
            raise failure
        self.tasks = asyncio.run_coroutine_threadsafe(self.engine.get_supported_tasks(), self.loop).result()

    async def _run_engine(self) -> None:
        """vLLM's AsyncLLM for the engine arguments, alive until finalize() sets the stop event."""
        engine = None
        try:
            vllm_config = self.engine_args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
            if self.metrics:
                self.logger.log_warn("V1 is enabled, but got --disable-frontend-multiprocessing.")
            engine = AsyncLLM.from_vllm_config(
                vllm_config=vllm_config, usage_context=UsageContext.OPENAI_API_SERVER,
                stat_loggers=self.metrics or None, enable_log_requests=self.engine_args.enable_log_requests,
                aggregate_engine_logging=self.engine_args.aggregate_engine_logging,
                disable_log_stats=self.engine_args.disable_log_stats)
            self.loop = asyncio.get_running_loop()
            with self.started:
                self.engine = engine
                self.started.notify_all()
            await self.stop.wait()
            while self.ongoing > 0:
                self.logger.log_info(f"[vllm] Awaiting remaining {self.ongoing} requests")
                await asyncio.sleep(1)
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()
        except Exception as exc:
            with self.started:
                if self.engine is None:
                    self.engine = exc
                    self.started.notify_all()
                    return
            raise
        finally:
            if engine is not None:
                engine.shutdown()
        self.engine = None
        self.logger.log_info("[vllm] Shutdown complete")

    def _send_responses(self) -> None:
        """Send queued (state, response, flags) until None arrives; keep the request count."""
        while (item := self.responses.get()) is not None:
            state, response, flags = item
            try:
                state["sender"].send(response, flags)
                if not state["last"]:
                    state["cancelled"] = state["sender"].is_cancelled()
            except Exception:  # noqa: BLE001 (a client gone mid-stream must not stop the other requests' responses)
                self.logger.log_error(f"An error occurred while sending a response: {traceback.format_exc()}")
            finally:
                if flags == FINAL:
                    self.ongoing -= 1

    def execute(self, requests):
        if self.health_check and not self._check_health(requests):
            return None
        for request in requests:
            assert not self.stop.is_set(), "Cannot create tasks after shutdown has been requested"
            asyncio.run_coroutine_threadsafe(self._infer(request), self.loop)
        return None

    def _check_health(self, requests) -> bool:
        """ENABLE_VLLM_HEALTH_CHECK: an engine that fails its health check unloads the model."""
        try:
            asyncio.run_coroutine_threadsafe(self.engine.check_health(), self.loop).result()
        except Exception:  # noqa: BLE001 (whatever the engine raised, the model is unloaded)
            self.logger.log_error(f"[vllm] Engine is not healthy and model will be unloaded: {traceback.format_exc()}")
            pb_utils.unload_model(self.model_config["name"])
            self.healthy = False
        if not self.healthy:
            for request in requests:
                request.get_response_sender().send(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    message="Model is unavailable due to unhealthy vLLM engine",
                    code=pb_utils.TritonError.UNAVAILABLE)), flags=FINAL)
        return self.healthy

    async def _infer(self, request) -> None:
        """One request through the engine: streamed deltas, or one final response."""
        sender = request.get_response_sender()
        state = {"sender": sender, "cancelled": False, "last": False}
        self.ongoing += 1
        count_here = True
        try:
            prompt, flags, parameters = self._read_request(request)
            stream = flags["stream"]
            sampling = self._sampling_params(parameters)
            parsed = parse_model_prompt(self.engine.model_config, {"prompt": prompt})
            (engine_input,) = await self.engine.renderer.render_cmpl_async([parsed])
            request_id = random_uuid()
            seen: dict = {}
            output = None
            async for output in self.engine.generate(engine_input, sampling, request_id, prompt_text=prompt):
                if state["cancelled"] if stream else sender.is_cancelled():
                    self.logger.log_info("[vllm] Cancelling the request")
                    await self.engine.abort(request_id)
                    self.logger.log_info("[vllm] Successfully cancelled the request")
                    if stream:
                        state["last"] = True
                        count_here = False
                        self.responses.put_nowait((state, pb_utils.InferenceResponse(error=pb_utils.TritonError(
                            message="Request was cancelled", code=pb_utils.TritonError.CANCELLED)), FINAL))
                    break
                if stream:
                    response = self._response(output, seen, flags, prepend="")
                    if output.finished:
                        state["last"] = True
                        count_here = False
                    self.responses.put_nowait((state, response, FINAL if output.finished else 0))
            if not stream and output is not None:
                prepend = "" if flags["exclude_input_in_output"] else (output.prompt or prompt)
                sender.send(self._response(output, {}, flags, prepend=prepend), flags=FINAL)
        except Exception as exc:
            self.logger.log_error(f"[vllm] Error generating stream: {traceback.format_exc()}")
            text = pb_utils.Tensor("text_output", np.asarray(["N/A"], dtype=self.output_dtype))
            sender.send(pb_utils.InferenceResponse(output_tensors=[text],
                                                   error=pb_utils.TritonError(f"Error generating stream: {exc}")),
                        flags=FINAL)
            raise
        finally:
            if count_here:
                self.ongoing -= 1

    def _read_request(self, request) -> tuple[str, dict, str]:
        """(prompt, flags, sampling parameters as JSON text) of a Triton request."""
        prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()[0]
        prompt = prompt.decode("utf-8") if isinstance(prompt, bytes) else str(prompt)
        flags = {}
        for name in FLAGS:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            flags[name] = None if tensor is None else bool(tensor.as_numpy()[0])
        flags["stream"] = bool(flags["stream"])
        if flags["exclude_input_in_output"] is None:
            flags["exclude_input_in_output"] = flags["stream"]
        if flags["stream"] and not flags["exclude_input_in_output"]:
            raise ValueError("When streaming, `exclude_input_in_output` = False is not allowed.")
        tensor = pb_utils.get_input_tensor_by_name(request, "sampling_parameters")
        parameters = tensor.as_numpy()[0].decode("utf-8") if tensor is not None else request.parameters()
        return prompt, flags, parameters

    def _sampling_params(self, text: str) -> SamplingParams:
        """vLLM's SamplingParams from the JSON object TEXT: null values left to vLLM's defaults, and a value of
        a field typed int, float, bool or str (or optional int) cast to that type, as the real backend casts
        (GenAI-Perf sends {"max_tokens": "64"}; bool() of a string is True whatever it says, as there)."""
        try:
            given = {key: value for key, value in json.loads(text or "{}").items() if value is not None}
            for key, value in given.items():
                cast = CASTS.get(SamplingParams.__annotations__.get(key))
                if cast is not None:
                    given[key] = cast(value)
            return SamplingParams(**given)
        except Exception as exc:
            self.logger.log_error(f"[vllm] Was trying to create `TritonSamplingParams`, but got exception: {exc}")
            raise ValueError(f"invalid sampling parameters: {exc}") from exc

    def _response(self, output, seen: dict, flags: dict, prepend: str):
        """The response for one engine output: text (and token counts) new since SEEN, which it updates."""
        texts, counts = [], []
        for index, completion in enumerate(output.outputs):
            old_text, old_tokens = seen.get(index, (0, 0))
            texts.append((prepend + completion.text[old_text:]).encode("utf-8"))
            counts.append(len(completion.token_ids) - old_tokens)
            seen[index] = (len(completion.text), len(completion.token_ids))
        tensors = [pb_utils.Tensor("text_output", np.asarray(texts, dtype=self.output_dtype))]
        if flags["return_finish_reason"]:
            reasons = [str(completion.finish_reason) for completion in output.outputs]
            tensors.append(pb_utils.Tensor("finish_reason", np.asarray(reasons, dtype=np.object_)))
        if flags["return_cumulative_logprob"]:
            logprobs = [completion.cumulative_logprob for completion in output.outputs]
            tensors.append(pb_utils.Tensor("cumulative_logprob", np.asarray(logprobs, dtype=np.float32)))
        if flags["return_num_input_tokens"]:
            tensors.append(pb_utils.Tensor("num_input_tokens",
                                           np.asarray(len(output.prompt_token_ids or ()), dtype=np.uint32)))
        if flags["return_num_output_tokens"]:
            tensors.append(pb_utils.Tensor("num_output_tokens", np.asarray(counts, dtype=np.uint32)))
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def finalize(self):
        self.logger.log_info("[vllm] Issuing finalize to vllm backend")
        self.loop.call_soon_threadsafe(self.stop.set)
        self.loop_thread.join()
        self.responses.put(None)
        self.response_thread.join()
        for factory in self.metrics:
            factory.finalize()
