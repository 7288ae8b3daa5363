"""The engine: the profile's runtime across the rank nodes, from the doctor's preflight to a ready endpoint.

Holds `containers` (the engine container per node), `modelfetch` (`hf download` in the container,
`local:PATH`), `modelcopy` (models to the other node over both QSFP twins), `modelsync` (models on
every rank node, verified), `meter` (bytes over time as progress), `lifecycle` (start, stop, logs,
status), `readiness` (port, health, the model, a first generation: the runtime's `ServingApi`), `stages` (the
stages of a multi-node start and the last one a log reached), `signatures` (failure causes, their fixes and the
lines that show them), `loglines` (a log's lines found by the words they hold, one pass), `logtime` (a log line's
own timestamp), `diagnose` (causes from logs, pure), `redact` (secrets out of text, pure), `credentials` (the
engine's own secrets: placed on the rank nodes, sent as a bearer, redacted by the bundle), `state` (the
launch state), `watch` (the launch watchdog), `memguard` (the memory guard beside the engine: started, ended,
read; the watch's check that a load fits above its floor), `bundle` (`sparkpair bundle`), `collect` (doctor's facts
from both nodes), `doctor` (the doctor flow: facts, then every judge of `checks`; launch's preflight),
`mpijobs` (doctor --deep's MPI and NCCL jobs in engine containers, for doctor and `launch
--check-fabric`), `fabric` (each node's NCCL settings, the fabric proof), `lockflow` (the
pair's lock gathered now, launch's drift check, the bundle's lock and diff) and `launch` (the flow).
May import: only the layers below its own in pyproject.toml's `[tool.importlinter]`
(`checks`, `apply`, `probes`, `runtimes`, `render`, `transport`, `inventory`, the leaf modules).
"""
