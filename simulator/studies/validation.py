"""Predict every row of a measurement table and report the error.

The table's columns are those of the bundled ``data/measurements.csv``: ``metric`` is one of
:data:`METRICS`; ``concurrency`` is an integer or ``max`` (saturated: the largest batch the
KV budget and batch cap allow). An empty ``chips`` means the automatic placement; empty
``input_tokens`` / ``output_tokens`` mean the documented default workload
(:data:`DEFAULT_INPUT_TOKENS`, :data:`DEFAULT_OUTPUT_TOKENS`). A row that cannot be predicted
is returned with its reason, never dropped.

Optional columns say how the measurement was taken, so the simulator runs the same load:

- ``load``: ``closed`` (``concurrency`` users in a closed loop, the default), ``poisson``
  (``requests`` arriving as a Poisson process at ``request_rate_per_s``, as benchmark clients
  with a request rate send them; ``gamma``: gamma gaps of squared coefficient of variation
  ``burstiness``; ``constant``: evenly spaced), ``offline`` (``requests`` all queued at t = 0, as
  throughput benchmarks run them; the metric is over the whole run) or ``static`` (one
  static batch of ``concurrency`` requests, as latency benchmarks run them);
- ``stack``: the serving stack the row was measured on (its batching limits and overheads);
- ``kv_cache``: the KV-cache precision the source states (``fp8``, ``bf16``); empty: the stack's
  default for the checkpoint;
- ``layout``: the parallel layout the source states, in the words engines use: ``TP8``,
  ``TP4 PP2``, ``TP8 EP4`` (attention over 8 chips, experts in 4 groups of 2), ``DEP8``
  (attention data-parallel over 8 chips, experts over the same 8). Empty: the layout the
  search picks for the row's question.

A row at concurrency 1 in a closed loop is predicted in closed form; every other row by an
engine run of its load.

- ``statistic``: which statistic of the metric's distribution ``value`` is: ``mean`` (the
  default) or a percentile ``p50``, ``p90``, ``p95``, ``p99`` (a source that states only a
  median); the closed form has one value for all of them.

Relative error is ``(predicted - measured) / measured``.

Two laws flag rows that no honest parameter set can match, so that they are reported
beside, not hidden inside, the headline error:

- *Single-stream ceiling.* At concurrency 1 without speculative decoding a token needs the
  active weights read once: ``tok/s <= chips * peak bandwidth / active weight bytes``. A
  claim above it needs speculation or a mechanism the profile does not have; the flag says
  how much bandwidth per chip it would take.
- *Closed-loop consistency.* C users each at most ``1 / ITL`` tok/s give
  ``aggregate <= C / ITL``; an aggregate row above the same source's ITL row is inconsistent.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import get_args

import numpy as np

from simulator.analytic.estimate import Estimate, estimate, saturation_concurrency
from simulator.analytic.layouts import LayoutChoice, Question, choose_layout, deploy
from simulator.analytic.placement import Deployment
from simulator.analytic.roofline import deployment_ceiling_tok_s
from simulator.config.base import Precision
from simulator.config.deployment import DeploymentSpec
from simulator.config.files import integer, number, read_csv
from simulator.config.loading import Catalog, ConfigError, validate_data
from simulator.config.scenario import Scenario
from simulator.errors import InfersimError
from simulator.results.summary import RunSummary
from simulator.runner import simulate

METRICS = ("per_user_output_tok_s", "ttft_s", "itl_s", "aggregate_output_tok_s", "e2e_s", "tpot_s")
#: Whether the measured system decoded speculatively: known yes, known no, or not stated.
SPEC_DECODING = ("yes", "none", "unknown")
#: How a row's load was generated (see the module docstring).
LOADS = ("closed", "poisson", "offline", "static", "gamma", "constant")
#: Open loads: ``requests`` arriving at ``request_rate_per_s`` (the engine's arrival process of each).
OPEN_LOADS = ("poisson", "gamma", "constant")
#: Statistics a row's value may be (module docstring).
STATISTICS = ("mean", "p50", "p90", "p95", "p99")
REQUIRED_COLUMNS = (
    "id", "hardware", "chips", "model", "weights", "spec_decoding",
    "input_tokens", "output_tokens", "concurrency", "metric", "value",
)  # fmt: skip
#: Default workload for rows without lengths: a 1k-token prompt and a 1k-token answer
#: (Artificial Analysis's pre-2025 standard prompt length; long enough to be decode-dominated).
DEFAULT_INPUT_TOKENS = 1000
DEFAULT_OUTPUT_TOKENS = 1000

BUNDLED_TABLE = Path(__file__).resolve().parent.parent / "data" / "measurements.csv"


@dataclass(frozen=True)
class MeasurementRow:
    id: str
    hardware: str
    chips: int | None
    model: str
    weights: Precision
    spec_decoding: str
    input_tokens: int
    output_tokens: int
    concurrency: int | None  # None means "max"
    metric: str
    value: float
    claim_type: str = ""
    load: str = "closed"
    request_rate_per_s: float | None = None
    requests: int | None = None
    stack: str | None = None
    layout: dict[str, object] = field(default_factory=dict)
    statistic: str = "mean"
    burstiness: float | None = None  # CV^2 of a gamma load's gaps
    source: str = ""  # where the figure was published (the ``source`` column)
    flag: str = ""  # why an importer doubts the figure (the ``flag`` column): reported apart
    kv_cache: Precision | None = None  # the KV-cache precision the source states (else the stack's default)

    @property
    def single_stream(self) -> bool:
        """One request at a time: the closed form predicts it."""
        return self.concurrency == 1 and self.load in ("closed", "static")


@dataclass(frozen=True)
class RowResult:
    row: MeasurementRow
    predicted: float | None
    reason: str = ""
    family: str = ""  # the hardware's architecture
    model_family: str = ""  # the model's lineage (llama, qwen3, deepseek, gpt-oss, ...)
    moe: bool = False
    bottleneck: str = ""
    flag: str = ""
    served: str = ""  # how the row was run: layout, stack, speculation, context, in words
    other_way: str = ""  # for information only: the prediction with the speculation question answered the other way
    predicted_cv: float | None = None  # with the fits refitted without the row's source (cross_validation)
    cv_reason: str = ""  # why ``predicted_cv`` is None for a predicted row

    @property
    def rel_error(self) -> float | None:
        return _relative(self.predicted, self.row.value)

    @property
    def rel_error_cv(self) -> float | None:
        return _relative(self.predicted_cv, self.row.value)


def _relative(predicted: float | None, measured: float) -> float | None:
    return None if predicted is None else (predicted - measured) / measured


def _int_or_none(text: str, column: str, where: str) -> int | None:
    """An empty cell, or a whole number >= 1."""
    return None if text.strip() == "" else integer(text.strip(), where, column, minimum=1)


_LAYOUT_TERMS = {"TP": "tensor_parallel", "PP": "pipeline_parallel", "EP": "expert_parallel"}


def parse_layout(text: str, where: str) -> dict[str, object]:
    """Deployment fields of a layout in engine words (module docstring), e.g. ``DEP8`` ->
    ``{tensor_parallel: 8, expert_parallel: 8, attention_parallel: data}``; empty -> ``{}``."""
    fields: dict[str, object] = {}
    for term in text.split():
        head, digits = term.rstrip("0123456789"), term[len(term.rstrip("0123456789")) :]
        if not digits or int(digits) < 1 or head not in (*_LAYOUT_TERMS, "DEP"):
            raise ConfigError(f"{where}: layout: expected terms like TP8, PP2, EP4 or DEP8, got {term!r}")
        size = int(digits)
        if head == "DEP":
            fields |= {"tensor_parallel": size, "expert_parallel": size, "attention_parallel": "data"}
        else:
            fields[_LAYOUT_TERMS[head]] = size
    if "expert_parallel" in fields:
        fields.setdefault("attention_parallel", "tensor")
    return fields


def _text(raw: dict[str, str], column: str) -> str:
    """An optional column's text, stripped; empty when the column is absent or blank."""
    return (raw.get(column) or "").strip()


def _check_choice(where: str, column: str, value: str, allowed: Sequence[str], *, or_empty: bool = False) -> None:
    """Raise ConfigError unless ``value`` is one of ``allowed`` (or empty, when ``or_empty``)."""
    if or_empty and not value:
        return
    if value not in allowed:
        empty = " or empty" if or_empty else ""
        raise ConfigError(f"{where}: {column}: expected one of {list(allowed)}{empty}, got {value!r}")


def _unique_id(raw: dict[str, str], where: str, line_number: int, seen: dict[str, int]) -> str:
    """The row's id, recorded in ``seen`` (id -> line); an empty or repeated id raises ConfigError."""
    row_id = raw["id"].strip()
    if not row_id:
        raise ConfigError(f"{where}: id: empty (every row needs an id)")
    if row_id in seen:
        raise ConfigError(f"{where}: id: {row_id!r} is also the id of line {seen[row_id]}; ids must be unique")
    seen[row_id] = line_number
    return row_id


@dataclass(frozen=True)
class _LoadColumns:
    """The checked load columns of one row: the load's kind and what that kind needs."""

    load: str
    concurrency: str
    rate: str
    requests: int | None
    burstiness: str


def _load_columns(raw: dict[str, str], where: str) -> _LoadColumns:
    """The load columns, checked against the load kind (an open load needs a rate and a count, a
    gamma load a burstiness); the closed-load needs are checked by :func:`_check_queued_load`."""
    load = _text(raw, "load") or "closed"
    _check_choice(where, "load", load, LOADS, or_empty=True)
    rate = _text(raw, "request_rate_per_s")
    requests = _int_or_none(raw.get("requests") or "", "requests", where)
    if load in OPEN_LOADS and (not rate or requests is None):
        raise ConfigError(f"{where}: a {load} load needs request_rate_per_s and requests")
    burstiness = _text(raw, "burstiness")
    if load == "gamma" and not burstiness:
        raise ConfigError(f"{where}: burstiness: a gamma load needs it (CV^2 of the gaps)")
    return _LoadColumns(load, raw["concurrency"].strip(), rate, requests, burstiness)


def _check_queued_load(where: str, columns: _LoadColumns) -> None:
    """An offline load needs its request count, a closed or static one its concurrency."""
    if columns.load == "offline" and columns.requests is None:
        raise ConfigError(f"{where}: an offline load needs requests (how many were queued at once)")
    if columns.load in ("closed", "static") and not columns.concurrency:
        raise ConfigError(f"{where}: concurrency: a {columns.load} load needs it (an integer or max)")


def _measurement_row(raw: dict[str, str], where: str, row_id: str) -> MeasurementRow:
    """One checked CSV row as a :class:`MeasurementRow` (the checks run in column order)."""
    _check_choice(where, "metric", raw["metric"], METRICS)
    _check_choice(where, "weights", raw["weights"], get_args(Precision))
    _check_choice(where, "spec_decoding", raw["spec_decoding"], SPEC_DECODING)
    columns = _load_columns(raw, where)
    statistic = _text(raw, "statistic") or "mean"
    kv_cache = _text(raw, "kv_cache")
    _check_choice(where, "kv_cache", kv_cache, get_args(Precision), or_empty=True)
    _check_choice(where, "statistic", statistic, STATISTICS, or_empty=True)
    _check_queued_load(where, columns)
    conc, rate, burstiness = columns.concurrency, columns.rate, columns.burstiness
    return MeasurementRow(
        id=row_id,
        hardware=raw["hardware"].strip(),
        chips=_int_or_none(raw["chips"], "chips", where),
        model=raw["model"].strip(),
        weights=raw["weights"],  # type: ignore[arg-type]
        spec_decoding=raw["spec_decoding"],
        input_tokens=_int_or_none(raw["input_tokens"], "input_tokens", where) or DEFAULT_INPUT_TOKENS,
        output_tokens=_int_or_none(raw["output_tokens"], "output_tokens", where) or DEFAULT_OUTPUT_TOKENS,
        concurrency=None if conc in ("max", "") else _int_or_none(conc, "concurrency", where),
        metric=raw["metric"],
        value=number(raw["value"], where, "value", positive=True),
        claim_type=raw.get("claim_type", ""),
        load=columns.load,
        request_rate_per_s=number(rate, where, "request_rate_per_s", positive=True) if rate else None,
        requests=columns.requests,
        stack=_text(raw, "stack") or None,
        layout=parse_layout(raw.get("layout") or "", where),
        statistic=statistic,
        burstiness=number(burstiness, where, "burstiness", positive=True) if burstiness else None,
        source=_text(raw, "source"),
        flag=_text(raw, "flag"),
        kv_cache=kv_cache or None,  # type: ignore[arg-type]
    )


def read_table(path: Path) -> list[MeasurementRow]:
    """Rows of a measurement CSV; a malformed row raises ConfigError naming file, line and column."""
    _, lines = read_csv(path, REQUIRED_COLUMNS)
    rows: list[MeasurementRow] = []
    seen: dict[str, int] = {}
    for line_number, raw in lines:
        where = f"{path}:{line_number}"
        rows.append(_measurement_row(raw, where, _unique_id(raw, where, line_number, seen)))
    if not rows:
        raise ConfigError(f"{path}: no measurement rows")
    return rows


@functools.cache
def validated_hardware() -> frozenset[str]:
    """Hardware ids the bundled table has at least one measurement row on (read once)."""
    return frozenset(r.hardware for r in read_table(BUNDLED_TABLE))


def hardware_label(hardware_id: str) -> str:
    """The id as ``estimate``, ``compare`` and reports print it: marked ``(unvalidated)`` when the
    bundled table has no measurement row on it (its efficiencies are borrowed, not checked)."""
    return hardware_id if hardware_id in validated_hardware() else f"{hardware_id} (unvalidated)"


#: Metrics the closed form gives under another name (one stream: every gap is one decode step).
_ESTIMATE_ALIAS = {"tpot_s": "itl_s"}


def metric_value(result: Estimate, metric: str) -> float:
    return float(getattr(result, _ESTIMATE_ALIAS.get(metric, metric)))


def _ceiling_flag(row: MeasurementRow, deployment: Deployment) -> str:
    if row.metric != "per_user_output_tok_s" or not row.single_stream or row.spec_decoding == "yes":
        return ""
    ceiling = deployment_ceiling_tok_s(deployment)
    if row.value <= ceiling:
        return ""
    needed = row.value / ceiling * deployment.weights_tier.bandwidth.value
    return (
        f"claim exceeds the single-stream ceiling {ceiling:.0f} tok/s of {deployment.chips} chips at peak "
        f"{deployment.weights_tier.name} bandwidth: needs {needed / 1e12:.1f} TB/s per chip, or speculative "
        f"decoding (spec_decoding: {row.spec_decoding})"
    )


def _setup(r: MeasurementRow) -> tuple[object, ...]:
    """What two rows must share to be measurements of the same closed-loop run."""
    return (r.hardware, r.model, r.chips, r.weights, r.input_tokens, r.output_tokens, r.concurrency, r.load)


def _above_itl_bound(r: MeasurementRow, itl: MeasurementRow | None) -> str:
    """The flag of an aggregate row above ``C / ITL`` of its run's ITL row ``itl``; else empty."""
    if r.metric != "aggregate_output_tok_s" or not itl or not r.concurrency:
        return ""
    bound = r.concurrency / itl.value
    if r.value > bound:
        return f"inconsistent with {itl.id}: C / ITL = {bound:.0f} tok/s < {r.value:.4g}"
    return ""


def consistency_flags(rows: Sequence[MeasurementRow]) -> dict[str, str]:
    """Aggregate rows above ``C / ITL`` of a matching ITL row, by row id."""
    closed = [r for r in rows if r.load == "closed" and r.concurrency]
    itl = {_setup(r): r for r in closed if r.metric == "itl_s"}
    flags = {}
    for r in closed:
        flag = _above_itl_bound(r, itl.get(_setup(r)))
        if flag:
            flags[r.id] = flag
    return flags


#: An offline or open-loop row's engine run sends at most ``ENGINE_REQUESTS_PER_SLOT`` requests
#: per slot of the row's batch (its concurrency, else the saturation one), and never fewer than
#: ``MIN_ENGINE_REQUESTS`` (every row that states up to 3,000 runs them all). Beyond a few batches
#: the run is in its steady state and the edges (the first fill, the last drain, about a batch
#: each) weigh ``batch / requests``: of MLPerf's 124,080 offline requests of H034 (batch 1,352)
#: the first 4,000, 8,000 and 10,816 give 8,844, 8,855 and 8,827 tok/s (within 0.3 %), at about
#: 0.3 ms of CPU and 80 kB of memory per simulated request (all of them: 40 s and 10 GB).
ENGINE_REQUESTS_PER_SLOT = 8
MIN_ENGINE_REQUESTS = 3000

#: Engine runs for loaded rows, in request durations: two to warm up, then four measured.
WARMUP_REQUEST_DURATIONS = 2.0
MEASURED_REQUEST_DURATIONS = 4.0

#: Where a measured metric is in an engine run's summary.
_SUMMARY_METRIC = {
    "ttft_s": "ttft_s.mean",
    "itl_s": "itl_s.mean",
    "e2e_s": "e2e_s.mean",
    "per_user_output_tok_s": "per_user_output_tok_s.mean",
    "aggregate_output_tok_s": "output_tok_s",
    "tpot_s": "tpot_s.mean",
}


def loaded_scenario(
    row: MeasurementRow, users: int, request_s: float, deployment: dict[str, object] | None = None
) -> Scenario:
    """The load that reproduces a measurement, with the row's lengths (module docstring).

    ``closed``: ``users`` start spread over one request duration (as a benchmark's clients drift
    apart); the run lasts six request durations, the first two of them warm-up, without drain.
    ``poisson``, ``offline`` and ``static`` send exactly their requests (at most
    :data:`ENGINE_REQUESTS_PER_SLOT` per slot of the batch) and run until the last
    completes, every request measured (as the benchmarks report them).
    """
    data: dict[str, object] = {
        "name": f"validate-{row.id}",
        "deployment": deployment or row_deployment(row),
        "requests": {
            "input_tokens": {"dist": "constant", "value": row.input_tokens},
            "output_tokens": {"dist": "constant", "value": row.output_tokens},
        },
    }
    if row.load in OPEN_LOADS:
        assert row.request_rate_per_s is not None and row.requests is not None
        arrivals: dict[str, object] = {"process": row.load, "rate_per_s": row.request_rate_per_s}
        if row.load == "gamma":
            arrivals["burstiness"] = row.burstiness
        data["load"] = {"kind": "open", "arrivals": arrivals}
        data["run"] = {"seed": 0, "max_requests": row.requests}
    elif row.load in ("offline", "static"):
        count = row.requests if row.load == "offline" else users
        assert count is not None
        data["load"] = {"kind": "closed", "users": count}
        data["run"] = {"seed": 0, "max_requests": count}
        if row.load == "static":
            data["scheduler"] = {"policy": "static"}
    else:
        data["load"] = {"kind": "closed", "users": users, "start_spread": f"{request_s} s"}
        data["run"] = {
            "seed": 0,
            "duration": f"{(WARMUP_REQUEST_DURATIONS + MEASURED_REQUEST_DURATIONS) * request_s} s",
            "warmup": f"{WARMUP_REQUEST_DURATIONS * request_s} s",
            "drain": False,
        }
    return validate_data(Scenario, data, f"row {row.id}")  # a row beyond the schema's bounds: a reason, not a crash


def row_deployment(row: MeasurementRow, catalog: Catalog | None = None) -> dict[str, object]:
    """The deployment a row was measured on: its hardware, model, chips, precision, stack and layout, the
    speculation its stack is documented to run (``spec_decoding``), and a context window long
    enough for its requests (a row measured beyond the model's window was served with a longer one)."""
    fields: dict[str, object] = {"hardware": row.hardware, "model": row.model, "chips": row.chips,
                                 "weights": row.weights, "stack": row.stack, **row.layout}  # fmt: skip
    if row.kv_cache is not None:
        fields["kv_cache"] = row.kv_cache
    if catalog is None:
        return fields
    hardware, model = catalog.hardware(row.hardware), catalog.model(row.model)
    if row.layout and model.moe is not None and "expert_parallel" not in row.layout:
        fields |= {"expert_parallel": 1, "attention_parallel": "tensor"}  # engines' "TP8": experts split too
    stack = catalog.stack(row.stack or hardware.execution.default_stack)
    speculation = stack.speculation_for(row.model, row.spec_decoding)
    if speculation is not None:
        fields["speculative"] = speculation.model_dump(exclude_none=True)
    if row.input_tokens + row.output_tokens > model.max_context_tokens:
        fields["context_tokens"] = row.input_tokens + row.output_tokens
    return fields


def _pinned(fields: dict[str, object], d: Deployment) -> dict[str, object]:
    """The row's deployment with the layout the closed form chose pinned, so the engine runs it."""
    layout: dict[str, object] = {"chips": d.chips, "tensor_parallel": d.tensor_parallel * d.attention_dp,
                                 "pipeline_parallel": d.pipeline_parallel}  # fmt: skip
    if d.model.moe is not None:
        layout |= {"expert_parallel": d.expert_parallel,
                   "attention_parallel": "data" if d.attention_dp > 1 else "tensor"}  # fmt: skip
    return fields | layout


def served(d: Deployment, fields: dict[str, object]) -> str:
    """How a row was run, in words: layout, stack, speculation, context."""
    words = [f"{d.chips} x {d.layout} on {d.stack.id}"]
    spec = d.speculative
    if spec is not None:
        documented = d.stack.speculation
        source = f" (documented: {d.stack.id} {documented.source})" if documented is not None else ""
        words.append(f"speculative: {spec.draft_model or spec.draft} drafts {spec.tokens_proposed} tokens{source}")
    if "context_tokens" in fields:
        words.append(f"context extended to {fields['context_tokens']:,} tokens")
    return "; ".join(words)


#: Engine runs by their scenario (its JSON without the name), for rows run against one catalog.
Runs = dict[str, RunSummary]


def _engine_value(
    row: MeasurementRow,
    users: int,
    request_s: float,
    catalog: Catalog,
    deployment: dict[str, object],
    runs: Runs | None = None,
) -> float:
    """The row's metric from an engine run of its load; a run already in ``runs`` (the same
    scenario on the same catalog: another metric of one measured run) is not run again."""
    scenario = loaded_scenario(row, users, request_s, deployment)
    key = scenario.model_dump_json(exclude={"name"})
    summary = None if runs is None else runs.get(key)
    if summary is None:
        summary = simulate(scenario, catalog).summary
        if runs is not None:
            runs[key] = summary
    path = _SUMMARY_METRIC[row.metric]
    return summary.metric(path.replace(".mean", f".{row.statistic}"))


def _engine_row(row: MeasurementRow, concurrency: int) -> MeasurementRow:
    """The row as its engine run simulates it: an offline or open-loop row's requests capped at
    ``max(MIN_ENGINE_REQUESTS, ENGINE_REQUESTS_PER_SLOT x concurrency)``; else the row itself."""
    cap = max(MIN_ENGINE_REQUESTS, ENGINE_REQUESTS_PER_SLOT * concurrency)
    if row.load in ("offline", *OPEN_LOADS) and row.requests is not None and row.requests > cap:
        return replace(row, requests=cap)
    return row


def row_question(row: MeasurementRow) -> Question:
    """What a row's layout is chosen for: its lengths, and its concurrency in a closed loop (else saturation)."""
    return Question(row.input_tokens, row.output_tokens, row.concurrency if row.load == "closed" else None)


def row_layouts(row: MeasurementRow, catalog: Catalog) -> LayoutChoice:
    """The layouts tried for a row's deployment (:func:`row_deployment`) and the one it is predicted
    on (the first): every layout that places, scored for :func:`row_question`."""
    return choose_layout(catalog, DeploymentSpec.model_validate(row_deployment(row, catalog)), row_question(row))


def predict_row(row: MeasurementRow, catalog: Catalog, runs: Runs | None = None) -> RowResult:
    """The model's prediction for one row, or the reason it has none.

    Concurrency 1 in a closed loop: the closed-form estimate. Anything else: an engine run of the
    row's load (:func:`loaded_scenario`); ``runs`` holds the runs made against ``catalog`` so far,
    so rows that are metrics of one measured run share one (a scenario's name changes no result).
    """
    try:
        hardware = catalog.hardware(row.hardware)
        fields = row_deployment(row, catalog)
        question = row_question(row)
        deployment = row_layouts(row, catalog).deployment
        concurrency = row.concurrency or saturation_concurrency(deployment, row.input_tokens, row.output_tokens)
        result = estimate(deployment, row.input_tokens, row.output_tokens, concurrency)
        predicted = metric_value(result, row.metric)
        simulated = _engine_row(row, concurrency)
        if not row.single_stream:
            predicted = _engine_value(simulated, concurrency, result.e2e_s, catalog, _pinned(fields, deployment), runs)
    except InfersimError as exc:  # the row asks for what the deployment cannot serve: reported, not dropped
        return RowResult(row, None, reason=str(exc).splitlines()[0])
    return RowResult(
        row,
        predicted,
        family=hardware.family,
        model_family=model_family(row.model),
        moe=deployment.model.moe is not None,
        bottleneck=result.bottleneck,
        flag=row.flag or ("" if deployment.speculative else _ceiling_flag(row, deployment)),
        served=served(deployment, fields)
        + (f"; first {simulated.requests:,} of {row.requests:,} requests simulated" if simulated is not row else ""),
        other_way=_other_way(row, fields, question, catalog),
    )


def _other_way(row: MeasurementRow, fields: dict[str, object], question: Question, catalog: Catalog) -> str:
    """A single-stream row's prediction had its speculation been decided the other way (information
    only: the error statistics never choose between the two)."""
    if not row.single_stream or row.spec_decoding == "none":
        return ""
    hardware = catalog.hardware(row.hardware)
    stack = catalog.stack(row.stack or hardware.execution.default_stack)
    if "speculative" in fields:
        other, label = {k: v for k, v in fields.items() if k != "speculative"}, "without speculation"
    elif stack.speculation is not None and stack.speculation.default is not None:
        other = fields | {"speculative": stack.speculation.default.model_dump(exclude_none=True)}
        label = "with the stack's default speculation"
    else:
        return ""
    try:
        d = deploy(catalog, DeploymentSpec.model_validate(other), question)
        value = metric_value(estimate(d, row.input_tokens, row.output_tokens, 1), row.metric)
    except InfersimError:
        return ""
    return f"{label}: {value:.4g}"


#: The cyclic garbage collector's young-generation threshold while rows are predicted (Python's
#: default: 700 net allocations of tracked objects between collections). An engine run makes and
#: drops millions of small objects (events, requests, batches), nearly all freed at once by
#: reference counting; at 700 the collector scanned them about 2,800 times in 40 engine rows of the
#: bundled table and took 16 % of the CPU (pure Python, start-up objects frozen as the command line
#: does); at 50,000, 26 times and 2.5 %. The reference cycles it still finds wait for 50,000 more
#: objects (a few MB). Collection frees memory and changes no result.
ROWS_GC_THRESHOLD = 50_000


@contextmanager
def collecting_rarely() -> Iterator[None]:
    """The block runs with the young-generation threshold at :data:`ROWS_GC_THRESHOLD` (the older
    generations' as they are); the thresholds before it are restored after."""
    before = gc.get_threshold()
    gc.set_threshold(ROWS_GC_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def validate(rows: Sequence[MeasurementRow], catalog: Catalog) -> list[RowResult]:
    """Predict every row (collecting rarely: :func:`collecting_rarely`); attach the consistency
    flags of the table to the rows they concern."""
    flags = consistency_flags(rows)
    runs: Runs = {}
    with collecting_rarely():
        results = [predict_row(row, catalog, runs) for row in rows]
    return [replace(r, flag=r.flag or flags.get(r.row.id, "")) for r in results]


def _stats(errors: list[float]) -> dict[str, float | int]:
    absolute = np.abs(np.asarray(errors))
    return {
        "rows": len(errors),
        "median_abs_rel_error": float(np.median(absolute)) if errors else float("nan"),
        "p90_abs_rel_error": float(np.percentile(absolute, 90)) if errors else float("nan"),
    }


def _errors(results: Sequence[RowResult]) -> list[float]:
    return [r.rel_error for r in results if r.rel_error is not None]


def _cv_errors(results: Sequence[RowResult]) -> list[float]:
    return [r.rel_error_cv for r in results if r.rel_error_cv is not None]


def _both(results: Sequence[RowResult], cv: bool) -> dict[str, float | int]:
    """Plain statistics, and with ``cv`` the cross-validated ones beside them (keys ending ``_cv``)."""
    plain = _stats(_errors(results))
    if not cv:
        return plain
    return plain | {f"{k}_cv": v for k, v in _stats(_cv_errors(results)).items()}


def model_family(model_id: str) -> str:
    """A model id's lineage: its first word and the words after it up to the first that holds a
    digit (``llama-3.1-8b`` -> ``llama``, ``gpt-oss-120b`` -> ``gpt-oss``, ``qwen3-32b`` -> ``qwen3``)."""
    first, *rest = model_id.split("-")
    words = [first]
    for word in rest:
        if any(ch.isdigit() for ch in word):
            break
        words.append(word)
    return "-".join(words)


def _grouped(
    results: Sequence[RowResult], key: Callable[[RowResult], str], cv: bool
) -> dict[str, dict[str, float | int]]:
    groups = sorted({key(r) for r in results})
    return {g: _both([r for r in results if key(r) == g], cv) for g in groups}


def summarize(results: Sequence[RowResult], cv: bool = False) -> dict[str, object]:
    """Median and 90th-percentile absolute relative error: all rows, unflagged rows, per architecture,
    per model family, and MoE against dense models; with ``cv`` also those of the cross-validated
    predictions (``*_cv`` keys: over the rows that have one) and the rows without one."""
    predicted = [r for r in results if r.rel_error is not None]
    unflagged = [r for r in predicted if not r.flag]
    summary: dict[str, object] = {
        "overall": _both(predicted, cv),
        "unflagged": _both(unflagged, cv),
        "by_architecture": _grouped(predicted, _family, cv),
        "by_model_family": _grouped(predicted, _model_family, cv),
        "by_model_kind": _grouped(predicted, _model_kind, cv),
        "flagged": [{"id": r.row.id, "flag": r.flag} for r in predicted if r.flag],
        "unpredicted": _unpredicted(results),
    }
    if cv:
        summary["not_cross_validated"] = _not_cross_validated(predicted)
    return summary


def _family(r: RowResult) -> str:
    return r.family


def _model_family(r: RowResult) -> str:
    return r.model_family


def _model_kind(r: RowResult) -> str:
    """``moe`` or ``dense``."""
    return "moe" if r.moe else "dense"


def _unpredicted(results: Sequence[RowResult]) -> list[dict[str, str]]:
    """The rows without a prediction, each with the reason."""
    return [{"id": r.row.id, "reason": r.reason} for r in results if r.predicted is None]


def _not_cross_validated(predicted: Sequence[RowResult]) -> list[dict[str, str]]:
    """The predicted rows without a cross-validated prediction, each with the reason."""
    return [{"id": r.row.id, "reason": r.cv_reason} for r in predicted if r.predicted_cv is None]
