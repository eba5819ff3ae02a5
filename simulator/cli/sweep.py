"""The sweep command: many runs from one scenario, cached, on a local pool or a Dask cluster."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from simulator.cli import Terminated
from simulator.cli.common import (
    catalog,
    interactive,
    json_text,
    limits,
    maybe_report,
    profile_dirs,
    progress_bar,
    progress_lines,
    scenario_yaml,
)
from simulator.cli.output import ResultsFolder
from simulator.config.loading import parse_override
from simulator.config.scenario import Scenario
from simulator.results.views import sweep_table
from simulator.studies.execution import check_address
from simulator.studies.sweep import cached_runs, expand, load_sweep, run_sweep, summarize_rows, table_file
from simulator.tables import format_table
from simulator.version import __version__


def sweep(args: argparse.Namespace) -> int:
    spec = load_sweep(args.sweep, dict(parse_override(text) for text in args.set or []))
    runs = expand(spec, args.sweep, catalog(args), limits(args))  # counted (and refused past the limit) first
    check_address(args.address)
    out = ResultsFolder(args.out or Path("runs") / f"sweep-{spec.name}", "sweep", args.overwrite)
    reused = cached_runs(runs, out.path)
    say = progress_lines("sweep", args)
    if say:
        say(f"{len(runs):,} runs ({spec.runs_how}), {reused:,} of them in the cache")
    bar = progress_bar(f"sweep of {len(runs)} runs") if interactive(args) else None
    progress = (lambda done, total: bar(done / total)) if bar else None
    started = False

    def ready() -> None:  # the executor is up: the folder exists, marked as a sweep's, before its cache fills
        nonlocal started
        out.write({}, replace=False)
        started = True

    try:
        rows = run_sweep(
            spec, runs, out.path, args.executor, args.jobs, args.address, profile_dirs(args), progress, ready
        )
    except (KeyboardInterrupt, Terminated) as exc:
        if started:
            exc.kept = f"finished runs are kept in {out.path / 'cache'}; rerun the sweep to resume"  # type: ignore[union-attr]
        raise
    factors = list(dict.fromkeys(k for p in runs for k in p.factors))
    summary = summarize_rows(rows, factors, spec.metrics)
    runs_name, runs_table = table_file(rows, "runs")
    summary_name, summary_table = table_file(summary, "summary")
    resolved = spec.model_dump(mode="json") | {"provenance": {"version": __version__, "runs": len(runs)}}
    first = Scenario.model_validate_json(runs[0].scenario_json)  # the captions' model, lengths, window, load
    out.write(
        {
            runs_name: runs_table,
            summary_name: summary_table,
            "sweep.resolved.yaml": yaml.safe_dump(resolved, sort_keys=False),
            "scenario.resolved.yaml": scenario_yaml(first),
        }
    )
    failed = sum(1 for r in rows if r["error"])
    maybe_report(args, out)
    if args.json:
        print(json_text({"runs": rows, "summary": summary}), end="")
    else:
        print(results_text(summary, factors, spec.metrics))
        print(
            f"\n{len(rows)} runs ({failed} failed; {reused} reused from the cache in {out.path / 'cache'}), "
            f"{len(summary)} factor combinations, mean ± 95 % CI half-width over {spec.replications} "
            f"replication{'s' if spec.replications > 1 else ''}; wrote {out.path / runs_name} and "
            f"{out.path / summary_name}"
        )
    return 0


def results_text(summary: list[dict[str, object]], factors: list[str], metrics: list[str]) -> str:
    """The per-combination results table printed at the end of a sweep."""
    return format_table(*sweep_table(summary, factors, metrics))
