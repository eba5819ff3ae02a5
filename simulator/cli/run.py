"""The run command: simulate a scenario (or one run per ``--set`` value) and write a results folder.

Several values run here, one after another, each printed on stderr with an ETA and written into
the folder as it finishes, beside ``runs.partial.json``
(:class:`~simulator.cli.common.PartialFolder`), so an interrupted command keeps what it
finished. Kept apart from ``compare`` and ``plan`` (:mod:`simulator.cli.simulate`) so that a run
does not import their executors and search at start-up.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simulator.cli import Terminated
from simulator.cli.common import (
    KV_HEADERS,
    SUMMARY_HEADERS,
    TASK_HEADERS,
    Countdown,
    PartialFolder,
    breakdown_text,
    catalog,
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
    summary_row,
    sweep_values,
    task_row,
)
from simulator.cli.output import ResultsFolder
from simulator.errors import naming
from simulator.results.metrics import overload_message, undefined_message
from simulator.runner import load_scenario_data, scenario_from, simulate
from simulator.tables import format_table


def run(args: argparse.Namespace) -> int:
    cat = catalog(args)
    data = load_scenario_data(args.scenario)
    combos = sweep_values(args.set or [])
    scenarios = [scenario_from(data, combo, str(args.scenario), cat) for combo in combos]  # all validated first
    out = ResultsFolder(args.out or Path("runs") / scenarios[0].name, "run", args.overwrite)
    folder = PartialFolder(out, "runs", scenarios[0].run.seed)
    say = progress_lines("run", args) if len(combos) > 1 else None
    countdown = Countdown(len(combos))
    results = []
    try:
        for index, (combo, scenario) in enumerate(zip(combos, scenarios, strict=True)):
            if say:
                say(f"run {index + 1}/{len(combos)}: {set_label(combo)}")
            progress = progress_bar(f"run {index + 1}/{len(combos)}") if interactive(args) else None
            with naming(str(args.scenario)):
                results.append((combo, simulate(scenario, cat, progress, limits(args))))
            if len(combos) > 1:
                folder.add({f"run-{index:03d}/{name}": text for name, text in run_files(results[-1][1]).items()},
                           [{"folder": f"run-{i:03d}", "set": c} for i, (c, _) in enumerate(results)])  # fmt: skip
            if say:
                say(f"run {index + 1}/{len(combos)} written to {out.path / f'run-{index:03d}'}; {countdown.finished()}")
    except (KeyboardInterrupt, Terminated) as exc:
        exc.kept = folder.kept()  # type: ignore[union-attr]
        raise
    if len(results) == 1:
        out.write(run_files(results[0][1]))
    else:
        folder.finish({"sweep.json": json_text([{"set": c, "summary": r.summary.to_dict()} for c, r in results]),
                       "index.txt": run_index(["--set"], [[set_label(c)] for c, _ in results])})  # fmt: skip
    maybe_report(args, out)
    if args.json:
        payload: object = results[0][1].summary.to_dict() if len(results) == 1 else [
            {"set": c, "summary": r.summary.to_dict()} for c, r in results]  # fmt: skip
        print(json_text(payload), end="")
        return 0
    for combo, result in results:
        for message in (overload_message(result.summary), undefined_message(result.summary)):
            if message:
                label = set_label(combo)
                print(f"infersim: warning: {label + ': ' if label else ''}{message}", file=sys.stderr)
    labels = [set_label(c) or r.scenario.name for c, r in results]
    rows = [summary_row(label, r.summary) for label, (_, r) in zip(labels, results, strict=True)]
    print(format_table(SUMMARY_HEADERS, rows))
    task_rows = [task_row(label, r.summary) for label, (_, r) in zip(labels, results, strict=True) if r.summary.tasks]
    if task_rows:
        print()
        print(format_table(TASK_HEADERS, task_rows))
    motion = [row for label, (_, r) in zip(labels, results, strict=True) for row in kv_rows(label, r.summary)]
    if motion:
        print()
        print(format_table(KV_HEADERS, motion))
    for label, (_, result) in zip(labels, results, strict=True):
        breakdown = breakdown_text(label if len(results) > 1 else "", result.summary)
        if breakdown:
            print(f"\n{breakdown}")
    print(f"\nwrote {out.path} (everything above and more per run, e.g. per-replica utilisation, ITL and task time "
          f"shares, is in summary.json; --json prints it)")  # fmt: skip
    return 0
