"""Imported runs as measurement rows (the ``validate`` table's columns) and as replay traces.

**Rows.** One row per metric a run states, among ``ttft_s``, ``tpot_s``, ``itl_s``, ``e2e_s``,
``per_user_output_tok_s`` and ``aggregate_output_tok_s`` (the run's output tokens per second).
``value`` is the mean (``statistic: mean``), or the median where the file has no mean
(``statistic: p50``); the other statistics the file states sit in their own columns
(:data:`STAT_COLUMNS`, SI units), for information. ``flag`` says which law the run's
figures break, if any (:mod:`simulator.io.importers.checks`): the row is kept, to be reported
apart from the unflagged ones. Lengths are the run's mean prompt and
answer (rounded): a row runs every request at those lengths, so a run whose lengths vary
(ShareGPT, random ranges) is approximated, and its notes say so; the replay trace keeps
each request's lengths. What the file does not say (hardware, chips, layout, stack,
weights, speculation, replicas) is the caller's :class:`Deployment`.

**Replicas.** ``replicas = N`` identical replicas behind a load balancer that picks one at
random (Kubernetes Services, kube-proxy): each replica receives a random 1/N thinning of
the arrivals, again Poisson (or, for near-periodic arrivals, near-periodic at rate/N). A row
describes one replica: rate / N, requests / N, clients / N (which must divide), and the
aggregate throughput / N.

**Trace.** A run with per-request data becomes a task-graph trace (:mod:`simulator.io.taskgraph`),
one single-call task per request in the order sent, each at its recorded send time or, when
the file has none, at a time drawn from the run's load with ``seed`` (a file without send
times cannot give the real ones: per-request TTFTs then differ by the arrival draw too).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from simulator.errors import ConfigError
from simulator.io.importers.common import STAT_NAMES, FloatArray, ImportedRun, Load

#: Table metric -> the run's metric it comes from.
# Laid out by hand as a table (rows of entries), so the formatter leaves it as it is.
ROW_METRICS = {"ttft_s": "ttft_s", "tpot_s": "tpot_s", "itl_s": "itl_s", "e2e_s": "e2e_s",
               "per_user_output_tok_s": "per_user_output_tok_s", "aggregate_output_tok_s": "output_tok_s"}  # fmt: skip
STAT_COLUMNS = tuple(n for n in STAT_NAMES if n != "mean")
# Laid out by hand as a table (rows of entries), so the formatter leaves it as it is.
COLUMNS = (
    "id", "hardware", "chips", "model", "weights", "spec_decoding", "input_tokens", "output_tokens", "concurrency",
    "metric", "value", "claim_type", "measured_by", "date", "source", "notes", "stack", "load",
    "request_rate_per_s", "requests", "layout", "burstiness", "statistic", *STAT_COLUMNS, "flag",
)  # fmt: skip


@dataclass(frozen=True)
class Deployment:
    """What the result file cannot say, from the command line."""

    hardware: str
    model: str
    weights: str
    chips: int | None = None
    layout: str = ""
    stack: str = ""
    spec_decoding: str = "none"
    replicas: int = 1


def per_replica(load: Load, replicas: int, where: str) -> Load:
    """The load one of ``replicas`` random-routed replicas receives (module docstring)."""
    if replicas == 1:
        return load
    if load.kind == "closed":
        assert load.concurrency is not None
        if load.concurrency % replicas:
            raise ConfigError(
                f"{where}: max_concurrency {load.concurrency} clients do not split evenly over {replicas} replicas"
            )
        return Load("closed", concurrency=load.concurrency // replicas)
    assert load.requests is not None
    requests = max(1, round(load.requests / replicas))
    rate = None if load.rate_per_s is None else load.rate_per_s / replicas
    return Load(load.kind, requests=requests, rate_per_s=rate, cv2=load.cv2)


def _cell(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def rows(run: ImportedRun, deployment: Deployment, run_id: str) -> list[dict[str, str]]:
    """The run's measurement rows (module docstring); none when its load cannot be reproduced."""
    if run.load is None:
        return []
    load = per_replica(run.load, deployment.replicas, run.source)
    notes = [f"imported from {run.format} {run.source}", f"load: {run.load.words()}", *run.notes]
    if deployment.replicas > 1:
        notes.append(
            f"{deployment.replicas} replicas behind a random load balancer: this row is one replica's "
            f"share ({load.words()}; aggregate throughput / {deployment.replicas})"
        )
    out = []
    for metric, name in ROW_METRICS.items():
        stats = run.metrics.get(name)
        if stats is None:
            continue
        statistic, value = stats.central
        if metric == "aggregate_output_tok_s":
            value /= deployment.replicas
        if not value > 0:
            continue
        row = {
            "id": f"{run_id}-{metric}",
            "hardware": deployment.hardware,
            "chips": _cell(deployment.chips),
            "model": deployment.model,
            "weights": deployment.weights,
            "spec_decoding": deployment.spec_decoding,
            "input_tokens": str(max(1, round(run.input_tokens_mean))),
            "output_tokens": str(max(1, round(run.output_tokens_mean))),
            "concurrency": _cell(load.concurrency),
            "metric": metric,
            "value": f"{value:.6g}",
            "claim_type": "measured",
            "measured_by": run.format,
            "date": "",
            "source": run.source,
            "notes": f"{stats.field}; " + "; ".join(notes),
            "stack": deployment.stack,
            "load": load.kind,
            "request_rate_per_s": _cell(load.rate_per_s),
            "requests": _cell(load.requests),
            "layout": deployment.layout,
            "burstiness": _cell(load.cv2),
            "statistic": statistic,
        }
        row |= {c: _cell(stats.values.get(c)) for c in STAT_COLUMNS}
        row["flag"] = "; ".join(flag for flag in run.flags if metric in _flagged_metrics(flag, metric))
        out.append(row)
    return out


#: The rows a flag concerns, by the figure it names first (:func:`~simulator.io.importers.checks.floor_flags`,
#: :func:`~simulator.io.importers.common.throughput_flag`): a stated throughput that disagrees with its
#: tokens and duration says nothing of the run's latencies.
FLAGGED_METRICS = {
    "output_throughput": ("aggregate_output_tok_s",),
    "mean TTFT": ("ttft_s", "e2e_s"),
    "TPOT": ("tpot_s", "itl_s", "per_user_output_tok_s", "e2e_s"),
    "per-user speed": ("per_user_output_tok_s", "tpot_s", "itl_s", "e2e_s"),
}


def _flagged_metrics(flag: str, metric: str) -> tuple[str, ...]:
    """The metrics ``flag`` concerns (every metric for a flag of another kind)."""
    return next((metrics for figure, metrics in FLAGGED_METRICS.items() if flag.startswith(figure)), (metric,))


def arrival_times(run: ImportedRun, seed: int) -> FloatArray:
    """Send times of a run's requests: recorded, or drawn from its load (module docstring)."""
    per = run.per_request
    assert per is not None
    if per.arrival_s is not None:
        return per.arrival_s
    count = len(per.ttft_s)
    load = run.load
    if load is None or load.kind in ("offline", "closed"):
        if load is not None and load.kind == "closed":
            raise ConfigError(f"{run.source}: a closed loop without recorded send times has no replay trace")
        return np.zeros(count)
    gaps = _gaps_s(load, count, seed)
    return np.concatenate([[0.0], np.cumsum(gaps[:-1])])


def _gaps_s(load: Load, count: int, seed: int) -> FloatArray:
    """``count`` gaps between sends at the load's rate: constant, gamma of the load's CV^2 (shape
    ``k = 1/CV^2``, scale ``mean gap x CV^2``), or exponential (Poisson arrivals), drawn from ``seed``."""
    assert load.rate_per_s is not None
    rng = np.random.default_rng(seed)
    mean_gap_s = 1.0 / load.rate_per_s
    if load.kind == "constant":
        return np.full(count, mean_gap_s)
    if load.kind == "gamma":
        assert load.cv2 is not None
        return rng.gamma(1.0 / load.cv2, mean_gap_s * load.cv2, count)  # shape k = 1/CV^2, mean k * scale
    return rng.exponential(mean_gap_s, count)


def trace_lines(run: ImportedRun, seed: int) -> str:
    """The run's requests as task-graph JSON lines (one single-call task per request)."""
    per = run.per_request
    assert per is not None
    arrivals = arrival_times(run, seed)
    lines = [
        json.dumps(
            {
                "id": f"r{i}",
                "arrival_s": float(a),
                "steps": [{"id": "call", "input_tokens": int(n_in), "output_tokens": int(n_out)}],
            }
        )
        for i, (a, n_in, n_out) in enumerate(zip(arrivals, per.input_tokens, per.output_tokens, strict=True))
    ]
    return "\n".join(lines) + "\n"


def measured_csv(run: ImportedRun) -> str:
    """The measured requests, one line each in the trace's order (seconds; empty where not measured)."""
    per = run.per_request
    assert per is not None
    lines = ["request,input_tokens,output_tokens,ttft_s,tpot_s,e2e_s"]
    for i in range(len(per.ttft_s)):
        cells = [per.ttft_s[i], per.tpot_s[i], per.e2e_s[i]]
        text = ",".join("" if math.isnan(c) else f"{c:.9g}" for c in cells)
        lines.append(f"{i},{per.input_tokens[i]},{per.output_tokens[i]},{text}")
    return "\n".join(lines) + "\n"
