"""A self-contained HTML report of a results folder (run, run sweep, compare, plan or demo).

The page opens with a summary of the results' headline takeaways; every table and figure
follows with a caption that states what was simulated (model, hardware and chips, lengths,
window, load, cost basis: :mod:`simulator.captions`) and a one-sentence takeaway computed from
the same numbers it shows; rows and points of runs that hit a capacity limit are marked. It
embeds every figure as a PNG (also written beside it as ``figures/NN.png``, numbered in page
order), the infersim version, the seed, and the resolved scenario (collapsed at the end), so
one file can be mailed around.
"""

from __future__ import annotations

import base64
import dataclasses
import html
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from pydantic import ValidationError

from simulator import failure_figures, fleet_report, plan_figure, plots
from simulator.analytic.estimate import estimate
from simulator.analytic.layouts import deploy
from simulator.capacity import LIMITED_MARK, Capacity, of_run
from simulator.captions import (
    Assumptions,
    best,
    best_under_load,
    caption,
    closed_form_assumptions,
    run_assumptions,
    trend,
)
from simulator.config.deployment import DeploymentSpec
from simulator.config.files import number, read_csv, read_json, read_text, read_yaml
from simulator.config.loading import Catalog, ConfigError, format_validation_error
from simulator.config.scenario import Scenario
from simulator.errors import InfersimError
from simulator.results.summary import RunSummary
from simulator.results.views import (
    BACKEND_HEADERS,
    CLASS_HEADERS,
    backend_rows,
    class_rows,
    fleet_slo_attainment,
    significant,
    sweep_table,
)
from simulator.sources import SourcedNumber, confidence_counts, deciding
from simulator.studies.sweep import read_table_file, table_path
from simulator.tables import format_number
from simulator.units import format_seconds
from simulator.version import __version__

#: Deployments the demo report draws on its roofline (one per architecture family).
ROOFLINE_HARDWARE = ("cerebras-cs3", "groq-lpu", "sambanova-sn40l", "nvidia-h100-sxm")


@dataclass(frozen=True)
class Section:
    """One block of the page: a table, a figure or text, with its caption and a takeaway.

    The caption says what is shown and what was simulated (:mod:`simulator.captions`); the
    takeaway is one sentence read off the same numbers. ``headline`` lifts the takeaway into the
    summary at the top of the page.
    """

    title: str
    table: tuple[list[str], list[list[object]]] | None = None
    figure: Axes | None = None
    text: str = ""
    caption: str = ""
    takeaway: str = ""
    headline: bool = False


def _png(ax: Axes) -> bytes:
    buffer = io.BytesIO()
    figure = ax.get_figure(root=True)
    assert figure is not None
    figure.savefig(buffer, format="png", dpi=110)
    return buffer.getvalue()


def _html_table(headers: list[str], rows: list[list[object]], caption: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    marked = ' class="limited"'
    body = "".join(
        f"<tr{marked if any(LIMITED_MARK in str(c) for c in r) else ''}>"
        + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>"
        for r in rows
    )  # fmt: skip
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    return f'<figure class="table"><figcaption>{caption}</figcaption>{table}</figure>' if caption else table


def read_summary(path: Path) -> RunSummary:
    """A ``summary.json`` as the typed summary (``null`` read as NaN); a damaged one is an error
    naming the file and the field."""
    data = read_json(path)
    try:
        return RunSummary.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(str(path), exc, data)) from None


def read_scenario(folder: Path) -> Scenario | None:
    """The run's ``scenario.resolved.yaml`` as the typed scenario (None when absent or not a scenario)."""
    path = folder / "scenario.resolved.yaml"
    if not path.exists():
        return None
    try:
        return Scenario.model_validate(read_yaml(path))
    except ValidationError:
        return None


def _assumptions(folder: Path, summary: RunSummary | None) -> Assumptions | None:
    scenario = read_scenario(folder)
    return None if scenario is None else run_assumptions(scenario, summary)


def _captioned(what: str, assumptions: Assumptions | None) -> str:
    return caption(what, assumptions) if assumptions is not None else what


def run_capacity(folder: Path, summary: RunSummary) -> Capacity:
    """What a run's fleet holds against its users (:func:`simulator.capacity.of_run`), from its folder."""
    scenario = read_scenario(folder)
    return Capacity(None, None, summary.preemptions) if scenario is None else of_run(scenario, summary.preemptions)


def limit_note(s: RunSummary, capacity: Capacity | None = None) -> str:
    """Why a run hit a capacity limit, marked with :data:`LIMITED_MARK` ('' when it did not): offered
    load above capacity, requests too long for the KV, or fewer sequences held than users (or preemptions)."""
    parts = []
    if s.overloaded and s.offered_requests_per_s is not None:
        parts.append(f"offered {significant(s.offered_requests_per_s)} req/s > capacity "
                     f"{significant(s.capacity_requests_per_s)} req/s")  # fmt: skip
    if s.requests_dropped:
        parts.append(f"{s.requests_dropped} request(s) too long for the KV cache")
    capacity = capacity or Capacity(None, None, s.preemptions)
    if capacity.limited:
        parts.append(capacity.note()[len(LIMITED_MARK) + 1 :])
    return f"{LIMITED_MARK} " + "; ".join(parts) if parts else ""


def _run_sections(folder: Path, label: str) -> list[Section]:
    summary = read_summary(folder / "summary.json")
    a = _assumptions(folder, summary)
    capacity = run_capacity(folder, summary)
    limit = limit_note(summary, capacity)
    mark = LIMITED_MARK if limit else ""
    speed = summary.per_user_output_tok_s.p50
    ttst = summary.ttst_s
    rows: list[list[object]] = [
        ["TTFT p50 / p99", f"{format_seconds(summary.ttft_s.p50)} / {format_seconds(summary.ttft_s.p99)}{mark}"],
        ["TTST p50 / p99", f"{format_seconds(ttst.p50)} / {format_seconds(ttst.p99)}" if ttst else "-"],
        ["TPOT mean", format_seconds(summary.tpot_s.mean)],
        ["per-user output p50 (tok/s)", format_number(speed, ",.0f") + mark],
        ["output (tok/s)", format_number(summary.output_tok_s, ",.0f")],
        ["requests completed", summary.requests_completed],
        ["SLO met (requests)", format_number(fleet_slo_attainment(summary), ".0%")],
        ["$/h", format_number(summary.cost.usd_per_hour, ",.2f")],
        ["$/1M output tokens", format_number(summary.cost.usd_per_million_output_tokens, ".3g")],
        ["J/output token", format_number(summary.cost.joules_per_output_token, ".3g")],
    ]  # fmt: skip
    if summary.speculation is not None:
        rows.append(["speculative acceptance length (tokens/verify)",
                     format_number(summary.speculation.acceptance_length, ".2f")])  # fmt: skip
    rows.append(
        [
            "capacity",
            limit
            or "ok"
            + (
                f" (holds {capacity.held:,} of {capacity.users:,} users)"
                if capacity.users and capacity.held is not None
                else ""
            ),
        ]
    )
    averaged = capacity.averaged(speed)
    per_user = (f"{format_number(speed, ',.0f')} tok/s per running user{mark} "
                f"({format_number(averaged, ',.0f')} averaged over all {capacity.users:,} users)"
                if capacity.limited and capacity.users and averaged != speed
                else f"{format_number(speed, ',.0f')} tok/s per user{mark}")  # fmt: skip
    takeaway = (
        f"{summary.requests_completed:,} requests completed in {significant(summary.window_s)} s: TTFT p50 "
        f"{format_seconds(summary.ttft_s.p50)}{mark}, {per_user}, "
        f"{format_number(summary.output_tok_s, ',.0f')} tok/s in all, "
        f"${format_number(summary.cost.usd_per_million_output_tokens, '.3g')} per 1M output tokens"
        + (f"; {limit}, so latencies depend on how long the run lasts" if limit else "") + "."
    )  # fmt: skip
    sections = [Section(f"{label}: summary", (["metric", "value"], rows),
                        caption=_captioned("Latency, speed, throughput and cost of the whole run.", a),
                        takeaway=takeaway, headline=True)]  # fmt: skip
    if summary.classes:
        sections.append(_class_section(label, summary, a))
    if summary.backends:
        table: list[list[object]] = backend_rows(summary)
        busiest = max(summary.backends.items(), key=lambda kv: kv[1].busy_fraction)
        sections.append(Section(
            f"{label}: backends", (BACKEND_HEADERS, table),
            caption=_captioned("Each backend: what it served, how busy it was, what it cost (busy and idle).", a),
            takeaway=f"{busiest[0]} is the busiest backend ({format_number(busiest[1].busy_fraction, '.0%')} busy, "
                     f"${format_number(busiest[1].cost.usd, ',.2f')} over the window).",
        ))  # fmt: skip
    if summary.tasks is not None:
        sections.append(_task_section(label, summary, a))
    numbers = _run_numbers(folder)
    if numbers:
        sections.append(_sources_section(numbers, a))
    levels = folder / "levels.csv"
    if levels.exists():
        series: dict[str, tuple[list[float], list[float]]] = {}
        for line, row in read_csv(levels, ("replica", "level", "t_s", "value"))[1]:
            if row["replica"] == "0":
                times, values = series.setdefault(row["level"], ([], []))
                times.append(number(row["t_s"], f"{levels}:{line}", "t_s"))
                values.append(number(row["value"], f"{levels}:{line}", "value"))
        sections.append(Section(
            f"{label}: replica 0 over time", figure=plots.timeline(series),
            caption=_captioned("Batch size, queue length and KV occupancy of replica 0 over simulated time.", a),
            takeaway=f"The batch averages {format_number(summary.mean_batch_size, '.1f')} sequences and the queue "
                     f"{format_number(summary.mean_queue_length, '.1f')} requests; KV is "
                     f"{format_number(summary.mean_kv_occupancy, '.0%')} full on average.",
        ))  # fmt: skip
    requests = folder / "requests.csv"
    if requests.exists():
        data = np.genfromtxt(requests, delimiter=",", names=True)
        ok = np.atleast_1d(data["dropped"] == 0)
        ttft = np.atleast_1d(data["first_token_s"] - data["arrival_s"])[ok]
        sections.append(Section(
            f"{label}: TTFT distribution", figure=plots.latency_cdf({label: ttft.tolist()}),
            caption=_captioned("Time to first token of every served request (warm-up included), as a CDF.", a),
            takeaway=f"Half the measured requests see their first token within "
                     f"{format_seconds(summary.ttft_s.p50)} and 99 % within {format_seconds(summary.ttft_s.p99)}"
                     + (f" ({limit})" if limit else "") + ".",
        ))  # fmt: skip
    if summary.failures is not None:
        parts = failure_figures.run_parts(label, summary.failures)
        sections += [Section(**{**p, "caption": _captioned(p["caption"], a)}) for p in parts]
    sections += fleet_report.run_sections(label, summary, lambda what: _captioned(what, a))  # APIs, power
    return sections


def _class_section(label: str, summary: RunSummary, a: Assumptions | None) -> Section:
    assert summary.classes is not None
    costs = {name: c.cost for name, c in summary.classes.items() if c.cost is not None}
    dearest = max(costs, key=lambda name: costs[name].usd) if costs else ""
    tasks = [(name, c) for name, c in costs.items() if c.usd_per_task == c.usd_per_task]
    takeaway = (f"{dearest} takes {format_number(costs[dearest].share_of_fleet_usd, '.0%')} of the fleet's $"
                if dearest else "no class was costed")  # fmt: skip
    if tasks:
        takeaway += "; " + ", ".join(f"{name} cost ${format_number(c.usd_per_task, '.3g')} per task on its own spend"
                                     for name, c in tasks)  # fmt: skip
    rule = summary.cost.attribution or ""
    what = (
        f"One row per workload class, then the fleet. {rule[:1].upper()}{rule[1:]}; the classes' $ sum to the fleet's."
    )
    return Section(f"{label}: per class", (CLASS_HEADERS, class_rows(summary)), caption=_captioned(what, a),
                   takeaway=takeaway + ".", headline=True)  # fmt: skip


def _task_section(label: str, summary: RunSummary, a: Assumptions | None) -> Section:
    t = summary.tasks
    assert t is not None
    task_rows: list[list[object]] = [
        ["tasks completed", t.tasks_completed],
        ["task time p50 / p95 / p99 (s)", " / ".join(format_number(v, ".4g") for v in
                                                     (t.task_time_s.p50, t.task_time_s.p95, t.task_time_s.p99))],
        ["$/task (the task classes' own spend)", format_number(summary.cost.usd_per_task, ".3g")],
        ["calls/task", format_number(t.calls_per_task, ".3g")],
    ]  # fmt: skip
    shares = t.time_share.to_dict()
    parts = {k: v for k, v in shares.items() if isinstance(v, float) and v == v}
    top = max(parts, key=parts.__getitem__) if parts else ""
    takeaway = (f"{top} takes {format_number(parts[top], '.0%')} of a task's time; a task takes "
                f"{format_number(t.task_time_s.p50, '.3g')} s at the median." if top else
                "No task completed in the window: lengthen run.duration or shorten run.warmup.")  # fmt: skip
    return Section(f"{label}: agent tasks", (["metric", "value"], task_rows),
                   plots.task_breakdown({label: t.mean_seconds.to_dict()}),
                   caption=_captioned("Agent tasks: completion time and where it goes (mean seconds per task).", a),
                   takeaway=takeaway, headline=True)  # fmt: skip


#: A swept field's axis label by its last path segment (the name, then the unit).
SWEPT_LABELS = {
    "users": "concurrent users", "agents": "concurrent agents", "rate_per_s": "arrival rate (req/s)",
    "tasks_per_s": "task arrival rate (tasks/s)", "replicas": "replicas", "chips": "chips",
}  # fmt: skip


def swept_axis(sets: list[dict[str, Any]]) -> tuple[list[float], str, list[str]] | None:
    """The numeric field a run sweep varies most (the x axis), as (values, axis label, each run's group);
    a run's group names its values of the other varied fields (one line per group, '' when there are none).
    None when no varied field is numeric in every run."""
    keys = list(dict.fromkeys(k for item in sets for k in item))
    varied = [k for k in keys if len({json.dumps(item.get(k), default=str) for item in sets}) > 1]
    numeric = [k for k in varied if all(isinstance(item.get(k), int | float) for item in sets)]
    if not numeric:
        return None
    path = max(numeric, key=lambda k: len({item[k] for item in sets}))  # the first of the most-valued
    name = SWEPT_LABELS.get(path.rsplit(".", 1)[-1], path)
    groups = [", ".join(f"{k}={item.get(k)}" for k in varied if k != path) for item in sets]
    return [float(item[path]) for item in sets], f"{name} ({path})" if name != path else path, groups


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


def _limited_clause(labels: Sequence[str], capacities: Sequence[Capacity], notes: Sequence[str],
                    speeds: Sequence[float] | None = None) -> str:  # fmt: skip
    """The runs whose figures are capacity-limited, marked, with what they hold (and for speeds, the speed
    averaged over all users); '' when none is."""
    parts = []
    for label, capacity, note, index in zip(labels, capacities, notes, range(len(labels)), strict=True):
        if not note:
            continue
        averaged = capacity.averaged(speeds[index]) if speeds is not None else None
        extra = (f", {format_number(averaged, ',.0f')} tok/s averaged over all {capacity.users:,} users"
                 if speeds is not None and capacity.users and averaged is not None and averaged == averaged
                 and averaged != speeds[index] else "")  # fmt: skip
        parts.append(f"{label} ({note[len(LIMITED_MARK) + 1 :]}{extra})")
    return f"; {LIMITED_MARK} capacity-limited: " + "; ".join(parts) if parts else ""


def _with(cell: str, mark: str) -> str:
    """A cell with the capacity mark; a cell with no number (``-``) stays as it is."""
    return cell + mark if cell != "-" else cell


def _sweep_sections(folder: Path) -> list[Section]:
    sweep = read_json(folder / "sweep.json")
    sets = [item["set"] for item in sweep]
    labels = [", ".join(f"{k}={v}" for k, v in item.items()) for item in sets]
    summaries = [RunSummary.model_validate(item["summary"]) for item in sweep]
    first = sorted(p for p in folder.iterdir() if p.is_dir() and (p / "summary.json").exists())
    a = _assumptions(first[0], summaries[0]) if first else None
    varied = f" Varied: {', '.join(dict.fromkeys(k for item in sets for k in item))} (per row)."
    keys = list(dict.fromkeys(k for item in sets for k in item))
    changing = [k for k in keys if len({json.dumps(item.get(k), default=str) for item in sets}) > 1]
    short = [
        ", ".join(f"{k}={item.get(k)}" for k in changing) or label for item, label in zip(sets, labels, strict=True)
    ]
    labels = short  # the fields every run shares are in the caption's "Varied" and the scenario
    capacities = [
        Capacity.from_dict(item["capacity"]) if isinstance(item.get("capacity"), dict)
        else run_capacity(folder / f"run-{i:03d}", s)
        for i, (item, s) in enumerate(zip(sweep, summaries, strict=True))
    ]  # fmt: skip
    notes = [limit_note(s, c) for s, c in zip(summaries, capacities, strict=True)]
    marks = [LIMITED_MARK if note else "" for note in notes]
    headers = ["run", "TTFT p50", "TTFT p99", "ITL p50", "tok/s/user p50", "output tok/s", "$/1M out", "capacity"]
    rows: list[list[object]] = [
        [label, _with(format_seconds(s.ttft_s.p50), mark), _with(format_seconds(s.ttft_s.p99), mark),
         format_seconds(s.itl_s.p50), _with(format_number(s.per_user_output_tok_s.p50, ".4g"), mark),
         format_number(s.output_tok_s, ".4g"),
         format_number(s.cost.usd_per_million_output_tokens, ".3g"), note or "ok"]
        for label, s, note, mark in zip(labels, summaries, notes, marks, strict=True)
    ]  # fmt: skip
    limited = [bool(note) for note in notes]
    axis = swept_axis(sets)
    run_order = [float(i) for i in range(1, len(sweep) + 1)]
    x, x_label, groups = axis if axis is not None else (run_order, "run (in sweep order)", [""] * len(sweep))
    name = x_label.split(" (")[0]
    ttft = [s.ttft_s.p50 for s in summaries]
    speed = [s.per_user_output_tok_s.p50 for s in summaries]
    total = [s.output_tok_s for s in summaries]
    first_group = [g == groups[0] for g in groups]  # the trend sentences follow one line of the figure

    def line(values: Sequence[float]) -> tuple[list[float], list[float]]:
        return [v for v, keep in zip(x, first_group, strict=True) if keep], [
            v for v, keep in zip(values, first_group, strict=True) if keep]  # fmt: skip

    along = f" ({groups[0]})" if groups[0] else ""
    story = (f"As {name} grow{'s' if not name.endswith('s') else ''}{along}, "
             f"{trend('TTFT p50', 's', *line(ttft), name)}; {trend('per-user speed', 'tok/s', *line(speed), name)}; "
             f"{trend('aggregate output', 'tok/s', *line(total), name)}"
             + _limited_clause(short, capacities, notes, speed) + ".")  # fmt: skip
    sections = [Section("Runs", (headers, rows), caption=_captioned("One row per run of the sweep." + varied, a),
                        takeaway=story, headline=True)]  # fmt: skip
    xs, flags = by_group(x, groups, limited)
    series: dict[str, list[Any]] = {}
    flagged: dict[str, list[Any]] = {}
    for metric, values in (("TTFT p50", ttft), ("TTFT p99", [s.ttft_s.p99 for s in summaries]),
                           ("ITL p50", [s.itl_s.p50 for s in summaries])):  # fmt: skip
        series |= _named(metric, by_group(x, groups, values)[1])
        flagged |= _named(metric, flags)
    lines = " One line per value of the other swept fields." if any(groups) else ""
    ttft_story = trend("TTFT p50", "s", *line(ttft), name) + along
    sections.append(Section(
        f"Latency against {name}", figure=plots.latency_vs_load(xs, series, x_label, limited=flagged),
        caption=_captioned(f"TTFT p50 and p99 and inter-token latency p50 of each run against {x_label}."
                           + lines + varied, a),
        takeaway=ttft_story[0].upper() + ttft_story[1:] + _limited_clause(short, capacities, notes) + ".",
    ))  # fmt: skip
    speeds = _named("per-user speed p50", by_group(x, groups, speed)[1])
    sections.append(
        Section(
            f"Per-user speed against {name}",
            figure=plots.speed_vs_load(
                xs,
                speeds,
                _named("aggregate output", by_group(x, groups, total)[1]),
                x_label,
                limited=_named("per-user speed p50", flags),
            ),
            caption=_captioned(
                f"Median per-user output speed (left) and aggregate output (right) against {x_label}." + lines + varied,
                a,
            ),
            takeaway=trend("Per-user speed", "tok/s", *line(speed), name)
            + along
            + _limited_clause(short, capacities, notes, speed)
            + ".",
        )
    )
    costs = [s.cost.usd_per_million_output_tokens for s in summaries]
    tasks = [s.cost.usd_per_task for s in summaries] if all(s.tasks is not None for s in summaries) else None
    sections.append(Section(
        "Cost", figure=plots.cost(labels, costs, tasks),
        caption=_captioned("$ per 1M output tokens (bars)" + (" and $ per task (diamonds)" if tasks else "")
                           + " of each run." + varied, a),
        takeaway=trend("$ per 1M output tokens", "$", *line(costs), name) + along + ".",
    ))  # fmt: skip
    sections += fleet_report.sweep_sections(labels, summaries, lambda what: _captioned(what, a))  # APIs, power
    return sections


def _compare_sections(folder: Path) -> list[Section]:
    rows = read_json(folder / "compare.json")
    from simulator.studies.compare import HEADERS, table_cells

    runs = sorted(p for p in folder.iterdir() if p.is_dir() and (p / "summary.json").exists())
    a = _assumptions(runs[0], read_summary(runs[0] / "summary.json")) if runs else None
    hardware = list(dict.fromkeys(r["hardware"] for r in rows))
    loads = list(dict.fromkeys(r["load"] for r in rows))
    if a is not None:
        a = dataclasses.replace(a, hardware=", ".join(hardware) + " (the same load on each; " + a.hardware
                                + " shown for the first run)")  # fmt: skip
        if len(loads) > 1:
            a = dataclasses.replace(a, load=f"{a.load} in the first run; per row: {', '.join(loads)}")
        bases = sorted({str(r["cost_basis"]) for r in rows})
        a = dataclasses.replace(a, cost_basis=", ".join(bases) + (" (per row)" if len(bases) > 1 else ""))
    labels = [f"{r['hardware']} {r['load']}".strip() for r in rows]
    sections = [Section("Comparison", (HEADERS, [table_cells(r) for r in rows]),
                        caption=_captioned("One row per hardware and load: speed against cost.", a),
                        takeaway=_per_load(rows, "per_user_output_tok_s_p50", "tok/s", "per-user speed"),
                        headline=True)]  # fmt: skip
    curves: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        point = (r["per_user_output_tok_s_p50"], r["output_tok_s_per_chip"])
        if all(isinstance(v, int | float) and v == v for v in point):  # a run that measured nothing has no point
            curves.setdefault(r["hardware"], []).append(point)
    front = plots.pareto([p for points in curves.values() for p in points])
    on_front = sorted({h for h, points in curves.items() if any(p in front for p in points)})
    sections.append(Section(
        "Throughput-interactivity frontier", figure=plots.frontier(curves),
        caption=_captioned("Per-user speed against aggregate output per chip, one curve per hardware through the "
                           "loads compared (more loads draw more of each curve); the Pareto set is ringed.", a),
        takeaway=f"On the Pareto set: {', '.join(on_front) or 'none'}.",
    ))  # fmt: skip
    tasks = [r["usd_per_task"] for r in rows] if all("usd_per_task" in r for r in rows) else None
    if tasks is not None:
        breakdown = {label: r["task_seconds"] for label, r in zip(labels, rows, strict=True)}
        sections.append(Section(
            "Where the task time goes", figure=plots.task_breakdown(breakdown),
            caption=_captioned("Mean seconds per agent task by part, one bar per hardware and load.", a),
            takeaway=_per_load(rows, "task_time_s_p50", "s", "median task time", highest=False), headline=True,
        ))  # fmt: skip
    numbers = {str(r["hardware"]): [SourcedNumber(**n) for n in r["sources"]] for r in rows if r.get("sources")}
    if numbers:
        sections.append(_sources_section(numbers, a))
    per_million = [r["usd_per_million_output_tokens"] for r in rows]
    key, what = ("usd_per_task", "$/task") if tasks is not None else ("usd_per_million_output_tokens", "$/1M out")
    sections.append(Section(
        "Cost", figure=plots.cost(labels, per_million, tasks),
        caption=_captioned("$ per 1M output tokens (bars)" + (" and $ per task (diamonds)" if tasks else "") + ".", a),
        takeaway=_per_load(rows, key, "$", what, highest=False),
    ))  # fmt: skip
    return sections


def _sources_section(numbers: dict[str, list[SourcedNumber]], a: Assumptions | None) -> Section:
    """The numbers the results rest on, per hardware: value, confidence, source and its citation."""
    rows: list[list[object]] = [[hardware, n.what, n.value, n.confidence, f"{n.source}: {n.citation}"[:160]]
                                for hardware, found in numbers.items() for n in found]  # fmt: skip
    every = [n for found in numbers.values() for n in found]
    assumed = [f"{hw} {n.what}" for hw, found in numbers.items() for n in found if n.confidence == "assumed"]
    takeaway = (f"Of the {len(every)} numbers these results rest on: {confidence_counts(every)}"
                + (f"; assumed: {', '.join(assumed)}." if assumed else "."))  # fmt: skip
    return Section("Where the numbers come from", (["hardware", "number", "value", "confidence", "source"], rows),
                   caption=_captioned("The profile numbers that decide the speeds and costs above (bandwidth, FLOP/s, "
                                      "efficiencies, latencies, prices), each with its confidence and source; "
                                      "infersim estimate --explain lists every number of a profile.", a),
                   takeaway=takeaway)  # fmt: skip


def _run_numbers(folder: Path) -> dict[str, list[SourcedNumber]]:
    """The deciding numbers of each backend's deployment of a run folder's resolved scenario ({} when it
    cannot be resolved again here)."""
    from simulator.plan.resolve import resolve

    scenario = read_scenario(folder)
    if scenario is None:
        return {}
    try:
        resolved = resolve(scenario, Catalog())
    except (InfersimError, OSError, ValueError):
        return {}
    return {b.deployment.hardware.id: deciding(b.deployment) for b in resolved.backends}


def _per_load(rows: list[dict[str, Any]], key: str, unit: str, what: str, highest: bool = True) -> str:
    """Which hardware does best on ``key`` at each load compared, in one sentence; capacity-limited rows
    flagged, and a per-user speed ranked averaged over all users (:func:`best_under_load`)."""
    loads = list(dict.fromkeys(r["load"] for r in rows))
    parts = []
    for load in loads:
        mine = [r for r in rows if r["load"] == load]
        values = {r["hardware"]: r.get(key) or math.nan for r in mine}
        capacities = {r["hardware"]: Capacity.from_dict(r) for r in mine}
        speed = key.startswith("per_user_output_tok_s")
        parts.append((f"at {load}, " if load else "") + best_under_load(values, capacities, unit, what, highest, speed))
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] + "."


def _demo_sections(folder: Path) -> list[Section]:
    """The speed-gap table and chart per model, and the roofline of the first model's deployments."""
    rows = read_json(folder / "speed_gap.json")
    fitted = [r for r in rows if "single_stream" in r]
    models = list(dict.fromkeys(r["model"] for r in rows))
    first = fitted[0]["single_stream"]
    users = fitted[0]["loaded"]["concurrency"]
    lengths = (first["input_tokens"], first["output_tokens"])
    sections = []
    for model in models:
        mine = [r for r in fitted if r["model"] == model]
        a = closed_form_assumptions(model, [r["hardware"] for r in mine], *lengths, (1, users))
        fits = {r["hardware"]: (r["single_stream"]["per_user_output_tok_s"], r["loaded"]["per_user_output_tok_s"])
                for r in mine}  # fmt: skip
        limited = [r["hardware"] for r in mine if r["loaded"].get("capacity_limited")]
        capacities = {r["hardware"]: Capacity(r["loaded"]["concurrency"], r["loaded"]["max_concurrency"])
                      for r in mine}  # fmt: skip
        alone = {h: v[0] for h, v in fits.items()}
        loaded = {h: v[1] for h, v in fits.items()}
        note = (f" Hatched: the KV cache of {', '.join(limited)} holds fewer than {users} users; the bar is the "
                f"speed of those that fit, the rest queue." if limited else "")  # fmt: skip
        sections.append(Section(
            f"The speed gap: {model}", figure=plots.speed_gap(fits, model, users, capacity_limited=limited),
            caption=caption(f"Per-user output speed of {model} on each hardware, alone and with {users} users."
                            + note, a),
            takeaway=f"{model}: alone, {best(alone, 'tok/s', 'per-user speed')}; with {users} users, "
                     f"{best_under_load(loaded, capacities, 'tok/s', 'per-user speed', per_user_speed=True)}.",
            headline=True,
        ))  # fmt: skip
    table_a = closed_form_assumptions(", ".join(models), ["every bundled hardware profile"], *lengths, (1, users))
    sections.insert(0, Section("The speed gap (table)", text=read_text(folder / "speed_gap.txt"),
                               caption=caption("Per-user speed, TTFT and aggregate throughput of each model on each "
                                               f"hardware; {LIMITED_MARK} marks capacity-limited figures.", table_a),
                               takeaway=f"{sum(1 for r in rows if 'error' in r)} model-hardware pairs do not fit; "
                                        f"{sum(1 for r in fitted if r['loaded'].get('capacity_limited'))} are "
                                        f"capacity-limited at {users} users ({LIMITED_MARK})."))  # fmt: skip
    deployments = [r["single_stream"]["deployment"] for r in fitted if r["model"] == models[0]]
    catalog = Catalog()
    chosen = {d["hardware"]: deploy(catalog, DeploymentSpec(
        hardware=d["hardware"], model=d["model"], chips=d["chips"], weights=d["weights"]))
        for d in deployments if d["hardware"] in ROOFLINE_HARDWARE}  # fmt: skip
    bounds = {hw: estimate(d, *plots.ROOFLINE_TOKENS, 1).bottleneck for hw, d in chosen.items()}
    roof_a = closed_form_assumptions(models[0], list(chosen), *plots.ROOFLINE_TOKENS, (1, 16, 128))
    sections.append(Section(
        f"Roofline: {models[0]} at batch 1, 16 and 128", figure=plots.roofline(chosen, (1, 16, 128)),
        caption=caption("Each deployment's per-chip roof (solid), its decode operating points (dashed, batch 1, 16, "
                        "128) and its latency ceiling (dotted: the FLOP/s a pass would reach in only its fixed, "
                        "fabric, hop and collective time; every point lies on or under it).", roof_a),
        takeaway="At batch 1 the decode pass is bound by "
                 + ", ".join(f"{kind.replace('_', ' ')} on {hw}" for hw, kind in bounds.items()) + ".",
    ))  # fmt: skip
    return sections


def _sweep_table_sections(folder: Path) -> list[Section]:
    """A sweep's per-combination summary; with hardware and speed columns, its frontier."""
    path = table_path(folder, "summary")
    assert path is not None
    rows = read_table_file(path)
    spec = read_yaml(folder / "sweep.resolved.yaml") if (folder / "sweep.resolved.yaml").exists() else {}
    metrics = list(spec.get("metrics", [])) if isinstance(spec, dict) else []
    factors = [c for c in (rows[0] if rows else {}) if c not in ("runs", "failed") and not c.endswith((".mean",
               ".ci95"))]  # fmt: skip
    metrics = metrics or [c[: -len(".mean")] for c in (rows[0] if rows else {}) if c.endswith(".mean")]
    summary: list[dict[str, object]] = [{k: _number(v) if k not in factors else v for k, v in r.items()} for r in rows]
    a = _assumptions(folder, None)
    varied = f" Varied: {', '.join(factors)}."
    replications = spec.get("replications", 1) if isinstance(spec, dict) else 1
    sections = [Section(
        "Sweep summary", sweep_table(summary, factors, metrics),
        caption=_captioned(f"Mean ± 95 % CI half-width over {replications} replication(s) per combination." + varied,
                           a),
        takeaway=f"{len(rows)} factor combinations, {sum(int(r['runs']) for r in rows)} runs, "
                 f"{sum(int(r['failed']) for r in rows)} failed.",
        headline=True,
    )]  # fmt: skip
    speed, total = "per_user_output_tok_s.p50.mean", "output_tok_s.mean"
    if rows and "deployment.hardware" in rows[0] and speed in rows[0] and total in rows[0]:
        curves: dict[str, list[tuple[float, float]]] = {}
        bars: dict[str, list[tuple[float, float]]] = {}
        for r in rows:
            if r[speed] and r[total] and float(r[speed]) > 0 and float(r[total]) > 0:
                curves.setdefault(r["deployment.hardware"], []).append((float(r[speed]), float(r[total])))
                x_ci, y_ci = (_ci(r.get(column[: -len("mean")] + "ci95", "")) for column in (speed, total))
                bars.setdefault(r["deployment.hardware"], []).append((x_ci, y_ci))
        front = plots.pareto([p for points in curves.values() for p in points])
        on_front = sorted({h for h, points in curves.items() if any(p in front for p in points)})
        intervals = " Error bars: 95 % CI over the replications." if replications > 1 else ""
        sections.append(Section(
            "Throughput-interactivity frontier",
            figure=plots.frontier(curves, per="replica", half_widths=bars if replications > 1 else None),
            caption=_captioned("Mean per-user speed against mean aggregate output per replica, one curve per "
                               "hardware through every swept load; the Pareto set is ringed." + intervals + varied, a),
            takeaway=f"On the Pareto set: {', '.join(on_front) or 'none'}.", headline=True,
        ))  # fmt: skip
    return sections


def _ci(text: str) -> float:
    """A CI half-width cell of summary.csv (0 where undefined: a single replication)."""
    value = _number(text)
    return value if isinstance(value, float) and value == value else 0.0


def _number(text: str) -> float | str:
    try:
        return float(text) if text != "" else math.nan
    except ValueError:
        return text


def _plan_sections(folder: Path) -> list[Section]:
    plan = read_json(folder / "plan.json")
    a = _assumptions(folder, None)
    return [Section("Plan", text=read_text(folder / "plan.txt"),
                    caption=_captioned("The cheapest fleet meeting every target, the cost-vs-SLO frontier and every "
                                       "rejected fleet with the target it misses.", a),
                    takeaway=str(plan.get("explanation", "")), headline=True),
            Section("Cost vs SLO", figure=plan_figure.cost_vs_slo(plan),
                    caption=_captioned(plan_figure.what(plan), a),
                    takeaway=plan_figure.frontier_takeaway(plan))] + [
        Section(**{**p, "caption": _captioned(p["caption"], a)})
        for p in (failure_figures.plan_parts(plan["availability"]) if "availability" in plan else [])
    ]  # fmt: skip


def collect(folder: Path) -> list[Section]:
    """The sections of whatever results ``folder`` holds (nested run folders included)."""
    sections: list[Section] = []
    if (folder / "speed_gap.json").exists():
        sections += _demo_sections(folder)
    if (folder / "plan.json").exists():
        sections += _plan_sections(folder)
    if (folder / "tasks.txt").exists():
        what = (
            "Task time, where it goes, per-user speed and $ per task, one row per hardware and load (the "
            "comparison below states what was simulated)."
        )
        sections.append(Section("Agentic task time", text=read_text(folder / "tasks.txt"), caption=what))
    if (folder / "compare.json").exists():
        sections += _compare_sections(folder)
    if (folder / "sweep.json").exists():
        sections += _sweep_sections(folder)
    if table_path(folder, "summary") is not None:
        sections += _sweep_table_sections(folder)
    if (folder / "summary.json").exists():
        sections += _run_sections(folder, folder.name)
    for child in sorted(p for p in folder.iterdir() if p.is_dir() and (p / "summary.json").exists()):
        if not (folder / "sweep.json").exists() and not (folder / "compare.json").exists():
            sections += _run_sections(child, child.name)
    for child in sorted(p for p in folder.iterdir() if p.is_dir() and p.name != "figures"):
        if (child / "speed_gap.json").exists() or (child / "compare.json").exists() or (child / "plan.json").exists():
            sections += collect(child)
    return sections


STYLE = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.9em}th,td{border:1px solid #ccc;padding:.25em .6em;
text-align:right}th{background:#f2f2f2}td:first-child,th:first-child{text-align:left}img{max-width:100%}
pre{background:#f7f7f7;padding:1em;overflow-x:auto;font-size:.8em}
h2{border-bottom:1px solid #ddd;padding-bottom:.2em}figcaption,.caption{text-align:left;
font-size:.85em;color:#444;margin:.3em 0}figure{margin:0 0 1.5em}.takeaway{color:#111}
tr.limited td{background:#fff1f0}figure.table{overflow-x:auto}td{white-space:nowrap}
.summary{background:#f5f9ff;border:1px solid #cfe0f5;padding:.2em 1em}
details{margin-top:2em}summary{cursor:pointer;font-weight:bold}"""


def render(title: str, sections: Sequence[Section], folder: Path, figures: dict[str, bytes]) -> str:
    """The HTML page: a summary of the headline takeaways, then every section with its caption and
    takeaway (figures numbered in order, each added to ``figures`` as ``figures/NN.png`` and embedded
    as base64), then the resolved scenario, collapsed."""
    parts = [f"<h1>{html.escape(title)}</h1>", f"<p>infersim {html.escape(__version__)}; {_provenance(folder)}</p>"]
    headlines = [s.takeaway for s in sections if s.headline and s.takeaway]
    if headlines:
        items = "".join(f"<li>{html.escape(text)}</li>" for text in headlines)
        parts.append(f'<section class="summary"><h2>Summary</h2><ul>{items}</ul></section>')
    number = 0
    for section in sections:
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        words = html.escape(section.caption)
        takeaway = f' <strong class="takeaway">{html.escape(section.takeaway)}</strong>' if section.takeaway else ""
        if section.text:
            parts.append(f'<p class="caption">{words}{takeaway}</p><pre>{html.escape(section.text)}</pre>')
        if section.table is not None:
            parts.append(_html_table(*section.table, caption=words + takeaway))
        if section.figure is not None:
            number += 1
            png = _png(section.figure)
            figures[f"figures/{number:02d}.png"] = png
            alt = html.escape(section.title)
            parts.append(
                f'<figure><img alt="{alt}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
                f"<figcaption><b>Figure {number}.</b> {words}{takeaway}</figcaption></figure>"
            )
    scenario = _resolved_scenario(folder)
    if scenario is not None:
        parts.append(f"<details><summary>Resolved scenario ({html.escape(str(scenario.relative_to(folder)))})"
                     f"</summary><pre>{html.escape(read_text(scenario))}</pre></details>")  # fmt: skip
    body = "\n".join(parts)
    return f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>' \
           f"<style>{STYLE}</style></head><body>\n{body}\n</body></html>\n"  # fmt: skip


def _resolved_scenario(folder: Path) -> Path | None:
    """The folder's own resolved scenario, else the first of its runs'."""
    own = folder / "scenario.resolved.yaml"
    return own if own.exists() else next(iter(sorted(folder.rglob("scenario.resolved.yaml"))), None)


def _provenance(folder: Path) -> str:
    scenario = _resolved_scenario(folder)
    if scenario is None:
        return "no resolved scenario in the folder"
    data: Any = read_yaml(scenario)
    provenance = data.get("provenance", {}) if isinstance(data, dict) else {}
    seed = provenance.get("seed", data.get("seed") if isinstance(data, dict) else None)
    return f"seed {seed}; scenario {html.escape(str(data.get('name', data.get('kind', '?'))))}"


def build_report(folder: Path) -> dict[str, str | bytes]:
    """``report.html`` and ``figures/NN.png`` of the results in ``folder`` (nothing is written).

    Raises
    ------
    ConfigError
        If the folder holds no results, or results this version cannot read (damaged files).
    """
    try:
        sections = collect(folder)
        if not sections:
            raise ConfigError(f"{folder}: no infersim results here (summary.json, compare.json, plan.json, ...)")
        figures: dict[str, bytes] = {}
        page = render(f"infersim report: {folder.name}", sections, folder, figures)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(
            f"{folder}: damaged or unreadable results ({type(exc).__name__}: {exc}); rerun the command that wrote them"
        ) from None
    return {"report.html": page, **figures}
