"""The page of a comparison (``infersim compare``): a row per hardware and load, the frontier, task
time, the numbers the results rest on and cost.

Captions state what the first run simulated, with the hardware and loads of every row; a
comparison interrupted before its end shows its finished runs one by one.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from simulator.capacity import Capacity
from simulator.report import plots
from simulator.report.captions import Assumptions, best_under_load, captioned
from simulator.report.html import Section
from simulator.report.reading import assumptions, read_rows, read_summary, read_text_file
from simulator.report.run import run_sections
from simulator.report.sources import sources_section
from simulator.results.marker import Manifest
from simulator.sources import SourcedNumber

#: The fields every row of ``compare.json`` has.
ROW_KEYS = ("hardware", "load")


def page(manifest: Manifest) -> list[Section]:
    """The page of a ``compare`` folder (or the runs an interrupted comparison finished)."""
    sections = []
    if manifest.has("tasks.txt"):
        what = (
            "Task time, where it goes, per-user speed and $ per task, one row per hardware and load (the "
            "comparison below states what was simulated)."
        )
        sections.append(Section("Agentic task time", text=read_text_file(manifest, "tasks.txt"), caption=what))
    if manifest.has("compare.json"):
        return sections + compare_sections(manifest)
    for run in manifest.runs():
        sections += run_sections(run, run.folder.name)
    return sections


def per_load(rows: list[dict[str, Any]], key: str, unit: str, what: str, highest: bool = True) -> str:
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


def _assumptions(manifest: Manifest, rows: list[dict[str, Any]]) -> Assumptions | None:
    """The first run's assumptions, widened to every row's hardware, load and cost basis."""
    runs = manifest.runs()
    a = assumptions(runs[0], read_summary(runs[0].path("summary.json"))) if runs else None
    if a is None:
        return None
    hardware = list(dict.fromkeys(r["hardware"] for r in rows))
    loads = list(dict.fromkeys(r["load"] for r in rows))
    shown = ", ".join(hardware) + " (the same load on each; " + a.hardware + " shown for the first run)"
    a = dataclasses.replace(a, hardware=shown)
    if len(loads) > 1:
        a = dataclasses.replace(a, load=f"{a.load} in the first run; per row: {', '.join(loads)}")
    bases = sorted({str(r["cost_basis"]) for r in rows})
    return dataclasses.replace(a, cost_basis=", ".join(bases) + (" (per row)" if len(bases) > 1 else ""))


def compare_sections(manifest: Manifest) -> list[Section]:
    """The comparison table, frontier, task time (agent loads), sources and cost of ``compare.json``."""
    from simulator.studies.compare import HEADERS, table_cells

    rows = read_rows(manifest, "compare.json", ROW_KEYS)
    a = _assumptions(manifest, rows)
    sections = [
        Section(
            "Comparison",
            (HEADERS, [table_cells(r) for r in rows]),
            caption=captioned("One row per hardware and load: speed against cost.", a),
            takeaway=per_load(rows, "per_user_output_tok_s_p50", "tok/s", "per-user speed"),
            headline=True,
        ),
        _frontier_section(rows, a),
    ]
    tasks = [r["usd_per_task"] for r in rows] if all("usd_per_task" in r for r in rows) else None
    if tasks is not None:
        sections.append(_task_section(rows, a))
    numbers = {str(r["hardware"]): [SourcedNumber(**n) for n in r["sources"]] for r in rows if r.get("sources")}
    if numbers:
        sections.append(sources_section(numbers, a))
    sections.append(_cost_section(rows, tasks, a))
    return sections


def _labels(rows: list[dict[str, Any]]) -> list[str]:
    return [f"{r['hardware']} {r['load']}".strip() for r in rows]


def _frontier_curves(rows: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Per hardware, each load's (per-user speed p50, output per chip) where both are numbers."""
    curves: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        point = (r["per_user_output_tok_s_p50"], r["output_tok_s_per_chip"])
        if all(isinstance(v, int | float) and v == v for v in point):  # a run that measured nothing has no point
            curves.setdefault(r["hardware"], []).append(point)
    return curves


def _frontier_section(rows: list[dict[str, Any]], a: Assumptions | None) -> Section:
    """Per-user speed against output per chip, one curve per hardware, the Pareto set named."""
    curves = _frontier_curves(rows)
    on_front = plots.on_front(curves)
    what = (
        "Per-user speed against aggregate output per chip, one curve per hardware through the loads compared "
        "(more loads draw more of each curve); the Pareto set is ringed."
    )
    return Section(
        "Throughput-interactivity frontier",
        figure=plots.frontier(curves),
        caption=captioned(what, a),
        takeaway=f"On the Pareto set: {', '.join(on_front) or 'none'}.",
    )


def _task_section(rows: list[dict[str, Any]], a: Assumptions | None) -> Section:
    breakdown = {label: r["task_seconds"] for label, r in zip(_labels(rows), rows, strict=True)}
    return Section(
        "Where the task time goes",
        figure=plots.task_breakdown(breakdown),
        caption=captioned("Mean seconds per agent task by part, one bar per hardware and load.", a),
        takeaway=per_load(rows, "task_time_s_p50", "s", "median task time", highest=False),
        headline=True,
    )


def _cost_section(rows: list[dict[str, Any]], tasks: list[Any] | None, a: Assumptions | None) -> Section:
    per_million = [r["usd_per_million_output_tokens"] for r in rows]
    key, what = ("usd_per_task", "$/task") if tasks is not None else ("usd_per_million_output_tokens", "$/1M out")
    return Section(
        "Cost",
        figure=plots.cost(_labels(rows), per_million, tasks),
        caption=captioned("$ per 1M output tokens (bars)" + (" and $ per task (diamonds)" if tasks else "") + ".", a),
        takeaway=per_load(rows, key, "$", what, highest=False),
    )
