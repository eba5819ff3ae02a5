"""A self-contained HTML report of a results folder (run, run sweep, sweep, compare, plan or demo).

The folder's manifest (its marker, or a run's ``summary.json``: :mod:`simulator.report.reading`)
says which command wrote it and which files; the page kind registered for that command
(:mod:`simulator.report.registry`, one module per kind) turns them into sections. The page opens
with a summary of the results' headline takeaways; every table and figure follows with a caption
that states what was simulated (model, hardware and chips, lengths, window, load, cost basis:
:mod:`simulator.report.captions`) and a one-sentence takeaway computed from the same numbers it shows;
rows and points of runs that hit a capacity limit are marked. It embeds every figure as a PNG
(also written beside it as ``figures/NN.png``, numbered in page order), the infersim version, the
seed, and the resolved scenario (collapsed at the end), so one file can be mailed around
(:mod:`simulator.report.html`).
"""

from simulator.report.assemble import build_report, collect
from simulator.report.html import STYLE, Section, render
from simulator.report.reading import read_manifest, read_scenario, read_summary
from simulator.report.registry import register, unregister
from simulator.results.marker import Manifest

__all__ = [
    "STYLE",
    "Manifest",
    "Section",
    "build_report",
    "collect",
    "read_manifest",
    "read_scenario",
    "read_summary",
    "register",
    "render",
    "unregister",
]
