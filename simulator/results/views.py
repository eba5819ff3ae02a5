"""Per-class and per-backend tables of a run summary (headers and cells; no I/O).

One row per workload class with its SLO attainment, task p50/p95/p99 and its attributed cost
(:mod:`simulator.results.attribution`), then the fleet total; one row per backend. The cells
are text with the unit in the header, so the terminal, the HTML report and the notebooks
show the same numbers.
"""

from __future__ import annotations

import math

from simulator.results.summary import ClassSummary, RunSummary, TaskSummary
from simulator.tables import format_number

CLASS_HEADERS = [
    "class", "requests", "SLO met", "TTFT p95 ms", "tok/s/user p50", "tasks", "task p50 s", "task p95 s",
    "task p99 s", "$", "share of $", "$/1M out", "$/task", "tasks/$",
]  # fmt: skip

BACKEND_HEADERS = [
    "backend", "hardware", "replicas x chips", "requests", "output tok/s", "busy", "basis", "$/h", "$", "idle $",
    "$/1M out",
]  # fmt: skip


def _task_cells(tasks: TaskSummary | None) -> list[object]:
    if tasks is None:
        return ["-"] * 4
    t = tasks.task_time_s
    return [tasks.tasks_completed, *(format_number(v, ".1f") for v in (t.p50, t.p95, t.p99))]


def class_row(name: str, c: ClassSummary) -> list[object]:
    cost = c.cost
    money: list[object] = (
        [format_number(cost.usd, ",.2f"), format_number(cost.share_of_fleet_usd, ".0%"),
         format_number(cost.usd_per_million_output_tokens, ".3g"), format_number(cost.usd_per_task, ".3g"),
         format_number(cost.tasks_per_usd, ".3g")]
        if cost is not None else ["-"] * 5
    )  # fmt: skip
    return [
        name, c.requests_completed, format_number(c.slo_attainment, ".0%"), format_number(c.ttft_s.p95 * 1e3, ".0f"),
        format_number(c.per_user_output_tok_s.p50, ",.0f"), *_task_cells(c.tasks), *money,
    ]  # fmt: skip


def fleet_slo_attainment(s: RunSummary) -> float:
    """Requests meeting their own class's SLOs over all measured requests (the run's SLO without classes)."""
    if s.classes:
        good = sum(c.goodput_requests_per_s for c in s.classes.values())
        rate = sum(c.requests_per_s for c in s.classes.values())
    else:
        good, rate = s.goodput_requests_per_s, s.requests_per_s
    return good / rate if rate else math.nan


def fleet_row(s: RunSummary) -> list[object]:
    return [
        "fleet", s.requests_completed, format_number(fleet_slo_attainment(s), ".0%"),
        format_number(s.ttft_s.p95 * 1e3, ".0f"), format_number(s.per_user_output_tok_s.p50, ",.0f"),
        *_task_cells(s.tasks), format_number(s.cost.usd, ",.2f"), "100%",
        format_number(s.cost.usd_per_million_output_tokens, ".3g"), format_number(s.cost.usd_per_task, ".3g"),
        format_number(s.cost.tasks_per_usd, ".3g"),
    ]  # fmt: skip


def class_rows(s: RunSummary) -> list[list[object]]:
    """One row per class, a row for backends no class used (if any $ went there), then the fleet."""
    rows = [class_row(name, c) for name, c in (s.classes or {}).items()]
    unused = s.cost.unattributed_usd
    if unused:
        rows.append(["(unused backends)", 0, "-", "-", "-", "-", "-", "-", "-", format_number(unused, ",.2f"),
                     format_number(unused / s.cost.usd, ".0%"), "-", "-", "-"])  # fmt: skip
    return [*rows, fleet_row(s)]


def backend_rows(s: RunSummary) -> list[list[object]]:
    return [
        [name, b.hardware, f"{b.replicas} x {b.chips // max(b.replicas, 1)}", b.requests_completed,
         format_number(b.output_tok_s, ",.0f"), format_number(b.busy_fraction, ".0%"), b.cost.basis,
         format_number(b.cost.usd_per_hour, ",.2f"), format_number(b.cost.usd, ",.2f"),
         format_number(b.cost.idle_usd, ",.2f"), format_number(b.cost.usd_per_million_output_tokens, ".3g")]
        for name, b in s.backends.items()
    ]  # fmt: skip
