"""The bundled report page kinds, one per command that writes results a report can show."""

from __future__ import annotations

from simulator.report import compare, demo, plan, runs, sweep
from simulator.report.registry import register

register("run", runs.page)
register("compare", compare.page)
register("sweep", sweep.page)
register("plan", plan.page)
register("demo", demo.page)
