"""A results folder read through its manifest, and its files through typed readers.

A folder's kind and files come from its marker (:mod:`simulator.results.marker`): the command
that wrote it and the files it wrote. A folder without one is a run when it holds a
``summary.json`` (the run's own typed record: a run folder inside a run sweep or a comparison, or
one copied without its marker). Nothing here decides what a folder is from the names of the
files found in it; a file counts only when the manifest lists it and the folder still holds it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from simulator.capacity import Capacity
from simulator.config.files import number, read_csv, read_json, read_text, read_yaml
from simulator.config.loading import ConfigError, format_validation_error
from simulator.config.scenario import Scenario
from simulator.report.captions import Assumptions, run_assumptions
from simulator.results.marker import MARKER, REPORT, RUN, Manifest, read_marker
from simulator.results.summary import RunSummary
from simulator.studies.sweep import read_table_file


def read_manifest(folder: Path) -> Manifest | None:
    """The manifest of ``folder``: its marker, else a run's when it holds a ``summary.json``; None when neither.

    A marker the report command wrote into a folder that had none names no results of its own,
    so such a folder is read as one without a marker.
    """
    marker = read_marker(folder)
    if marker is not None and marker.command != REPORT:
        return marker
    if (folder / "summary.json").is_file():
        return Manifest(folder, RUN, frozenset(_files_below(folder, depth=2)))
    return None


def _files_below(folder: Path, depth: int) -> Iterator[str]:
    """The files of ``folder`` and its sub-folders ``depth`` levels down (links not followed), as relative paths."""
    for root, folders, files in os.walk(folder):
        relative = Path(root).relative_to(folder)
        if len(relative.parts) + 1 >= depth:
            folders.clear()
        yield from ((relative / name).as_posix() for name in files if name != MARKER)


def read_summary(path: Path) -> RunSummary:
    """A ``summary.json`` as the typed summary (``null`` read as NaN); a damaged one is an error
    naming the file and the field."""
    data = read_json(path)
    try:
        return RunSummary.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(str(path), exc, data)) from None


def read_scenario(manifest: Manifest) -> Scenario | None:
    """The run's ``scenario.resolved.yaml`` as the typed scenario (None when absent or not a scenario)."""
    if not manifest.has("scenario.resolved.yaml"):
        return None
    try:
        return Scenario.model_validate(read_yaml(manifest.path("scenario.resolved.yaml")))
    except ValidationError:
        return None


def assumptions(manifest: Manifest, summary: RunSummary | None) -> Assumptions | None:
    """What the run of ``manifest`` simulated, for the captions (None without a resolved scenario)."""
    scenario = read_scenario(manifest)
    return None if scenario is None else run_assumptions(scenario, summary)


def _damaged(path: Path, expected: str) -> ConfigError:
    return ConfigError(f"{path}: damaged results: expected {expected}; rerun the command that wrote them")


@dataclass(frozen=True)
class SweepRun:
    """One run of ``run --set a,b,...`` as ``sweep.json`` holds it: the values set, the summary, the capacity."""

    values: dict[str, Any]
    summary: RunSummary
    capacity: Capacity | None


def read_sweep_runs(manifest: Manifest) -> list[SweepRun]:
    """The runs of a run sweep's ``sweep.json``, each summary typed."""
    path = manifest.path("sweep.json")
    data = read_json(path)
    if not isinstance(data, list) or not all(isinstance(i, dict) and isinstance(i.get("set"), dict) for i in data):
        raise _damaged(path, "a list of runs, each with its 'set' values and 'summary'")
    return [
        SweepRun(
            item["set"],
            RunSummary.model_validate(item["summary"]),
            Capacity.from_dict(item["capacity"]) if isinstance(item.get("capacity"), dict) else None,
        )
        for item in data
    ]


def read_rows(manifest: Manifest, name: str, keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """The rows of a JSON table (``compare.json``, ``speed_gap.json``): a list of mappings holding ``keys``."""
    path = manifest.path(name)
    rows = read_json(path)
    if not isinstance(rows, list) or not all(isinstance(r, dict) and all(k in r for k in keys) for r in rows):
        raise _damaged(path, f"a list of rows, each with {', '.join(repr(k) for k in keys)}")
    return rows


def read_plan(manifest: Manifest) -> dict[str, Any]:
    """A plan's ``plan.json``: its answer (``explanation``), every fleet it evaluated and, when it
    tolerated failures, the answer's ``availability``."""
    plan = read_json(manifest.path("plan.json"))
    if not isinstance(plan, dict):
        raise _damaged(manifest.path("plan.json"), "a mapping")
    return plan


def read_text_file(manifest: Manifest, name: str) -> str:
    return read_text(manifest.path(name))


def read_levels(manifest: Manifest, replica: str = "0") -> dict[str, tuple[list[float], list[float]]]:
    """Each level of ``levels.csv`` (batch, queue, KV) of one replica as its (times in s, values)."""
    path = manifest.path("levels.csv")
    series: dict[str, tuple[list[float], list[float]]] = {}
    for line, row in read_csv(path, ("replica", "level", "t_s", "value"))[1]:
        if row["replica"] == replica:
            times, values = series.setdefault(row["level"], ([], []))
            times.append(number(row["t_s"], f"{path}:{line}", "t_s"))
            values.append(number(row["value"], f"{path}:{line}", "value"))
    return series


def read_ttft_s(manifest: Manifest) -> list[float]:
    """The time to first token of every served request of ``requests.csv`` (first token - arrival, in s)."""
    import numpy as np

    data = np.genfromtxt(manifest.path("requests.csv"), delimiter=",", names=True)
    served = np.atleast_1d(data["dropped"] == 0)
    ttft: list[float] = np.atleast_1d(data["first_token_s"] - data["arrival_s"])[served].tolist()
    return ttft


@dataclass(frozen=True)
class SweepTable:
    """A sweep's per-combination summary table (cells as text) with what its spec says."""

    rows: list[dict[str, str]]
    metrics: list[str]
    replications: int


def read_sweep_table(manifest: Manifest, path: Path) -> SweepTable:
    """The summary table at ``path`` and the metrics and replications of the sweep's resolved spec."""
    name = "sweep.resolved.yaml"
    spec = read_yaml(manifest.path(name)) if manifest.has(name) else {}
    metrics = list(spec.get("metrics", [])) if isinstance(spec, dict) else []
    replications = spec.get("replications", 1) if isinstance(spec, dict) else 1
    if not isinstance(replications, int):
        raise _damaged(manifest.path(name), "replications: a whole number")
    return SweepTable(read_table_file(path), metrics, replications)


def cell_number(text: str) -> float | str:
    """A table cell as a number (NaN when empty), or the text when it is not one."""
    try:
        return float(text) if text != "" else math.nan
    except ValueError:
        return text
