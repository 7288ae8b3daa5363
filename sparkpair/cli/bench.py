"""`sparkpair bench`."""

from __future__ import annotations

from pathlib import Path

import click

from sparkpair.cli.app import App, cli, pass_app
from sparkpair.cli.options import int_list, known_profile, writable_target


@cli.command("bench")
@click.argument("profile", required=False)
@click.option("--concurrency", default="1", show_default=True, metavar="N,..", help="Concurrent streams to test.")
@click.option("--requests", "requests_", type=click.IntRange(1, 100000), default=20, show_default=True,
              help="Measured requests per concurrency level (after warm-up).")
@click.option("--max-tokens", type=click.IntRange(1, 32768), default=128, show_default=True)
@click.option("--prompts", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="JSONL prompts ({\"prompt\": ...} or {\"messages\": [...]}) instead of the bundled set.")
@click.option("--compare-baseline", is_flag=True, help="Also relaunch without the draft and report the speedup.")
@click.option("--draft-len", metavar="N,..", help="Relaunch for each max_draft_len and measure each.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("bench-results"),
              show_default=True, help="Where results.json, results.csv, plots and summary.md go.")
@click.option("--json", "as_json", is_flag=True, help="Results as JSON on stdout.")
@click.option("--dry-run", is_flag=True, help="Say what would be measured and which configurations relaunch the engine "
                                              "(--compare-baseline, --draft-len); relaunch, measure and write nothing.")
@pass_app
def bench_cmd(app: App, profile: str | None, concurrency: str, requests_: int, max_tokens: int, prompts: Path | None,
              compare_baseline: bool, draft_len: str | None, out_dir: Path, as_json: bool, dry_run: bool) -> int:
    """Measure what speculative decoding buys: TTFT, tokens/s, latency percentiles, draft acceptance."""
    from sparkpair import report
    from sparkpair.bench import BenchOptions, plan_bench, record, run_bench, write_outputs
    from sparkpair.bench.prompts import load_prompts

    load_prompts(prompts)   # a bad prompts file and an unwritable --out are refused before any node is asked
    if not dry_run:
        writable_target(out_dir, "--out", directory=True)
    inv = app.inventory
    options = BenchOptions(profile=known_profile(inv, profile), concurrency=int_list(concurrency, "--concurrency"),
                           requests=requests_, max_tokens=max_tokens, prompts=prompts,
                           compare_baseline=compare_baseline,
                           draft_lengths=int_list(draft_len, "--draft-len") if draft_len else [],
                           out_dir=out_dir, as_json=as_json, inventory_path=Path(app.inventory_path))
    if dry_run:
        with app.pair() as pair:
            pair.connect()
            configs = plan_bench(pair, inv, options)
        if as_json:
            report.emit_json({"configs": [config.as_dict() for config in configs], "changed": False})
            return 0
        report.line(f"would measure {options.profile} at concurrency {concurrency}, {requests_} requests each, in "
                    f"{len(configs)} configuration(s):")
        for config in configs:
            report.line(f"  {config.label}: " + (f"relaunch the engine as {config.profile}" if config.relaunch else
                                                 "the engine as it runs"))
        if any(config.relaunch for config in configs):
            report.line(f"  then relaunch {options.profile} as it was launched")
        report.line("nothing was relaunched, measured or written (--dry-run)")
        return 0
    with app.pair() as pair:
        pair.connect(changing=bool(compare_baseline or draft_len))
        with app.locked(pair, f"bench {options.profile}", dry_run=not (compare_baseline or draft_len)):
            result = run_bench(pair, inv, options, report.event)
    if as_json:  # shown before the files are written: a failed write loses nothing measured
        report.emit_json(result.record)
    else:
        report.bench_results(*record.table(result.rows))
    paths = write_outputs(result.record, out_dir)
    if not as_json:
        report.written_files(out_dir, paths)
    if result.errors:
        total = sum(row["requests"] for row in result.rows)
        report.error_lines([f"{len(result.errors)} of {total} measured requests failed; first: {result.errors[0]}"])
        return 1
    return 0
