"""Parameter sweeps: many scenarios from one, run on a local process pool or a Dask cluster
(:mod:`simulator.studies.execution`).

A sweep spec names a scenario file and the factors to vary, by the scenario's own field
paths (``deployment.hardware``, ``load.users``): a ``grid`` (every combination), a
``sample`` (``random`` or ``latin-hypercube`` points in numeric ranges, crossed with the
grid), and ``replications``, each with its own seed spawned from ``run.seed`` by
``SeedSequence`` (independent streams, reproducible). Every run is one row: the factor
values, the replication and seed, the chosen metrics (dotted paths into the run summary),
and ``error`` (a run that fails is a row with its message, not an aborted sweep).

Rows are cached under ``DIR/cache/<key>.json`` (:mod:`simulator.studies.execution`; the metric columns
are part of the key): a rerun, or a sweep killed half-way, only simulates what is missing (failed
runs are not cached, so they are retried). ``summary`` groups rows by factor values across
seeds: the mean and the half-width of a 95 % Student-t confidence interval for every metric.
"""

from __future__ import annotations

import csv
import difflib
import importlib
import io
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, model_validator
from scipy import stats
from scipy.stats import qmc

from simulator.config.base import Spec
from simulator.config.files import read_csv
from simulator.config.loading import Catalog, ConfigError, read_yaml, validate_data
from simulator.config.paths import write_in
from simulator.config.scenario import Scenario
from simulator.errors import naming
from simulator.plan.limits import Limits, check_runs
from simulator.plan.limits import check as check_size
from simulator.plan.resolve import ScenarioError, resolve
from simulator.results.summary import RunSummary
from simulator.runner import load_scenario_data, metric_paths, scenario_from, simulate, summary_shape
from simulator.studies.execution import (
    Cache,
    Executor,
    ExecutorName,
    Profiles,
    catalog_of,
    inputs_digest,
    run_key,
    start,
)

# Laid out by hand as a table (rows of entries), so the formatter leaves it as it is.
DEFAULT_METRICS = (
    "per_user_output_tok_s.p50", "ttft_s.p50", "ttft_s.p99", "tpot_s.mean", "e2e_s.p50", "output_tok_s",
    "requests_per_s", "goodput_requests_per_s", "mean_batch_size", "cost.usd_per_million_output_tokens",
    "cost.usd_per_task", "tasks.task_time_s.p50",
)  # fmt: skip


class RangeSpec(Spec):
    low: float
    high: float
    integer: bool = Field(False, description="round samples to integers")
    log: bool = Field(False, description="sample uniformly in log space")

    @model_validator(mode="after")
    def _ordered(self) -> RangeSpec:
        if not self.low < self.high or (self.log and self.low <= 0):
            raise ValueError("need low < high (and low > 0 for log ranges)")
        if self.integer and math.ceil(self.low) > math.floor(self.high):
            raise ValueError(f"no integer lies in [{self.low}, {self.high}]")
        return self


class SampleSpec(Spec):
    method: Literal["random", "latin-hypercube"] = "latin-hypercube"
    points: Annotated[int, Field(ge=1)]
    seed: Annotated[int, Field(ge=0)] = 0
    ranges: dict[str, RangeSpec] = Field(min_length=1)


class SweepSpec(Spec):
    schema_version: Literal[1] = 1
    name: str
    scenario: Path = Field(description="scenario file, relative to the sweep file")
    grid: dict[str, list[Any]] = Field(default_factory=dict, description="field path -> values")
    sample: SampleSpec | None = None
    replications: Annotated[int, Field(ge=1)] = 1
    metrics: list[str] = Field(default_factory=lambda: list(DEFAULT_METRICS), min_length=1)

    @model_validator(mode="after")
    def _not_empty(self) -> SweepSpec:
        if not self.grid and self.sample is None and self.replications == 1:
            raise ValueError("the sweep is empty: give grid values, a sample or replications > 1")
        for path, values in self.grid.items():
            if not values:
                raise ValueError(f"grid.{path}: empty list of values (the sweep would have no runs)")
        return self

    @property
    def runs(self) -> int:
        """Grid combinations x sample points x replications."""
        points = self.sample.points if self.sample is not None else 1
        return math.prod(len(values) for values in self.grid.values()) * points * self.replications

    @property
    def runs_how(self) -> str:
        """How :attr:`runs` is counted, in words."""
        grid = " x ".join(str(len(v)) for v in self.grid.values()) or "1"
        points = self.sample.points if self.sample else 1
        return f"grid {grid}, {points:,} sample points, {self.replications:,} replications"


@dataclass(frozen=True)
class RunPoint:
    """One run of the sweep: its factor values and replication, its resolved scenario and key."""

    index: int
    factors: dict[str, Any]
    replication: int
    seed: int
    scenario_json: str
    key: str


def factor_points(spec: SweepSpec) -> list[dict[str, Any]]:
    """Grid combinations crossed with the sample points (field path -> value)."""
    points: list[dict[str, Any]] = [{}]
    for path, values in spec.grid.items():
        points = [p | {path: v} for p in points for v in values]
    if spec.sample is None:
        return points
    samples = _sample_points(spec.sample)
    return [p | q for p in points for q in samples]


def _sample_points(s: SampleSpec) -> list[dict[str, Any]]:
    """The sample's points (field path -> value): unit-cube draws (Latin hypercube or uniform
    random, seeded) mapped onto each range by :func:`_from_unit`."""
    names = list(s.ranges)
    if s.method == "latin-hypercube":
        unit = qmc.LatinHypercube(d=len(names), seed=s.seed).random(s.points)
    else:
        unit = np.random.default_rng(s.seed).random((s.points, len(names)))
    return [{name: _from_unit(s.ranges[name], u) for name, u in zip(names, row, strict=True)} for row in unit]


def _from_unit(r: RangeSpec, u: float) -> float:
    """The value of range ``r`` at unit coordinate ``u``: an integer range without ``log`` makes
    every integer in ``[ceil(low), floor(high)]`` equally likely; otherwise ``low + u (high - low)``,
    or ``low (high / low)^u`` on a log range, rounded on an integer range."""
    if r.integer and not r.log:
        lo, hi = math.ceil(r.low), math.floor(r.high)
        return lo + min(math.floor(u * (hi - lo + 1)), hi - lo)
    value = math.exp(math.log(r.low) + u * math.log(r.high / r.low)) if r.log else r.low + u * (r.high - r.low)
    return round(value) if r.integer else float(value)


def replication_seeds(base_seed: int, replications: int) -> list[int]:
    """Independent 32-bit seeds spawned from the scenario's seed (SeedSequence)."""
    children = np.random.SeedSequence(base_seed).spawn(replications)
    return [int(child.generate_state(1)[0]) for child in children]


def expand(
    spec: SweepSpec,
    sweep_path: Path,
    catalog: Catalog | None = None,
    limits: Limits | None = Limits(),  # noqa: B008 - a frozen dataclass of constants
) -> list[RunPoint]:
    """Every run, validated up front: a bad field path, a metric that is not in a run's summary,
    or a run over the size ``limits`` fails before anything is simulated."""
    catalog = catalog or Catalog()
    check_runs(
        spec.runs,
        limits,
        f"{sweep_path}: sweep",
        spec.runs_how,
        "give fewer grid values, sample points or replications",
    )
    scenario_path = spec.scenario if spec.scenario.is_absolute() else sweep_path.parent / spec.scenario
    with naming(f"{sweep_path}: scenario"):
        data = load_scenario_data(scenario_path)
    runs: list[RunPoint] = []
    for number, factors in enumerate(factor_points(spec)):
        point = ", ".join(f"{k}={v}" for k, v in factors.items())
        with naming(f"{sweep_path}: grid point {point}" if point else f"{sweep_path}: scenario"):
            base = write_in(scenario_from(dict(data), factors, str(scenario_path), catalog), catalog)
            if limits is not None:
                _check_size(base, catalog, limits)
        if number == 0 and "metrics" in spec.model_fields_set:  # the defaults may name task metrics a chat run lacks
            check_metrics(spec.metrics, summary_shape(base, catalog), sweep_path)
        runs += _replications(base, factors, spec, len(runs))
    return runs


def _replications(base: Scenario, factors: dict[str, Any], spec: SweepSpec, first: int) -> list[RunPoint]:
    """The runs of one grid point, numbered from ``first``: one per replication, each at its seed
    (:func:`replication_seeds`; the scenario's own seed when there is one replication)."""
    inputs = inputs_digest(base, spec.metrics)
    seeds = replication_seeds(base.run.seed, spec.replications) if spec.replications > 1 else [base.run.seed]
    runs = []
    for replication, seed in enumerate(seeds):
        scenario = base.model_copy(update={"run": base.run.model_copy(update={"seed": seed})})
        text = scenario.model_dump_json(by_alias=True)
        runs.append(RunPoint(first + replication, factors, replication, seed, text, run_key(text, inputs)))
    return runs


def _check_size(scenario: Scenario, catalog: Catalog, limits: Limits) -> None:
    """A run over the size limits fails the sweep up front; one that cannot run as asked is left
    to fail as its own row (a sweep may well cross the edge of what fits)."""
    try:
        size = resolve(scenario, catalog).size
    except ScenarioError:
        return
    check_size(size, limits)


def check_metrics(metrics: list[str], shape: RunSummary, sweep_path: Path) -> None:
    """Every metric must name a number of the run summary (a typo would be a silent NaN column)."""
    known = metric_paths(shape)
    for index, name in enumerate(metrics):
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            raise ConfigError(f"{sweep_path}: metrics.{index}: {name!r} is not a number in a run's summary{hint}")


def run_point(scenario_json: str, metrics: list[str], profiles: Profiles) -> dict[str, Any]:
    """Simulate one resolved scenario (in a worker process); errors become the row's ``error``."""
    try:
        catalog = catalog_of(profiles)
        scenario = Scenario.model_validate_json(scenario_json)
        summary = simulate(scenario, catalog, limits=None).summary  # its size was checked by expand

        return {name: summary.metric(name) for name in metrics} | {"error": ""}
    except Exception as exc:  # a failed run is a row, not an aborted sweep
        return dict.fromkeys(metrics, math.nan) | {"error": f"{type(exc).__name__}: {exc}"}


def run_sweep(
    spec: SweepSpec,
    runs: list[RunPoint],
    out: Path,
    executor: ExecutorName = "local",
    jobs: int = 1,
    address: str | None = None,
    profiles: Profiles = (None, None, None),
    progress: Callable[[int, int], None] | None = None,
    ready: Callable[[], None] | None = None,
) -> list[dict[str, Any]]:
    """Every run's row, from the cache where present; the rest simulated on the executor.

    ``ready`` is called once the executor is up (or nothing is left to run), before any run is
    submitted: the caller creates its results folder then, so a sweep that cannot start leaves none.
    """
    cache = Cache(out / "cache")
    rows: dict[int, dict[str, Any]] = {}
    todo = []
    for point in runs:
        cached = cache.get(point.key)
        if cached is None:
            todo.append(point)
        else:
            rows[point.index] = cached

    def finished() -> None:  # tells ``progress`` how many runs have their rows
        if progress:
            progress(len(rows), len(runs))

    finished()
    if todo:
        pool = start(executor, min(jobs, len(todo)), address)  # a worker more than there are runs would idle
        try:
            if ready:
                ready()
            _simulate(pool, spec, todo, profiles, cache, rows, finished)
        except BaseException:  # Ctrl-C, SIGTERM, a broken worker: stop the workers now
            pool.close(True)
            raise
        pool.close(False)
    elif ready:
        ready()
    return [_row(p, rows[p.index]) for p in runs]


def _simulate(
    pool: Executor,
    spec: SweepSpec,
    todo: list[RunPoint],
    profiles: Profiles,
    cache: Cache,
    rows: dict[int, dict[str, Any]],
    finished: Callable[[], None],
) -> None:
    """Run ``todo`` on the pool, each row into ``rows`` (and the cache, when it did not fail) as it completes."""
    futures = {pool.submit(run_point, p.scenario_json, spec.metrics, profiles, key=p.key): p for p in todo}
    for future in pool.completed(futures):
        point = futures[future]
        row = future.result()
        if not row["error"]:  # a failure is reported, and retried by the next run
            cache.put(point.key, row)
        rows[point.index] = row
        finished()


def _row(point: RunPoint, result: dict[str, Any]) -> dict[str, Any]:
    return {
        "run": point.index,
        **point.factors,
        "replication": point.replication,
        "seed": point.seed,
        "key": point.key,
        **result,
    }


def summarize_rows(rows: list[dict[str, Any]], factors: list[str], metrics: list[str]) -> list[dict[str, Any]]:
    """Per factor combination: runs, failures, and each metric's mean and 95 % CI half-width."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(json.dumps([row[f] for f in factors], default=str), []).append(row)
    out = []
    for members in groups.values():
        entry: dict[str, Any] = {f: members[0][f] for f in factors}
        entry |= {"runs": len(members), "failed": sum(1 for m in members if m["error"])}
        for name in metrics:
            entry[f"{name}.mean"], entry[f"{name}.ci95"] = _mean_ci95(members, name)
        out.append(entry)
    return out


def _mean_ci95(members: list[dict[str, Any]], name: str) -> tuple[float, float]:
    """Mean of metric ``name`` over the runs without error (finite values), and the 95 % CI
    half-width ``t(0.975, n - 1) s / sqrt(n)``; NaN where there are too few values."""
    values = np.array([m[name] for m in members if not m["error"]], dtype=float)
    values = values[np.isfinite(values)]
    mean = float(values.mean()) if values.size else math.nan
    if values.size <= 1:
        return mean, math.nan
    t = stats.t.ppf(0.975, values.size - 1)
    return mean, float(t * values.std(ddof=1) / math.sqrt(values.size))


def load_sweep(path: Path, overrides: dict[str, list[Any]] | None = None) -> SweepSpec:
    """The sweep spec at ``path`` with ``--set`` overrides (:func:`override_sweep`) applied before validation."""
    data = read_yaml(path)
    if overrides and isinstance(data, dict):
        data = override_sweep(data, overrides)
    return validate_data(SweepSpec, data, str(path))


def override_sweep(data: dict[str, Any], overrides: dict[str, list[Any]]) -> dict[str, Any]:
    """A sweep spec's data with ``--set`` values: a path into the spec sets it (``replications=3``,
    ``grid.load.users=1,8``, ``sample.points=20``, ``metrics=ttft_s.p99,output_tok_s``); any other path
    is a field of the base scenario, whose values become that field's grid values for every run
    (``deployment.hardware=nvidia-h200`` fixes it; ``load.users=1,4,16`` sweeps it), replacing the
    spec's own grid values for it."""
    out = dict(data)
    for path, values in overrides.items():
        head, _, rest = path.partition(".")
        if head == "grid" and rest:
            out["grid"] = dict(out.get("grid") or {}) | {rest: values}
        elif head == "metrics" and not rest:
            out["metrics"] = values
        elif head in SweepSpec.model_fields:
            _set_spec_field(out, path, values)
        else:
            out["grid"] = dict(out.get("grid") or {}) | {path: values}
    return out


def _set_spec_field(out: dict[str, Any], path: str, values: list[Any]) -> None:
    """Set the spec field at dotted ``path`` in ``out`` (copying the mappings on the way) to the
    single value in ``values``."""
    node = out
    parts = path.split(".")
    for part in parts[:-1]:
        child = dict(node.get(part) or {})
        node[part] = child
        node = child
    if len(values) != 1:
        raise ConfigError(f"--set {path}: takes one value (a comma list sweeps only grid and scenario fields)")
    node[parts[-1]] = values[0]


def cached_runs(runs: list[RunPoint], out: Path) -> int:
    """How many of ``runs`` already have a row in the cache of the sweep folder ``out``."""
    cache = Cache(out / "cache")
    return sum(1 for p in runs if cache.get(p.key) is not None)


def table_file(rows: list[dict[str, Any]], stem: str) -> tuple[str, bytes | str]:
    """``(file name, contents)`` of a table: Parquet when pyarrow is installed, else CSV."""
    columns = list(dict.fromkeys(k for row in rows for k in row))
    try:
        pa, pq = importlib.import_module("pyarrow"), importlib.import_module("pyarrow.parquet")
    except ImportError:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows({c: _cell(row.get(c)) for c in columns} for row in rows)
        return f"{stem}.csv", buffer.getvalue()
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist([{c: row.get(c) for c in columns} for row in rows]), sink)
    return f"{stem}.parquet", sink.getvalue()


def _cell(value: Any) -> str:
    return "" if value is None else f"{value:.6g}" if isinstance(value, float) else str(value)


def table_path(folder: Path, stem: str) -> Path | None:
    """The table :func:`table_file` wrote in ``folder`` (Parquet or CSV), or None."""
    return next((p for p in (folder / f"{stem}.parquet", folder / f"{stem}.csv") if p.is_file()), None)


def read_table_file(path: Path) -> list[dict[str, str]]:
    """Rows of a table :func:`table_file` wrote, cells as CSV text (so both forms read alike)."""
    if path.suffix != ".parquet":
        return [row for _, row in read_csv(path)[1]]
    try:
        pq = importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise ConfigError(f"{path}: a Parquet table needs pyarrow (pip install pyarrow)") from None
    try:
        records = pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow's errors (ArrowInvalid, OSError) for a damaged file
        raise ConfigError(f"{path}: not a readable Parquet table: {exc}") from None
    return [{k: _cell(v) for k, v in record.items()} for record in records]
