"""The sweep command: many runs from one scenario, cached, on a local pool or a Dask cluster."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from simulator.cli import Terminated, stop_if_terminated
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
from simulator.studies.sweep import (
    RunPoint,
    SweepSpec,
    cached_runs,
    expand,
    load_sweep,
    run_sweep,
    summarize_rows,
    table_file,
)
from simulator.tables import format_table
from simulator.version import __version__


def sweep(args: argparse.Namespace) -> int:
    """Run the sweep's runs (through the folder's cache); write the runs and summary tables and print the results."""
    spec = load_sweep(args.sweep, dict(parse_override(text) for text in args.set or []))
    runs = expand(spec, args.sweep, catalog(args), limits(args))  # counted (and refused past the limit) first
    check_address(args.address)
    out = ResultsFolder(args.out or Path("runs") / f"sweep-{spec.name}", "sweep", args.overwrite)
    reused = cached_runs(runs, out.path)
    progress = _sweep_progress(args, spec, runs, reused)
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
    stop_if_terminated(f"finished runs are kept in {out.path / 'cache'}; rerun the sweep to resume")
    factors = list(dict.fromkeys(k for p in runs for k in p.factors))
    summary = summarize_rows(rows, factors, spec.metrics)
    runs_name, runs_table = table_file(rows, "runs")
    summary_name, summary_table = table_file(summary, "summary")
    out.write({runs_name: runs_table, summary_name: summary_table, **_resolved_files(spec, runs)})
    maybe_report(args, out)
    if args.json:
        print(json_text({"runs": rows, "summary": summary}), end="")
        return 0
    print(results_text(summary, factors, spec.metrics))
    print(_done_line(rows, summary, spec, reused, out.path, (runs_name, summary_name)))
    return 0


def _done_line(
    rows: list[dict[str, Any]],
    summary: list[dict[str, object]],
    spec: SweepSpec,
    reused: int,
    path: Path,
    names: tuple[str, str],
) -> str:
    """How many runs failed or came from the cache, over how many replications, and the tables written."""
    failed = sum(1 for r in rows if r["error"])
    return (
        f"\n{len(rows)} runs ({failed} failed; {reused} reused from the cache in {path / 'cache'}), "
        f"{len(summary)} factor combinations, mean ± 95 % CI half-width over {spec.replications} "
        f"replication{'s' if spec.replications > 1 else ''}; wrote {path / names[0]} and "
        f"{path / names[1]}"
    )


def _sweep_progress(
    args: argparse.Namespace, spec: SweepSpec, runs: list[RunPoint], reused: int
) -> Callable[[int, int], None] | None:
    """Say how many runs (and how many cached); the progress bar's update on a terminal, else None."""
    say = progress_lines("sweep", args)
    if say:
        say(f"{len(runs):,} runs ({spec.runs_how}), {reused:,} of them in the cache")
    bar = progress_bar(f"sweep of {len(runs)} runs") if interactive(args) else None
    return (lambda done, total: bar(done / total)) if bar else None


def _resolved_files(spec: SweepSpec, runs: list[RunPoint]) -> dict[str, str]:
    """The sweep as resolved (with its provenance) and its first run's scenario (the captions' model,
    lengths, window and load)."""
    resolved = spec.model_dump(mode="json") | {"provenance": {"version": __version__, "runs": len(runs)}}
    first = Scenario.model_validate_json(runs[0].scenario_json)
    return {
        "sweep.resolved.yaml": yaml.safe_dump(resolved, sort_keys=False),
        "scenario.resolved.yaml": scenario_yaml(first),
    }


def results_text(summary: list[dict[str, object]], factors: list[str], metrics: list[str]) -> str:
    """The per-combination results table printed at the end of a sweep."""
    return format_table(*sweep_table(summary, factors, metrics))
