"""The page of a ``run`` folder: one run (:func:`simulator.report.run.run_sections`), or a run sweep
(``infersim run --set a,b,...``): a row per run, then latency, speed and cost against the swept quantity.

The x axis is the numeric field the runs vary most (:func:`swept_axis`); the runs' other varied
fields make one line each (:func:`by_group`). The trend sentences follow the first line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from simulator.capacity import LIMITED_MARK, Capacity
from simulator.report import fleet_report, plots
from simulator.report.captions import Assumptions, captioned, trend
from simulator.report.html import Section
from simulator.report.reading import SweepRun, assumptions, read_sweep_runs
from simulator.report.run import limit_note, run_capacity, run_sections
from simulator.results.marker import RUN, Manifest
from simulator.results.summary import RunSummary
from simulator.tables import format_number
from simulator.units import format_seconds

#: A swept field's axis label by its last path segment (the name, then the unit).
SWEPT_LABELS = {
    "users": "concurrent users",
    "agents": "concurrent agents",
    "rate_per_s": "arrival rate (req/s)",
    "tasks_per_s": "task arrival rate (tasks/s)",
    "replicas": "replicas",
    "chips": "chips",
}
HEADERS = ["run", "TTFT p50", "TTFT p99", "ITL p50", "tok/s/user p50", "output tok/s", "$/1M out", "capacity"]


def _varied(sets: list[dict[str, Any]]) -> list[str]:
    """The fields whose value is not the same in every run, in the order first met."""
    keys = list(dict.fromkeys(k for item in sets for k in item))
    return [k for k in keys if len({json.dumps(item.get(k), default=str) for item in sets}) > 1]


def swept_axis(sets: list[dict[str, Any]]) -> tuple[list[float], str, list[str]] | None:
    """The numeric field a run sweep varies most (the x axis), as (values, axis label, each run's group);
    a run's group names its values of the other varied fields (one line per group, '' when there are none).
    None when no varied field is numeric in every run."""
    varied = _varied(sets)
    numeric = _numeric(varied, sets)
    if not numeric:
        return None
    path = max(numeric, key=lambda k: len({item[k] for item in sets}))  # the first of the most-valued
    groups = [", ".join(f"{k}={item.get(k)}" for k in varied if k != path) for item in sets]
    return [float(item[path]) for item in sets], _axis_label(path), groups


def _numeric(varied: list[str], sets: list[dict[str, Any]]) -> list[str]:
    """The varied fields that are a number in every run."""
    return [k for k in varied if all(isinstance(item.get(k), int | float) for item in sets)]


def _axis_label(path: str) -> str:
    """The swept field's name with its path (the path alone when it has no name of its own)."""
    name = SWEPT_LABELS.get(path.rsplit(".", 1)[-1], path)
    return f"{name} ({path})" if name != path else path


def by_group(
    x: Sequence[float], groups: Sequence[str], values: Sequence[Any]
) -> tuple[list[float], dict[str, list[Any]]]:
    """Runs' values laid out as one series per group over the sorted distinct x (NaN where a group has no run).

    >>> by_group([1, 2, 1, 2], ["a", "a", "b", "b"], [10, 20, 30, 40])
    ([1, 2], {'a': [10, 20], 'b': [30, 40]})
    """
    xs = sorted(set(x))
    out: dict[str, list[Any]] = {}
    for xv, group, value in zip(x, groups, values, strict=True):
        out.setdefault(group, [math.nan] * len(xs))[xs.index(xv)] = value
    return xs, out


def _named(metric: str, series: dict[str, list[Any]]) -> dict[str, list[Any]]:
    return {f"{metric}, {group}" if group else metric: values for group, values in series.items()}


def _with(cell: str, mark: str) -> str:
    """A cell with the capacity mark; a cell with no number (``-``) stays as it is."""
    return cell + mark if cell != "-" else cell


@dataclass(frozen=True)
class Sweep:
    """A run sweep as the page draws it: each run's label, summary, capacity and limit note, and the axis."""

    labels: list[str]
    summaries: list[RunSummary]
    capacities: list[Capacity]
    notes: list[str]
    x: list[float]
    x_label: str
    groups: list[str]
    varied: str
    a: Assumptions | None

    @property
    def name(self) -> str:
        """The swept quantity's name (the axis label without its field path)."""
        return self.x_label.split(" (")[0]

    @property
    def along(self) -> str:
        """Which line the trend sentences follow, in brackets ('' with one line)."""
        return f" ({self.groups[0]})" if self.groups[0] else ""

    def line(self, values: Sequence[float]) -> tuple[list[float], list[float]]:
        """The x and the ``values`` of the first line of the figure (the runs of the first group)."""
        keep = [g == self.groups[0] for g in self.groups]
        return [v for v, k in zip(self.x, keep, strict=True) if k], [v for v, k in zip(values, keep, strict=True) if k]

    def trend(self, what: str, unit: str, values: Sequence[float]) -> str:
        return trend(what, unit, *self.line(values), self.name)

    def limited(self, speeds: Sequence[float] | None = None) -> str:
        """The runs whose figures are capacity-limited, marked, with what they hold (and for speeds, the speed
        averaged over all users); '' when none is."""
        parts = []
        for index, (label, capacity, note) in enumerate(zip(self.labels, self.capacities, self.notes, strict=True)):
            if note:
                parts.append(f"{label} ({note[len(LIMITED_MARK) + 1 :]}{_averaged(capacity, speeds, index)})")
        return f"; {LIMITED_MARK} capacity-limited: " + "; ".join(parts) if parts else ""

    def series(self, metric: str, values: Sequence[Any]) -> dict[str, list[Any]]:
        """``values`` as one named series per group over the sorted x."""
        return _named(metric, by_group(self.x, self.groups, values)[1])


def _averaged(capacity: Capacity, speeds: Sequence[float] | None, index: int) -> str:
    """', N tok/s averaged over all U users' (or the calls in flight) for a limited run's speed ('' when no
    speed or it is the same)."""
    if speeds is None or not capacity.users:
        return ""
    averaged = capacity.averaged(speeds[index])
    if averaged is None or averaged != averaged or averaged == speeds[index]:
        return ""
    return f", {format_number(averaged, ',.0f')} tok/s averaged over {capacity.sharing()}"


def _label(values: dict[str, Any], keys: list[str]) -> str:
    """``k=v, ...`` of a run's ``values`` of ``keys``."""
    return ", ".join(f"{k}={values.get(k)}" for k in keys)


def _sweep(manifest: Manifest, runs: list[SweepRun]) -> Sweep:
    """The run sweep as the page draws it (:class:`Sweep`)."""
    sets = [run.values for run in runs]
    summaries = [run.summary for run in runs]
    first = manifest.runs()
    a = assumptions(first[0], summaries[0]) if first else None
    keys = list(dict.fromkeys(k for item in sets for k in item))
    changing = _varied(sets)
    # the fields every run shares are in the caption's "Varied" and the scenario
    labels = [_label(item, changing) or _label(item, list(item)) for item in sets]
    capacities = _capacities(manifest, runs)
    notes = [limit_note(s, c) for s, c in zip(summaries, capacities, strict=True)]
    x, x_label, groups = _x_axis(sets)
    varied = f" Varied: {', '.join(keys)} (per row)."
    return Sweep(labels, summaries, capacities, notes, x, x_label, groups, varied, a)


def _capacities(manifest: Manifest, runs: list[SweepRun]) -> list[Capacity]:
    """Each run's capacity verdict: as the sweep recorded it, else worked out from its run folder."""
    return [
        run.capacity if run.capacity is not None else run_capacity(manifest.sub(f"run-{i:03d}", RUN), run.summary)
        for i, run in enumerate(runs)
    ]


def _x_axis(sets: list[dict[str, Any]]) -> tuple[list[float], str, list[str]]:
    """The swept axis (:func:`swept_axis`), else the runs in sweep order, all in one group."""
    axis = swept_axis(sets)
    if axis is not None:
        return axis
    return [float(i) for i in range(1, len(sets) + 1)], "run (in sweep order)", [""] * len(sets)


def page(manifest: Manifest) -> list[Section]:
    """The page of a ``run`` folder: one run, a run sweep, or the runs an interrupted sweep finished."""
    if manifest.has("sweep.json"):
        return sweep_sections(manifest)
    sections = run_sections(manifest, manifest.folder.name) if manifest.has("summary.json") else []
    for run in manifest.runs():
        sections += run_sections(run, run.folder.name)
    return sections


def sweep_sections(manifest: Manifest) -> list[Section]:
    """The runs table, then latency, per-user speed and cost against the swept quantity."""
    sweep = _sweep(manifest, read_sweep_runs(manifest))
    sections = [_runs_section(sweep), _latency_section(sweep), _speed_section(sweep), _cost_section(sweep)]
    return sections + fleet_report.sweep_sections(sweep.labels, sweep.summaries, lambda what: captioned(what, sweep.a))


def _row(label: str, s: RunSummary, note: str) -> list[object]:
    mark = LIMITED_MARK if note else ""
    return [
        label,
        _with(format_seconds(s.ttft_s.p50), mark),
        _with(format_seconds(s.ttft_s.p99), mark),
        format_seconds(s.itl_s.p50),
        _with(format_number(s.per_user_output_tok_s.p50, ".4g"), mark),
        format_number(s.output_tok_s, ".4g"),
        format_number(s.cost.usd_per_million_output_tokens, ".3g"),
        note or "ok",
    ]


def _runs_section(sweep: Sweep) -> Section:
    summaries = sweep.summaries
    speed = [s.per_user_output_tok_s.p50 for s in summaries]
    name = sweep.name
    story = (
        f"As {name} grow{'s' if not name.endswith('s') else ''}{sweep.along}, "
        f"{sweep.trend('TTFT p50', 's', [s.ttft_s.p50 for s in summaries])}; "
        f"{sweep.trend('per-user speed', 'tok/s', speed)}; "
        f"{sweep.trend('aggregate output', 'tok/s', [s.output_tok_s for s in summaries])}" + sweep.limited(speed) + "."
    )
    rows = [_row(label, s, note) for label, s, note in zip(sweep.labels, summaries, sweep.notes, strict=True)]
    return Section(
        "Runs",
        (HEADERS, rows),
        caption=captioned("One row per run of the sweep." + sweep.varied, sweep.a),
        takeaway=story,
        headline=True,
    )


def _lines(sweep: Sweep) -> str:
    return " One line per value of the other swept fields." if any(sweep.groups) else ""


def _latency_section(sweep: Sweep) -> Section:
    summaries = sweep.summaries
    limited = [bool(note) for note in sweep.notes]
    xs, flags = by_group(sweep.x, sweep.groups, limited)
    series: dict[str, list[Any]] = {}
    flagged: dict[str, list[Any]] = {}
    latencies = (
        ("TTFT p50", [s.ttft_s.p50 for s in summaries]),
        ("TTFT p99", [s.ttft_s.p99 for s in summaries]),
        ("ITL p50", [s.itl_s.p50 for s in summaries]),
    )
    for metric, values in latencies:
        series |= sweep.series(metric, values)
        flagged |= _named(metric, flags)
    story = sweep.trend("TTFT p50", "s", latencies[0][1]) + sweep.along
    what = f"TTFT p50 and p99 and inter-token latency p50 of each run against {sweep.x_label}."
    return Section(
        f"Latency against {sweep.name}",
        figure=plots.latency_vs_load(xs, series, sweep.x_label, limited=flagged),
        caption=captioned(what + _lines(sweep) + sweep.varied, sweep.a),
        takeaway=story[0].upper() + story[1:] + sweep.limited() + ".",
    )


def _speed_section(sweep: Sweep) -> Section:
    speed = [s.per_user_output_tok_s.p50 for s in sweep.summaries]
    total = [s.output_tok_s for s in sweep.summaries]
    xs, flags = by_group(sweep.x, sweep.groups, [bool(note) for note in sweep.notes])
    what = f"Median per-user output speed (left) and aggregate output (right) against {sweep.x_label}."
    return Section(
        f"Per-user speed against {sweep.name}",
        figure=plots.speed_vs_load(
            xs,
            sweep.series("per-user speed p50", speed),
            sweep.series("aggregate output", total),
            sweep.x_label,
            limited=_named("per-user speed p50", flags),
        ),
        caption=captioned(what + _lines(sweep) + sweep.varied, sweep.a),
        takeaway=sweep.trend("Per-user speed", "tok/s", speed) + sweep.along + sweep.limited(speed) + ".",
    )


def _cost_section(sweep: Sweep) -> Section:
    summaries = sweep.summaries
    costs = [s.cost.usd_per_million_output_tokens for s in summaries]
    tasks = [s.cost.usd_per_task for s in summaries] if all(s.tasks is not None for s in summaries) else None
    what = "$ per 1M output tokens (bars)" + (" and $ per task (diamonds)" if tasks else "") + " of each run."
    return Section(
        "Cost",
        figure=plots.cost(sweep.labels, costs, tasks),
        caption=captioned(what + sweep.varied, sweep.a),
        takeaway=sweep.trend("$ per 1M output tokens", "$", costs) + sweep.along + ".",
    )
