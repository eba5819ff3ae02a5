"""The page of a plan (``infersim plan``): the cheapest fleet meeting every target, with the search's text."""

from __future__ import annotations

from simulator.report.captions import captioned
from simulator.report.html import Section
from simulator.report.reading import assumptions, read_plan_explanation, read_text_file
from simulator.results.marker import Manifest


def page(manifest: Manifest) -> list[Section]:
    """The page of a ``plan`` folder (nothing before its ``plan.json`` is written)."""
    if not manifest.has("plan.json"):
        return []
    what = (
        "The cheapest fleet meeting every target, the cost-vs-SLO frontier and every rejected fleet with the "
        "target it misses."
    )
    return [
        Section(
            "Plan",
            text=read_text_file(manifest, "plan.txt"),
            caption=captioned(what, assumptions(manifest, None)),
            takeaway=read_plan_explanation(manifest),
            headline=True,
        )
    ]
