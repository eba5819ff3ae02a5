"""The plan's cost-vs-SLO figure read from a ``plan.json`` document: every fleet drawn where its
cost and worst ratio put it, the frontier a staircase that falls with cost, fleets that measured
nothing above the rest, and the takeaway naming the answer and the cost basis."""

from __future__ import annotations

from typing import Any

from simulator.report import plan_figure


def _fleet(n: int, usd: float, worst: float | None, meets: bool) -> dict[str, Any]:
    return {"fleet": {"gpu": n}, "usd_per_hour": usd, "worst_ratio": worst, "meets": meets}


PLAN = {
    "cost_basis": "rental",
    "answer": _fleet(3, 6.0, 0.8, True),
    "frontier": [_fleet(1, 2.0, 3.0, False), _fleet(2, 4.0, 1.5, False), _fleet(3, 6.0, 0.8, True)],
    "rejected": [_fleet(1, 2.0, 3.0, False), _fleet(2, 4.0, 1.5, False), _fleet(0, 1.0, None, False)],
}


def test_the_figure_draws_each_fleet_the_falling_frontier_and_the_unmeasured_above() -> None:
    lines = {str(line.get_label()): line for line in plan_figure.cost_vs_slo(PLAN).get_lines()}
    stair = next(line for label, line in lines.items() if label.startswith("frontier"))
    assert [float(y) for y in stair.get_ydata()] == [3.0, 1.5, 0.8]
    unmeasured = next(line for label, line in lines.items() if "nothing ended" in label)
    assert [float(x) for x in unmeasured.get_xdata()] == [1.0]
    assert float(unmeasured.get_ydata()[0]) > 3.0  # above every measured ratio
    assert "answer: 3 x gpu" in lines


def test_the_takeaway_names_the_answer_the_basis_and_the_dearest_miss() -> None:
    words = plan_figure.frontier_takeaway(PLAN)
    assert words.startswith("Cheapest fleet meeting every target: 3 x gpu at $6.00/h on the rental basis")
    assert "2 x gpu at $4.00/h, reaches 1.5 x its bound" in words
    assert "rental basis" in plan_figure.what(PLAN)
    assert plan_figure.frontier_takeaway(PLAN | {"answer": None}).startswith("No simulated fleet meets every target")
