"""Every plot function: returns its Axes, labels both axes with units, draws the expected series."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.axes import Axes

from simulator.analytic.layouts import deploy
from simulator.config.deployment import DeploymentSpec
from simulator.report import plots
from tests.engine.conftest import CATALOG, run


@pytest.fixture(scope="module")
def agent_run():  # type: ignore[no-untyped-def]
    return run(load={"kind": "agents", "workload": "chat", "agents": 3}, requests=None,
               run={"seed": 1, "duration": "20 s"})  # fmt: skip


def _labelled(ax: Axes, x_unit: str, y_unit: str) -> None:
    assert x_unit in ax.get_xlabel() and y_unit in ax.get_ylabel()


def test_speed_gap_has_two_bars_per_hardware() -> None:
    ax = plots.speed_gap({"a": (3000.0, 2900.0), "b": (400.0, 40.0), "c": (500.0, 480.0)}, "m", 64)
    _labelled(ax, "hardware", "tok/s")
    assert len(ax.patches) == 6 and len(ax.get_legend().get_texts()) == 2


def test_frontier_draws_one_curve_per_backend() -> None:
    """One curve per backend, then the Pareto set ringed: exactly the points nothing beats on both axes."""
    curves = {"x": [(10, 100), (5, 200)], "y": [(300, 10), (200, 20), (100, 40), (50, 30)]}
    ax = plots.frontier(curves)
    _labelled(ax, "tok/s", "tok/s")
    assert len(ax.lines) == 3 and list(ax.lines[0].get_xdata()) == [5, 10]
    ringed = set(zip(ax.lines[2].get_xdata(), ax.lines[2].get_ydata(), strict=True))
    everything = [p for points in curves.values() for p in points]
    for p in everything:
        beaten = any(q[0] >= p[0] and q[1] >= p[1] and q != p for q in everything)
        assert (p in ringed) == (not beaten)
    assert (50, 30) not in ringed and len(ringed) == 5


def test_frontier_error_bars_follow_their_points() -> None:
    """Half-widths given per point (in the caller's order) are drawn around the same point once sorted."""
    ax = plots.frontier({"x": [(10.0, 100.0), (5.0, 200.0)]}, half_widths={"x": [(1.0, 7.0), (0.5, 3.0)]})
    (bars,) = ax.containers
    segments = bars.lines[2][1].get_segments()  # the vertical bars, in sorted order: x = 5 then x = 10
    assert [(seg[0][0], seg[1][1] - seg[0][1]) for seg in segments] == [(5.0, 6.0), (10.0, 14.0)]


def test_latency_vs_load_and_cdf(agent_run) -> None:  # type: ignore[no-untyped-def]
    ax = plots.latency_vs_load([1, 2, 4], {"TTFT p50": [0.1, 0.2, 0.4], "TTFT p99": [0.2, 0.5, 1.0]}, "users")
    _labelled(ax, "users", "(s)")
    assert len(ax.lines) == 2
    r = agent_run.records.requests
    ax = plots.latency_cdf({"run": (r["first_token_s"] - r["arrival_s"]).tolist()})
    _labelled(ax, "(s)", "fraction")
    assert len(ax.lines) == 1 and max(ax.lines[0].get_ydata()) == 1.0


def test_task_breakdown_stacks_every_part(agent_run) -> None:  # type: ignore[no-untyped-def]
    tasks = agent_run.summary.tasks
    assert tasks is not None
    ax = plots.task_breakdown({"run": tasks.mean_seconds.to_dict()})
    _labelled(ax, "run", "(s)")
    assert len(ax.patches) == len(plots.TASK_PARTS)


def test_roofline_has_a_roof_and_operating_points_per_deployment() -> None:
    deployments = {
        hw: deploy(CATALOG, DeploymentSpec(hardware=hw, model="llama-3.1-8b"))
        for hw in ("nvidia-h100-sxm", "cerebras-cs3")
    }
    ax = plots.roofline(deployments, (1, 16))
    _labelled(ax, "FLOP/byte", "FLOP/s")
    assert len(ax.lines) == 6  # per deployment: roof, operating points, latency ceiling
    for roof, points, floor in zip(ax.lines[::3], ax.lines[1::3], ax.lines[2::3], strict=True):
        xs, ys = points.get_xdata(), points.get_ydata()
        assert all(
            y <= np.interp(x, roof.get_xdata(), roof.get_ydata()) * (1 + 1e-9) for x, y in zip(xs, ys, strict=True)
        )
        assert all(ys <= floor.get_ydata() * (1 + 1e-12))  # the time includes the latency part


def test_timeline_draws_batch_queue_and_kv(agent_run) -> None:  # type: ignore[no-untyped-def]
    ax = plots.timeline(agent_run.records.levels(0))
    _labelled(ax, "(s)", "% of KV")
    assert [line.get_label() for line in ax.lines] == ["batch size", "queue", "KV occupancy %"]


def test_cost_bars_with_a_task_axis() -> None:
    ax = plots.cost(["a", "b"], [1.5, 20.0], [0.1, 2.0])
    _labelled(ax, "run", "USD")
    assert len(ax.patches) == 2 and ax.figure.axes[1].get_ylabel() == "USD per task"
