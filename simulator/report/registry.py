"""Report page kinds by the command whose results they show.

A page kind is a function from a results folder's manifest to its sections. A new kind is one
module with that function and one :func:`register` call naming the command (the bundled kinds are
registered in :mod:`simulator.report.pages`).
"""

from __future__ import annotations

from collections.abc import Callable

from simulator.report.html import Section
from simulator.results.marker import Manifest

Page = Callable[[Manifest], list[Section]]

PAGES: dict[str, Page] = {}


def register(command: str, page: Page) -> None:
    """Show the results of ``command`` with ``page``; a command has one page kind."""
    if command in PAGES:
        raise ValueError(f"a report page is already registered for {command!r} results")
    PAGES[command] = page


def unregister(command: str) -> None:
    """Forget the page kind of ``command`` (a test's own kind, once it is done)."""
    del PAGES[command]


def page_of(command: str) -> Page | None:
    """The page kind that shows the results of ``command`` (None when none does)."""
    return PAGES.get(command)
