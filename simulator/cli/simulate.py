"""Commands that simulate: run, compare, plan."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from simulator.cli.common import (
    KV_HEADERS,
    SUMMARY_HEADERS,
    TASK_HEADERS,
    breakdown_text,
    catalog,
    interactive,
    json_text,
    kv_rows,
    maybe_report,
    progress_bar,
    run_files,
    scenario_yaml,
    single_values,
    summary_row,
    sweep_values,
    task_row,
)
from simulator.cli.output import ResultsFolder
from simulator.compare import check_one_deployment, compare_cases, comparison_table, on_hardware
from simulator.config.paths import write_in
from simulator.errors import ConfigError, naming
from simulator.limits import Limits
from simulator.planning import answer_scenario, plan_fleet, plan_text
from simulator.results.metrics import overload_message, undefined_message
from simulator.runner import load_scenario_data, scenario_from, simulate
from simulator.tables import format_table

EXIT_NO_PLAN = 2  # `plan` when no fleet within the limits meets the targets


def limits(args: argparse.Namespace) -> Limits | None:
    """The up-front size limits, unless ``--allow-large-runs``."""
    return None if args.allow_large_runs else Limits()


def _label(combo: dict[str, object]) -> str:
    return ", ".join(f"{k}={v}" for k, v in combo.items())


def run(args: argparse.Namespace) -> int:
    cat = catalog(args)
    data = load_scenario_data(args.scenario)
    combos = sweep_values(args.set or [])
    scenarios = [scenario_from(data, combo, str(args.scenario), cat) for combo in combos]  # all validated first
    out = ResultsFolder(args.out or Path("runs") / scenarios[0].name, "run", args.overwrite)
    results = []
    for index, (combo, scenario) in enumerate(zip(combos, scenarios, strict=True)):
        progress = progress_bar(f"run {index + 1}/{len(combos)}") if interactive(args) else None
        with naming(str(args.scenario)):
            results.append((combo, simulate(scenario, cat, progress, limits(args))))
    if len(results) == 1:
        files = run_files(results[0][1])
    else:
        files = {f"run-{i:03d}/{name}": text for i, (_, r) in enumerate(results) for name, text in run_files(r).items()}
        files["sweep.json"] = json_text([{"set": c, "summary": r.summary.to_dict()} for c, r in results])
        files["index.txt"] = run_index(["--set"], [[_label(c)] for c, _ in results])
    out.write(files)
    maybe_report(args, out)
    if args.json:
        payload: object = results[0][1].summary.to_dict() if len(results) == 1 else [
            {"set": c, "summary": r.summary.to_dict()} for c, r in results]  # fmt: skip
        print(json_text(payload), end="")
        return 0
    for combo, result in results:
        for message in (overload_message(result.summary), undefined_message(result.summary)):
            if message:
                label = _label(combo)
                print(f"infersim: warning: {label + ': ' if label else ''}{message}", file=sys.stderr)
    labels = [_label(c) or r.scenario.name for c, r in results]
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


def run_index(headers: list[str], rows: list[list[object]]) -> str:
    """Which run folder holds what: ``run-NNN`` and its values, one line each."""
    return format_table(["folder", *headers], [[f"run-{i:03d}", *row] for i, row in enumerate(rows)]) + "\n"


def compare(args: argparse.Namespace) -> int:
    cat = catalog(args)
    data = load_scenario_data(args.scenario)
    hardware = [h.strip() for h in args.hardware.split(",") if h.strip()]
    if not hardware:
        raise ConfigError(
            f"--hardware {args.hardware!r}: no hardware profile ids given (e.g. nvidia-h100-sxm,cerebras-cs3)"
        )
    for hw in hardware:
        cat.hardware(hw)  # unknown ids fail before any simulation
    name = str(data.get("name", args.scenario.stem))
    with naming(str(args.scenario)):
        check_one_deployment(name, "backends" in data)
    combos = sweep_values(args.set or [])
    # each case moves the deployment first, so a --set into its hardware applies to every hardware
    cases = [(hw, _label(c), scenario_from(data, on_hardware(name, hw) | c, str(args.scenario), cat))
             for c in combos for hw in hardware]  # fmt: skip
    out = ResultsFolder(args.out or Path("runs") / f"compare-{name}", "compare", args.overwrite)
    with naming(str(args.scenario)):
        rows = compare_cases(cases, cat, limits(args))
    payload = [row.to_dict() for row in rows]
    files = {f"run-{i:03d}/{name}": text for i, row in enumerate(rows) for name, text in run_files(row.result).items()}
    files["compare.json"] = json_text(payload)
    files["index.txt"] = run_index(["hardware", "load"], [[row.hardware, row.load or "-"] for row in rows])
    files["compare.txt"] = comparison_table(rows) + "\n"
    out.write(files)
    maybe_report(args, out)
    if args.json:
        print(json_text(payload), end="")
        return 0
    print(comparison_table(rows))
    for row in rows:
        breakdown = breakdown_text(f"{row.hardware} {row.load}".strip(), row.result.summary)
        if breakdown:
            print(f"\n{breakdown}")
    print(f"\nwrote {out.path} (index.txt says which run-NNN folder holds which hardware and load)")
    return 0


def plan(args: argparse.Namespace) -> int:
    cat = catalog(args)
    scenario = scenario_from(load_scenario_data(args.scenario), single_values(args.set or [], "plan"),
                             str(args.scenario), cat)  # fmt: skip
    out = ResultsFolder(args.out or Path("runs") / f"plan-{scenario.name}", "plan", args.overwrite)
    progress = (lambda text: print(f"infersim: {text}", file=sys.stderr)) if interactive(args) else None
    with naming(str(args.scenario)):
        result = plan_fleet(scenario, cat, progress, limits(args))
    payload = result.to_dict()
    files = {"plan.json": json_text(payload), "plan.txt": plan_text(result) + "\n",
             "scenario.resolved.yaml": scenario_yaml(write_in(scenario, cat))}  # fmt: skip
    if result.answer is not None:
        files["answer.yaml"] = scenario_yaml(write_in(answer_scenario(scenario, result.answer), cat))
    out.write(files)
    maybe_report(args, out)
    if args.json:
        print(json_text(payload), end="")
    else:
        print(plan_text(result))
        print(f"\nwrote {out.path}")
    if result.answer is None:
        print(f"infersim: error: {result.explanation} (the full search is in {out.path})", file=sys.stderr)
        return EXIT_NO_PLAN
    return 0
