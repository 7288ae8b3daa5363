"""The `trtllm-serve serve` command line of TensorRT-LLM 1.3.0rc12 (flags, types, defaults)."""

from .clickish import Arg, Command, Opt

BACKENDS = ("pytorch", "tensorrt", "_autodeploy")
LOG_LEVELS = ("debug", "error", "info", "internal_error", "trace", "verbose", "warning")
REASONING_PARSERS = ("deepseek-r1", "qwen3", "gpt-oss", "nano-v3", "kimi_k2", "glm45", "minimax_m2", "auto")
TOOL_PARSERS = ("qwen3", "qwen3_coder", "kimi_k2", "deepseek_v3", "deepseek_v31", "deepseek_v32",
                "glm4", "minimax_m2", "auto")
SUBCOMMANDS = ("serve", "disaggregated", "disaggregated_mpi_worker", "mm_embedding_serve", "grpc")


def _int(names, dest, default, text):
    return Opt(names, dest, "int", default, help=text)


def _str(names, dest, text):
    return Opt(names, dest, "str", None, help=text)


def _flag(names, dest, text):
    return Opt(names, dest, "flag", False, help=text)


SERVE_OPTIONS = [
    _str(("--tokenizer",), "tokenizer", "Path | Name of the tokenizer."),
    _str(("--custom_tokenizer",), "custom_tokenizer", "Custom tokenizer type or import path."),
    Opt(("--host",), "host", "str", "localhost", help="Hostname of the server."),
    _int(("--port",), "port", 8000, "Port of the server."),
    Opt(("--backend",), "backend", "choice", "pytorch", choices=BACKENDS, aliases=(("trt", "tensorrt"),),
        help="The backend to use to serve the model."),
    Opt(("--custom_module_dirs",), "custom_module_dirs", "path", None, multiple=True,
        help="Paths to custom module directories to import."),
    Opt(("--log_level",), "log_level", "choice", "info", choices=LOG_LEVELS, help="The logging level."),
    _int(("--max_beam_width",), "max_beam_width", 1, "Maximum number of beams for beam search decoding."),
    _int(("--max_batch_size",), "max_batch_size", 2048, "Maximum number of requests that the engine can schedule."),
    _int(("--max_num_tokens",), "max_num_tokens", 8192, "Maximum number of batched input tokens."),
    _int(("--max_seq_len",), "max_seq_len", None, "Maximum total length of one request."),
    _int(("--tensor_parallel_size", "--tp_size"), "tensor_parallel_size", 1, "Tensor parallelism size."),
    _int(("--pipeline_parallel_size", "--pp_size"), "pipeline_parallel_size", 1, "Pipeline parallelism size."),
    _int(("--context_parallel_size", "--cp_size"), "context_parallel_size", 1, "Context parallelism size."),
    _int(("--moe_expert_parallel_size", "--ep_size"), "moe_expert_parallel_size", None, "Expert parallelism size."),
    _int(("--moe_cluster_parallel_size", "--cluster_size"), "moe_cluster_parallel_size", None,
         "Expert cluster parallelism size."),
    _int(("--gpus_per_node",), "gpus_per_node", None, "Number of GPUs per node."),
    Opt(("--free_gpu_memory_fraction", "--kv_cache_free_gpu_memory_fraction"), "free_gpu_memory_fraction",
        "float", 0.9, help="Free GPU memory fraction reserved for KV Cache."),
    _int(("--num_postprocess_workers",), "num_postprocess_workers", 0, "Number of postprocess workers."),
    _flag(("--trust_remote_code",), "trust_remote_code", "Flag for HF transformers."),
    _str(("--revision", "--hf_revision"), "revision", "The revision to use for the HuggingFace model."),
    _str(("--config", "--extra_llm_api_options"), "extra_llm_api_options",
         "Path to a YAML file that overwrites the parameters specified by trtllm-serve."),
    Opt(("--reasoning_parser",), "reasoning_parser", "choice", None, choices=REASONING_PARSERS,
        help="Specify the parser for reasoning models."),
    Opt(("--tool_parser",), "tool_parser", "choice", None, choices=TOOL_PARSERS,
        help="Specify the parser for tool models."),
    _str(("--metadata_server_config_file",), "metadata_server_config_file", "Path to metadata server config file."),
    _str(("--server_role",), "server_role", "Server role (disaggregated mode)."),
    _flag(("--fail_fast_on_attention_window_too_large",), "fail_fast_on_attention_window_too_large",
          "Exit when the attention window does not fit the KV cache."),
    _str(("--otlp_traces_endpoint",), "otlp_traces_endpoint", "Target URL for OpenTelemetry traces."),
    _str(("--disagg_cluster_uri",), "disagg_cluster_uri", "URI of the disaggregated cluster."),
    _flag(("--enable_chunked_prefill",), "enable_chunked_prefill", "Enable chunked prefill."),
    _str(("--media_io_kwargs",), "media_io_kwargs", "Keyword arguments for media I/O (JSON)."),
    _str(("--chat_template",), "chat_template", "A custom chat template (file or one-liner)."),
    _flag(("--enable_attention_dp",), "enable_attention_dp", "Enable attention data parallelism."),
    # In 1.3.0rc12 too (its documentation's option index); accepted, without effect on the simulation.
    _str(("--served_model_name",), "served_model_name", "The model name /v1/models reports."),
    _str(("--kv_cache_dtype",), "kv_cache_dtype", "The KV cache data type."),
    Opt(("--video_pruning_rate",), "video_pruning_rate", "float", None, help="Video token pruning rate."),
    _str(("--extra_visual_gen_options",), "extra_visual_gen_options", "Path to a YAML file of visual generation options."),
    _flag(("--grpc",), "grpc", "Serve over gRPC."),
    _flag(("--telemetry",), "telemetry", "Send usage telemetry."),
    _flag(("--no-telemetry",), "no_telemetry", "Do not send usage telemetry."),
]

SERVE_COMMAND = Command(
    prog="trtllm-serve serve",
    usage_tail="[OPTIONS] MODEL",
    summary="Running an OpenAI API compatible server  MODEL: model name | HF checkpoint path | "
            "TensorRT engine path  (simulated by sparkpair's simengine)",
    options=SERVE_OPTIONS,
    arguments=[Arg("MODEL", "model")],
)

GROUP_HELP = """Usage: trtllm-serve [OPTIONS] COMMAND [ARGS]...

Options:
  --help  Show this message and exit.

Commands:
  serve*                     Running an OpenAI API compatible server
  disaggregated              Running server in disaggregated mode (not simulated)
  disaggregated_mpi_worker   Launching disaggregated MPI worker (not simulated)
  mm_embedding_serve         Running an OpenAI API compatible server (not simulated)"""


def split_subcommand(argv):
    """``trtllm-serve MODEL ...`` means ``trtllm-serve serve MODEL ...`` (click DefaultGroup).

    Returns (subcommand, remaining argv).
    """
    if argv and argv[0] in SUBCOMMANDS:
        return argv[0], argv[1:]
    return "serve", list(argv)
