"""Simulated against measured, request by request, for an imported run with per-request data.

The import's trace (one single-call task per measured request, in the order sent) is replayed
through the engine on the imported deployment with the import's seed; simulated request ``i``
is task ``i`` (tasks are numbered in arrival order, ties in trace order), so each measured
request meets its own simulation. Per metric (TTFT, TPOT, E2E; definitions of
:mod:`simulator.results.metrics`) the comparison reports, over requests measured and
simulated both:

- ``bias_s``: mean of ``simulated - measured`` (the signed error: late or early on average);
- ``median_abs_error_s`` and ``p90_abs_error_s``: of ``|simulated - measured|`` per request;
- both distributions' p50 and p90, so a user sees *where* the simulator is off (a right
  shift of the whole CDF, or only its tail), not only by how much.

Where the measured file had no send times the trace's arrivals were drawn from the stated
load, so per-request errors include that draw; the distributions remain comparable.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simulator.config.files import number, read_csv
from simulator.config.loading import Catalog
from simulator.config.scenario import Scenario
from simulator.errors import ConfigError
from simulator.io.importers.common import FloatArray
from simulator.runner import simulate
from simulator.studies.validation import MeasurementRow, parse_layout, row_deployment

COMPARED = ("ttft_s", "tpot_s", "e2e_s")


@dataclass(frozen=True)
class Comparison:
    run_id: str
    served: str  # the deployment, in words
    measured: dict[str, FloatArray]  # metric -> per request (NaN: not measured)
    simulated: dict[str, FloatArray]  # metric -> per request (NaN: not served, or undefined)

    @property
    def requests(self) -> int:
        return len(self.measured["ttft_s"])

    def errors(self, metric: str) -> FloatArray:
        both = np.isfinite(self.measured[metric]) & np.isfinite(self.simulated[metric])
        return (self.simulated[metric] - self.measured[metric])[both]

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"requests": self.requests, "served": self.served}
        for metric in COMPARED:
            errors = self.errors(metric)
            measured, simulated = (a[np.isfinite(a)] for a in (self.measured[metric], self.simulated[metric]))
            out[metric] = {
                "compared": int(errors.size),
                "measured_p50": _quantile(measured, 50),
                "measured_p90": _quantile(measured, 90),
                "simulated_p50": _quantile(simulated, 50),
                "simulated_p90": _quantile(simulated, 90),
                "bias_s": float(errors.mean()) if errors.size else math.nan,
                "median_abs_error_s": _quantile(np.abs(errors), 50),
                "p90_abs_error_s": _quantile(np.abs(errors), 90),
            }
        return out


def _quantile(values: FloatArray, q: float) -> float:
    return float(np.percentile(values, q)) if values.size else math.nan


def _measured(path: Path) -> dict[str, FloatArray]:
    _, lines = read_csv(path, ("request", "input_tokens", "output_tokens", *COMPARED))
    columns: dict[str, list[float]] = {m: [] for m in (*COMPARED, "input_tokens", "output_tokens")}
    for line, raw in lines:
        for name, values in columns.items():
            text = raw[name].strip()
            values.append(number(text, f"{path}:{line}", name, minimum=0.0) if text else math.nan)
    return {name: np.array(values) for name, values in columns.items()}


def scenario(entry: dict[str, Any], folder: Path, measured: dict[str, FloatArray], catalog: Catalog) -> Scenario:
    """The replay: the import's deployment, its trace, its seed, every request run to completion."""
    d = entry["deployment"]
    row = MeasurementRow(
        id=str(entry["id"]),
        hardware=d["hardware"],
        chips=d["chips"],
        model=d["model"],
        weights=d["weights"],
        spec_decoding=d["spec_decoding"],
        input_tokens=int(np.nanmax(measured["input_tokens"])),
        output_tokens=int(np.nanmax(measured["output_tokens"])),
        concurrency=None,
        metric="ttft_s",
        value=1.0,
        stack=d["stack"] or None,
        layout=parse_layout(d["layout"], f"{folder}: run {entry['id']}"),
    )
    fields = {k: v for k, v in row_deployment(row, catalog).items() if v is not None}
    return Scenario.model_validate(
        {
            "name": f"replay-{entry['id']}",
            "deployment": fields,
            "load": {"kind": "trace", "format": "taskgraph", "path": str((folder / entry["trace"]).resolve())},
            "run": {"seed": int(entry["seed"]), "max_requests": len(measured["ttft_s"])},
        }
    )


def compare_run(entry: dict[str, Any], folder: Path, catalog: Catalog) -> Comparison:
    """Replay one imported run and pair each simulated request with its measured one."""
    for key in ("id", "deployment", "trace", "measured", "seed"):
        if key not in entry:
            raise ConfigError(f"{key}: missing (expected a run written by infersim import)")
    measured = _measured(folder / entry["measured"])
    result = simulate(scenario(entry, folder, measured, catalog), catalog)
    count = len(measured["ttft_s"])
    simulated = {m: np.full(count, math.nan) for m in COMPARED}
    for req in result.records.request_chunks():  # every row, kept or streamed
        served = (req["dropped"] == 0) & np.isfinite(req["done_s"]) & (req["task"] >= 0) & (req["task"] < count)
        index = req["task"][served].astype(int)
        first, done, arrival = req["first_token_s"][served], req["done_s"][served], req["arrival_s"][served]
        n_out = req["output_tokens"][served]
        simulated["ttft_s"][index] = first - arrival
        simulated["e2e_s"][index] = done - arrival
        with np.errstate(divide="ignore", invalid="ignore"):
            simulated["tpot_s"][index] = np.where(n_out > 1, (done - first) / (n_out - 1), math.nan)
    words = f"{entry['deployment']['hardware']} x {entry['deployment']['model']}"
    return Comparison(str(entry["id"]), words, {m: measured[m] for m in COMPARED}, simulated)


def comparison_csv(comparison: Comparison) -> str:
    """One line per request: measured and simulated TTFT, TPOT and E2E (seconds)."""
    header = ["request"] + [f"{kind}_{m}" for m in COMPARED for kind in ("measured", "simulated")]
    lines = [",".join(header)]
    for i in range(comparison.requests):
        cells = [v for m in COMPARED for v in (comparison.measured[m][i], comparison.simulated[m][i])]
        lines.append(",".join([str(i), *("" if math.isnan(c) else f"{c:.9g}" for c in cells)]))
    return "\n".join(lines) + "\n"


def summary_rows(comparison: Comparison) -> list[list[str]]:
    out = []
    summary = comparison.summary()
    for metric in COMPARED:
        s = summary[metric]
        out.append(
            [
                metric,
                *(
                    f"{s[k]:.4g}"
                    for k in ("measured_p50", "simulated_p50", "bias_s", "median_abs_error_s", "p90_abs_error_s")
                ),
            ]
        )
    return out


def cdf_figure(comparison: Comparison) -> bytes:
    """PNG of the measured and simulated CDFs of TTFT, TPOT and E2E, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(COMPARED), figsize=(4 * len(COMPARED), 3.2))
    for ax, metric in zip(axes, COMPARED, strict=True):
        for kind, values in (("measured", comparison.measured[metric]), ("simulated", comparison.simulated[metric])):
            finite = np.sort(values[np.isfinite(values)])
            if finite.size:
                ax.step(finite, np.arange(1, finite.size + 1) / finite.size, where="post", label=kind)
        ax.set_xlabel(f"{metric} (s)")
        ax.set_ylabel("fraction of requests")
        ax.legend()
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    return buffer.getvalue()
