"""The report command: an HTML page and its figures, added to a results folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from simulator.cli.output import ResultsFolder
from simulator.errors import ConfigError
from simulator.report import build_report


def write_report(folder: Path) -> Path:
    """Add ``report.html`` and ``figures/`` to a results folder (its other files are kept)."""
    files = build_report(folder)
    ResultsFolder(folder, None).write(files, replace=False, owned=("figures/", "report.html"))
    return folder / "report.html"


def report(args: argparse.Namespace) -> int:
    if not args.folder.is_dir():
        raise ConfigError(f"{args.folder}: not a results folder (no such folder)")
    print(f"wrote {write_report(args.folder)}")
    return 0
