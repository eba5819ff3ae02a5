"""The report command: an HTML page and its figures, added to a results folder."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from simulator.cli.output import ResultsFolder
from simulator.report import build_report


def write_report(folder: Path) -> Path:
    """Add ``report.html`` and ``figures/`` to a results folder (its other files are kept)."""
    out = ResultsFolder(folder, None)  # first: a folder that must not take a report is refused before the work
    out.write(build_report(folder), replace=False, owned=("figures/", "report.html"))
    return folder / "report.html"


def report(args: argparse.Namespace) -> int:
    page = write_report(args.folder)
    if args.json:
        figures = sorted(str(p) for p in (args.folder / "figures").glob("*.png"))
        print(json.dumps({"report": str(page), "figures": figures}, indent=2))
    else:
        print(f"wrote {page}")
    return 0
