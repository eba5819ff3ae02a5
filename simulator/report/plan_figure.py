"""The plan's cost-vs-SLO frontier as a figure, and its takeaway, from ``plan.json``.

Each simulated fleet is a point: its ``$/h`` on the plan's one cost basis (x) against its worst
target ratio (y): the largest ``achieved / bound`` over its targets and replications (``bound /
achieved`` for a lower bound), so ``<= 1`` meets every target. A run stopped once its miss was
settled (:class:`~simulator.studies.settled.SettledMiss`) has the larger of the ratio measured when
it stopped and the settled floor's (over 1): a lower bound on the full run's. The
frontier (:attr:`~simulator.studies.planning.PlanResult.frontier`: no fleet is both cheaper and closer to
its targets) is drawn as a staircase; along it a dearer fleet always has a smaller worst ratio. A
search stopped before its end (``plan.max_candidates``, ``--time-limit``) also draws its floor: every
fleet cheaper than it is settled a miss, so the cheapest that meets lies between it and the answer.
A fleet run to its end has bars of :data:`NOISE_ERRORS` sampling errors of its worst ratio
(``worst_ratio_error``, :mod:`simulator.results.sampling`): where a bar crosses 1, another seed may
well give the other verdict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.axes import Axes

from simulator.report.plots import _axes, _legend, _plain_log
from simulator.results.sampling import NOISE_ERRORS
from simulator.tables import format_ratio

#: A fleet that measured nothing (no task or request ended before its run stopped) is drawn this
#: many times above the largest measured ratio.
UNMEASURED_ABOVE = 1.5


def _fleet(entry: Mapping[str, Any]) -> str:
    return " + ".join(f"{n} x {name}" for name, n in entry["fleet"].items() if n) or "(empty)"


def _drawn(entry: Mapping[str, Any]) -> bool:
    """Whether a fleet has a point: a finite ratio (``plan.json`` writes nothing measured as null)
    and a cost above 0 (the axes are logarithmic)."""
    ratio = entry["worst_ratio"]
    return isinstance(ratio, int | float) and math.isfinite(ratio) and entry["usd_per_hour"] > 0


def _points(entries: Sequence[Mapping[str, Any]]) -> tuple[list[float], list[float]]:
    shown = [e for e in entries if _drawn(e)]
    return [e["usd_per_hour"] for e in shown], [e["worst_ratio"] for e in shown]


def cost_vs_slo(plan: Mapping[str, Any], ax: Axes | None = None) -> Axes:
    """Every fleet of ``plan`` (a ``plan.json`` document) simulated: ``$/h`` against the worst target
    ratio, the frontier as a staircase, the answer starred, the line where every target is met."""
    ax = _axes(ax)
    basis = plan.get("cost_basis") or "one"
    rejected, frontier = plan.get("rejected", []), plan.get("frontier", [])
    xs, ys = _points(rejected)
    ax.plot(xs, ys, "x", color="tab:red", label="misses a target")
    unmeasured = [e["usd_per_hour"] for e in rejected if not _drawn(e) and e["usd_per_hour"] > 0]
    if unmeasured:  # above every measured point: no task (or request) had ended when the run stopped
        top = max([*ys, 1.0]) * UNMEASURED_ABOVE
        ax.plot(
            unmeasured, [top] * len(unmeasured), "^", color="tab:red", label="misses, nothing ended yet (drawn above)"
        )
    met = [e for e in frontier if e["meets"]]
    xs, ys = _points(met)
    ax.plot(xs, ys, "o", color="tab:green", label="meets every target")
    xs, ys = _points(frontier)
    ax.step(xs, ys, where="post", color="black", linewidth=1.0, label="frontier (nothing cheaper is closer)")
    barred = [e for e in frontier if _drawn(e) and _error(e) > 0]
    if barred:
        ax.errorbar([e["usd_per_hour"] for e in barred], [e["worst_ratio"] for e in barred],
                    yerr=[NOISE_ERRORS * _error(e) for e in barred], fmt="none", ecolor="grey", capsize=3,
                    label=f"+/-{NOISE_ERRORS:g} sampling errors of one run")  # fmt: skip
    answer = plan.get("answer")
    if answer is not None and _drawn(answer):
        ax.plot([answer["usd_per_hour"]], [answer["worst_ratio"]], "*", markersize=16, color="gold",
                markeredgecolor="black", label=f"answer: {_fleet(answer)}")  # fmt: skip
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1.0, label="every target met at or below")
    floor = _floor(plan)
    if floor is not None:
        ax.axvline(floor, color="tab:purple", linestyle=":", linewidth=1.5,
                   label=f"search stopped: every fleet under ${floor:,.2f}/h misses")  # fmt: skip
    _plain_log(ax, "x")
    _plain_log(ax, "y")
    ax.set_xlabel(f"fleet cost ($/h, {basis} basis)")
    ax.set_ylabel("worst target ratio (achieved / bound)")
    ax.set_title("Cost vs SLO: every fleet simulated")
    _legend(ax)
    return ax


def _error(entry: Mapping[str, Any]) -> float:
    """A fleet's sampling error of its worst ratio in one run (0 where ``plan.json`` has none)."""
    error = entry.get("worst_ratio_error")
    return float(error) if isinstance(error, int | float) and math.isfinite(error) else 0.0


def _floor(plan: Mapping[str, Any]) -> float | None:
    """The floor of a stopped search worth a line: finite, above 0 and under the answer's cost."""
    floor, answer = plan.get("floor_usd_per_hour"), plan.get("answer")
    if not plan.get("stopped") or not isinstance(floor, int | float) or floor <= 0:
        return None
    return None if answer is not None and floor >= answer["usd_per_hour"] else float(floor)


def what(plan: Mapping[str, Any]) -> str:
    """What :func:`cost_vs_slo` shows, for its caption (the report adds what was simulated: the load)."""
    return (
        f"Each simulated fleet's $/h ({plan.get('cost_basis') or 'one'} basis) against its worst target ratio "
        f"(<= 1 meets every target); the staircase is the cost-vs-SLO frontier, its bars +/-{NOISE_ERRORS:g} "
        "sampling errors of one run."
    )


def frontier_takeaway(plan: Mapping[str, Any]) -> str:
    """One sentence read off the frontier: the answer and the dearest fleet that still misses."""
    basis = plan.get("cost_basis") or "one"
    answer = plan.get("answer")
    misses = [e for e in plan.get("frontier", []) if not e["meets"] and _drawn(e)]
    dearest = max(misses, key=lambda e: e["usd_per_hour"], default=None)
    below = (
        f"; the dearest fleet on the frontier that misses, {_fleet(dearest)} at ${dearest['usd_per_hour']:,.2f}/h, "
        f"reaches {format_ratio(dearest['worst_ratio'])} x its bound"
        if dearest is not None
        else ""
    )
    floor = _floor(plan)
    gap = (
        f"; the search stopped at {plan['stopped']}, so the cheapest fleet that meets costs at least "
        f"${floor:,.2f}/h (every cheaper one is settled a miss)"
        if floor is not None
        else ""
    )
    if answer is None:
        return f"No simulated fleet meets every target ($/h on the {basis} basis){below}{gap}."
    found = "found " if floor is not None else ""
    margin = 1.0 - answer["worst_ratio"] if _drawn(answer) else math.inf
    noise = (
        f" (it meets by {margin:.1%} of its bound, within {NOISE_ERRORS:g} sampling errors of one run: another seed "
        "may miss)"
        if margin < NOISE_ERRORS * _error(answer)
        else ""
    )
    return (
        f"Cheapest fleet {found}meeting every target: {_fleet(answer)} at ${answer['usd_per_hour']:,.2f}/h on the "
        f"{basis} basis{noise}{below}{gap}."
    )
