"""Render: the inventory turned into what runs on the nodes, pure and offline.

Holds `recipe` (NVIDIA's two-Spark recipe as data: container spec, env, hostfile, command lines),
`files` (jinja2 templates to validated `RenderedFile`s), `runbook` (the launch as readable steps),
`engine_config` (the check of the engine YAML against TensorRT-LLM's schema) and `engine_schema`
(that schema by version, derived from NVIDIA's sources). May import: only the layers below its own
in pyproject.toml's `[tool.importlinter]` (`inventory` and the leaf modules); never a connection
(the `pure` contract there).
"""

from sparkpair.render.files import (
    NETPLAN_FILE,
    RenderedFile,
    container_env_file,
    hostfile,
    launch_script,
    llm_api_config,
    netplan_file,
    node_config_files,
    render_template,
    rsh_agent,
    sshd_entrypoint,
    templates_dir,
    trtllm_files,
    write_files,
)

__all__ = ["NETPLAN_FILE", "RenderedFile", "container_env_file", "hostfile", "launch_script", "llm_api_config",
           "netplan_file", "node_config_files", "render_template", "rsh_agent", "sshd_entrypoint",
           "templates_dir", "trtllm_files", "write_files"]
