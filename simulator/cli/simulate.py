"""Commands that simulate many candidates: compare and plan.

Both run their simulations on an executor of :mod:`simulator.studies.execution` (``--jobs``,
``--executor dask --address``) through the cache under ``DIR/cache``, print a line per step on
stderr (which run or candidate, an ETA; ``plan`` also with ``--json``, whose JSON is on stdout) and
write each finished run into the results folder as
it completes, beside ``<command>.partial.json`` (:class:`~simulator.cli.common.PartialFolder`),
so an interrupted command keeps what it finished; the last write replaces that file with the
full results. ``run`` is in :mod:`simulator.cli.run`, which imports none of this machinery.

Both count their runs before building any (``compare``: hardware ids x ``--set`` combinations;
``plan``: an upper bound on candidates x replications) and refuse more than
:attr:`~simulator.plan.limits.Limits.max_runs` unless ``--allow-large-runs``. A compare case that
measured nothing makes ``compare`` exit :data:`~simulator.runner.EXIT_NOTHING_MEASURED`, as ``run``.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from simulator.cli import Terminated
from simulator.cli.common import (
    Countdown,
    PartialFolder,
    breakdown_text,
    catalog,
    count_values,
    json_text,
    limits,
    maybe_report,
    profile_dirs,
    progress_lines,
    run_files,
    run_index,
    scenario_yaml,
    set_label,
    single_values,
    sweep_values,
)
from simulator.cli.output import ResultsFolder
from simulator.cli.run import measured_nothing
from simulator.config.loading import Catalog
from simulator.config.paths import write_in
from simulator.config.scenario import Scenario
from simulator.errors import ConfigError, naming
from simulator.plan.limits import Limits, check_runs
from simulator.plan.limits import check as check_size
from simulator.plan.resolve import resolve
from simulator.results.summary import RunSummary
from simulator.runner import load_scenario_data, nothing_measured, requests_arrived, scenario_from, simulate
from simulator.sources import SourcedNumber, every_number
from simulator.studies.compare import ComparisonRow, check_one_deployment, comparison_table, on_hardware, sources_text
from simulator.studies.execution import Cache, Profiles, Runs, catalog_of, check_address, inputs_digest, run_key, start
from simulator.studies.planning import Evaluation, Planner, answer_scenario, plan_text, summary_run
from simulator.studies.tolerance import answer_availability, availability_text

EXIT_NO_PLAN = 3  # `plan` answered: no fleet meets the targets (within the limits, or found before a stop)


def compare_run(scenario_json: str, profiles: Profiles, run_limits: Limits | None) -> dict[str, Any]:
    """One compare case (on any executor): its row, summary document and run folder files."""
    result = simulate(Scenario.model_validate_json(scenario_json), catalog_of(profiles), limits=run_limits)
    files = {name: text if isinstance(text, str | bytes) else "".join(text) for name, text in run_files(result).items()}
    return {
        "row": ComparisonRow("", "", result).to_dict(),
        "summary": result.summary.to_dict(),
        "files": files,
        "arrived": requests_arrived(result),
    }


def compare(args: argparse.Namespace) -> int:
    """Run the scenario on each hardware (and each --set load); write and print the comparison."""
    cat = catalog(args)
    data = load_scenario_data(args.scenario)
    hardware = _compare_hardware(args.hardware)
    how = _check_compare_count(args, hardware)
    name, cases = _compare_cases(args, data, hardware, cat)
    check_address(args.address)
    out = ResultsFolder(args.out or Path("runs") / f"compare-{name}", "compare", args.overwrite)
    folder = PartialFolder(out, "compare", cases[0][2].run.seed)
    with naming(str(args.scenario)):
        texts, keys = _checked_case_texts(args, cases, cat)
        found = _compare_runs(args, cases, texts, keys, folder, how)
    rows = [
        found[key]["row"] | {"hardware": hw, "load": label} for key, (hw, label, _) in zip(keys, cases, strict=True)
    ]
    summaries = [RunSummary.model_validate(found[key]["summary"]) for key in keys]
    empty = _measured_nothing_cases(found, keys, rows, summaries)
    folder.finish(_compare_files(rows))
    maybe_report(args, out)
    if args.json:
        print(json_text(rows), end="")
        return measured_nothing(empty, out.path)
    _print_comparison(args, rows, summaries, cases, cat)
    print(f"\nwrote {out.path} (index.txt says which run-NNN folder holds which hardware and load)")
    return measured_nothing(empty, out.path)


def _compare_hardware(text: str) -> list[str]:
    """The hardware ids of --hardware: at least one, each once."""
    hardware = [h.strip() for h in text.split(",") if h.strip()]
    if not hardware:
        raise ConfigError(f"--hardware {text!r}: no hardware profile ids given (e.g. nvidia-h100-sxm,cerebras-cs3)")
    twice = sorted(hw for hw, n in Counter(hardware).items() if n > 1)
    if twice:
        raise ConfigError(f"--hardware: {', '.join(twice)} named more than once (each id once)")
    return hardware


def _check_compare_count(args: argparse.Namespace, hardware: list[str]) -> str:
    """Refuse more runs than the limits allow (counted before any case is built); says how they were counted."""
    count, how = count_values(args.set or [])
    how = f"{len(hardware):,} hardware x {count:,} load{'s' if count > 1 else ''}" + (f" ({how})" if count > 1 else "")
    check_runs(
        len(hardware) * count, limits(args), f"{args.scenario}: compare", how, "name fewer hardware ids or comma values"
    )
    return how


def _compare_cases(
    args: argparse.Namespace, data: dict[str, Any], hardware: list[str], cat: Catalog
) -> tuple[str, list[tuple[str, str, Scenario]]]:
    """The scenario's name and its (hardware, load label, scenario) cases, load by load."""
    for hw in hardware:
        cat.hardware(hw)  # unknown ids fail before any simulation
    name = str(data.get("name", args.scenario.stem))
    with naming(str(args.scenario)):
        check_one_deployment(name, "backends" in data)
    combos = sweep_values(args.set or [])
    # each case moves the deployment first, so a --set into its hardware applies to every hardware
    cases = [
        (hw, set_label(c), scenario_from(data, on_hardware(name, hw) | c, str(args.scenario), cat))
        for c in combos
        for hw in hardware
    ]
    return name, cases


def _checked_case_texts(
    args: argparse.Namespace, cases: list[tuple[str, str, Scenario]], cat: Catalog
) -> tuple[list[str], list[str]]:
    """Each case's scenario text and cache key, once every case is known to resolve and fit the limits."""
    run_limits = limits(args)
    for _, _, scenario in cases:  # a case that cannot run, or is too large, fails before any runs
        size = resolve(scenario, cat).size
        if run_limits is not None:
            check_size(size, run_limits)
    texts = [write_in(scenario, cat).model_dump_json(by_alias=True) for _, _, scenario in cases]
    keys = [
        run_key(text, inputs_digest(scenario, "compare-run"))
        for text, (_, _, scenario) in zip(texts, cases, strict=True)
    ]
    return texts, keys


def _measured_nothing_cases(
    found: dict[str, dict[str, Any]], keys: list[str], rows: list[dict[str, Any]], summaries: list[RunSummary]
) -> list[tuple[str, str]]:
    """The cases that measured nothing, by hardware and load, with why."""
    return [
        (f"{row['hardware']} {row['load']}".strip(), reason)
        for key, row, summary in zip(keys, rows, summaries, strict=True)
        if (reason := nothing_measured(summary, found[key].get("arrived")))
    ]


def _compare_files(rows: list[dict[str, Any]]) -> dict[str, str]:
    """compare.json, the run index and the comparison table with its sources."""
    return {
        "compare.json": json_text(rows),
        "index.txt": run_index(["hardware", "load"], [[row["hardware"], row["load"] or "-"] for row in rows]),
        "compare.txt": comparison_table(rows) + "\n\n" + sources_text(rows) + "\n",
    }


def _print_comparison(
    args: argparse.Namespace,
    rows: list[dict[str, Any]],
    summaries: list[RunSummary],
    cases: list[tuple[str, str, Scenario]],
    cat: Catalog,
) -> None:
    """The comparison table, its sources (every number with --explain) and each case's breakdown."""
    print(comparison_table(rows))
    print()
    print(sources_text(rows, _every_number(cases, cat) if args.explain else None))
    for row, summary in zip(rows, summaries, strict=True):
        breakdown = breakdown_text(f"{row['hardware']} {row['load']}".strip(), summary)
        if breakdown:
            print(f"\n{breakdown}")


def _every_number(cases: list[tuple[str, str, Scenario]], cat: Catalog) -> list[SourcedNumber]:
    """``--explain``: every sourced number of each hardware and stack profile the cases deploy, once each."""
    profiles: dict[str, Any] = {}
    for _, _, scenario in cases:
        deployment = resolve(scenario, cat).backends[0].deployment
        profiles.setdefault(deployment.hardware.id, deployment.hardware)
        profiles.setdefault(f"stack {deployment.stack.id}", deployment.stack)
    return every_number(*profiles.values())


def _compare_runs(
    args: argparse.Namespace,
    cases: list[tuple[str, str, Scenario]],
    texts: list[str],
    keys: list[str],
    folder: PartialFolder,
    how: str,
) -> dict[str, dict[str, Any]]:
    """Every case's result, on the executor through the cache; each written to its run folder as it finishes."""
    say = progress_lines("compare", args)
    countdown = Countdown(len(cases))  # one count per case: a run several cases share counts for each
    finished: list[dict[str, object]] = []
    runs: Runs

    def done(key: str, cached: bool) -> None:
        for index in (i for i, k in enumerate(keys) if k == key):
            hw, label, _ = cases[index]
            result = runs.results[key]
            finished.append({"folder": f"run-{index:03d}", "row": result["row"] | {"hardware": hw, "load": label}})
            folder.add({f"run-{index:03d}/{n}": t for n, t in result["files"].items()}, finished)
            if say:
                say(
                    f"run {index + 1}/{len(cases)} ({hw}{f', {label}' if label else ''}) "
                    f"{'from the cache' if cached else 'finished'}; {countdown.finished()}"
                )

    pool = start(args.executor, min(args.jobs, len(set(keys))), args.address)
    runs = Runs(pool, compare_run, (profile_dirs(args), limits(args)), Cache(folder.out.path / "cache"), done)
    if say:
        say(
            f"{len(cases):,} run{'s' if len(cases) > 1 else ''} ({how}) on {pool.slots} worker"
            f"{'s' if pool.slots > 1 else ''}"
        )
    try:
        for key, text in zip(keys, texts, strict=True):
            runs.ask(key, text)
        found = runs.wait(keys)
    except BaseException as exc:  # Ctrl-C, SIGTERM, a failed run: stop the workers now
        runs.close(True)
        if isinstance(exc, KeyboardInterrupt | Terminated):
            exc.kept = folder.kept()  # type: ignore[union-attr]
        raise
    runs.close()
    return found


def plan(args: argparse.Namespace) -> int:
    cat = catalog(args)
    scenario = scenario_from(
        load_scenario_data(args.scenario), single_values(args.set or [], "plan"), str(args.scenario), cat
    )
    check_address(args.address)
    out = ResultsFolder(args.out or Path("runs") / f"plan-{scenario.name}", "plan", args.overwrite)
    folder = PartialFolder(out, "plan", scenario.run.seed)
    resolved = scenario_yaml(write_in(scenario, cat))

    def checkpoint(evaluations: list[Evaluation]) -> None:
        folder.add({"scenario.resolved.yaml": resolved}, {"evaluations": [e.to_dict() for e in evaluations]})

    def started(key: str, cached: bool) -> None:  # a run finished: the folder exists before its cache
        if not folder.started:
            checkpoint([])

    with naming(str(args.scenario)):
        say = progress_lines("plan", argparse.Namespace())  # on stderr, with --json too: a long search is never silent
        planner = Planner(scenario, cat, say, limits(args), checkpoint=checkpoint, time_limit_s=args.time_limit)
        scenario = planner.scenario  # priced on one cost basis (Planner)
        resolved = scenario_yaml(write_in(scenario, cat))
        pool = start(args.executor, args.jobs, args.address)
        run_args = (profile_dirs(args), limits(args), planner.stops_early, planner.deadline, planner.tasks_only)
        planner.runs = Runs(pool, summary_run, run_args, Cache(out.path / "cache"), started)
        try:
            result = planner.search()
        except BaseException as exc:  # Ctrl-C, SIGTERM, a failed run: stop the workers now
            planner.runs.close(True)
            if isinstance(exc, KeyboardInterrupt | Terminated):
                exc.kept = folder.kept()  # type: ignore[union-attr]
            raise
        planner.runs.close()
    payload, text = result.to_dict(), plan_text(result)
    found = answer_availability(answer_scenario(scenario, result.answer), cat) if result.answer else None
    if found is not None:  # the answer's replica availability and P(at most tolerate_failures down)
        payload["availability"], text = found, f"{text}\n{availability_text(found)}"
    files = {"plan.json": json_text(payload), "plan.txt": text + "\n", "scenario.resolved.yaml": resolved}
    if result.answer is not None:
        files["answer.yaml"] = scenario_yaml(write_in(answer_scenario(scenario, result.answer), cat))
    folder.finish(files)
    maybe_report(args, out)
    if args.json:
        print(json_text(payload), end="")
    else:
        print(text)
        print(f"\nwrote {out.path}")
    if result.answer is None:
        print(f"infersim: error: {result.explanation} (the full search is in {out.path})", file=sys.stderr)
        return EXIT_NO_PLAN
    return 0
