"""sparkpair train-draft: an Eagle3 draft trained for a profile's target from the target's own answers,
with NVIDIA ModelOpt in a container on the head (or data parallel on the inventory's first `--nodes K`
nodes, head first, at any number of nodes), exported into the head's model cache (the evaluation's launch
copies it, content-verified, to every node that runs a rank) and measured against the profile's current
draft.

Holds `plan` (the plan before anything runs: per node memory and disk, online or offline or a refusal, device,
time; pure), `sizing` (what the plan is made of, asked of the nodes), `run` (the options, the result and the
run every step records into), `hidden` (offline: the target's hidden states from the engine serving it across
the ranks, kept content-hashed on the head), `training` (the train step: the engine stopped, the hidden states
on every training node, the containers run), `record` (the draft's record on the head: each finished step with
its inputs' digest, so a second run resumes after the last finished step and a changed input re-runs its step; pure parts
tested alone), `data` (the prompt set, hostile JSONL read capped, the held-back split, generation
through the served endpoint), `train` (the ModelOpt container's command on a GPU or the CPU, each training node's
rendezvous and its progress lines),
`export` (the exported checkpoint into the HF cache layout on the head, content-hashed, with its
training record), `evaluate` (bench of both drafts, side by side) and `flow` (the command: plan, data ->
hidden -> train -> export -> evaluate, with progress events). Never prints: `report.draft` shows its result.
May import: only the layers below its own in pyproject.toml's `[tool.importlinter]` (`bench` and everything
below it).
"""
