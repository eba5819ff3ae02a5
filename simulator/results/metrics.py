"""Metrics derived from recorded timestamps (definitions after vLLM's serving benchmark and
inference-perf, so simulated and measured runs compare directly).

Per request r with arrival a, admission s, first token f, completion c and n output tokens:

- ``ttft_s = f - a`` (time to first token, queueing included);
- ``e2e_s = c - a`` (end-to-end latency);
- ``tpot_s = (c - f) / (n - 1)`` (time per output token after the first; n > 1 only);
- ``per_user_output_tok_s = (n - 1) / (c - f) = 1 / tpot`` (decode speed one user sees);
- ``normalized_tpot_s = e2e / n`` (inference-perf's normalised time per output token);
- ``queueing_delay_s = s - a`` (waiting before the first scheduled iteration);
- ``itl_s``: every gap between consecutive tokens of a request, pooled over requests
  (a log-binned histogram, 0.5 % resolution).

Agent tasks (when the run has them), per task t started at ``s_t`` and ended at ``e_t``:
``task_time_s = e_t - s_t`` split into ``model_s`` (admission to last token of each call),
``queue_s`` (arrival to admission of each call), ``tool_s`` and ``subagent_s`` (waiting at a
fan-out's join); only top-level tasks count (sub-agents are tasks of their own, reported as
``subagent_tasks``); ``tasks_per_hour`` counts
tasks started after the warm-up and finished in the window; ``prefix_cache_hit_rate`` is
prompt tokens served from cached KV over all prompt tokens of measured calls.

Measured requests are the completed ones that arrived at or after the warm-up. Rates use
the window ``[warmup, end]``: ``output_tok_s`` and ``input_tok_s`` are the tokens emitted
and prefilled *inside* the window (a cumulative counter kept per iteration, linear within a
jump), so a drain tail or in-flight requests do not bias them; ``requests_per_s`` counts
completions in the window; ``goodput_requests_per_s`` counts those meeting every SLO given
(TTFT and TPOT bounds). Levels (batch, queue, KV)
are time-weighted means over the same window; utilisation is achieved / peak FLOP/s and
bytes/s of a replica's chips over the window. ``cost`` holds $/h, $/1M output tokens, $/task,
J/token and J/task of the window (:mod:`simulator.results.economics`), busy time prorated.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from simulator.config.scenario import CostSpec, SLOSpec, WorkloadClass
from simulator.results.economics import CostAssumptions, CostError, run_cost
from simulator.results.records import FloatArray, RunRecords

PERCENTILES = (50, 90, 95, 99)
#: Where a task's time goes (the columns ``<part>_s`` of the task records).
TASK_PARTS = ("model", "queue", "tool", "subagent")


def distribution_stats(values: FloatArray) -> dict[str, float]:
    """Mean and p50/p90/p95/p99 of finite values (NaN when there are none)."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return {"mean": float("nan"), **{f"p{p}": float("nan") for p in PERCENTILES}}
    stats = {"mean": float(finite.mean())}
    stats.update({f"p{p}": float(v) for p, v in zip(PERCENTILES, np.percentile(finite, PERCENTILES), strict=True)})
    return stats


def histogram_stats(counts: FloatArray, edges: FloatArray) -> dict[str, float]:
    """Mean and percentiles of a histogram, at the geometric midpoints of its bins."""
    total = counts.sum()
    if total == 0:
        return distribution_stats(np.array([]))
    mids = np.sqrt(edges[:-1] * edges[1:])
    cumulative = np.cumsum(counts) / total
    stats = {"mean": float((counts * mids).sum() / total)}
    for p in PERCENTILES:
        stats[f"p{p}"] = float(mids[np.searchsorted(cumulative, p / 100.0)])
    return stats


def request_metrics(records: RunRecords, klass: int | None = None) -> dict[str, FloatArray]:
    r = records.requests
    measured = (r["dropped"] == 0) & np.isfinite(r["done_s"]) & (r["arrival_s"] >= records.warmup_s)
    if klass is not None:
        measured &= r["class"] == klass
    a, s, f, c, n = (r[k][measured] for k in ("arrival_s", "admitted_s", "first_token_s", "done_s", "output_tokens"))
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(n > 1, (c - f) / (n - 1), np.nan)
        per_user = np.where((n > 1) & (c > f), (n - 1) / (c - f), np.nan)
    return {
        "ttft_s": f - a,
        "e2e_s": c - a,
        "tpot_s": tpot,
        "per_user_output_tok_s": per_user,
        "normalized_tpot_s": (c - a) / n,
        "queueing_delay_s": s - a,
        "input_tokens": r["input_tokens"][measured],
        "output_tokens": n,
    }


def _meets(m: dict[str, FloatArray], slo: SLOSpec) -> npt.NDArray[np.bool_]:
    ok = np.ones(m["ttft_s"].size, dtype=bool)
    if slo.ttft is not None:
        ok &= m["ttft_s"] <= slo.ttft
    if slo.tpot is not None:
        ok &= ~(m["tpot_s"] > slo.tpot)
    return ok


LATENCIES = ("ttft_s", "tpot_s", "e2e_s", "per_user_output_tok_s", "normalized_tpot_s", "queueing_delay_s")


def class_summary(records: RunRecords, klass: int, spec: WorkloadClass) -> dict[str, Any]:
    """One workload class: its latencies, its goodput under its own SLOs, its tasks."""
    m = request_metrics(records, klass)
    window = max(records.end_s - records.warmup_s, 1e-12)
    out: dict[str, Any] = {name: distribution_stats(m[name]) for name in LATENCIES}
    out |= {
        "priority": spec.priority,
        "requests_completed": int(m["ttft_s"].size),
        "requests_per_s": m["ttft_s"].size / window,
        "goodput_requests_per_s": float(_meets(m, spec.slo).sum()) / window,
        "slo_attainment": float(_meets(m, spec.slo).mean()) if m["ttft_s"].size else float("nan"),
    }
    if (records.tasks["class"] == klass).any():
        out["tasks"] = task_summary(records, klass)
    return out


def cost_summary(records: RunRecords, spec: CostSpec, tasks: int) -> dict[str, Any]:
    """Dollars and joules of the window (``{"error": ...}`` when a needed price is missing)."""
    basis = spec.basis
    if basis == "auto":
        basis = "rental" if records.hardware.price.rental_usd_per_chip_hour is not None else "ownership"
    assumptions = CostAssumptions(basis, spec.years, spec.pue, spec.usd_per_kwh, spec.idle_power_fraction)
    t0, t1 = records.warmup_s, records.end_s
    output_tokens, _ = records.tokens_in_window(t0, t1)
    busy = [total.busy_s * (t1 - t0) / max(t1, 1e-12) for total in records.totals]  # busy share of the window
    try:
        cost = run_cost(records.hardware, records.chips_per_replica, busy, t1 - t0, output_tokens, tasks, assumptions)
    except CostError as exc:
        return {"basis": basis, "error": str(exc)}
    return {"basis": basis} | cost.to_dict()


def summarize(
    records: RunRecords, slo: SLOSpec, classes: Sequence[WorkloadClass] = (), cost: CostSpec | None = None
) -> dict[str, Any]:
    """The run summary: distributions, rates, goodput, levels and utilisation (and per class)."""
    m = request_metrics(records)
    window = max(records.end_s - records.warmup_s, 1e-12)
    ok = _meets(m, slo)
    replicas = len(records.totals)
    t0, t1 = records.warmup_s, records.end_s
    chips = records.chips_per_replica
    output_tokens, input_tokens = records.tokens_in_window(t0, t1)
    summary: dict[str, Any] = {name: distribution_stats(m[name]) for name in LATENCIES}
    summary["itl_s"] = histogram_stats(records.itl_counts, records.itl_bin_edges_s)
    summary |= {
        "requests_completed": int(m["ttft_s"].size),
        "requests_dropped": int((records.requests["dropped"] == 1).sum()),
        "requests_in_flight": records.in_flight,
        "window_s": window,
        "requests_per_s": m["ttft_s"].size / window,
        "output_tok_s": output_tokens / window,
        "input_tok_s": input_tokens / window,
        "goodput_requests_per_s": float(ok.sum()) / window,
        "preemptions": int(records.requests["preemptions"].sum()),
        "mean_batch_size": float(np.mean([b.time_mean(t0, t1) for b in records.batch])),
        "mean_queue_length": float(np.mean([q.time_mean(t0, t1) for q in records.queue])),
        "mean_kv_occupancy": float(np.mean([k.time_mean(t0, t1) for k in records.kv_blocks]))
        / max(records.kv_blocks_per_replica, 1),
        "replicas": [
            {
                "busy_fraction": t.busy_s / max(t1, 1e-12),
                "compute_utilisation": t.flops / (chips * records.peak_flops_per_chip * max(t1, 1e-12)),
                "memory_bandwidth_utilisation": t.bytes_moved
                / (chips * records.peak_bandwidth_per_chip * max(t1, 1e-12)),
                "iterations": t.iterations,
            }
            for t in records.totals
        ],
    }
    summary["replica_count"] = replicas
    r = records.requests
    measured = (r["dropped"] == 0) & np.isfinite(r["done_s"]) & (r["arrival_s"] >= records.warmup_s)
    prompts = float(r["input_tokens"][measured].sum())
    summary["prefix_cache_hit_rate"] = float(r["cached_tokens"][measured].sum()) / prompts if prompts else 0.0
    if records.tasks["task"].size:
        summary["tasks"] = task_summary(records)
    if len(classes) > 1:
        summary["classes"] = {spec.name: class_summary(records, k, spec) for k, spec in enumerate(classes)}
    tasks_done = summary["tasks"]["tasks_completed"] if "tasks" in summary else 0
    summary["cost"] = cost_summary(records, cost or CostSpec(), tasks_done)
    summary["capacity_requests_per_s"] = records.capacity_requests_per_s
    summary["offered_requests_per_s"] = records.offered_requests_per_s
    offered, capacity = records.offered_requests_per_s, records.capacity_requests_per_s
    summary["overloaded"] = bool(offered is not None and capacity == capacity and offered > capacity)
    return summary


def task_summary(records: RunRecords, klass: int | None = None) -> dict[str, Any]:
    """Task completion time, where it went, calls and tokens per task, tasks per hour."""
    t = records.tasks
    keep = (t["start_s"] >= records.warmup_s) & (t["failed"] == 0) & (t["parent"] == -1)
    if klass is not None:
        keep &= t["class"] == klass
    duration = t["end_s"][keep] - t["start_s"][keep]
    window = max(records.end_s - records.warmup_s, 1e-12)
    total = duration.sum() if duration.size else 0.0
    return {
        "task_time_s": distribution_stats(duration),
        "tasks_completed": int(keep.sum()),
        "tasks_failed": int(((t["failed"] == 1) & (t["parent"] == -1)).sum()),
        "subagent_tasks": int((t["parent"] != -1).sum()),
        "tasks_per_hour": float(keep.sum()) / window * 3600.0,
        "calls_per_task": float(t["calls"][keep].mean()) if keep.any() else float("nan"),
        "input_tokens_per_task": float(t["input_tokens"][keep].mean()) if keep.any() else float("nan"),
        "output_tokens_per_task": float(t["output_tokens"][keep].mean()) if keep.any() else float("nan"),
        "time_share": {
            part: float(t[f"{part}_s"][keep].sum() / total) if total else float("nan") for part in TASK_PARTS
        },
        "mean_seconds": {
            part: float(t[f"{part}_s"][keep].mean()) if keep.any() else float("nan") for part in TASK_PARTS
        },
    }


def overload_message(summary: dict[str, Any]) -> str:
    """Why a run's queue never drains, in words (empty when it does)."""
    if not summary["overloaded"]:
        return ""
    offered, capacity = summary["offered_requests_per_s"], summary["capacity_requests_per_s"]
    return (
        f"offered load {offered:.3g} req/s is {offered / capacity:.1f}x the fleet's capacity (about "
        f"{capacity:.3g} req/s at saturation for these lengths): the queue grows without bound, so latencies "
        f"depend on how long the run lasts; add replicas or lower the rate"
    )
