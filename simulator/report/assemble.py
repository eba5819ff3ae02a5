"""A results folder's sections, from its manifest, and the report built from them (nothing written)."""

from __future__ import annotations

from pathlib import Path

import simulator.report.pages  # noqa: F401  (registers the bundled page kinds)
from simulator.config.loading import ConfigError
from simulator.report.html import Section, render
from simulator.report.reading import read_manifest
from simulator.report.registry import page_of
from simulator.results.marker import Manifest


def _manifest(folder: Path) -> Manifest:
    """The folder's manifest (ConfigError when it holds no infersim results)."""
    manifest = read_manifest(folder)
    if manifest is None:
        raise ConfigError(f"{folder}: no infersim results here (summary.json, compare.json, plan.json, ...)")
    return manifest


def sections_of(manifest: Manifest) -> list[Section]:
    """The sections of the page kind registered for the command that wrote the folder.

    Raises
    ------
    ConfigError
        If no page kind shows that command's results.
    """
    page = page_of(manifest.command)
    if page is None:
        raise ConfigError(f"{manifest.folder}: the results of `infersim {manifest.command}` have no report page")
    return page(manifest)


def collect(folder: Path) -> list[Section]:
    """The sections of whatever results ``folder`` holds (its runs included), by its manifest."""
    return sections_of(_manifest(folder))


def build_report(folder: Path) -> dict[str, str | bytes]:
    """``report.html`` and ``figures/NN.png`` of the results in ``folder`` (nothing is written).

    Raises
    ------
    ConfigError
        If the folder holds no results, or results this version cannot read (damaged files).
    """
    try:
        manifest = _manifest(folder)
        sections = sections_of(manifest)
        if not sections:
            raise ConfigError(f"{folder}: no infersim results here (summary.json, compare.json, plan.json, ...)")
        figures: dict[str, bytes] = {}
        page = render(f"infersim report: {folder.name}", sections, manifest, figures)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(
            f"{folder}: damaged or unreadable results ({type(exc).__name__}: {exc}); rerun the command that wrote them"
        ) from None
    return {"report.html": page, **figures}
