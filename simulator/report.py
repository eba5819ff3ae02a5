"""A self-contained HTML report of a results folder (run, run sweep, compare, plan or demo).

The page embeds every figure as a PNG (also written beside it under ``figures/``), the tables,
the resolved scenario, the infersim version and the seed, so one file can be mailed around.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes

from simulator import plots
from simulator.analytic.layouts import deploy
from simulator.config.deployment import DeploymentSpec
from simulator.config.files import read_csv, read_json, read_text, read_yaml
from simulator.config.loading import Catalog, ConfigError
from simulator.results.summary import RunSummary
from simulator.sweep import read_table_file, table_path
from simulator.tables import format_number
from simulator.version import __version__

#: Deployments the demo report draws on its roofline (one per architecture family).
ROOFLINE_HARDWARE = ("cerebras-cs3", "groq-lpu", "sambanova-sn40l", "nvidia-h100-sxm")


@dataclass(frozen=True)
class Section:
    title: str
    table: tuple[list[str], list[list[object]]] | None = None
    figure: Axes | None = None
    text: str = ""


def _png(ax: Axes) -> bytes:
    buffer = io.BytesIO()
    figure = ax.get_figure(root=True)
    assert figure is not None
    figure.savefig(buffer, format="png", dpi=110)
    return buffer.getvalue()


def _html_table(headers: list[str], rows: list[list[object]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def read_summary(path: Path) -> RunSummary:
    """A ``summary.json`` as the typed summary (``null`` read as NaN)."""
    return RunSummary.model_validate(read_json(path))


def _run_sections(folder: Path, label: str) -> list[Section]:
    summary = read_summary(folder / "summary.json")
    rows: list[list[object]] = [
        ["TTFT p50 / p99 (s)", f"{format_number(summary.ttft_s.p50)} / {format_number(summary.ttft_s.p99)}"],
        ["TPOT mean (s)", format_number(summary.tpot_s.mean)],
        ["per-user output p50 (tok/s)", format_number(summary.per_user_output_tok_s.p50)],
        ["output (tok/s)", format_number(summary.output_tok_s)],
        ["requests completed", summary.requests_completed],
        ["$/h", format_number(summary.cost.usd_per_hour)],
        ["$/1M output tokens", format_number(summary.cost.usd_per_million_output_tokens)],
        ["J/output token", format_number(summary.cost.joules_per_output_token)],
    ]
    sections = [Section(f"{label}: summary", (["metric", "value"], rows))]
    if summary.backends:
        table: list[list[object]] = [
            [name, b.hardware, b.model, b.replicas, b.chips, b.requests_completed, format_number(b.output_tok_s),
             format_number(b.busy_fraction, ".0%"), b.cost.basis, format_number(b.cost.usd_per_hour),
             format_number(b.cost.idle_usd)]
            for name, b in summary.backends.items()
        ]  # fmt: skip
        headers = ["backend", "hardware", "model", "replicas", "chips", "requests", "out tok/s", "busy", "basis",
                   "$/h", "idle $"]  # fmt: skip
        sections.append(Section(f"{label}: backends", (headers, table)))
    if summary.tasks is not None:
        t = summary.tasks
        task_rows: list[list[object]] = [
            ["tasks completed", t.tasks_completed],
            ["task time p50 / p90 (s)", f"{format_number(t.task_time_s.p50)} / {format_number(t.task_time_s.p90)}"],
            ["$/task", format_number(summary.cost.usd_per_task)],
            ["calls/task", format_number(t.calls_per_task)],
        ]
        sections.append(Section(f"{label}: agent tasks", (["metric", "value"], task_rows),
                                plots.task_breakdown({label: t.mean_seconds.to_dict()})))  # fmt: skip
    levels = folder / "levels.csv"
    if levels.exists():
        series: dict[str, tuple[list[float], list[float]]] = {}
        for _, row in read_csv(levels, ("replica", "level", "t_s", "value"))[1]:
            if row["replica"] == "0":
                series.setdefault(row["level"], ([], []))
                series[row["level"]][0].append(float(row["t_s"]))
                series[row["level"]][1].append(float(row["value"]))
        sections.append(Section(f"{label}: replica 0 over time", figure=plots.timeline(series)))
    requests = folder / "requests.csv"
    if requests.exists():
        data = np.genfromtxt(requests, delimiter=",", names=True)
        ok = np.atleast_1d(data["dropped"] == 0)
        ttft = np.atleast_1d(data["first_token_s"] - data["arrival_s"])[ok]
        sections.append(Section(f"{label}: TTFT distribution", figure=plots.latency_cdf({label: ttft.tolist()})))
    return sections


def _sweep_sections(folder: Path) -> list[Section]:
    sweep = read_json(folder / "sweep.json")
    labels = [", ".join(f"{k}={v}" for k, v in item["set"].items()) for item in sweep]
    summaries = [RunSummary.model_validate(item["summary"]) for item in sweep]
    headers = ["run", "TTFT p50 s", "TTFT p99 s", "tok/s/user p50", "out tok/s", "$/1M out"]
    rows: list[list[object]] = [
        [label, format_number(s.ttft_s.p50), format_number(s.ttft_s.p99), format_number(s.per_user_output_tok_s.p50),
         format_number(s.output_tok_s), format_number(s.cost.usd_per_million_output_tokens)]
        for label, s in zip(labels, summaries, strict=True)
    ]  # fmt: skip
    sections = [Section("Runs", (headers, rows))]
    series = {"TTFT p50": [s.ttft_s.p50 for s in summaries], "TTFT p99": [s.ttft_s.p99 for s in summaries],
              "ITL p50": [s.itl_s.p50 for s in summaries]}  # fmt: skip
    sections.append(Section("Latency across the runs", figure=plots.latency_vs_load(
        list(range(1, len(sweep) + 1)), series, "run (in sweep order)")))  # fmt: skip
    costs = [s.cost.usd_per_million_output_tokens for s in summaries]
    tasks = [s.cost.usd_per_task for s in summaries] if all(s.tasks is not None for s in summaries) else None
    sections.append(Section("Cost", figure=plots.cost(labels, costs, tasks)))
    return sections


def _compare_sections(folder: Path) -> list[Section]:
    rows = read_json(folder / "compare.json")
    from simulator.compare import HEADERS, table_cells

    sections = [Section("Comparison", (HEADERS, [table_cells(r) for r in rows]))]
    curves: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        curves.setdefault(r["hardware"], []).append((r["per_user_output_tok_s_p50"], r["output_tok_s_per_chip"]))
    sections.append(Section("Throughput-interactivity frontier", figure=plots.frontier(curves)))
    labels = [f"{r['hardware']} {r['load']}".strip() for r in rows]
    tasks = [r["usd_per_task"] for r in rows] if all("usd_per_task" in r for r in rows) else None
    if tasks is not None:
        breakdown = {label: r["task_seconds"] for label, r in zip(labels, rows, strict=True)}
        sections.append(Section("Where the task time goes", figure=plots.task_breakdown(breakdown)))
    sections.append(
        Section("Cost", figure=plots.cost(labels, [r["usd_per_million_output_tokens"] for r in rows], tasks))
    )
    return sections


def _demo_sections(folder: Path) -> list[Section]:
    """The speed-gap table and chart per model, and the roofline of the first model's deployments."""
    rows = read_json(folder / "speed_gap.json")
    sections = [Section("The speed gap (table)", text=read_text(folder / "speed_gap.txt"))]
    models = list(dict.fromkeys(r["model"] for r in rows))
    for model in models:
        fits = {r["hardware"]: (r["single_stream"]["per_user_output_tok_s"], r["loaded"]["per_user_output_tok_s"])
                for r in rows if r["model"] == model and "single_stream" in r}  # fmt: skip
        users = next(r["loaded"]["concurrency"] for r in rows if r["model"] == model and "loaded" in r)
        limited = [r["hardware"] for r in rows if r["model"] == model and r.get("loaded", {}).get("capacity_limited")]
        figure = plots.speed_gap(fits, model, users, capacity_limited=limited)
        sections.append(Section(f"The speed gap: {model}", figure=figure))
    first = [r["single_stream"]["deployment"] for r in rows if r["model"] == models[0] and "single_stream" in r]
    catalog = Catalog()
    chosen = {d["hardware"]: deploy(catalog, DeploymentSpec(
        hardware=d["hardware"], model=d["model"], chips=d["chips"], weights=d["weights"]))
        for d in first if d["hardware"] in ROOFLINE_HARDWARE}  # fmt: skip
    sections.append(
        Section(f"Roofline: {models[0]} at batch 1, 16 and 128", figure=plots.roofline(chosen, (1, 16, 128)))
    )
    return sections


def _sweep_table_sections(folder: Path) -> list[Section]:
    """A sweep's per-combination summary; with hardware and speed columns, its frontier."""
    path = table_path(folder, "summary")
    assert path is not None
    rows = read_table_file(path)
    columns = [c for c in rows[0] if not c.endswith(".ci95")][:10] if rows else []
    sections = [Section("Sweep summary (mean across seeds)", (columns, [[r[c] for c in columns] for r in rows]))]
    speed, total = "per_user_output_tok_s.p50.mean", "output_tok_s.mean"
    if rows and "deployment.hardware" in rows[0] and speed in rows[0] and total in rows[0]:
        curves: dict[str, list[tuple[float, float]]] = {}
        for r in rows:
            if r[speed] and r[total] and float(r[speed]) > 0 and float(r[total]) > 0:
                curves.setdefault(r["deployment.hardware"], []).append((float(r[speed]), float(r[total])))
        sections.append(Section("Throughput-interactivity frontier", figure=plots.frontier(curves, per="replica")))
    return sections


def _plan_sections(folder: Path) -> list[Section]:
    return [Section("Plan", text=read_text(folder / "plan.txt"))]


def collect(folder: Path) -> list[Section]:
    """The sections of whatever results ``folder`` holds (nested run folders included)."""
    sections: list[Section] = []
    if (folder / "speed_gap.json").exists():
        sections += _demo_sections(folder)
    if (folder / "plan.json").exists():
        sections += _plan_sections(folder)
    if (folder / "tasks.txt").exists():
        sections.append(Section("Agentic task time", text=read_text(folder / "tasks.txt")))
    if (folder / "compare.json").exists():
        sections += _compare_sections(folder)
    if (folder / "sweep.json").exists():
        sections += _sweep_sections(folder)
    if table_path(folder, "summary") is not None:
        sections += _sweep_table_sections(folder)
    if (folder / "summary.json").exists():
        sections += _run_sections(folder, folder.name)
    for child in sorted(p for p in folder.iterdir() if p.is_dir() and (p / "summary.json").exists()):
        if not (folder / "sweep.json").exists() and not (folder / "compare.json").exists():
            sections += _run_sections(child, child.name)
    for child in sorted(p for p in folder.iterdir() if p.is_dir() and p.name != "figures"):
        if (child / "speed_gap.json").exists() or (child / "compare.json").exists() or (child / "plan.json").exists():
            sections += collect(child)
    return sections


STYLE = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.9em}th,td{border:1px solid #ccc;padding:.25em .6em;
text-align:right}th{background:#f2f2f2}td:first-child,th:first-child{text-align:left}img{max-width:100%}
pre{background:#f7f7f7;padding:1em;overflow-x:auto;font-size:.8em}
h2{border-bottom:1px solid #ddd;padding-bottom:.2em}"""


def render(title: str, sections: Sequence[Section], folder: Path, figures: dict[str, bytes]) -> str:
    """The HTML page; each figure is added to ``figures`` as ``figures/NN.png`` and embedded as base64."""
    parts = [f"<h1>{html.escape(title)}</h1>", f"<p>infersim {html.escape(__version__)}; {_provenance(folder)}</p>"]
    for index, section in enumerate(sections):
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        if section.text:
            parts.append(f"<pre>{html.escape(section.text)}</pre>")
        if section.table is not None:
            parts.append(_html_table(*section.table))
        if section.figure is not None:
            png = _png(section.figure)
            figures[f"figures/{index:02d}.png"] = png
            alt = html.escape(section.title)
            parts.append(f'<img alt="{alt}" src="data:image/png;base64,{base64.b64encode(png).decode()}">')
    scenario = _resolved_scenario(folder)
    if scenario is not None:
        parts.append(f"<h2>Resolved scenario ({html.escape(str(scenario.relative_to(folder)))})</h2>")
        parts.append(f"<pre>{html.escape(read_text(scenario))}</pre>")
    body = "\n".join(parts)
    return f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>' \
           f"<style>{STYLE}</style></head><body>\n{body}\n</body></html>\n"  # fmt: skip


def _resolved_scenario(folder: Path) -> Path | None:
    """The folder's own resolved scenario, else the first of its runs'."""
    own = folder / "scenario.resolved.yaml"
    return own if own.exists() else next(iter(sorted(folder.rglob("scenario.resolved.yaml"))), None)


def _provenance(folder: Path) -> str:
    scenario = _resolved_scenario(folder)
    if scenario is None:
        return "no resolved scenario in the folder"
    data: Any = read_yaml(scenario)
    provenance = data.get("provenance", {}) if isinstance(data, dict) else {}
    seed = provenance.get("seed", data.get("seed") if isinstance(data, dict) else None)
    return f"seed {seed}; scenario {html.escape(str(data.get('name', data.get('kind', '?'))))}"


def build_report(folder: Path) -> dict[str, str | bytes]:
    """``report.html`` and ``figures/NN.png`` of the results in ``folder`` (nothing is written).

    Raises
    ------
    ConfigError
        If the folder holds no results, or results this version cannot read (damaged files).
    """
    try:
        sections = collect(folder)
        if not sections:
            raise ConfigError(f"{folder}: no infersim results here (summary.json, compare.json, plan.json, ...)")
        figures: dict[str, bytes] = {}
        page = render(f"infersim report: {folder.name}", sections, folder, figures)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(
            f"{folder}: damaged or unreadable results ({type(exc).__name__}: {exc}); rerun the command that wrote them"
        ) from None
    return {"report.html": page, **figures}
