"""The report command: an HTML page and its figures, added to a results folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from simulator.cli.output import ResultsFolder
from simulator.report import build_report


def write_report(folder: Path) -> Path:
    """Add ``report.html`` and ``figures/`` to a results folder (its other files are kept)."""
    out = ResultsFolder(folder, None)  # first: a folder that must not take a report is refused before the work
    out.write(build_report(folder), replace=False, owned=("figures/", "report.html"))
    return folder / "report.html"


def report(args: argparse.Namespace) -> int:
    print(f"wrote {write_report(args.folder)}")
    return 0
