"""The page of a sweep (``infersim sweep``): its per-combination summary table and, when it varies the
hardware and measures speed and output, the throughput-interactivity frontier with 95 % intervals."""

from __future__ import annotations

from simulator.report import plots
from simulator.report.captions import Assumptions, captioned
from simulator.report.html import Section
from simulator.report.reading import SweepTable, assumptions, cell_number, read_sweep_table
from simulator.results.marker import Manifest
from simulator.results.views import sweep_table

SPEED, TOTAL, HARDWARE = "per_user_output_tok_s.p50.mean", "output_tok_s.mean", "deployment.hardware"
MEAN, HALF_WIDTH = ".mean", ".ci95"


def page(manifest: Manifest) -> list[Section]:
    """The page of a ``sweep`` folder (nothing before its summary table is written)."""
    path = manifest.table("summary")
    if path is None:
        return []
    table = read_sweep_table(manifest, path)
    factors, metrics = _columns(table)
    a = assumptions(manifest, None)
    varied = f" Varied: {', '.join(factors)}."
    sections = [_summary_section(table, factors, metrics, varied, a)]
    if _measures_the_frontier(table.rows):
        sections.append(_frontier_section(table, varied, a))
    return sections


def _columns(table: SweepTable) -> tuple[list[str], list[str]]:
    """The factor columns of the summary table, and its metrics (as named, else read off the mean columns)."""
    first = table.rows[0] if table.rows else {}
    factors = [c for c in first if c not in ("runs", "failed") and not c.endswith((MEAN, HALF_WIDTH))]
    metrics = table.metrics or [c[: -len(MEAN)] for c in first if c.endswith(MEAN)]
    return factors, metrics


def _summary_section(
    table: SweepTable, factors: list[str], metrics: list[str], varied: str, a: Assumptions | None
) -> Section:
    """The per-combination summary table: how many combinations, runs and failures."""
    rows = table.rows
    summary: list[dict[str, object]] = [
        {k: cell_number(v) if k not in factors else v for k, v in r.items()} for r in rows
    ]
    what = f"Mean ± 95 % CI half-width over {table.replications} replication(s) per combination." + varied
    return Section(
        "Sweep summary",
        sweep_table(summary, factors, metrics),
        caption=captioned(what, a),
        takeaway=f"{len(rows)} factor combinations, {sum(int(r['runs']) for r in rows)} runs, "
        f"{sum(int(r['failed']) for r in rows)} failed.",
        headline=True,
    )


def _measures_the_frontier(rows: list[dict[str, str]]) -> bool:
    """Whether the sweep varies the hardware and measures per-user speed and output."""
    return bool(rows) and HARDWARE in rows[0] and SPEED in rows[0] and TOTAL in rows[0]


def _ci(text: str) -> float:
    """A CI half-width cell of summary.csv (0 where undefined: a single replication)."""
    value = cell_number(text)
    return value if isinstance(value, float) and value == value else 0.0


def _frontier_points(
    table: SweepTable,
) -> tuple[dict[str, list[tuple[float, float]]], dict[str, list[tuple[float, float]]]]:
    """Per hardware, each combination's (mean speed, mean output) where both are positive, and their
    95 % half-widths."""
    curves: dict[str, list[tuple[float, float]]] = {}
    bars: dict[str, list[tuple[float, float]]] = {}
    for r in table.rows:
        if r[SPEED] and r[TOTAL] and float(r[SPEED]) > 0 and float(r[TOTAL]) > 0:
            curves.setdefault(r[HARDWARE], []).append((float(r[SPEED]), float(r[TOTAL])))
            x_ci, y_ci = (_ci(r.get(column[: -len(MEAN)] + HALF_WIDTH, "")) for column in (SPEED, TOTAL))
            bars.setdefault(r[HARDWARE], []).append((x_ci, y_ci))
    return curves, bars


def _frontier_section(table: SweepTable, varied: str, a: Assumptions | None) -> Section:
    """Mean speed against mean output per replica, one curve per hardware, the Pareto set ringed."""
    curves, bars = _frontier_points(table)
    on_front = plots.on_front(curves)
    replicated = table.replications > 1
    intervals = " Error bars: 95 % CI over the replications." if replicated else ""
    what = (
        "Mean per-user speed against mean aggregate output per replica, one curve per hardware through every "
        "swept load; the Pareto set is ringed." + intervals + varied
    )
    return Section(
        "Throughput-interactivity frontier",
        figure=plots.frontier(curves, per="replica", half_widths=bars if replicated else None),
        caption=captioned(what, a),
        takeaway=f"On the Pareto set: {', '.join(on_front) or 'none'}.",
        headline=True,
    )
