"""The run command: simulate a scenario (or one run per ``--set`` value) and write a results folder.

Several values are counted first, from the lengths of the comma lists, and refused past
:attr:`~simulator.plan.limits.Limits.max_runs` unless ``--allow-large-runs``; they run one after
another, each printed on stderr with an ETA and written into the folder as it finishes, beside
``runs.partial.json`` (:class:`~simulator.cli.common.PartialFolder`), so an interrupted command
keeps what it finished. Kept apart from ``compare`` and ``plan`` (:mod:`simulator.cli.simulate`) so that a run
does not import their executors and search at start-up.

A run that measures nothing (no request arrived, or none completed in the measurement window)
still writes its files, then exits :data:`~simulator.runner.EXIT_NOTHING_MEASURED` with the reason.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from simulator.capacity import LIMITED_MARK, Capacity, of_run
from simulator.cli import Terminated
from simulator.cli.common import (
    KV_HEADERS,
    SUMMARY_HEADERS,
    TASK_HEADERS,
    Countdown,
    PartialFolder,
    breakdown_text,
    catalog,
    count_values,
    interactive,
    json_text,
    kv_rows,
    limits,
    maybe_report,
    progress_bar,
    progress_lines,
    run_files,
    run_index,
    set_label,
    speculation_text,
    summary_row,
    sweep_values,
    task_row,
)
from simulator.cli.output import ResultsFolder
from simulator.config.loading import Catalog
from simulator.config.scenario import Scenario
from simulator.errors import naming
from simulator.plan.limits import check_runs
from simulator.results.metrics import overload_message
from simulator.results.summary import RunSummary
from simulator.runner import (
    EXIT_NOTHING_MEASURED,
    RunResult,
    load_scenario_data,
    nothing_measured,
    requests_arrived,
    scenario_from,
    simulate,
)
from simulator.tables import format_table


class Finished(NamedTuple):
    """One finished run as the command reports it (its records are written, then let go)."""

    combo: dict[str, object]
    summary: RunSummary
    name: str
    arrived: int
    capacity: Capacity

    def document(self) -> dict[str, object]:
        """The run in ``sweep.json`` and ``--json``: the values set, the summary, the capacity verdict."""
        return {"set": self.combo, "summary": self.summary.to_dict(), "capacity": self.capacity.to_dict()}


def run(args: argparse.Namespace) -> int:
    """Simulate the scenario (once per --set combination); write the run folder(s) and print the results."""
    cat = catalog(args)
    data = load_scenario_data(args.scenario)
    count, how, combos, scenarios = _combinations(args, data, cat)
    say = progress_lines("run", args) if count > 1 else None
    if say:
        say(f"{count:,} runs ({how}), one after another")
    out = ResultsFolder(args.out or Path("runs") / scenarios[0].name, "run", args.overwrite)
    folder = PartialFolder(out, "runs", scenarios[0].run.seed)
    try:
        results, last = _run_each(args, cat, list(zip(combos, scenarios, strict=True)), folder, say)
    except (KeyboardInterrupt, Terminated) as exc:
        exc.kept = folder.kept()  # type: ignore[union-attr]
        raise
    _write_results(results, last, out, folder)
    maybe_report(args, out)
    empty = [(set_label(r.combo), why) for r in results if (why := nothing_measured(r.summary, r.arrived))]
    if args.json:  # the summary document, with the capacity verdict beside it (simulator.capacity)
        print(json_text(_json_payload(results)), end="")
        return measured_nothing(empty, out.path)
    _print_results(results, out.path)
    return measured_nothing(empty, out.path)


def _combinations(
    args: argparse.Namespace, data: dict[str, Any], cat: Catalog
) -> tuple[int, str, list[dict[str, object]], list[Scenario]]:
    """How many --set combinations and how counted (refused past the limits before any is built), then
    each combination with its scenario, every one validated before any runs."""
    count, how = count_values(args.set or [])  # counted before any combination is built
    check_runs(count, limits(args), f"{args.scenario}: --set", how, "give fewer comma values")
    combos = sweep_values(args.set or [])
    scenarios = [scenario_from(data, combo, str(args.scenario), cat) for combo in combos]  # all validated first
    return count, how, combos, scenarios


def _write_results(results: list[Finished], last: RunResult, out: ResultsFolder, folder: PartialFolder) -> None:
    """One run: its files in the folder itself; several: sweep.json and the index beside their run folders."""
    if len(results) == 1:
        out.write(run_files(last))
    else:
        folder.finish(
            {
                "sweep.json": json_text([r.document() for r in results]),
                "index.txt": run_index(["--set"], [[set_label(r.combo)] for r in results]),
            }
        )


def _json_payload(results: list[Finished]) -> object:
    """One run: its summary with the capacity verdict; several: each run's document."""
    if len(results) == 1:
        return results[0].summary.to_dict() | {"capacity": results[0].capacity.to_dict()}
    return [r.document() for r in results]


def _run_each(
    args: argparse.Namespace,
    cat: Catalog,
    cases: list[tuple[dict[str, object], Scenario]],
    folder: PartialFolder,
    say: Callable[[str], None] | None,
) -> tuple[list[Finished], RunResult]:
    """Simulate each case in turn; with several, write each run's folder as it finishes. Returns the
    finished runs and the last run's result (whose records a single run writes)."""
    countdown = Countdown(len(cases))
    results: list[Finished] = []
    for index, (combo, scenario) in enumerate(cases):
        if say:
            say(f"run {index + 1}/{len(cases)}: {set_label(combo)}")
        progress = progress_bar(f"run {index + 1}/{len(cases)}") if interactive(args) else None
        with naming(str(args.scenario)):
            result = simulate(scenario, cat, progress, limits(args))
        capacity = of_run(result.scenario, result.summary, cat)
        results.append(Finished(combo, result.summary, result.scenario.name, requests_arrived(result), capacity))
        if len(cases) > 1:
            folder.add(
                {f"run-{index:03d}/{name}": text for name, text in run_files(result).items()},
                [{"folder": f"run-{i:03d}", "set": r.combo} for i, r in enumerate(results)],
            )
        if say:
            written = folder.out.path / f"run-{index:03d}"
            say(f"run {index + 1}/{len(cases)} written to {written}; {countdown.finished()}")
    return results, result


def _print_results(results: list[Finished], path: Path) -> None:
    """Overload warnings on stderr; the summary, task and KV tables and each run's breakdown on stdout."""
    _warn_overloads(results)
    labels = [set_label(r.combo) or r.name for r in results]
    _print_summary_table(results, labels)
    _print_task_and_kv_tables(labels, [r.summary for r in results])
    _print_breakdowns(labels, [r.summary for r in results])
    print(
        f"\nwrote {path} (everything above and more per run, e.g. per-replica utilisation, ITL and task time "
        f"shares, is in summary.json; --json prints it)"
    )


def _warn_overloads(results: list[Finished]) -> None:
    """A warning on stderr for each overloaded run, named by its --set label."""
    for r in results:
        message = overload_message(r.summary)
        if message:
            label = set_label(r.combo)
            print(f"infersim: warning: {label + ': ' if label else ''}{message}", file=sys.stderr)


def _print_summary_table(results: list[Finished], labels: list[str]) -> None:
    """The summary table, and the legend of its capacity-limited mark when a run is."""
    print(
        format_table(
            SUMMARY_HEADERS,
            [summary_row(label, r.summary, r.capacity) for label, r in zip(labels, results, strict=True)],
        )
    )
    if any(r.capacity.limited for r in results):
        print(
            f"{LIMITED_MARK} capacity-limited: the fleet holds fewer sequences than the calls in flight (KV or batch "
            f"cap) or preempted; TTFT and speed are those of the calls running, the others queue"
        )


def _print_task_and_kv_tables(labels: list[str], summaries: list[RunSummary]) -> None:
    """The task table and the KV motion table, each only when some run has rows for it."""
    task_rows = [task_row(label, s) for label, s in zip(labels, summaries, strict=True) if s.tasks]
    motion = [row for label, s in zip(labels, summaries, strict=True) for row in kv_rows(label, s)]
    for headers, rows in ((TASK_HEADERS, task_rows), (KV_HEADERS, motion)):
        if rows:
            print()
            print(format_table(headers, rows))


def _print_breakdowns(labels: list[str], summaries: list[RunSummary]) -> None:
    """Each run's speculation and time breakdown (labelled when there are several runs)."""
    for label, summary in zip(labels, summaries, strict=True):
        name = label if len(summaries) > 1 else ""
        for text in (speculation_text(name, summary), breakdown_text(name, summary)):
            if text:
                print(f"\n{text}")


def measured_nothing(empty: list[tuple[str, str]], folder: Path) -> int:
    """Each run that measured nothing as an error line on stderr (its label, why), and the exit
    status: :data:`~simulator.runner.EXIT_NOTHING_MEASURED` if any did, else 0."""
    for label, reason in empty:
        print(f"infersim: error: {label + ': ' if label else ''}{reason} (its files are in {folder})", file=sys.stderr)
    return EXIT_NOTHING_MEASURED if empty else 0
