"""The HTML page of a report: sections in order, each with its caption and takeaway.

The page opens with the headline takeaways; each table and figure follows with its caption and
takeaway. Figures are numbered in page order, embedded as base64 PNGs and returned beside the
page as ``figures/NN.png``; the resolved scenario closes the page, collapsed, so one file can be
mailed around.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes

from simulator.capacity import LIMITED_MARK
from simulator.config.files import read_text, read_yaml
from simulator.results.marker import Manifest
from simulator.version import __version__


@dataclass(frozen=True)
class Section:
    """One block of the page: a table, a figure or text, with its caption and a takeaway.

    The caption says what is shown and what was simulated (:mod:`simulator.report.captions`); the
    takeaway is one sentence read off the same numbers. ``headline`` lifts the takeaway into the
    summary at the top of the page.
    """

    title: str
    table: tuple[list[str], list[list[object]]] | None = None
    figure: Axes | None = None
    text: str = ""
    caption: str = ""
    takeaway: str = ""
    headline: bool = False


STYLE = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.9em}th,td{border:1px solid #ccc;padding:.25em .6em;
text-align:right}th{background:#f2f2f2}td:first-child,th:first-child{text-align:left}img{max-width:100%}
pre{background:#f7f7f7;padding:1em;overflow-x:auto;font-size:.8em}
h2{border-bottom:1px solid #ddd;padding-bottom:.2em}figcaption,.caption{text-align:left;
font-size:.85em;color:#444;margin:.3em 0}figure{margin:0 0 1.5em}.takeaway{color:#111}
tr.limited td{background:#fff1f0}figure.table{overflow-x:auto}td{white-space:nowrap}
.summary{background:#f5f9ff;border:1px solid #cfe0f5;padding:.2em 1em}
details{margin-top:2em}summary{cursor:pointer;font-weight:bold}"""


def _png(ax: Axes) -> bytes:
    buffer = io.BytesIO()
    figure = ax.get_figure(root=True)
    assert figure is not None
    figure.savefig(buffer, format="png", dpi=110)
    return buffer.getvalue()


def _html_row(cells: list[object]) -> str:
    """One table row, marked ``limited`` when a cell carries :data:`LIMITED_MARK`."""
    marked = ' class="limited"' if any(LIMITED_MARK in str(c) for c in cells) else ""
    return f"<tr{marked}>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>"


def _html_table(headers: list[str], rows: list[list[object]], caption: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(_html_row(r) for r in rows)
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    return f'<figure class="table"><figcaption>{caption}</figcaption>{table}</figure>' if caption else table


def _summary(sections: Sequence[Section]) -> list[str]:
    """The headline takeaways as a list at the top of the page (nothing when there are none)."""
    headlines = [s.takeaway for s in sections if s.headline and s.takeaway]
    if not headlines:
        return []
    items = "".join(f"<li>{html.escape(text)}</li>" for text in headlines)
    return [f'<section class="summary"><h2>Summary</h2><ul>{items}</ul></section>']


def _section(section: Section, figures: dict[str, bytes]) -> list[str]:
    """A section's heading, text, table and figure (numbered after those in ``figures``, and added to it)."""
    parts = [f"<h2>{html.escape(section.title)}</h2>"]
    words = html.escape(section.caption)
    takeaway = f' <strong class="takeaway">{html.escape(section.takeaway)}</strong>' if section.takeaway else ""
    if section.text:
        parts.append(f'<p class="caption">{words}{takeaway}</p><pre>{html.escape(section.text)}</pre>')
    if section.table is not None:
        parts.append(_html_table(*section.table, caption=words + takeaway))
    if section.figure is not None:
        number = len(figures) + 1
        png = _png(section.figure)
        figures[f"figures/{number:02d}.png"] = png
        alt = html.escape(section.title)
        parts.append(
            f'<figure><img alt="{alt}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
            f"<figcaption><b>Figure {number}.</b> {words}{takeaway}</figcaption></figure>"
        )
    return parts


def render(title: str, sections: Sequence[Section], manifest: Manifest, figures: dict[str, bytes]) -> str:
    """The HTML page: a summary of the headline takeaways, then every section with its caption and
    takeaway (figures numbered in order, each added to ``figures`` as ``figures/NN.png`` and embedded
    as base64), then the resolved scenario, collapsed."""
    parts = [f"<h1>{html.escape(title)}</h1>", f"<p>infersim {html.escape(__version__)}; {_provenance(manifest)}</p>"]
    parts += _summary(sections)
    for section in sections:
        parts += _section(section, figures)
    scenario = resolved_scenario(manifest)
    if scenario is not None:
        shown = html.escape(str(scenario.relative_to(manifest.folder)))
        parts.append(
            f"<details><summary>Resolved scenario ({shown})</summary><pre>{html.escape(read_text(scenario))}</pre>"
            "</details>"
        )
    body = "\n".join(parts)
    head = f'<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>{STYLE}</style>'
    return f"<!doctype html>\n{head}</head><body>\n{body}\n</body></html>\n"


def resolved_scenario(manifest: Manifest) -> Path | None:
    """The folder's own resolved scenario, else the first of its runs' (by path)."""
    if manifest.has("scenario.resolved.yaml"):
        return manifest.path("scenario.resolved.yaml")
    listed = sorted(f for f in manifest.files if f.endswith("/scenario.resolved.yaml") and manifest.has(f))
    return manifest.path(listed[0]) if listed else None


def _provenance(manifest: Manifest) -> str:
    scenario = resolved_scenario(manifest)
    if scenario is None:
        return "no resolved scenario in the folder"
    data: Any = read_yaml(scenario)
    provenance = data.get("provenance", {}) if isinstance(data, dict) else {}
    seed = provenance.get("seed", data.get("seed") if isinstance(data, dict) else None)
    return f"seed {seed}; scenario {html.escape(str(data.get('name', data.get('kind', '?'))))}"
