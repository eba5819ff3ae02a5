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
    rows = table.rows
    factors = [
        c for c in (rows[0] if rows else {}) if c not in ("runs", "failed") and not c.endswith((MEAN, HALF_WIDTH))
    ]
    metrics = table.metrics or [c[: -len(MEAN)] for c in (rows[0] if rows else {}) if c.endswith(MEAN)]
    summary: list[dict[str, object]] = [
        {k: cell_number(v) if k not in factors else v for k, v in r.items()} for r in rows
    ]
    a = assumptions(manifest, None)
    varied = f" Varied: {', '.join(factors)}."
    what = f"Mean ± 95 % CI half-width over {table.replications} replication(s) per combination." + varied
    sections = [
        Section(
            "Sweep summary",
            sweep_table(summary, factors, metrics),
            caption=captioned(what, a),
            takeaway=f"{len(rows)} factor combinations, {sum(int(r['runs']) for r in rows)} runs, "
            f"{sum(int(r['failed']) for r in rows)} failed.",
            headline=True,
        )
    ]
    if rows and HARDWARE in rows[0] and SPEED in rows[0] and TOTAL in rows[0]:
        sections.append(_frontier_section(table, varied, a))
    return sections


def _ci(text: str) -> float:
    """A CI half-width cell of summary.csv (0 where undefined: a single replication)."""
    value = cell_number(text)
    return value if isinstance(value, float) and value == value else 0.0


def _frontier_section(table: SweepTable, varied: str, a: Assumptions | None) -> Section:
    """Mean speed against mean output per replica, one curve per hardware, the Pareto set ringed."""
    curves: dict[str, list[tuple[float, float]]] = {}
    bars: dict[str, list[tuple[float, float]]] = {}
    for r in table.rows:
        if r[SPEED] and r[TOTAL] and float(r[SPEED]) > 0 and float(r[TOTAL]) > 0:
            curves.setdefault(r[HARDWARE], []).append((float(r[SPEED]), float(r[TOTAL])))
            x_ci, y_ci = (_ci(r.get(column[: -len(MEAN)] + HALF_WIDTH, "")) for column in (SPEED, TOTAL))
            bars.setdefault(r[HARDWARE], []).append((x_ci, y_ci))
    front = plots.pareto([p for points in curves.values() for p in points])
    on_front = sorted({h for h, points in curves.items() if any(p in front for p in points)})
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
