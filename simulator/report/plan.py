"""The page of a plan (``infersim plan``): the cheapest fleet meeting every target with the search's
text, the cost-vs-SLO frontier (:mod:`simulator.report.plan_figure`) and, when the plan tolerated
failures, the answer's availability (:mod:`simulator.report.failure_figures`)."""

from __future__ import annotations

from simulator.report import failure_figures, plan_figure
from simulator.report.captions import captioned
from simulator.report.html import Section
from simulator.report.reading import assumptions, read_plan, read_text_file
from simulator.results.marker import Manifest


def page(manifest: Manifest) -> list[Section]:
    """The page of a ``plan`` folder (nothing before its ``plan.json`` is written)."""
    if not manifest.has("plan.json"):
        return []
    plan = read_plan(manifest)
    a = assumptions(manifest, None)
    what = (
        "The cheapest fleet meeting every target, the cost-vs-SLO frontier and every rejected fleet with the "
        "target it misses."
    )
    sections = [
        Section(
            "Plan",
            text=read_text_file(manifest, "plan.txt"),
            caption=captioned(what, a),
            takeaway=str(plan.get("explanation", "")),
            headline=True,
        ),
        Section(
            "Cost vs SLO",
            figure=plan_figure.cost_vs_slo(plan),
            caption=captioned(plan_figure.what(plan), a),
            takeaway=plan_figure.frontier_takeaway(plan),
        ),
    ]
    availability = plan.get("availability")
    parts = failure_figures.plan_parts(availability) if availability else []
    return sections + [Section(**{**p, "caption": captioned(p["caption"], a)}) for p in parts]
