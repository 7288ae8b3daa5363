#!/usr/bin/env python3
"""NVIDIA's GenAI-Perf against a Triton Inference Server's generate endpoint (seed 003's measurement: concurrency 1,
streaming, time to first token and output tokens per second), and, once sparkpair serves Triton, `sparkpair bench`
against the same server in the same run, both figures side by side with their ratio (issue 34 asks them within 5%).

GenAI-Perf (genai-perf 0.0.16 driving perf_analyzer 2.60.0) runs from its own root (genai_perf_tools.py: this
machine's glibc is too old for perf_analyzer's wheel), made on first use and cached. Its tokenizer is a LOCAL
folder (--tokenizer; default: the tiny target's snapshot in the simulated head's HF cache, which
`scripts/testbed triton` put there): GenAI-Perf would otherwise fetch `hf-internal-testing/llama-tokenizer` from the
hub, and HF_HUB_OFFLINE=1 is set for it in any case. Needs root (the tools root runs in a chroot).

Usage:
  .venv/bin/python scripts/bench/triton_genai_perf.py [--url http://198.18.0.11:8000] [--model eagle_model]
      [--endpoint-type generate|kserve] [--requests 20] [--isl 64] [--osl 64] [--tokenizer DIR]
      [--sparkpair-inventory PATH [--profile qwen3-235b] [--rounds 3]]
The last lines: `genai-perf: TTFT p50 X ms, output Y tok/s` and, with --sparkpair-inventory,
`sparkpair bench: TTFT p50 X ms, output Y tok/s`, `ratio sparkpair/genai-perf: TTFT R, tok/s R` (of the
rounds' medians) and `paired ratio ...` (the median of each round's own ratio, with their range). With
--sparkpair-inventory both send the same prompt (--prompt; GenAI-Perf's --input-file, bench's --prompts), so the
time to first token compares like with like; without it GenAI-Perf's prompts are synthetic (--isl tokens).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import genai_perf_tools  # scripts/bench/genai_perf_tools.py, beside this script
from sparkpair_testbed.layout import HEAD, VLLM_TARGET_REPO
from sparkpair_testbed.vllm_models import hub_dir

ROOT = Path(__file__).resolve().parents[2]
GRPC_PORT = 8001
EXPORT = "profile_export_genai_perf.json"
# sparkpair bench's sampling parameters for Triton (runtimes/triton.py TritonApi: temperature 0, the input left out
# of text_output); GenAI-Perf puts --extra-inputs beside text_input, which Triton hands to the request's parameters.
SAME_AS_BENCH = ("--extra-inputs", "temperature:0", "--extra-inputs", "exclude_input_in_output:true")
PROMPT = ("Write a short story of about 300 words about a lighthouse keeper who finds a message in a bottle addressed "
          "to her grandmother.")  # the first of sparkpair's bundled prompts


def default_tokenizer() -> Path | None:
    """The tiny target's snapshot in the simulated head's HF cache, as this machine sees it (None when absent)."""
    folder = hub_dir(HEAD) / ("models--" + VLLM_TARGET_REPO.replace("/", "--"))
    ref = folder / "refs" / "main"
    return folder / "snapshots" / ref.read_text().strip() if ref.is_file() else None


def tokenizer_binds(folder: Path) -> tuple[str, dict[str, Path]]:
    """(the tokenizer's path in the tools root, what to bind there): a snapshot of a Hugging Face cache holds
    symlinks into ../../blobs, so its whole repo folder goes in; any other folder goes in as it is."""
    folder = folder.absolute()
    if folder.parent.name == "snapshots":
        return f"/tokenizer/snapshots/{folder.name}", {"/tokenizer": folder.parent.parent}
    return "/tokenizer", {"/tokenizer": folder}


def genai_perf_argv(args: argparse.Namespace, tokenizer: str) -> list[str]:
    """`genai-perf profile` against the server: Triton's HTTP generate endpoint (streaming: generate_stream), or
    seed 003's form, the KServe gRPC endpoint with the vllm backend."""
    parts = urlsplit(args.url)
    if args.endpoint_type == "kserve":  # sampling_parameters {"max_tokens": N, "min_tokens": N}
        target = ["--endpoint-type", "kserve", "--backend", "vllm", "--url", f"{parts.hostname}:{GRPC_PORT}",
                  "--output-tokens-mean-deterministic"]
    else:  # max_tokens and the sampling beside text_input: Triton hands keys that name no input to the request's parameters.
        # GenAI-Perf 0.0.16 posts streaming requests to .../generate, which Triton refuses for the decoupled vLLM
        # backend ("generate expects model to produce exactly 1 response, use generate stream ..."): name the stream URL.
        # The sampling bench sends (greedy, only the new text back), so both time the same generation.
        target = ["--endpoint-type", "generate", "--url", f"{parts.scheme}://{parts.netloc}",
                  "--endpoint", f"v2/models/{args.model}/generate_stream", *SAME_AS_BENCH]
    inputs = ["--input-file", "/in/inputs.jsonl"] if args.sparkpair_inventory else \
        ["--synthetic-input-tokens-mean", str(args.isl), "--synthetic-input-tokens-stddev", "0"]
    return ["genai-perf", "profile", "-m", args.model, *target, "--streaming", "--tokenizer", tokenizer,
            "--concurrency", "1", "--request-count", str(args.requests), "--warmup-request-count", "1", *inputs,
            "--output-tokens-mean", str(args.osl), "--artifact-dir", "/out", "--profile-export-file",
            "profile_export.json"]


def genai_perf_figures(export: dict) -> tuple[float, float]:
    """(TTFT p50 in ms, output tokens per second) from GenAI-Perf's profile_export_genai_perf.json."""
    ttft = export["time_to_first_token"]
    unit = ttft.get("unit", "ms")
    return ttft["p50"] / (1e6 if unit == "ns" else 1.0), export["output_token_throughput"]["avg"]


def run_genai_perf(args: argparse.Namespace) -> tuple[float, float]:
    tokenizer = args.tokenizer or default_tokenizer()
    if tokenizer is None or not (Path(tokenizer) / "tokenizer.json").is_file():
        sys.exit(f"no local tokenizer at {tokenizer} (scripts/testbed triton plants the tiny target, or give --tokenizer)")
    inside, binds = tokenizer_binds(Path(tokenizer))
    with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as given:
        line = json.dumps({"text": args.prompt}) + "\n"
        (Path(given) / "inputs.jsonl").write_text(line * (args.requests + 1))
        proc = genai_perf_tools.run(genai_perf_argv(args, inside), {**binds, "/out": Path(out), "/in": Path(given)})
        exports = sorted(Path(out).rglob(EXPORT))
        if proc.returncode != 0 or not exports:
            sys.exit(f"genai-perf failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
        print(proc.stdout[-4000:], file=sys.stderr)
        return genai_perf_figures(json.loads(exports[0].read_text()))


def sparkpair_figures(args: argparse.Namespace) -> tuple[float, float]:
    """(TTFT p50 in ms, output tokens per second) from `sparkpair bench --json` on what sparkpair serves."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl") as prompts, tempfile.TemporaryDirectory() as out:
        prompts.write(json.dumps({"prompt": args.prompt}) + "\n")
        prompts.flush()
        argv = [sys.executable, "-m", "sparkpair", "-i", args.sparkpair_inventory, "bench",
                *([args.profile] if args.profile else []), "--concurrency", "1", "--requests", str(args.requests),
                "--max-tokens", str(args.osl), "--prompts", prompts.name, "--out", out, "--json"]
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"sparkpair bench failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    row = json.loads(proc.stdout)["rows"][0]
    return row["ttft_ms_p50"], row["aggregate_tokens_per_s"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default=f"http://{HEAD.mgmt_ip}:8000", help="Triton's HTTP endpoint")
    parser.add_argument("--model", default="eagle_model")
    parser.add_argument("--endpoint-type", choices=("generate", "kserve"), default="generate")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--isl", type=int, default=64, help="prompt tokens (synthetic)")
    parser.add_argument("--osl", type=int, default=64, help="output tokens")
    parser.add_argument("--tokenizer", help="a local tokenizer folder (default: the tiny target's snapshot)")
    parser.add_argument("--prompt", default=PROMPT, help="the prompt both send (with --sparkpair-inventory)")
    parser.add_argument("--sparkpair-inventory", help="also run `sparkpair bench` with this inventory")
    parser.add_argument("--profile", help="the profile sparkpair bench measures (default: the inventory's)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="with --sparkpair-inventory: rounds of both, in turn first, medians compared (the "
                             "CPU build's time to first token moves with the machine's load by a factor of two)")
    args = parser.parse_args(argv)
    if not args.sparkpair_inventory:
        ttft, tokens = run_genai_perf(args)
        print(f"genai-perf: TTFT p50 {ttft:.1f} ms, output {tokens:.2f} tok/s")
        return
    theirs, ours = [], []
    for round_number in range(1, args.rounds + 1):   # interleaved, so a change of load meets both alike
        if round_number % 2:   # GenAI-Perf first in odd rounds, bench first in even ones: no tool always goes first
            theirs.append(run_genai_perf(args))
            ours.append(sparkpair_figures(args))
        else:
            ours.append(sparkpair_figures(args))
            theirs.append(run_genai_perf(args))
        print(f"round {round_number}: genai-perf TTFT p50 {theirs[-1][0]:.1f} ms, {theirs[-1][1]:.2f} tok/s; "
              f"sparkpair bench TTFT p50 {ours[-1][0]:.1f} ms, {ours[-1][1]:.2f} tok/s", flush=True)
    ttft, tokens = (statistics.median(row[i] for row in theirs) for i in (0, 1))
    own_ttft, own_tokens = (statistics.median(row[i] for row in ours) for i in (0, 1))
    print(f"genai-perf: TTFT p50 {ttft:.1f} ms, output {tokens:.2f} tok/s (median of {args.rounds} rounds)")
    print(f"sparkpair bench: TTFT p50 {own_ttft:.1f} ms, output {own_tokens:.2f} tok/s (median of {args.rounds} rounds)")
    print(f"ratio sparkpair/genai-perf: TTFT {own_ttft / ttft:.3f}, tok/s {own_tokens / tokens:.3f}")
    # each round's two runs met the same load: the median of the rounds' own ratios is the paired estimate
    ratios = [[b[i] / a[i] for a, b in zip(theirs, ours, strict=True)] for i in (0, 1)]
    paired = [statistics.median(values) for values in ratios]
    spread = [(min(values), max(values)) for values in ratios]
    print(f"paired ratio (median of the rounds' ratios): TTFT {paired[0]:.3f} ({spread[0][0]:.2f}-{spread[0][1]:.2f}), "
          f"tok/s {paired[1]:.3f} ({spread[1][0]:.2f}-{spread[1][1]:.2f})")


if __name__ == "__main__":
    main()
