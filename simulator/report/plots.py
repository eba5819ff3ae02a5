"""Figures of results (matplotlib). Each function takes results and an optional Axes, draws,
labels the axes with their units, and returns the Axes; only the CLI, the report and the
notebooks save figures. Without an Axes a new ``Figure`` is made directly (no pyplot state,
so nothing depends on a display).
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

from simulator.analytic.architecture import FLOPS_PER_MAC, active_params
from simulator.analytic.estimate import estimate
from simulator.analytic.placement import Deployment
from simulator.analytic.precision import BYTES_PER_ELEMENT, matmul_precision
from simulator.results.metrics import TASK_PARTS
from simulator.results.views import plain

#: Marks a point whose offered load exceeds what the fleet (or its KV cache) can hold.
LIMITED_LABEL = "capacity-limited: the queue grows (offered load above capacity, or KV full)"
#: Capacity-limited runs: one flag per point of the load (shared by every line) or per line by name.
Limited = Sequence[bool] | Mapping[str, Sequence[bool]]


class ShownFigure(Figure):
    """A figure that a notebook shows as a PNG (``_repr_png_``) with no pyplot and no ``%matplotlib``
    magic: a bare :class:`~matplotlib.figure.Figure` would print as the text ``<Figure size ...>``."""

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", dpi=100)
        return buffer.getvalue()


def _axes(ax: Axes | None) -> Axes:
    if ax is None:
        ax = ShownFigure(figsize=(9.0, 4.4), layout="constrained").add_subplot()
    return ax


#: Legend entries wrap at this many characters, so a long one does not squeeze the axes.
LEGEND_CHARS = 32


def _legend(ax: Axes, handles_from: Sequence[Axes] = ()) -> None:
    """The legend outside the data, right of the axes (entries of ``ax`` and of any twin axes)."""
    handles, labels = ax.get_legend_handles_labels()
    for other in handles_from:
        more = other.get_legend_handles_labels()
        handles, labels = handles + more[0], labels + more[1]
    labels = [textwrap.fill(label, LEGEND_CHARS) for label in labels]
    ax.legend(
        handles,
        labels,
        loc="upper left",
        bbox_to_anchor=(1.02 + 0.1 * bool(handles_from), 1.0),
        borderaxespad=0.0,
        fontsize="small",
    )


#: A log axis spanning more decades than this gets a tick per decade, else at 1-2-5 steps.
DECADES_FOR_1_2_5 = 3.0


def _plain_log(ax: Axes, axis: str, at: Sequence[float] | None = None) -> None:
    """A log axis with plain tick labels (400, 300, 60 rather than 4x10^2): at ``at``, or at 1-2-5 steps
    (one per decade on a wide axis). Call it after drawing, so the data's span is known."""
    target = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
    low, high = ax.dataLim.intervalx if axis == "x" else ax.dataLim.intervaly
    wide = low > 0 and np.isfinite(high) and np.log10(high / low) > DECADES_FOR_1_2_5
    subs = (1.0,) if wide else (1.0, 2.0, 5.0)
    target.set_major_locator(FixedLocator(list(at)) if at is not None else LogLocator(subs=subs))
    target.set_major_formatter(FuncFormatter(lambda value, _: plain(value)))
    target.set_minor_formatter(NullFormatter())


def load_axis(ax: Axes, values: Sequence[float], label: str) -> None:
    """The swept quantity on x: log with a tick at every value when it spans 10x or more, else linear."""
    positive = [v for v in values if v > 0]
    if positive and len(positive) == len(values) and max(positive) >= 10 * min(positive):
        _plain_log(ax, "x", sorted(set(values)))
    else:
        ax.set_xticks(sorted(set(values)))
    ax.set_xlabel(label)


def _mark_limited(
    ax: Axes, x: Sequence[float], ys: Sequence[Sequence[float]], limited: Sequence[bool], labelled: bool = True
) -> None:
    """Ring the points of capacity-limited runs (one legend entry when ``labelled``)."""
    points = [(xv, y[i]) for y in ys for i, xv in enumerate(x) if limited[i] and y[i] == y[i]]
    if points:
        ax.plot(
            *zip(*points, strict=True),
            "o",
            markersize=13,
            markerfacecolor="none",
            markeredgecolor="red",
            linestyle="none",
            label=LIMITED_LABEL if labelled else "_nolegend_",
        )


def speed_gap(
    per_user_tok_s: Mapping[str, tuple[float, float]],
    model: str,
    loaded_users: int,
    ax: Axes | None = None,
    capacity_limited: Sequence[str] = (),
) -> Axes:
    """Per-user output tok/s by hardware for one model: alone and with ``loaded_users`` users.

    Hardware in ``capacity_limited`` cannot hold ``loaded_users`` users' KV: its loaded bar
    (hatched) is the speed of the users that fit, the rest queue.
    """
    ax = _axes(ax)
    names = list(per_user_tok_s)
    x = np.arange(len(names))
    alone = [per_user_tok_s[n][0] for n in names]
    loaded = [per_user_tok_s[n][1] for n in names]
    ax.bar(x - 0.2, alone, 0.4, label="single stream")
    bars = ax.bar(x + 0.2, loaded, 0.4, label=f"{loaded_users} users")
    limited = [bar for bar, name in zip(bars, names, strict=True) if name in capacity_limited]
    for bar in limited:
        bar.set_hatch("//")
    if limited:
        ax.bar(
            [np.nan],
            [np.nan],
            0.4,
            color=bars[0].get_facecolor(),
            hatch="//",
            label=f"KV holds fewer than {loaded_users}: speed of those that fit, the rest queue",
        )
    ax.set_xticks(x, names, rotation=30, ha="right")
    _plain_log(ax, "y")
    ax.set_ylabel("per-user output speed (tok/s)")
    ax.set_xlabel("hardware")
    ax.set_title(f"The speed gap: {model}")
    _legend(ax)
    return ax


def pareto(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both coordinates (both higher is better), by x.

    >>> pareto([(1, 10), (2, 8), (3, 9), (4, 1)])
    [(1, 10), (3, 9), (4, 1)]
    """
    return sorted(p for p in points if not any(q[0] >= p[0] and q[1] >= p[1] and q != p for q in points))


def frontier(
    curves: Mapping[str, Sequence[tuple[float, float]]],
    ax: Axes | None = None,
    per: str = "chip",
    half_widths: Mapping[str, Sequence[tuple[float, float]]] | None = None,
) -> Axes:
    """Throughput-interactivity frontier: (per-user tok/s, aggregate tok/s per ``per``), one curve per
    hardware, with the Pareto set over every curve ringed; ``half_widths`` (x, y per point, e.g. 95 %
    CIs over replications) draw error bars."""
    ax = _axes(ax)
    for name, points in curves.items():
        _frontier_curve(ax, name, points, None if half_widths is None else half_widths.get(name))
    _ring_pareto_set(ax, pareto([p for points in curves.values() for p in points]), per)
    _plain_log(ax, "x")
    _plain_log(ax, "y")
    ax.set_xlabel("per-user output speed (tok/s)")
    ax.set_ylabel(f"aggregate output per {per} (tok/s)")
    ax.set_title("Throughput-interactivity frontier")
    _legend(ax)
    return ax


def on_front(curves: Mapping[str, Sequence[tuple[float, float]]]) -> list[str]:
    """The names of the curves with a point on the Pareto set over every curve, sorted."""
    front = pareto([p for points in curves.values() for p in points])
    return sorted({h for h, points in curves.items() if any(p in front for p in points)})


def _frontier_curve(
    ax: Axes, name: str, points: Sequence[tuple[float, float]], half_widths: Sequence[tuple[float, float]] | None
) -> None:
    """One hardware's curve in order of speed, with its error bars when ``half_widths`` are given."""
    order = sorted(range(len(points)), key=lambda i: points[i])
    xs, ys = [points[i][0] for i in order], [points[i][1] for i in order]
    (line,) = ax.plot(xs, ys, marker="o", label=name)
    if half_widths is not None:
        bars = [half_widths[i] for i in order]
        ax.errorbar(
            xs,
            ys,
            xerr=[b[0] for b in bars],
            yerr=[b[1] for b in bars],
            fmt="none",
            ecolor=line.get_color(),
            alpha=0.6,
        )


def _ring_pareto_set(ax: Axes, best: list[tuple[float, float]], per: str) -> None:
    """Ring the Pareto set (if any point is on it)."""
    if best:
        ax.plot(
            [p[0] for p in best],
            [p[1] for p in best],
            "o",
            markersize=12,
            markerfacecolor="none",
            markeredgecolor="black",
            label="Pareto set (nothing is both faster per user and higher per " + per + ")",
        )


def _series_against_load(
    ax: Axes, load: Sequence[float], series: Mapping[str, Sequence[float]], load_label: str, limited: Limited
) -> Axes:
    """Lines against the swept quantity on a log y axis, capacity-limited points ringed (``limited`` per
    point of the load, shared by every line, or per line by name)."""
    for name, values in series.items():
        ax.plot(load, values, marker="o", label=name)
    for name, values in series.items():
        flags = limited.get(name, ()) if isinstance(limited, Mapping) else limited
        _mark_limited(ax, load, [values], list(flags) or [False] * len(load), labelled=not _has_limited_label(ax))
    load_axis(ax, load, load_label)
    _plain_log(ax, "y")
    return ax


def _has_limited_label(ax: Axes) -> bool:
    return any(line.get_label() == LIMITED_LABEL for line in ax.get_lines())


def latency_vs_load(
    load: Sequence[float],
    series: Mapping[str, Sequence[float]],
    load_label: str,
    ax: Axes | None = None,
    limited: Limited = (),
) -> Axes:
    """Latencies (seconds; e.g. TTFT p50/p99, ITL p50) against the swept quantity (users, req/s, replicas),
    one line per series (a sweep of several fields: one per metric and value of the other fields).

    ``limited`` marks the runs that hit a capacity limit (ringed in red)."""
    ax = _series_against_load(_axes(ax), load, series, load_label, limited)
    ax.set_ylabel("latency (s)")
    ax.set_title(f"Latency against {load_label}")
    _legend(ax)
    return ax


def speed_vs_load(
    load: Sequence[float],
    per_user_tok_s: Mapping[str, Sequence[float]],
    aggregate_tok_s: Sequence[float] | Mapping[str, Sequence[float]],
    load_label: str,
    ax: Axes | None = None,
    limited: Limited = (),
) -> Axes:
    """Per-user output speed (left axis) and aggregate output (right axis, one dashed line per series when
    given by name) against the swept quantity."""
    ax = _series_against_load(_axes(ax), load, per_user_tok_s, load_label, limited)
    ax.set_ylabel("per-user output speed (tok/s)")
    twin = ax.twinx()
    totals = aggregate_tok_s if isinstance(aggregate_tok_s, Mapping) else {"aggregate output": aggregate_tok_s}
    for index, (name, values) in enumerate(totals.items()):
        twin.plot(load, values, "s--", color=f"C{(3 + index) % 10}", label=f"{name} (tok/s, right axis)")
    _plain_log(twin, "y")
    twin.set_ylabel("aggregate output (tok/s)")
    ax.set_title(f"Per-user speed and aggregate output against {load_label}")
    _legend(ax, [twin])
    return ax


def latency_cdf(samples_s: Mapping[str, Sequence[float]], metric: str = "TTFT", ax: Axes | None = None) -> Axes:
    """Empirical CDF of a latency (seconds), one curve per run."""
    ax = _axes(ax)
    for name, values in samples_s.items():
        v = np.sort(np.asarray(values, dtype=float)[np.isfinite(values)])
        if v.size:
            ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", label=name)
    _plain_log(ax, "x")
    ax.set_xlabel(f"{metric} (s)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(f"{metric} distribution")
    _legend(ax)
    return ax


def task_breakdown(mean_seconds: Mapping[str, Mapping[str, float]], ax: Axes | None = None) -> Axes:
    """Where a task's time goes (model, queue, tools, sub-agents, network), stacked per run."""
    ax = _axes(ax)
    names = list(mean_seconds)
    bottom = np.zeros(len(names))
    for part in TASK_PARTS:
        values = np.array([mean_seconds[n].get(part, 0.0) for n in names])
        ax.bar(names, values, bottom=bottom, label=part)
        bottom += values
    ax.set_ylabel("mean time per task (s)")
    ax.set_xlabel("run")
    ax.set_title("Task time breakdown")
    ax.tick_params(axis="x", rotation=30)
    _legend(ax)
    return ax


TERA = 1e12  # FLOP/s per TFLOP/s
#: The (prompt, output) tokens of the roofline's operating points.
ROOFLINE_TOKENS = (1000, 256)
LATENCY_PARTS = ("fabric", "fixed_latency", "pipeline_hops", "torus_hops", "communication")


def roofline(
    deployments: Mapping[str, Deployment], batch_sizes: Sequence[int] = (1, 8, 64), ax: Axes | None = None
) -> Axes:
    """Per-chip roofline of each deployment with its decode operating points at ``batch_sizes``.

    Arithmetic intensity of a decode pass is ``2 P B / (P * bytes per weight)`` FLOP/byte; the
    attainable rate is ``min(peak, intensity * bandwidth)``. A point is the *achieved* FLOP/s
    per chip of the closed-form estimate. The dotted line is the **latency ceiling**,
    ``2 P B / (t_latency * chips)`` with ``t_latency`` the pass's fabric, fixed, hop and
    collective time: a floor on the pass's *time* (the parts add up to the pass, so
    ``t_pass >= t_latency``), hence on this FLOP/s axis a ceiling that every point sits on or
    under. An SRAM machine's points sit on it, far below its bandwidth roof.
    """
    ax = _axes(ax)
    intensities = np.logspace(-1, 4, 200)
    for index, (name, d) in enumerate(deployments.items()):
        color = f"C{index}"
        hw = d.hardware
        peak = hw.compute.peak[matmul_precision(hw, d.weights, d.activations)].value
        bandwidth = d.weights_tier.bandwidth.value
        ax.plot(intensities, np.minimum(peak, intensities * bandwidth) / TERA, color=color, label=f"{name} roof")
        params = active_params(d.model)
        points, floor = [], []
        for b in batch_sizes:
            step = estimate(d, *ROOFLINE_TOKENS, b).decode_step
            flops = FLOPS_PER_MAC * params * b / d.chips
            intensity = FLOPS_PER_MAC * b / BYTES_PER_ELEMENT[d.weights]
            points.append((intensity, flops / step.total_s / TERA))
            floor.append((intensity, flops / sum(step.components_s.get(k, 0.0) for k in LATENCY_PARTS) / TERA))
        ax.plot(*zip(*points, strict=True), "o--", color=color, label=f"{name} decode (B = {list(batch_sizes)})")
        ax.plot(*zip(*floor, strict=True), ":", color=color, label=f"{name} latency ceiling (time floor)")
    _plain_log(ax, "x")
    _plain_log(ax, "y")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("TFLOP/s per chip")
    ax.set_title("Roofline, decode operating points and latency ceilings")
    _legend(ax)
    return ax


def timeline(levels: Mapping[str, tuple[Sequence[float], Sequence[float]]], ax: Axes | None = None) -> Axes:
    """Piecewise-constant levels over simulated time, e.g. :meth:`~simulator.records.store.RunRecords.levels`
    of a replica."""
    ax = _axes(ax)
    for name, (times, values) in levels.items():
        ax.step(times, values, where="post", label=name)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("sequences / requests / % of KV blocks")
    ax.set_title("Batch, queue and KV over time")
    _legend(ax)
    return ax


def cost(
    labels: Sequence[str],
    usd_per_million_output_tokens: Sequence[float],
    usd_per_task: Sequence[float] | None = None,
    ax: Axes | None = None,
) -> Axes:
    """$/1M output tokens per run (bars) and, when given, $/task (a second axis)."""
    ax = _axes(ax)
    x = np.arange(len(labels))
    ax.bar(x, usd_per_million_output_tokens, 0.6, label="$ / 1M output tokens", color="C0")
    _plain_log(ax, "y")
    ax.set_ylabel("USD per 1M output tokens")
    ax.set_xticks(x, labels, rotation=30, ha="right")
    ax.set_xlabel("run")
    ax.set_title("Cost")
    twins = []
    if usd_per_task is not None:
        twin = ax.twinx()
        twin.plot(x, usd_per_task, "D", color="C3", markersize=8, label="$ / task (right axis)")
        _plain_log(twin, "y")
        twin.set_ylabel("USD per task")
        twins.append(twin)
    _legend(ax, twins)
    return ax
