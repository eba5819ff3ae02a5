"""The plan's cost-vs-SLO figure read from a ``plan.json`` document: every fleet drawn where its
cost and worst ratio put it, the frontier a staircase that falls with cost, fleets that measured
nothing above the rest, and the takeaway naming the answer and the cost basis; a ratio prints on its
side of 1."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.report import plan_figure
from simulator.tables import format_ratio


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


def test_a_stopped_search_draws_its_floor_and_its_takeaway_gives_the_gap() -> None:
    """Stopped before its end, a plan's floor is a vertical line where every cheaper fleet misses,
    and the takeaway bounds the cheapest fleet that meets from below; a floor at the answer's
    cost (the full answer) draws nothing."""
    stopped = PLAN | {"stopped": "plan.max_candidates = 3", "floor_usd_per_hour": 4.5}
    lines = {str(line.get_label()): line for line in plan_figure.cost_vs_slo(stopped).get_lines()}
    floor = next(line for label, line in lines.items() if label.startswith("search stopped"))
    assert [float(x) for x in floor.get_xdata()] == [4.5, 4.5]
    assert "every fleet under $4.50/h misses" in str(floor.get_label())
    words = plan_figure.frontier_takeaway(stopped)
    assert words.startswith("Cheapest fleet found meeting every target: 3 x gpu at $6.00/h")
    assert "stopped at plan.max_candidates = 3" in words and "costs at least $4.50/h" in words
    closed = stopped | {"floor_usd_per_hour": 6.0}
    labels = [str(line.get_label()) for line in plan_figure.cost_vs_slo(closed).get_lines()]
    assert not any(label.startswith("search stopped") for label in labels)
    assert "stopped" not in plan_figure.frontier_takeaway(closed)
    assert not any(str(line.get_label()).startswith("search stopped")
                   for line in plan_figure.cost_vs_slo(PLAN).get_lines())  # fmt: skip


@pytest.mark.parametrize("offset", [0.0, *(sign * 10.0**-k for k in range(1, 7) for sign in (1, -1))])
def test_a_printed_ratio_stays_on_its_side_of_one(offset: float) -> None:
    """A ratio over the bound never prints as 1 (a miss reading as a meet), down to one part in a
    million, and at most 7 significant digits are spent on it."""
    ratio = 1.0 + offset
    text = format_ratio(ratio)
    assert (float(text) > 1.0) is (ratio > 1.0) and (float(text) < 1.0) is (ratio < 1.0)
    assert len(text.replace(".", "").lstrip("0")) <= 7


def test_fleets_run_to_their_end_carry_error_bars_and_an_answer_within_them_is_flagged() -> None:
    """A frontier fleet with a sampling error has a bar of 2 errors each side; the answer meeting
    by 1.2 % with an error of 1.4 % is within noise, and the takeaway says another seed may miss;
    with an error of 0.4 % it says nothing."""
    near = _fleet(3, 6.0, 0.988, True) | {"worst_ratio_error": 0.014}
    plan = PLAN | {"answer": near, "frontier": [*PLAN["frontier"][:2], near]}
    ax = plan_figure.cost_vs_slo(plan)
    bars = next(c for c in ax.containers if "sampling errors" in str(c.get_label()))
    (segment,) = bars.lines[2][0].get_segments()
    assert [float(y) for y in segment[:, 1]] == pytest.approx([0.988 - 0.028, 0.988 + 0.028])
    assert "within 2 sampling errors of one run: another seed may miss" in plan_figure.frontier_takeaway(plan)
    sure = near | {"worst_ratio_error": 0.004}
    assert "another seed" not in plan_figure.frontier_takeaway(PLAN | {"answer": sure})
