"""Figures and report rows of failures (matplotlib; no I/O): what a run's replicas were up, and what
a planned fleet's tolerance of failures buys.

Each figure function takes results and an optional Axes, draws, labels its axes with their units and
returns the Axes, as :mod:`simulator.report.plots` does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.axes import Axes

from simulator.analytic.availability import more_than_down
from simulator.report.plots import _axes, _legend
from simulator.results.summary import FailureSummary
from simulator.studies.tolerance import HOURS_PER_YEAR


def replica_availability(observed: Sequence[float], expected: float, ax: Axes | None = None) -> Axes:
    """Each replica's observed share of the window up (bars) beside the closed form's MTBF / (MTBF + MTTR)."""
    ax = _axes(ax)
    x = np.arange(len(observed))
    ax.bar(x, [100.0 * a for a in observed], 0.6, color="C0", label="observed up-time share")
    if expected == expected:  # NaN: no replica fails at random
        ax.axhline(100.0 * expected, color="C3", linestyle="--", label="MTBF / (MTBF + MTTR)")
    ax.set_xticks(x, [str(i) for i in x])
    ax.set_xlabel("replica")
    ax.set_ylabel("% of the window up")
    ax.set_ylim(0.0, 105.0)
    ax.set_title("Replica availability")
    _legend(ax)
    return ax


def tolerance(availabilities: Sequence[float], tolerated: int, ax: Axes | None = None) -> Axes:
    """P(at most k replicas down) for every k, with the tolerated k marked: the share of time the
    fleet still meets its targets by the planner's test, and what one more tolerated failure buys."""
    ax = _axes(ax)
    ks = list(range(min(len(availabilities), tolerated + 3)))  # more than n - 1 down: never more than n
    missing = [more_than_down(availabilities, k) for k in ks]
    ax.semilogy(ks, [m * HOURS_PER_YEAR for m in missing], "o-", color="C0", label="hours a year with more than k down")
    ax.axvline(tolerated, color="C3", linestyle="--", label=f"tolerated: {tolerated}")
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("k (replicas down at once)")
    ax.set_ylabel("hours per year with more than k down")
    ax.set_title("What tolerating failures buys")
    _legend(ax)
    return ax


def failure_rows(f: FailureSummary) -> tuple[list[str], list[list[object]], str]:
    """Headers, rows and takeaway of a run's failures."""
    rows: list[list[object]] = [
        ["availability (observed, mean over replicas)", f"{f.availability:.4%}"],
        ["availability (MTBF / (MTBF + MTTR))", "-" if f.expected_availability != f.expected_availability
         else f"{f.expected_availability:.4%}"],
        ["replica failures", f.failures],
        ["requests retried on another replica", f.requests_retried],
        ["requests failed (an error answer)", f.requests_failed],
        ["straggler replicas", f.stragglers],
    ]  # fmt: skip
    takeaway = (f"{f.failures} replica failure{'s' if f.failures != 1 else ''}: the replicas were up "
                f"{f.availability:.2%} of the window; {f.requests_retried} requests were retried and "
                f"{f.requests_failed} failed.")  # fmt: skip
    return ["metric", "value"], rows, takeaway


def plan_availability_rows(found: Mapping[str, Any]) -> tuple[list[str], list[list[object]], list[float]]:
    """Headers and rows of a plan's availability (``plan.json`` ``availability``), and each replica's A."""
    rows: list[list[object]] = []
    each: list[float] = []
    for name, b in found["backends"].items():
        rows.append([name, b["replicas"], f"{b['replica_availability']:.5%}", f"{b['replica_mtbf_h']:,.0f}",
                     f"{b['mttr_s'] / 60:,.1f}"])  # fmt: skip
        each += [b["replica_availability"]] * int(b["replicas"])
    headers = ["backend", "replicas", "replica availability", "replica MTBF (h)", "MTTR (min)"]
    return headers, rows, each


def run_parts(label: str, f: FailureSummary) -> list[dict[str, Any]]:
    """The report's failure blocks of a run (keyword arguments of a report section; ``caption`` says
    what is shown, the report adds what was simulated)."""
    headers, rows, takeaway = failure_rows(f)
    return [
        {"title": f"{label}: failures", "table": (headers, rows), "takeaway": takeaway,
         "caption": "Replica failures, repairs and what they cost the requests: the observed share of the window "
                    "each replica was up (mean) beside the closed form's MTBF / (MTBF + MTTR); failures, retried "
                    "and failed requests over the whole run."},
        {"title": f"{label}: replica availability", "figure": replica_availability(f.replica_availability,
                                                                                    f.expected_availability),
         "takeaway": f"The least available replica was up {min(f.replica_availability):.2%} of the window.",
         "caption": "Share of the measured window each replica was up (bars; a planned outage or a drawn "
                    "failure takes it down until restart and weight reload end), and the closed form's long-run "
                    "share for replicas that fail at random (dashed)."},
    ]  # fmt: skip


def plan_parts(found: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The report's blocks of a plan's availability (``plan.json`` ``availability``)."""
    headers, rows, each = plan_availability_rows(found)
    k = int(found["tolerate_failures"])
    takeaway = (
        f"The planned fleet meets its targets with {k} replica{'s' if k != 1 else ''} down; more than {k} "
        f"{'is' if k == 1 else 'are'} down {found['hours_per_year_more_down']:.3g} h a year (independent failures)."
    )
    return [
        {"title": "Plan: availability", "table": (headers, rows), "takeaway": takeaway, "headline": True,
         "caption": f"Each backend's replica availability MTBF / (MTBF + MTTR) and the fleet's chance of having at "
                    f"most {k} replica{'s' if k != 1 else ''} down at once (independent failures; "
                    f"slo.tolerate_failures = {k})."},
        {"title": "Plan: what tolerating failures buys", "figure": tolerance(each, k), "takeaway": takeaway,
         "caption": "Hours a year the planned fleet has more than k replicas down, for each k (log scale): the "
                    "planner's answer meets its targets with the tolerated k down (dashed)."},
    ]  # fmt: skip
