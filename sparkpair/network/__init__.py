"""setup-network: the QSFP twins addressed by netplan, SSH trust between the nodes, verified both ways.

Holds `netplan` (the netplan planner, pure) and `lockout` (the lockout guard, pure), `watchdog` (the
root job on each node that puts the network back unless confirmed), `guarded` (the self-reverting
apply: arm, apply, reach again over new SSH connections, verify, confirm or revert), `verify` (the
link probed until it works, judged by doctor's own link checks), `rollback` (undo an apply from its
journal), `restore` (`--restore`: the first-touch snapshot; `--last`: the last apply), `trust` (node
keys and host keys), `run` (a run's options, plan, result and state) and `flow` (the command: plan,
apply, verify; Ctrl-C undoes the run). May import: only the layers below its own in pyproject.toml's
`[tool.importlinter]` (`checks`, `apply`, `probes`, `render`, `transport`, `inventory`, the leaf
modules); never `engine`.
"""
