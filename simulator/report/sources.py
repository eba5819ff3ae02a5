"""The section that lists the profile numbers results rest on, each with its confidence and source."""

from __future__ import annotations

from simulator.config.loading import Catalog
from simulator.errors import InfersimError
from simulator.report.captions import Assumptions, captioned
from simulator.report.html import Section
from simulator.report.reading import read_scenario
from simulator.results.marker import Manifest
from simulator.sources import SourcedNumber, confidence_counts, deciding

HEADERS = ["hardware", "number", "value", "confidence", "source"]
#: The longest source cell, in characters (a citation is cut there).
SOURCE_CELL_CHARS = 160


def sources_section(numbers: dict[str, list[SourcedNumber]], a: Assumptions | None) -> Section:
    """The numbers the results rest on, per hardware: value, confidence, source and its citation."""
    rows: list[list[object]] = [
        [hardware, n.what, n.value, n.confidence, f"{n.source}: {n.citation}"[:SOURCE_CELL_CHARS]]
        for hardware, found in numbers.items()
        for n in found
    ]
    every = [n for found in numbers.values() for n in found]
    assumed = [f"{hw} {n.what}" for hw, found in numbers.items() for n in found if n.confidence == "assumed"]
    takeaway = f"Of the {len(every)} numbers these results rest on: {confidence_counts(every)}" + (
        f"; assumed: {', '.join(assumed)}." if assumed else "."
    )
    what = (
        "The profile numbers that decide the speeds and costs above (bandwidth, FLOP/s, efficiencies, latencies, "
        "prices), each with its confidence and source; infersim estimate --explain lists every number of a profile."
    )
    return Section("Where the numbers come from", (HEADERS, rows), caption=captioned(what, a), takeaway=takeaway)


def run_numbers(manifest: Manifest) -> dict[str, list[SourcedNumber]]:
    """The deciding numbers of each backend's deployment of a run's resolved scenario ({} when it
    cannot be resolved again here)."""
    from simulator.plan.resolve import resolve

    scenario = read_scenario(manifest)
    if scenario is None:
        return {}
    try:
        resolved = resolve(scenario, Catalog())
    except (InfersimError, OSError, ValueError):
        return {}
    return {b.deployment.hardware.id: deciding(b.deployment) for b in resolved.backends}
