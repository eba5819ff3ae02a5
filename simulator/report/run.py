"""The sections of one run: its summary, classes, backends, tasks, sources, timeline and TTFT.

The page of a ``run`` folder (:mod:`simulator.report.runs`) shows one run with them, and so does
the comparison's for each run an interrupted one finished.
"""

from __future__ import annotations

from simulator.capacity import LIMITED_MARK, Capacity, of_run
from simulator.report import failure_figures, fleet_report, plots
from simulator.report.captions import Assumptions, captioned
from simulator.report.html import Section
from simulator.report.reading import assumptions, read_levels, read_scenario, read_summary, read_ttft_s
from simulator.report.sources import run_numbers, sources_section
from simulator.results.marker import Manifest
from simulator.results.summary import RunSummary
from simulator.results.views import (
    BACKEND_HEADERS,
    CLASS_HEADERS,
    backend_rows,
    class_rows,
    fleet_slo_attainment,
    significant,
)
from simulator.tables import format_number
from simulator.units import format_seconds


def run_capacity(manifest: Manifest, summary: RunSummary) -> Capacity:
    """What a run's fleet holds against its users (:func:`simulator.capacity.of_run`), from its folder."""
    scenario = read_scenario(manifest)
    return Capacity(None, None, summary.preemptions) if scenario is None else of_run(scenario, summary)


def limit_note(s: RunSummary, capacity: Capacity | None = None) -> str:
    """Why a run hit a capacity limit, marked with :data:`LIMITED_MARK` ('' when it did not): offered
    load above capacity, requests too long for the KV, or fewer sequences held than users (or preemptions)."""
    parts = []
    if s.overloaded and s.offered_requests_per_s is not None:
        parts.append(
            f"offered {significant(s.offered_requests_per_s)} req/s > capacity "
            f"{significant(s.capacity_requests_per_s)} req/s"
        )
    if s.requests_dropped:
        parts.append(f"{s.requests_dropped} request(s) too long for the KV cache")
    capacity = capacity or Capacity(None, None, s.preemptions)
    if capacity.limited:
        parts.append(capacity.note()[len(LIMITED_MARK) + 1 :])
    return f"{LIMITED_MARK} " + "; ".join(parts) if parts else ""


def run_sections(manifest: Manifest, label: str) -> list[Section]:
    """One run's sections: its summary, then whichever of classes, backends, tasks, sources, the
    timeline of replica 0 and the TTFT distribution it has."""
    summary = read_summary(manifest.path("summary.json"))
    a = assumptions(manifest, summary)
    capacity = run_capacity(manifest, summary)
    limit = limit_note(summary, capacity)
    sections = [_summary_section(label, summary, capacity, limit, a)]
    if summary.classes:
        sections.append(_class_section(label, summary, a))
    if summary.backends:
        sections.append(_backend_section(label, summary, a))
    if summary.tasks is not None:
        sections.append(_task_section(label, summary, a))
    numbers = run_numbers(manifest)
    if numbers:
        sections.append(sources_section(numbers, a))
    if manifest.has("levels.csv"):
        sections.append(_timeline_section(label, summary, read_levels(manifest), a))
    if manifest.has("requests.csv"):
        sections.append(_ttft_section(label, summary, read_ttft_s(manifest), limit, a))
    if summary.failures is not None:
        sections += [Section(**{**p, "caption": captioned(p["caption"], a)})
                     for p in failure_figures.run_parts(label, summary.failures)]  # fmt: skip
    return sections + fleet_report.run_sections(label, summary, lambda what: captioned(what, a))  # APIs, power


def _summary_rows(summary: RunSummary, capacity: Capacity, limit: str) -> list[list[object]]:
    """The metric-value rows of a run's summary table, capacity-limited figures marked."""
    mark = LIMITED_MARK if limit else ""
    ttft = f"{format_seconds(summary.ttft_s.p50)} / {format_seconds(summary.ttft_s.p99)}{mark}"
    holds = f" ({capacity.holds()})" if capacity.users and capacity.holds() else ""
    cost = summary.cost
    ttst = summary.ttst_s
    rows: list[list[object]] = [
        ["TTFT p50 / p99", ttft],
        ["TTST p50 / p99", f"{format_seconds(ttst.p50)} / {format_seconds(ttst.p99)}" if ttst else "-"],
        ["TPOT mean", format_seconds(summary.tpot_s.mean)],
        ["per-user output p50 (tok/s)", format_number(summary.per_user_output_tok_s.p50, ",.0f") + mark],
        ["output (tok/s)", format_number(summary.output_tok_s, ",.0f")],
        ["requests completed", summary.requests_completed],
        ["SLO met (requests)", format_number(fleet_slo_attainment(summary), ".0%")],
        ["$/h", format_number(cost.usd_per_hour, ",.2f")],
        ["$/1M output tokens", format_number(cost.usd_per_million_output_tokens, ".3g")],
        ["J/output token", format_number(cost.joules_per_output_token, ".3g")],
    ]
    if summary.speculation is not None:
        rows.append(["speculative acceptance length (tokens/verify)",
                     format_number(summary.speculation.acceptance_length, ".2f")])  # fmt: skip
    return [*rows, ["capacity", limit or "ok" + holds]]


def _per_user_words(speed: float, capacity: Capacity, mark: str) -> str:
    """The per-user speed in words: per running user, and averaged over all users when they differ."""
    averaged = capacity.averaged(speed)
    if capacity.limited and capacity.users and averaged != speed:
        return (
            f"{format_number(speed, ',.0f')} tok/s per running user{mark} "
            f"({format_number(averaged, ',.0f')} averaged over {capacity.sharing()})"
        )
    return f"{format_number(speed, ',.0f')} tok/s per user{mark}"


def _summary_section(label: str, summary: RunSummary, capacity: Capacity, limit: str, a: Assumptions | None) -> Section:
    mark = LIMITED_MARK if limit else ""
    per_user = _per_user_words(summary.per_user_output_tok_s.p50, capacity, mark)
    takeaway = (
        f"{summary.requests_completed:,} requests completed in {significant(summary.window_s)} s: TTFT p50 "
        f"{format_seconds(summary.ttft_s.p50)}{mark}, {per_user}, "
        f"{format_number(summary.output_tok_s, ',.0f')} tok/s in all, "
        f"${format_number(summary.cost.usd_per_million_output_tokens, '.3g')} per 1M output tokens"
        + (f"; {limit}, so latencies depend on how long the run lasts" if limit else "")
        + "."
    )
    return Section(
        f"{label}: summary",
        (["metric", "value"], _summary_rows(summary, capacity, limit)),
        caption=captioned("Latency, speed, throughput and cost of the whole run.", a),
        takeaway=takeaway,
        headline=True,
    )


def _backend_section(label: str, summary: RunSummary, a: Assumptions | None) -> Section:
    name, busiest = max(summary.backends.items(), key=lambda kv: kv[1].busy_fraction)
    return Section(
        f"{label}: backends",
        (BACKEND_HEADERS, backend_rows(summary)),
        caption=captioned("Each backend: what it served, how busy it was, what it cost (busy and idle).", a),
        takeaway=f"{name} is the busiest backend ({format_number(busiest.busy_fraction, '.0%')} busy, "
        f"${format_number(busiest.cost.usd, ',.2f')} over the window).",
    )


def _class_section(label: str, summary: RunSummary, a: Assumptions | None) -> Section:
    """One row per workload class, then the fleet; the dearest class's share and each task class's $/task."""
    assert summary.classes is not None
    rule = summary.cost.attribution or ""
    what = (
        f"One row per workload class, then the fleet. {rule[:1].upper()}{rule[1:]}; the classes' $ sum to the fleet's."
    )
    return Section(
        f"{label}: per class",
        (CLASS_HEADERS, class_rows(summary)),
        caption=captioned(what, a),
        takeaway=_class_takeaway(summary) + ".",
        headline=True,
    )


def _class_takeaway(summary: RunSummary) -> str:
    """The dearest class's share of the fleet's $, then the $/task of each class with tasks."""
    assert summary.classes is not None
    costs = {name: c.cost for name, c in summary.classes.items() if c.cost is not None}
    dearest = max(costs, key=lambda name: costs[name].usd) if costs else ""
    tasks = [(name, c) for name, c in costs.items() if c.usd_per_task == c.usd_per_task]
    takeaway = (
        f"{dearest} takes {format_number(costs[dearest].share_of_fleet_usd, '.0%')} of the fleet's $"
        if dearest
        else "no class was costed"
    )
    if tasks:
        takeaway += "; " + ", ".join(
            f"{name} cost ${format_number(c.usd_per_task, '.3g')} per task on its own spend" for name, c in tasks
        )
    return takeaway


def _task_section(label: str, summary: RunSummary, a: Assumptions | None) -> Section:
    t = summary.tasks
    assert t is not None
    times = (t.task_time_s.p50, t.task_time_s.p95, t.task_time_s.p99)
    task_rows: list[list[object]] = [
        ["tasks completed", t.tasks_completed],
        ["task time p50 / p95 / p99 (s)", " / ".join(format_number(v, ".4g") for v in times)],
        ["$/task (the task classes' own spend)", format_number(summary.cost.usd_per_task, ".3g")],
        ["calls/task", format_number(t.calls_per_task, ".3g")],
    ]
    shares = t.time_share.to_dict()
    parts = {k: v for k, v in shares.items() if isinstance(v, float) and v == v}
    top = max(parts, key=parts.__getitem__) if parts else ""
    takeaway = (
        f"{top} takes {format_number(parts[top], '.0%')} of a task's time; a task takes "
        f"{format_number(t.task_time_s.p50, '.3g')} s at the median."
        if top
        else "No task completed in the window: lengthen run.duration or shorten run.warmup."
    )
    return Section(
        f"{label}: agent tasks",
        (["metric", "value"], task_rows),
        plots.task_breakdown({label: t.mean_seconds.to_dict()}),
        caption=captioned("Agent tasks: completion time and where it goes (mean seconds per task).", a),
        takeaway=takeaway,
        headline=True,
    )


def _timeline_section(
    label: str, summary: RunSummary, series: dict[str, tuple[list[float], list[float]]], a: Assumptions | None
) -> Section:
    return Section(
        f"{label}: replica 0 over time",
        figure=plots.timeline(series),
        caption=captioned("Batch size, queue length and KV occupancy of replica 0 over simulated time.", a),
        takeaway=f"The batch averages {format_number(summary.mean_batch_size, '.1f')} sequences and the queue "
        f"{format_number(summary.mean_queue_length, '.1f')} requests; KV is "
        f"{format_number(summary.mean_kv_occupancy, '.0%')} full on average.",
    )


def _ttft_section(label: str, summary: RunSummary, ttft_s: list[float], limit: str, a: Assumptions | None) -> Section:
    return Section(
        f"{label}: TTFT distribution",
        figure=plots.latency_cdf({label: ttft_s}),
        caption=captioned("Time to first token of every served request (warm-up included), as a CDF.", a),
        takeaway=f"Half the measured requests see their first token within "
        f"{format_seconds(summary.ttft_s.p50)} and 99 % within {format_seconds(summary.ttft_s.p99)}"
        + (f" ({limit})" if limit else "")
        + ".",
    )
