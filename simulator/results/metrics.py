"""Metrics derived from recorded timestamps (definitions after vLLM's serving benchmark and
inference-perf, so simulated and measured runs compare directly).

Per request r with arrival a, admission s, first token f, completion c and n output tokens:

- ``ttft_s = f - a`` (time to first token, queueing included);
- ``ttst_s = f2 - f`` (time to second token, AIPerf's: from the first token to the second, at
  ``f2``; n > 1 only);
- ``e2e_s = c - a`` (end-to-end latency);
- ``tpot_s = (c - f) / (n - 1)`` (time per output token after the first; n > 1 only);
- ``per_user_output_tok_s = (n - 1) / (c - f) = 1 / tpot`` (decode speed one user sees);
- ``normalized_tpot_s = e2e / n`` (inference-perf's normalised time per output token);
- ``queueing_delay_s = s - a`` (waiting before the first scheduled iteration, and the half
  round trip to a distant backend);
- ``itl_s``: every gap between consecutive tokens of a request, pooled over requests
  (a log-binned histogram, 0.5 % resolution).

Every distribution states count, mean, std (ddof 0, as vLLM), min, max and p50/p90/p95/p99/
p99.9 (``p99_9``). Run-level counts and peaks (the fields vLLM bench, GuideLLM and AIPerf state):

- ``requests_failed = requests_dropped + requests_rejected_over_budget`` (vLLM's ``failed``: no
  answer), plus, with failures, the requests answered with an error because of them;
  ``requests_in_flight`` is GuideLLM's ``incomplete`` (arrived, unanswered at the end);
- ``mean_concurrency = (1 / (t1 - t0)) * integral over [t0, t1] of N(t) dt`` and
  ``peak_concurrency = max_t N(t)``, with ``N(t)`` the requests arrived and not yet answered (the
  client's count: vLLM's ``max_concurrent_requests``, AIPerf's ``effective_concurrency``); the
  peak is over the whole run, warm-up included (the level keeps its exact peak when compacted);
- ``peak_output_tok_s = max_k (O(t0 + k + 1) - O(t0 + k))`` over the whole seconds of the window,
  with ``O`` the fleet's cumulative output tokens (vLLM's ``max_output_tokens_per_s``, whose
  1-second buckets start at the first request; here at the warm-up's end). An iteration's tokens
  are spread evenly over it, and a compacted token series interpolates within its buckets.

Speculative decoding (runs that speculate; ``speculation`` is absent otherwise), over the verify
passes that ended in the window, one per decoding sequence, each of ``k`` drafted tokens of
which the first ``j`` were accepted (:mod:`simulator.analytic.speculation`; the draws, before an
answer's last tokens cut them short), vLLM bench's ``spec_decode_*`` keys:
``acceptance_length = 1 + sum(j) / passes`` (tokens per verify pass, 1 to ``k + 1``; for a
constant per-token acceptance ``a`` its expectation is ``(1 - a^(k+1)) / (1 - a)``),
``acceptance_rate = sum(j) / sum(k)`` and ``per_position_acceptance[i]``, the passes that
accepted draft ``i`` over those that drafted it.

Agent tasks (when the run has them), per task t started at ``s_t`` and ended at ``e_t``:
``task_time_s = e_t - s_t`` split into ``model_s`` (admission to last token of each call),
``queue_s`` (arrival at the replica to admission of each call), ``tool_s``, ``subagent_s``
(waiting at a fan-out's join) and ``network_s`` (round trips to the backend); only top-level
tasks count (sub-agents are tasks of their own, reported as ``subagent_tasks``);
``tasks_per_hour`` counts tasks started after the warm-up and finished in the window; ``prefix_cache_hit_rate`` is
prompt tokens served from cached KV over all prompt tokens of measured calls.

Measured requests are the completed ones that arrived at or after the warm-up. Rates use
the window ``[warmup, end]``: ``output_tok_s`` and ``input_tok_s`` are the tokens emitted
and prefilled *inside* the window (a cumulative counter kept per iteration, linear within a
jump), so a drain tail or in-flight requests do not bias them; ``requests_per_s`` counts
completions in the window; ``goodput_requests_per_s`` counts those meeting every SLO given
(TTFT and TPOT bounds). Levels (batch, queue, KV)
are time-weighted means over the same window; utilisation is achieved / peak FLOP/s and
bytes/s of a replica's chips over the window. ``cost`` holds the fleet's $/h, $, idle $, $/1M
output tokens, $/task, tasks per $, J/token and J/task of the window
(:mod:`simulator.analytic.economics`), busy time prorated; ``backends`` the same per backend,
with what each served; with workload classes, ``classes`` gives each class its part of every
backend's cost (:mod:`simulator.results.attribution` states the rule) and the fleet's per-task
figures charge only the classes that run tasks. Dropped requests (too long for every allowed backend) and requests
rejected over the API budget are counted apart.

Percentiles are exact order statistics when the run kept every request row; a run whose rows
streamed takes them from log-binned histograms (:mod:`simulator.results.requests` states the bin
width; counts, means, goodput and token sums stay exact). ``statistics`` in the summary says
which statistics are exact and which binned, and the resolution of the levels.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import TypeVar

import numpy as np

from simulator.analytic.economics import RunCost, api_usd, assumptions_of, run_cost
from simulator.analytic.power import replica_energy_j
from simulator.config.fleet import CostSpec
from simulator.config.scenario import SLOSpec, WorkloadClass
from simulator.config.workload import AgentsLoad, TraceLoad
from simulator.records.store import (
    DROPPED_OVER_BUDGET,
    DROPPED_REPLICA_FAILED,
    DROPPED_THROTTLED,
    DROPPED_TOO_LONG,
    REQUEST_ROWS_KEPT,
    BackendRecord,
    FloatArray,
    KVTierRecords,
    KVTransferRecords,
    LevelMonitor,
    RunRecords,
)
from simulator.results.api_limits import api_summary
from simulator.results.attribution import ATTRIBUTION, ClassCosts, attribute
from simulator.results.power import power_summaries
from simulator.results.requests import (
    BIN_WIDTH,
    LATENCIES,
    NO_REQUESTS,
    QUANTILES,
    Requests,
    distribution_stats,
    measured_rows,
    requests_of,
)
from simulator.results.summary import (
    BackendCost,
    BackendSummary,
    ClassCost,
    ClassSummary,
    DistributionStats,
    FailureSummary,
    FleetCost,
    KVTiersSummary,
    KVTierSummary,
    KVTransferSummary,
    ReplicaSummary,
    RunSummary,
    SpeculationSummary,
    Statistics,
    TaskParts,
    TaskSummary,
)

CostRecord = TypeVar("CostRecord", BackendCost, FleetCost)

#: Where a task's time goes (the columns ``<part>_s`` of the task records).
TASK_PARTS = ("model", "queue", "tool", "subagent", "network")


NO_TASKS = "no task started after the warm-up finished in the window"
NO_VERIFY = "no speculative verify pass ended in the window"


def histogram_stats(counts: FloatArray, edges: FloatArray) -> DistributionStats:
    """Mean, std, min, max and percentiles of a histogram, at the geometric midpoints of its bins
    (min and max: the midpoints of the lowest and highest bins holding a count)."""
    total = counts.sum()
    if total == 0:
        return distribution_stats(np.array([]), "no inter-token interval was observed (only 1-token answers, or none)")
    mids = np.sqrt(edges[:-1] * edges[1:])
    cumulative = np.cumsum(counts) / total
    percentiles = {key: float(mids[np.searchsorted(cumulative, q / 100.0)]) for key, q in QUANTILES.items()}
    mean = float((counts * mids).sum() / total)
    held = np.flatnonzero(counts)
    return DistributionStats(
        count=int(total), mean=mean, std=math.sqrt(float((counts * (mids - mean) ** 2).sum() / total)),
        min=float(mids[held[0]]), max=float(mids[held[-1]]), **percentiles,
    )  # fmt: skip


SHORT_WINDOW = "the measurement window is shorter than 1 s"


def peak_output_tok_s(records: RunRecords) -> float:
    """Most output tokens the fleet emitted in one whole second of the window (module docstring);
    NaN when the window is shorter than 1 s."""
    seconds = math.floor(records.end_s - records.warmup_s)
    if seconds < 1:
        return math.nan
    grid = records.warmup_s + np.arange(seconds + 1, dtype=np.float64)
    cumulative = np.zeros(grid.size)
    for counter in records.tokens:
        times = np.frombuffer(counter.times, dtype=np.float64)
        cumulative += np.interp(grid, times, np.frombuffer(counter.output, dtype=np.float64))
    return float(np.diff(cumulative).max())


def speculation_summary(records: RunRecords) -> SpeculationSummary | None:
    """The speculative verify passes of the window (module docstring); None when nothing speculated."""
    if not records.verifications:
        return None
    longest = max(records.verifications)
    passes = accepted = drafted = 0.0
    at = np.zeros(longest)  # passes that accepted draft i
    of = np.zeros(longest)  # passes that drafted it
    for drafts, counts in records.verifications.items():
        accepts = np.arange(drafts + 1, dtype=np.float64)
        passes += float(counts.sum())
        accepted += float(accepts @ counts)
        drafted += drafts * float(counts.sum())
        at[:drafts] += np.cumsum(counts[::-1])[::-1][1:]  # passes with more than i accepted
        of[:drafts] += counts.sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        per_position = np.where(of > 0, at / of, math.nan)
    return SpeculationSummary(
        verify_passes=round(passes),
        draft_tokens=round(drafted),
        accepted_tokens=round(accepted),
        acceptance_length=1.0 + accepted / passes if passes else math.nan,
        acceptance_rate=accepted / drafted if drafted else math.nan,
        per_position_acceptance=per_position.tolist(),
        undefined=None if passes else {"acceptance_length": NO_VERIFY, "acceptance_rate": NO_VERIFY},
    )


def class_summary(records: RunRecords, requests: Requests, klass: int, spec: WorkloadClass,
                  cost: ClassCost | None = None) -> ClassSummary:  # fmt: skip
    """One workload class: its latencies, its goodput under its own SLOs, its tasks, its cost."""
    window = max(records.end_s - records.warmup_s, 1e-12)
    tasks = class_tasks(records, klass, spec)
    completed, met = requests.completed(klass), requests.meeting(spec.slo, klass)
    return ClassSummary(
        **requests.latency_stats(klass),
        priority=spec.priority,
        requests_completed=completed,
        requests_per_s=completed / window,
        goodput_requests_per_s=float(met) / window,
        slo_attainment=met / completed if completed else float("nan"),
        tasks=tasks,
        cost=cost,
    )


def class_tasks(records: RunRecords, klass: int, spec: WorkloadClass) -> TaskSummary | None:
    """The tasks of one class, if its load runs tasks."""
    return task_summary(records, klass) if (records.tasks["class"] == klass).any() or _makes_tasks(spec) else None


def _makes_tasks(klass: WorkloadClass) -> bool:
    """Whether a class's load runs tasks (agents, agent-session and task-graph traces)."""
    load = klass.load
    return isinstance(load, AgentsLoad) or (isinstance(load, TraceLoad) and load.format in ("weka", "taskgraph"))


def backend_cost(records: RunRecords, requests: Requests, backend: BackendRecord, spec: CostSpec,
                 tasks: int) -> RunCost:  # fmt: skip
    """Dollars and joules of one backend over the window (the API bill from its measured requests)."""
    assumptions = assumptions_of(spec)
    t0, t1 = records.warmup_s, records.end_s
    output_tokens, _ = records.tokens_in_window(t0, t1, backend.replicas)
    busy = [records.totals[i].busy_s * (t1 - t0) / max(t1, 1e-12) for i in backend.replicas]  # window share
    billed_input, billed_output = requests.billed(backend.replicas)
    bill = api_usd(backend.pricing.token_price, billed_input, billed_output)
    if backend.pricing.token_price is not None:
        output_tokens = billed_output  # $/1M of an API backend: its bill over the same requests' tokens
    joules = None
    if backend.power is not None:  # a power cap: its chips' capped and idle draw (simulator.results.power)
        joules = assumptions.pue * sum(replica_energy_j(backend.power, backend.chips_per_replica, b, t1 - t0)
                                       for b in busy)  # fmt: skip
    return run_cost(
        backend.hardware, backend.chips_per_replica, busy, t1 - t0, output_tokens, tasks, assumptions,
        backend.pricing, bill, joules,
    )  # fmt: skip


def backend_summary(records: RunRecords, requests: Requests, backend: BackendRecord, spec: CostSpec) -> BackendSummary:
    """One backend of the fleet: what it served, how busy it was, what it cost."""
    t0, t1 = records.warmup_s, records.end_s
    window = max(t1 - t0, 1e-12)
    output_tokens, _ = records.tokens_in_window(t0, t1, backend.replicas)
    cost = backend_cost(records, requests, backend, spec, 0)
    busy = [records.totals[i].busy_s for i in backend.replicas]
    return BackendSummary(
        hardware=backend.hardware.id,
        model=backend.model_id,
        replicas=len(backend.replicas),
        chips=len(backend.replicas) * backend.chips_per_replica,
        requests_completed=requests.served(backend.replicas),
        output_tok_s=output_tokens / window,
        busy_fraction=float(np.mean(busy)) / max(t1, 1e-12) if busy else 0.0,
        cost=cost_record(BackendCost, backend.pricing.basis, cost),
    )


def cost_reasons(cost: RunCost) -> dict[str, str]:
    """Why a per-token or per-task figure of a cost is undefined, by figure."""
    reasons: dict[str, str] = {}
    if not cost.output_tokens:
        reasons |= dict.fromkeys(("usd_per_million_output_tokens", "joules_per_output_token"),
                                 "no output token was emitted in the window")  # fmt: skip
    if not cost.tasks:
        reasons |= dict.fromkeys(("usd_per_task", "joules_per_task"), "no task completed in the window")
    if not cost.usd:
        reasons["tasks_per_usd"] = "nothing was spent in the window"
    return reasons


def cost_record(record: type[CostRecord], basis: str, cost: RunCost) -> CostRecord:
    """The figures of ``cost`` a cost record names, with the reasons of those undefined."""
    names = [name for name in record.model_fields if name not in ("basis", "undefined") and hasattr(cost, name)]
    reasons = {name: why for name, why in cost_reasons(cost).items() if name in names}
    return record(basis=basis, **{name: getattr(cost, name) for name in names}, undefined=reasons or None)


def class_cost(parts: dict[str, RunCost], tasks: int, fleet_usd: float, makes_tasks: bool) -> ClassCost:
    """One class's cost record from its parts of each backend (:mod:`simulator.results.attribution`)."""
    zero = RunCost(0.0, 0.0, 0.0, 0.0, 0)
    total = dataclasses.replace(functools.reduce(RunCost.plus, parts.values(), zero), tasks=tasks)
    reasons = cost_reasons(total)
    values = {name: getattr(total, name) for name in ClassCost.model_fields if hasattr(total, name)}
    if not makes_tasks:
        values |= dict.fromkeys(PER_TASK, math.nan)
        reasons |= dict.fromkeys(PER_TASK, "the class runs no tasks")
    return ClassCost(
        **values,
        share_of_fleet_usd=total.usd / fleet_usd if fleet_usd else math.nan,
        usd_by_backend={name: part.usd for name, part in parts.items()},
        undefined={name: why for name, why in reasons.items() if name in ClassCost.model_fields} or None,
    )


def class_task_summaries(records: RunRecords, classes: Sequence[WorkloadClass]) -> dict[str, TaskSummary | None]:
    """Each class's tasks as :func:`summarize` reports them: the run's (``tasks``) for a single
    class, each class's own (``classes.<name>.tasks``) for several."""
    if len(classes) > 1:
        return {spec.name: class_tasks(records, k, spec) for k, spec in enumerate(classes)}
    return {spec.name: _run_tasks(records, classes) for spec in classes}


def _run_tasks(records: RunRecords, classes: Sequence[WorkloadClass]) -> TaskSummary | None:
    """The run's task summary when it recorded tasks or a class makes them, else None."""
    if records.tasks["task"].size or any(_makes_tasks(c) for c in classes):
        return task_summary(records)
    return None


def _backend_costs(records: RunRecords, requests: Requests, cost_spec: CostSpec, tasks: TaskSummary | None,
                   ) -> list[RunCost]:  # fmt: skip
    """Each backend's cost of the run (per task over the run's completed tasks)."""
    completed = tasks.tasks_completed if tasks else 0
    return [backend_cost(records, requests, b, cost_spec, completed) for b in records.backends]


def _mean_level(levels: Sequence[LevelMonitor], t0: float, t1: float) -> float:
    """Mean over replicas of a level's time-mean over ``[t0, t1]``."""
    return float(np.mean([level.time_mean(t0, t1) for level in levels]))


def _pricing_basis(records: RunRecords) -> str:
    """The backends' common pricing basis, or ``mixed`` when they differ."""
    bases = sorted({b.pricing.basis for b in records.backends})
    return bases[0] if len(bases) == 1 else "mixed"


def _requests_failed(requests: Requests) -> int:
    """Requests dropped for any reason: too long, over budget, on a failed replica, throttled."""
    codes = (DROPPED_TOO_LONG, DROPPED_OVER_BUDGET, DROPPED_REPLICA_FAILED, DROPPED_THROTTLED)
    return sum(requests.dropped(code) for code in codes)


def _mean_kv_occupancy(records: RunRecords, owner: Sequence[BackendRecord], t0: float, t1: float) -> float:
    """Mean over replicas of the time-mean KV blocks in use over ``[t0, t1]`` per block of capacity."""
    return float(np.mean([
        k.time_mean(t0, t1) / max(b.kv_blocks_per_replica, 1) for k, b in zip(records.kv_blocks, owner, strict=True)
    ]))  # fmt: skip


def _replica_summaries(records: RunRecords, owner: Sequence[BackendRecord], t1: float) -> list[ReplicaSummary]:
    """Each replica's busy fraction and utilisations over ``[0, t1]``: ``flops / (chips * peak * t1)``."""
    return [
        ReplicaSummary(
            backend=b.name,
            busy_fraction=t.busy_s / max(t1, 1e-12),
            compute_utilisation=t.flops / (b.chips_per_replica * b.peak_flops_per_chip * max(t1, 1e-12)),
            memory_bandwidth_utilisation=t.bytes_moved
            / (b.chips_per_replica * b.peak_bandwidth_per_chip * max(t1, 1e-12)),
            iterations=t.iterations,
        )
        for t, b in zip(records.totals, owner, strict=True)
    ]


def _optional_sections(records: RunRecords, requests: Requests) -> dict[str, object]:
    """The summary's sections a run has only with the feature on (None otherwise): KV handoffs,
    KV tiers, failures, power and API backends."""
    return {
        "kv_transfers": {k.prefill_backend: kv_transfer_summary(records, k) for k in records.kv_transfers} or None,
        "kv_tiers": kv_tier_summaries(records.kv_tiers) or None,
        "failures": failure_summary(records, requests) if records.failures is not None else None,
        "power": power_summaries(records) or None,
        "api": {a.backend: api_summary(a) for a in records.api} or None,
    }


def _overloaded(offered: float | None, capacity: float) -> bool:
    """Whether the offered load exceeds a known (not NaN) capacity."""
    return bool(offered is not None and capacity == capacity and offered > capacity)


def summarize(
    records: RunRecords, slo: SLOSpec, classes: Sequence[WorkloadClass] = (), cost: CostSpec | None = None
) -> RunSummary:
    """The run summary: distributions, rates, goodput, levels and utilisation (and per class)."""
    requests = requests_of(records, [slo, *(c.slo for c in classes)], len(classes))
    window = max(records.end_s - records.warmup_s, 1e-12)
    replicas = len(records.totals)
    t0, t1 = records.warmup_s, records.end_s
    output_tokens, input_tokens = records.tokens_in_window(t0, t1)
    owner = [records.backend_of(i) for i in range(replicas)]
    cached, prompts = requests.prompt_tokens()
    completed = requests.completed()
    tasks = _run_tasks(records, classes)
    cost_spec = cost or CostSpec()
    parts = _backend_costs(records, requests, cost_spec, tasks)
    offered, capacity = records.offered_requests_per_s, records.capacity_requests_per_s
    per_class, split = _class_summaries(records, requests, classes, parts) if len(classes) > 1 else (None, None)
    peak_tokens = peak_output_tok_s(records)
    return RunSummary(
        **requests.latency_stats(),
        itl_s=histogram_stats(records.itl_counts, records.itl_bin_edges_s),
        requests_completed=completed,
        requests_dropped=requests.dropped(DROPPED_TOO_LONG),
        requests_rejected_over_budget=requests.dropped(DROPPED_OVER_BUDGET),
        requests_in_flight=records.in_flight,
        requests_failed=_requests_failed(requests),
        mean_concurrency=records.in_system.time_mean(t0, t1),
        peak_concurrency=records.in_system.maximum(),
        peak_output_tok_s=peak_tokens,
        speculation=speculation_summary(records),
        window_s=window,
        requests_per_s=completed / window,
        output_tok_s=output_tokens / window,
        input_tok_s=input_tokens / window,
        goodput_requests_per_s=float(requests.meeting(slo)) / window,
        preemptions=requests.preemptions(),
        mean_batch_size=_mean_level(records.batch, t0, t1),
        mean_queue_length=_mean_level(records.queue, t0, t1),
        mean_kv_occupancy=_mean_kv_occupancy(records, owner, t0, t1),
        replicas=_replica_summaries(records, owner, t1),
        replica_count=replicas,
        prefix_cache_hit_rate=cached / prompts if prompts else 0.0,
        tasks=tasks,
        classes=per_class,
        backends={b.name: backend_summary(records, requests, b, cost_spec) for b in records.backends},
        **_optional_sections(records, requests),
        cost=_fleet_cost(functools.reduce(RunCost.plus, parts), _pricing_basis(records), per_class, split),
        capacity_requests_per_s=capacity,
        offered_requests_per_s=offered,
        overloaded=_overloaded(offered, capacity),
        statistics=statistics(records, requests),
        undefined={"peak_output_tok_s": SHORT_WINDOW} if math.isnan(peak_tokens) else None,
    )  # fmt: skip


def failure_summary(records: RunRecords, requests: Requests) -> FailureSummary:
    """Failures of a run: each replica's share of the window ``[t0, t1]`` up, ``1 - |union of its spans
    down within the window| / (t1 - t0)``, their mean (``availability``) beside the closed form's mean
    ``MTBF / (MTBF + MTTR)`` over the replicas that fail at random; counts over the whole run."""
    failures = records.failures
    assert failures is not None
    t0, t1 = records.warmup_s, records.end_s
    up = [failures.up_fraction(i, t0, t1) for i in range(len(records.totals))]
    expected = list(failures.expected_availability.values())
    return FailureSummary(
        availability=float(np.mean(up)),
        expected_availability=float(np.mean(expected)) if expected else math.nan,
        failures=failures.failures,
        requests_retried=failures.retried,
        requests_failed=requests.dropped(DROPPED_REPLICA_FAILED),
        stragglers=len(failures.stragglers),
        replica_availability=up,
        undefined={"expected_availability": "no replica fails at random"} if not expected else None,
    )


ITL_BINS = f"mean and percentiles at bin midpoints; {BIN_WIDTH}"


def statistics(records: RunRecords, requests: Requests) -> Statistics:
    """What is exact in a run's summary and what comes from histograms."""
    tasks = ["tasks.task_time_s"] if records.tasks["task"].size else []
    if requests.exact:
        rows = f"all {records.request_count} kept in memory: every percentile is an exact order statistic"
        exact, binned = [*LATENCIES, *tasks], {"itl_s": ITL_BINS}
    else:
        rows = (f"{records.request_count} streamed (more than {REQUEST_ROWS_KEPT} would be kept in memory); "
                "latency counts, means, SLO attainment and token sums are exact")  # fmt: skip
        exact = tasks
        binned = dict.fromkeys(LATENCIES, f"percentiles from log-binned histograms; {BIN_WIDTH}") | {"itl_s": ITL_BINS}
    widest = max(level.bucket_s for level in [*records.queue, *records.batch, *records.kv_blocks])
    levels = "every change of every level kept" if widest == 0 else (
        f"compacted: levels.csv holds time-weighted means over buckets of up to {widest:g} s (the stretch since the "
        "last whole bucket exact); mean levels and token rates over the window stay exact; class cost shares "
        "read seat-seconds off the bucketed batch level"
    )  # fmt: skip
    return Statistics(request_rows=rows, exact=exact, binned=binned, levels=levels)


def _class_summaries(records: RunRecords, requests: Requests, classes: Sequence[WorkloadClass],
                     parts: list[RunCost]) -> tuple[dict[str, ClassSummary], ClassCosts]:  # fmt: skip
    """Every class's summary with its attributed cost, and the split itself."""
    tasks = [class_tasks(records, k, spec) for k, spec in enumerate(classes)]
    counts = [t.tasks_completed if t is not None else 0 for t in tasks]
    split = attribute(records.backends, requests, parts, counts, len(classes))
    fleet_usd = sum(p.usd for p in parts)
    costs = [class_cost(split.by_class[k], counts[k], fleet_usd, tasks[k] is not None) for k in range(len(classes))]
    summaries = {spec.name: class_summary(records, requests, k, spec, costs[k]) for k, spec in enumerate(classes)}
    return summaries, split


def _task_class_costs(classes: dict[str, ClassSummary]) -> list[ClassCost]:
    """The attributed costs of the classes that run tasks."""
    return [c.cost for c in classes.values() if c.tasks is not None and c.cost is not None]


def _merged_reasons(record: FleetCost, per_task: FleetCost) -> dict[str, str]:
    """Why figures are undefined: the fleet record's reasons for whole-fleet figures, the task
    classes' record's reasons for the per-task ones."""
    fleet_reasons = {k: v for k, v in (record.undefined or {}).items() if k not in PER_TASK}
    task_reasons = {k: v for k, v in (per_task.undefined or {}).items() if k in PER_TASK}
    return fleet_reasons | task_reasons


def _fleet_cost(fleet: RunCost, basis: str, classes: dict[str, ClassSummary] | None, split: ClassCosts | None,
                ) -> FleetCost:  # fmt: skip
    """The fleet's cost; with classes, per-task figures charge only the task classes' attributed spend."""
    record = cost_record(FleetCost, basis, fleet)
    if classes is None or split is None:
        return record
    attributed = {"attribution": ATTRIBUTION, "unattributed_usd": split.unattributed_usd}
    with_tasks = _task_class_costs(classes)
    if not with_tasks:
        return record.model_copy(update=attributed)
    task_cost = RunCost(0.0, sum(c.usd for c in with_tasks), sum(c.joules for c in with_tasks), 0.0, fleet.tasks)
    per_task = cost_record(FleetCost, basis, task_cost)
    reasons = _merged_reasons(record, per_task)
    per_task_figures = {name: getattr(per_task, name) for name in PER_TASK}
    return record.model_copy(update={**per_task_figures, **attributed, "undefined": reasons or None})


PER_TASK = ("usd_per_task", "tasks_per_usd", "joules_per_task")


def kv_transfer_summary(records: RunRecords, kv: KVTransferRecords) -> KVTransferSummary:
    """Handoffs of the measured requests; TTFT split at the prefill's end and the KV's arrival.

    With arrival ``a``, prefill end ``p``, arrival of the KV at the decode pool ``k`` and the
    first token at the client ``f``: ``prefill_s = p - a``, ``transfer_s = k - p``,
    ``decode_first_s = f - k``; they sum to ``ttft_s = f - a``.
    """
    r, c = records.requests, kv.columns
    measured = measured_rows(r, records.warmup_s)
    ids = r["id"][measured]
    rows = np.isin(c["request"], ids)
    order = np.searchsorted(r["id"], c["request"][rows])  # records are sorted by id
    a, f = r["arrival_s"][order], r["first_token_s"][order]
    p, k, nbytes = c["prefill_end_s"][rows], c["arrival_s"][rows], c["bytes"][rows]
    count = int(rows.sum())
    return KVTransferSummary(
        decode_backend=kv.decode_backend,
        handoff=kv.kind,
        handoffs=count,
        bytes_moved=float(nbytes.sum()),
        bytes_per_handoff=float(nbytes.mean()) if count else math.nan,
        prefill_s=distribution_stats(p - a),
        transfer_s=distribution_stats(k - p),
        decode_first_s=distribution_stats(f - k),
        undefined={"bytes_per_handoff": NO_REQUESTS} if not count else None,
    )


def _tier_summary(replicas: Sequence[KVTierRecords], i: int) -> KVTierSummary:
    """Tier ``i`` of one backend, summed over its replicas; only the last tier drops blocks."""
    first = replicas[0]
    hits = int(sum(r.loaded[i] for r in replicas))
    peaks = [r.occupancy[i].maximum() / max(r.capacity_blocks[i], 1) for r in replicas]
    return KVTierSummary(
        capacity_blocks=first.capacity_blocks[i],
        peak_occupancy=max(peaks),
        blocks_in=int(sum(r.demoted[i] for r in replicas)),
        hit_blocks=hits,
        hit_tokens=hits * first.block_tokens,
        bytes_up=hits * first.block_bytes,
        blocks_dropped=sum(r.dropped for r in replicas) if i == len(first.names) - 1 else 0,
    )


def _tiers_summary(replicas: Sequence[KVTierRecords]) -> KVTiersSummary:
    """One backend's tiers and loads, summed over its replicas."""
    return KVTiersSummary(
        tiers={tier: _tier_summary(replicas, i) for i, tier in enumerate(replicas[0].names)},
        loads=sum(len(r.load_pairs_s) for r in replicas),
        loads_declined=sum(r.declined for r in replicas),
        blocks_lost=sum(r.lost for r in replicas),
        load_s=sum(float(r.load_pairs_s[:, 0].sum()) for r in replicas),
        ttft_saved_s=sum(float((r.load_pairs_s[:, 1] - r.load_pairs_s[:, 0]).sum()) for r in replicas),
    )


def kv_tier_summaries(tiers: Sequence[KVTierRecords]) -> dict[str, KVTiersSummary]:
    """Each backend's KV tiers, summed over its replicas (counts over the whole run)."""
    backends: dict[str, list[KVTierRecords]] = {}
    for replica in tiers:
        backends.setdefault(replica.backend, []).append(replica)
    return {name: _tiers_summary(replicas) for name, replicas in backends.items()}


def task_summary(records: RunRecords, klass: int | None = None) -> TaskSummary:
    """Task completion time, where it went, calls and tokens per task, tasks per hour."""
    t = records.tasks
    keep = (t["start_s"] >= records.warmup_s) & (t["failed"] == 0) & (t["parent"] == -1)
    if klass is not None:
        keep &= t["class"] == klass
    duration = t["end_s"][keep] - t["start_s"][keep]
    window = max(records.end_s - records.warmup_s, 1e-12)
    total = duration.sum() if duration.size else 0.0
    return TaskSummary(
        task_time_s=distribution_stats(duration, NO_TASKS),
        tasks_completed=int(keep.sum()),
        tasks_failed=int(((t["failed"] == 1) & (t["parent"] == -1)).sum()),
        subagent_tasks=int((t["parent"] != -1).sum()),
        tasks_per_hour=float(keep.sum()) / window * 3600.0,
        calls_per_task=float(t["calls"][keep].mean()) if keep.any() else float("nan"),
        input_tokens_per_task=float(t["input_tokens"][keep].mean()) if keep.any() else float("nan"),
        output_tokens_per_task=float(t["output_tokens"][keep].mean()) if keep.any() else float("nan"),
        time_share=TaskParts(
            **{part: float(t[f"{part}_s"][keep].sum() / total) if total else float("nan") for part in TASK_PARTS}
        ),
        mean_seconds=TaskParts(
            **{part: float(t[f"{part}_s"][keep].mean()) if keep.any() else float("nan") for part in TASK_PARTS}
        ),
    )


def overload_message(summary: RunSummary) -> str:
    """Why a run's queue never drains, in words (empty when it does)."""
    if not summary.overloaded or summary.offered_requests_per_s is None:
        return ""
    offered, capacity = summary.offered_requests_per_s, summary.capacity_requests_per_s
    return (
        f"offered load {offered:.3g} req/s is {offered / capacity:.1f}x the fleet's capacity (about "
        f"{capacity:.3g} req/s at saturation for these lengths): the queue grows without bound, so latencies "
        f"depend on how long the run lasts; add replicas or lower the rate"
    )
