"""Figures of results (matplotlib). Each function takes results and an optional Axes, draws,
labels the axes with their units, and returns the Axes; only the CLI, the report and the
notebooks save figures. Without an Axes a new ``Figure`` is made directly (no pyplot state,
so nothing depends on a display).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from simulator.analytic.architecture import FLOPS_PER_MAC, active_params
from simulator.analytic.estimate import estimate
from simulator.analytic.placement import Deployment
from simulator.analytic.precision import BYTES_PER_ELEMENT, matmul_precision
from simulator.results.metrics import TASK_PARTS


def _axes(ax: Axes | None) -> Axes:
    if ax is None:
        ax = Figure(figsize=(7.5, 4.2), layout="constrained").add_subplot()
    return ax


def speed_gap(per_user_tok_s: Mapping[str, tuple[float, float]], model: str, loaded_users: int,
              ax: Axes | None = None, capacity_limited: Sequence[str] = ()) -> Axes:  # fmt: skip
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
        ax.bar([np.nan], [np.nan], 0.4, color=bars[0].get_facecolor(), hatch="//",
               label=f"KV holds fewer than {loaded_users}: speed of those that fit, the rest queue")  # fmt: skip
    ax.set_xticks(x, names, rotation=30, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("per-user output speed (tok/s)")
    ax.set_xlabel("hardware")
    ax.set_title(f"The speed gap: {model}")
    ax.legend()
    return ax


def frontier(curves: Mapping[str, Sequence[tuple[float, float]]], ax: Axes | None = None, per: str = "chip") -> Axes:
    """Throughput-interactivity frontier: (per-user tok/s, aggregate tok/s per ``per``), one curve per backend."""
    ax = _axes(ax)
    for name, points in curves.items():
        ordered = sorted(points)
        ax.plot([p[0] for p in ordered], [p[1] for p in ordered], marker="o", label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("per-user output speed (tok/s)")
    ax.set_ylabel(f"aggregate output per {per} (tok/s)")
    ax.set_title("Throughput-interactivity frontier")
    ax.legend()
    return ax


def latency_vs_load(load: Sequence[float], series: Mapping[str, Sequence[float]], load_label: str,
                    ax: Axes | None = None) -> Axes:  # fmt: skip
    """Latencies (seconds; e.g. TTFT p50/p99, ITL p50) against a load axis (users, req/s)."""
    ax = _axes(ax)
    for name, values in series.items():
        ax.plot(load, values, marker="o", label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(load_label)
    ax.set_ylabel("latency (s)")
    ax.set_title("Latency under load")
    ax.legend()
    return ax


def latency_cdf(samples_s: Mapping[str, Sequence[float]], metric: str = "TTFT", ax: Axes | None = None) -> Axes:
    """Empirical CDF of a latency (seconds), one curve per run."""
    ax = _axes(ax)
    for name, values in samples_s.items():
        v = np.sort(np.asarray(values, dtype=float)[np.isfinite(values)])
        if v.size:
            ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel(f"{metric} (s)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(f"{metric} distribution")
    ax.legend()
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
    ax.legend()
    return ax


LATENCY_PARTS = ("fabric", "fixed_latency", "pipeline_hops", "torus_hops", "communication")


def roofline(deployments: Mapping[str, Deployment], batch_sizes: Sequence[int] = (1, 8, 64),
             ax: Axes | None = None) -> Axes:  # fmt: skip
    """Per-chip roofline of each deployment with its decode operating points at ``batch_sizes``.

    Arithmetic intensity of a decode pass is ``2 P B / (P * bytes per weight)`` FLOP/byte; the
    attainable rate is ``min(peak, intensity * bandwidth)``. A point is the *achieved* FLOP/s
    per chip of the closed-form estimate. The dotted line is the latency floor's ceiling,
    ``2 P B / (t_latency * chips)`` with ``t_latency`` the pass's fabric, fixed, hop and
    collective time: an SRAM machine's points sit on it, far below its bandwidth roof.
    """
    ax = _axes(ax)
    intensities = np.logspace(-1, 4, 200)
    for index, (name, d) in enumerate(deployments.items()):
        color = f"C{index}"
        hw = d.hardware
        peak = hw.compute.peak[matmul_precision(hw, d.weights, d.activations)].value
        bandwidth = d.weights_tier.bandwidth.value
        ax.plot(intensities, np.minimum(peak, intensities * bandwidth), color=color, label=f"{name} roof")
        params = active_params(d.model)
        points, floor = [], []
        for b in batch_sizes:
            step = estimate(d, 1000, 256, b).decode_step
            flops = FLOPS_PER_MAC * params * b / d.chips
            intensity = FLOPS_PER_MAC * b / BYTES_PER_ELEMENT[d.weights]
            points.append((intensity, flops / step.total_s))
            floor.append((intensity, flops / sum(step.components_s.get(k, 0.0) for k in LATENCY_PARTS)))
        ax.plot(*zip(*points, strict=True), "o--", color=color, label=f"{name} decode (B = {list(batch_sizes)})")
        ax.plot(*zip(*floor, strict=True), ":", color=color, label=f"{name} latency floor")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("FLOP/s per chip")
    ax.set_title("Roofline, decode operating points and latency floors")
    ax.legend(fontsize=7)
    return ax


def timeline(levels: Mapping[str, tuple[Sequence[float], Sequence[float]]], ax: Axes | None = None) -> Axes:
    """Piecewise-constant levels over simulated time, e.g. :meth:`~simulator.records.RunRecords.levels` of a replica."""
    ax = _axes(ax)
    for name, (times, values) in levels.items():
        ax.step(times, values, where="post", label=name)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("sequences / requests / % of KV blocks")
    ax.set_title("Batch, queue and KV over time")
    ax.legend()
    return ax


def cost(labels: Sequence[str], usd_per_million_output_tokens: Sequence[float],
         usd_per_task: Sequence[float] | None = None, ax: Axes | None = None) -> Axes:  # fmt: skip
    """$/1M output tokens per run (bars) and, when given, $/task (a second axis)."""
    ax = _axes(ax)
    x = np.arange(len(labels))
    ax.bar(x, usd_per_million_output_tokens, 0.6, label="$ / 1M output tokens", color="C0")
    ax.set_yscale("log")
    ax.set_ylabel("USD per 1M output tokens")
    ax.set_xticks(x, labels, rotation=30, ha="right")
    ax.set_xlabel("run")
    ax.set_title("Cost")
    if usd_per_task is not None:
        twin = ax.twinx()
        twin.plot(x, usd_per_task, "o", color="C3", label="$ / task")
        twin.set_yscale("log")
        twin.set_ylabel("USD per task")
        twin.legend(loc="upper right")
    ax.legend(loc="upper left")
    return ax
