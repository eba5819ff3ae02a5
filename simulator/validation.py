"""Predict every row of a measurement table and report the error.

The table's columns are those of the bundled ``data/measurements.csv``: ``metric`` is one of
:data:`METRICS`; ``concurrency`` is an integer or ``max`` (saturated: the largest batch the
KV budget and batch cap allow). An empty ``chips`` means the automatic placement; empty
``input_tokens`` / ``output_tokens`` mean the documented default workload
(:data:`DEFAULT_INPUT_TOKENS`, :data:`DEFAULT_OUTPUT_TOKENS`). A row that cannot be predicted
is returned with its reason, never dropped.

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

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import get_args

import numpy as np

from simulator.analytic.estimate import Estimate, estimate, saturation_concurrency
from simulator.analytic.placement import Deployment, PlacementError, plan
from simulator.analytic.roofline import deployment_ceiling_tok_s
from simulator.config.base import Precision
from simulator.config.deployment import DeploymentSpec
from simulator.config.files import integer, number, read_csv
from simulator.config.loading import Catalog, ConfigError
from simulator.config.scenario import Scenario
from simulator.runner import simulate

METRICS = ("per_user_output_tok_s", "ttft_s", "itl_s", "aggregate_output_tok_s", "e2e_s")
#: Whether the measured system decoded speculatively: known yes, known no, or not stated.
SPEC_DECODING = ("yes", "none", "unknown")
REQUIRED_COLUMNS = (
    "id", "hardware", "chips", "model", "weights", "spec_decoding",
    "input_tokens", "output_tokens", "concurrency", "metric", "value",
)  # fmt: skip
#: Default workload for rows without lengths: a 1k-token prompt and a 1k-token answer
#: (Artificial Analysis's pre-2025 standard prompt length; long enough to be decode-dominated).
DEFAULT_INPUT_TOKENS = 1000
DEFAULT_OUTPUT_TOKENS = 1000

BUNDLED_TABLE = Path(__file__).resolve().parent / "data" / "measurements.csv"


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


@dataclass(frozen=True)
class RowResult:
    row: MeasurementRow
    predicted: float | None
    reason: str = ""
    family: str = ""
    bottleneck: str = ""
    flag: str = ""

    @property
    def rel_error(self) -> float | None:
        if self.predicted is None:
            return None
        return (self.predicted - self.row.value) / self.row.value


def _int_or_none(text: str, column: str, where: str) -> int | None:
    """An empty cell, or a whole number >= 1."""
    return None if text.strip() == "" else integer(text.strip(), where, column, minimum=1)


def read_table(path: Path) -> list[MeasurementRow]:
    """Rows of a measurement CSV; a malformed row raises ConfigError naming file, line and column."""
    _, lines = read_csv(path, REQUIRED_COLUMNS)
    rows: list[MeasurementRow] = []
    seen: dict[str, int] = {}
    for line_number, raw in lines:
        where = f"{path}:{line_number}"
        row_id = raw["id"].strip()
        if not row_id:
            raise ConfigError(f"{where}: id: empty (every row needs an id)")
        if row_id in seen:
            raise ConfigError(f"{where}: id: {row_id!r} is also the id of line {seen[row_id]}; ids must be unique")
        seen[row_id] = line_number
        if raw["metric"] not in METRICS:
            raise ConfigError(f"{where}: metric: expected one of {list(METRICS)}, got {raw['metric']!r}")
        if raw["weights"] not in get_args(Precision):
            raise ConfigError(f"{where}: weights: expected one of {list(get_args(Precision))}, got {raw['weights']!r}")
        if raw["spec_decoding"] not in SPEC_DECODING:
            raise ConfigError(
                f"{where}: spec_decoding: expected one of {list(SPEC_DECODING)}, got {raw['spec_decoding']!r}"
            )
        conc = raw["concurrency"].strip()
        rows.append(
            MeasurementRow(
                id=row_id,
                hardware=raw["hardware"].strip(),
                chips=_int_or_none(raw["chips"], "chips", where),
                model=raw["model"].strip(),
                weights=raw["weights"],  # type: ignore[arg-type]
                spec_decoding=raw["spec_decoding"],
                input_tokens=_int_or_none(raw["input_tokens"], "input_tokens", where) or DEFAULT_INPUT_TOKENS,
                output_tokens=_int_or_none(raw["output_tokens"], "output_tokens", where) or DEFAULT_OUTPUT_TOKENS,
                concurrency=None if conc == "max" else _int_or_none(conc, "concurrency", where),
                metric=raw["metric"],
                value=number(raw["value"], where, "value", positive=True),
                claim_type=raw.get("claim_type", ""),
            )
        )
    if not rows:
        raise ConfigError(f"{path}: no measurement rows")
    return rows


def metric_value(result: Estimate, metric: str) -> float:
    return float(getattr(result, metric))


def _ceiling_flag(row: MeasurementRow, deployment: Deployment) -> str:
    if row.metric != "per_user_output_tok_s" or row.concurrency != 1 or row.spec_decoding == "yes":
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


def consistency_flags(rows: Sequence[MeasurementRow]) -> dict[str, str]:
    """Aggregate rows above ``C / ITL`` of a matching ITL row, by row id."""

    def key(r: MeasurementRow) -> tuple[object, ...]:
        return (r.hardware, r.model, r.chips, r.weights, r.input_tokens, r.output_tokens, r.concurrency)

    itl = {key(r): r for r in rows if r.metric == "itl_s" and r.concurrency}
    flags = {}
    for r in rows:
        match = itl.get(key(r))
        if r.metric == "aggregate_output_tok_s" and match and r.concurrency:
            bound = r.concurrency / match.value
            if r.value > bound:
                flags[r.id] = f"inconsistent with {match.id}: C / ITL = {bound:.0f} tok/s < {r.value:.4g}"
    return flags


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
}


def loaded_scenario(row: MeasurementRow, users: int, request_s: float) -> Scenario:
    """The closed loop that reproduces a loaded measurement: C users, the row's lengths.

    Users start spread over one request duration (as a benchmark's clients drift apart); the
    run lasts six request durations, the first two of them warm-up, without drain.
    """
    return Scenario.model_validate({
        "name": f"validate-{row.id}",
        "deployment": {"hardware": row.hardware, "model": row.model, "chips": row.chips, "weights": row.weights},
        "load": {"kind": "closed", "users": users, "start_spread": f"{request_s} s"},
        "requests": {
            "input_tokens": {"dist": "constant", "value": row.input_tokens},
            "output_tokens": {"dist": "constant", "value": row.output_tokens},
        },
        "run": {
            "seed": 0,
            "duration": f"{(WARMUP_REQUEST_DURATIONS + MEASURED_REQUEST_DURATIONS) * request_s} s",
            "warmup": f"{WARMUP_REQUEST_DURATIONS * request_s} s",
            "drain": False,
        },
    })  # fmt: skip


def _engine_value(row: MeasurementRow, users: int, request_s: float, catalog: Catalog) -> float:
    summary = simulate(loaded_scenario(row, users, request_s), catalog).summary
    return summary.metric(_SUMMARY_METRIC[row.metric])


def predict_row(row: MeasurementRow, catalog: Catalog) -> RowResult:
    """The model's prediction for one row, or the reason it has none.

    Concurrency 1: the closed-form estimate. Higher or ``max``: an engine run (closed loop).
    """
    try:
        hardware = catalog.hardware(row.hardware)
        model = catalog.model(row.model)
        spec = DeploymentSpec(hardware=row.hardware, model=row.model, chips=row.chips, weights=row.weights)
        deployment = plan(hardware, model, spec)
    except (ConfigError, PlacementError) as exc:
        return RowResult(row, None, reason=str(exc).splitlines()[0])
    concurrency = row.concurrency or saturation_concurrency(deployment, row.input_tokens, row.output_tokens)
    result = estimate(deployment, row.input_tokens, row.output_tokens, concurrency)
    predicted = metric_value(result, row.metric)
    if concurrency > 1:
        predicted = _engine_value(row, concurrency, result.e2e_s, catalog)
    return RowResult(
        row,
        predicted,
        family=hardware.family,
        bottleneck=result.bottleneck,
        flag=_ceiling_flag(row, deployment),
    )


def validate(rows: Sequence[MeasurementRow], catalog: Catalog) -> list[RowResult]:
    """Predict every row; attach the consistency flags of the table to the rows they concern."""
    flags = consistency_flags(rows)
    results = [predict_row(row, catalog) for row in rows]
    return [replace(r, flag=r.flag or flags.get(r.row.id, "")) for r in results]


def _stats(errors: list[float]) -> dict[str, float | int]:
    absolute = np.abs(np.asarray(errors))
    return {
        "rows": len(errors),
        "median_abs_rel_error": float(np.median(absolute)) if errors else float("nan"),
        "p90_abs_rel_error": float(np.percentile(absolute, 90)) if errors else float("nan"),
    }


def _errors(results: Sequence[RowResult], family: str | None = None) -> list[float]:
    return [r.rel_error for r in results if r.rel_error is not None and family in (None, r.family)]


def summarize(results: Sequence[RowResult]) -> dict[str, object]:
    """Median and 90th-percentile absolute relative error: all rows, unflagged rows, per architecture."""
    predicted = [r for r in results if r.rel_error is not None]
    unflagged = [r for r in predicted if not r.flag]
    families = sorted({r.family for r in predicted})
    return {
        "overall": _stats(_errors(predicted)),
        "unflagged": _stats(_errors(unflagged)),
        "by_architecture": {fam: _stats(_errors(predicted, fam)) for fam in families},
        "flagged": [{"id": r.row.id, "flag": r.flag} for r in predicted if r.flag],
        "unpredicted": [{"id": r.row.id, "reason": r.reason} for r in results if r.predicted is None],
    }
