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


#: How a summary metric is shown: its name, unit and factor from SI (by the metric's first part).
METRIC_UNITS = {
    "per_user_output_tok_s": ("speed/user", "tok/s", 1.0), "output_tok_s": ("output", "tok/s", 1.0),
    "input_tok_s": ("input", "tok/s", 1.0), "requests_per_s": ("completed", "req/s", 1.0),
    "goodput_requests_per_s": ("goodput", "req/s", 1.0), "mean_batch_size": ("batch", "seqs", 1.0),
    "ttft_s": ("TTFT", "ms", 1e3), "ttst_s": ("TTST", "ms", 1e3), "tpot_s": ("TPOT", "ms", 1e3),
    "itl_s": ("ITL", "ms", 1e3),
    "e2e_s": ("E2E", "s", 1.0), "queueing_delay_s": ("queueing", "ms", 1e3),
    "normalized_tpot_s": ("norm. TPOT", "ms", 1e3),
    "cost.usd_per_million_output_tokens": ("cost", "$/1M out", 1.0), "cost.usd_per_task": ("cost", "$/task", 1.0),
    "cost.tasks_per_usd": ("tasks", "per $", 1.0), "cost.usd_per_hour": ("cost", "$/h", 1.0),
    "cost.usd": ("cost", "$", 1.0), "cost.joules_per_output_token": ("energy", "J/token", 1.0),
    "cost.joules_per_task": ("energy", "J/task", 1.0), "tasks.task_time_s": ("task time", "s", 1.0),
}  # fmt: skip


def metric_label(path: str) -> tuple[str, float]:
    """``(label with unit, factor from SI)`` of a summary metric path.

    >>> metric_label("ttft_s.p99"), metric_label("cost.usd_per_task"), metric_label("tasks.task_time_s.p95")
    (('TTFT p99 ms', 1000.0), ('cost $/task', 1.0), ('task time p95 s', 1.0))
    """
    for key, (name, unit, factor) in METRIC_UNITS.items():
        if path == key or path.startswith(key + "."):
            stat = path[len(key) + 1 :]
            return " ".join(part for part in (name, stat, unit) if part), factor
    return path, 1.0


def significant(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant figures, in plain notation with thousands separators.

    >>> significant(1834.2), significant(0.06712), significant(150.4), significant(3.1e-05, 2), significant(0.05)
    ('1,830', '0.0671', '150', '0.000031', '0.05')
    """
    if value != value or value in (math.inf, -math.inf):
        return "-"
    if value == 0:
        return "0"
    decimals = digits - 1 - math.floor(math.log10(abs(value)))
    text = f"{round(value, decimals):,.{max(decimals, 0)}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def plain(value: float) -> str:
    """A number as a person writes it: no exponent, no trailing zeros (axis ticks, swept values).

    >>> plain(1.0), plain(0.05), plain(2000.0), plain(256.0), plain(123456.0)
    ('1', '0.05', '2,000', '256', '123,456')
    """
    return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:,.4g}"


def mean_with_ci(mean: object, ci95: object, factor: float) -> str:
    """``mean ± half-width`` (3 significant figures, scaled to the label's unit); ``-`` when undefined."""
    if not isinstance(mean, int | float) or mean != mean:
        return "-"
    text = significant(mean * factor)
    if isinstance(ci95, int | float) and ci95 == ci95:
        text += f" ± {significant(ci95 * factor, 2)}"
    return text


def _count(value: object) -> str:
    """A count read back from a table (``3.0`` from CSV) as ``3``."""
    return str(int(value)) if isinstance(value, int | float) and value == value else str(value)


def sweep_table(summary: list[dict[str, object]], factors: list[str],
                metrics: list[str]) -> tuple[list[str], list[list[object]]]:  # fmt: skip
    """The per-combination table of a sweep: factor values, runs, and each metric's mean ± 95 % CI
    (a metric no run defines, such as task time in a chat sweep, is left out)."""
    shown = [m for m in metrics if any(e[f"{m}.mean"] == e[f"{m}.mean"] for e in summary)]
    labels = [metric_label(m) for m in shown]
    headers = [*factors, "runs", *(label for label, _ in labels)]
    rows: list[list[object]] = [
        [*(str(entry[f]) for f in factors), _count(entry["runs"]) + (f" ({_count(entry['failed'])} failed)"
         if entry["failed"] else ""), *(mean_with_ci(entry[f"{m}.mean"], entry[f"{m}.ci95"], factor)
                     for m, (_, factor) in zip(shown, labels, strict=True))]
        for entry in summary
    ]  # fmt: skip
    return headers, rows
