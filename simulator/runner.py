"""Run a scenario end to end: resolve, build, simulate, freeze the records, derive the summary."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.config.loading import Catalog, ConfigError, read_yaml, validate_data
from simulator.config.paths import set_path
from simulator.config.scenario import Scenario
from simulator.config.workload import TraceLoad
from simulator.engine.build import Simulation, StopWhen, build
from simulator.plan.limits import Limits
from simulator.plan.limits import check as check_size
from simulator.plan.resolve import ResolvedScenario, resolve
from simulator.records.store import RunRecords
from simulator.results.metrics import class_task_summaries, summarize
from simulator.results.summary import RunSummary, TaskSummary


@dataclass(frozen=True)
class RunResult:
    scenario: Scenario  # as it ran: every profile it names written in
    records: RunRecords
    summary: RunSummary
    stopped: bool = False  # stopped early by a StopWhen: records and summary cover only the run so far


def load_scenario_data(path: Path) -> dict[str, object]:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of fields at the top level")
    return data


def scenario_from(
    data: dict[str, object], overrides: dict[str, object], source: str, catalog: Catalog | None = None
) -> Scenario:
    """Apply field-path overrides to raw scenario data, then validate (errors name the path).

    A path may go into a profile the scenario names (:mod:`simulator.config.paths`): the
    ``catalog`` supplies it. A relative trace path is taken relative to the scenario file,
    and must exist.
    """
    for path, value in overrides.items():
        data = set_path(data, path, value, Scenario, catalog, where=f"{source}: --set ")
    scenario = validate_data(Scenario, data, source)
    base = Path(source).parent
    if isinstance(scenario.load, TraceLoad):
        scenario = scenario.model_copy(update={"load": _resolved(scenario.load, base, source, "load")})
    if scenario.classes is not None:
        classes = [
            c.model_copy(update={"load": _resolved(c.load, base, source, f"classes.{i}.load")})
            if isinstance(c.load, TraceLoad) else c
            for i, c in enumerate(scenario.classes)
        ]  # fmt: skip
        scenario = scenario.model_copy(update={"classes": classes})
    return scenario


def _resolved(load: TraceLoad, base: Path, source: str, where: str) -> TraceLoad:
    trace = load.path if load.path.is_absolute() else (base / load.path).resolve()
    if not trace.exists():
        raise ConfigError(f"{source}: {where}.path: {trace} does not exist")
    return load.model_copy(update={"path": trace})


def simulate(
    scenario: Scenario | ResolvedScenario,
    catalog: Catalog,
    progress: Callable[[float], None] | None = None,
    limits: Limits | None = Limits(),  # noqa: B008 - a frozen dataclass of constants
    stop: StopWhen | None = None,
) -> RunResult:
    """Resolve, build, run (``progress`` gets the fraction done), freeze and summarise one scenario.

    A scenario already resolved runs as its plans say (a plan may be replaced, e.g. its cost
    model by a test double). ``limits``: the size a run may reach before it needs
    ``limits=None`` (:mod:`simulator.plan.limits`). ``stop``: ends the run as soon as it says the
    outcome is settled (:class:`~simulator.engine.build.StopWhen`; the result says ``stopped``);
    without it the run is the ordinary one.
    """
    resolved = scenario if isinstance(scenario, ResolvedScenario) else resolve(scenario, catalog)
    simulation = _built(resolved, limits, details=True)
    end_s = simulation.run(progress, stop)
    records = simulation.records(end_s)
    ran = resolved.scenario  # self-contained: the profiles it ran with written in
    summary = summarize(records, ran.slo, ran.workload_classes, ran.cost)
    return RunResult(ran, records, summary, simulation.stopped)


def simulate_tasks(
    scenario: Scenario, catalog: Catalog, limits: Limits | None = Limits(),  # noqa: B008 - frozen constants
    stop: StopWhen | None = None,
) -> tuple[dict[str, TaskSummary | None], bool]:  # fmt: skip
    """The same run as :func:`simulate`, recording only its tasks: each class's task summary
    (:func:`~simulator.results.metrics.class_task_summaries`, the numbers :func:`simulate`'s summary
    holds for them) and whether ``stop`` ended it early. For a caller that reads nothing else (a
    plan's task-time verdicts): it skips the request rows, levels, token counts, inter-token gaps and
    work totals, about a fifth of the CPU of a run of agents."""
    resolved = resolve(scenario, catalog)
    simulation = _built(resolved, limits, details=False)
    records = simulation.records(simulation.run(None, stop))
    return class_task_summaries(records, resolved.scenario.workload_classes), simulation.stopped


def _built(resolved: ResolvedScenario, limits: Limits | None, details: bool) -> Simulation:
    """The simulation of ``resolved``, once its size passes ``limits`` (None: any size)."""
    if limits is not None:
        check_size(resolved.size, limits)
    return build(resolved, details=details)


#: Exit status of ``run`` and ``compare`` when a run measured nothing: no request arrived, or none
#: completed in the measurement window (2 is bad input, 1 a bug).
EXIT_NOTHING_MEASURED = 4


def nothing_measured(summary: RunSummary, arrived: int | None = None) -> str:
    """Why a run measured nothing, in words; empty when a request completed in the measurement window.

    ``arrived``: requests that entered the run (recorded rows plus those in flight at the end,
    :func:`requests_arrived`); without it, the summary's in-flight, dropped and rejected counts
    (a lower bound: requests finished during the warm-up are not in the summary).
    """
    if summary.requests_completed:
        return ""
    unfinished = summary.requests_in_flight + summary.requests_dropped + summary.requests_rejected_over_budget
    arrived = unfinished if arrived is None else arrived
    if not arrived:
        return ("no request arrived during the run: the first arrival comes after run.duration ends, or the load "
                "sends nothing; lengthen run.duration or raise the load")  # fmt: skip
    return (
        f"{arrived:,} request{'s' if arrived != 1 else ''} arrived but none completed in the measurement window "
        f"({summary.window_s:.4g} s after the warm-up; {summary.requests_in_flight:,} still in flight, "
        f"{summary.requests_dropped + summary.requests_rejected_over_budget:,} dropped): the fleet is far too slow "
        "for this run (check its hardware numbers) or the run too short; lengthen run.duration or shorten run.warmup"
    )


def requests_arrived(result: RunResult) -> int:
    """Requests that entered the run: every recorded row (finished or dropped) and those still in flight."""
    return result.records.request_count + result.records.in_flight


def summary_shape(scenario: Scenario, catalog: Catalog) -> RunSummary:
    """The summary a run of ``scenario`` would have, before anything runs (every number undefined):
    its keys are the metric paths a sweep or a plan may ask for."""
    records = build(resolve(scenario, catalog)).records(0.0)
    return summarize(records, scenario.slo, scenario.workload_classes, scenario.cost)


def metric_paths(summary: RunSummary) -> set[str]:
    """Dotted paths of every number in a summary (``undefined`` reasons excluded)."""
    return _paths(summary.to_dict())


def _paths(document: dict[str, Any], prefix: str = "") -> set[str]:
    paths: set[str] = set()
    for key, value in document.items():
        if key == "undefined":
            continue
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            paths |= _paths(value, f"{path}.")
        elif isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, dict):
                    paths |= _paths(item, f"{path}.{index}.")
        elif isinstance(value, int | float) or value is None:
            paths.add(path)
    return paths
