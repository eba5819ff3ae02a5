"""The run summary as typed records: named fields, read by attribute, written as ``summary.json``.

A number that cannot be computed (nothing measured in the window, a 1-token answer's
inter-token time) is NaN in memory and ``null`` in JSON, with the reason under ``undefined``
in the record that holds it. :meth:`RunSummary.to_dict` gives the JSON document's shape, key
for key: a part that does not apply (``tasks`` of a run without agents, ``classes`` of a
one-class run, ``undefined`` where everything is defined) is left out. Summaries read back
from ``summary.json`` (``null`` for NaN) validate into the same records. Metric definitions
are in :mod:`simulator.results.metrics`.

``schema_version`` numbers the document's shape: a change that renames or moves a field, or
adds one, increments it; ``schema`` names it (``infersim-summary/<version>``), and
``infersim schema summary`` prints the JSON Schema of these records (``null`` allowed wherever a
number may be undefined). Version 2 added ``std``, ``min``, ``max`` and ``p99_9`` to every
distribution and ``requests_failed``, ``mean_concurrency``, ``peak_concurrency`` and
``peak_output_tok_s`` to the run; a version-1 document reads with those NaN. Version 3 added
``ttst_s`` (time to second token) to the run and each class, and ``speculation`` (verify passes
and acceptance length) to a run that speculates; an older document reads without them. Parts that
only some runs have (``kv_transfers``, ``kv_tiers``, ``failures``, ``power``, ``api``) are left out
where they do not apply and need no new version.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    WithJsonSchema,
    model_serializer,
    model_validator,
)

#: A number that is NaN where undefined (``null`` in JSON, read back as NaN).
Number = Annotated[
    float,
    BeforeValidator(lambda value: math.nan if value is None else value),
    WithJsonSchema({"anyOf": [{"type": "number"}, {"type": "null"}]}),
]
SCHEMA_VERSION: Literal[3] = 3
SUMMARY_SCHEMA = f"infersim-summary/{SCHEMA_VERSION}"
Reasons = dict[str, str]


class Record(BaseModel):
    """A frozen part of a summary; a field left at its default of None is not written."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_serializer(mode="wrap")
    def _present(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        fields = type(self).model_fields
        return {key: value for key, value in data.items() if value is not None or fields[key].is_required()}

    def to_dict(self) -> dict[str, Any]:
        """The JSON document's shape (NaN where undefined; :func:`simulator.serialize.strict_json` writes null)."""
        data: dict[str, Any] = self.model_dump(by_alias=True)
        return data


class DistributionStats(Record):
    """Count, mean, percentiles, standard deviation (ddof 0), min and max of a metric over the
    measured requests (or tasks); ``p99_9`` is the 99.9th percentile. Fields added in schema 2
    read as NaN from a schema-1 document."""

    count: int
    mean: Number
    p50: Number
    p90: Number
    p95: Number
    p99: Number
    p99_9: Number = math.nan
    std: Number = math.nan
    min: Number = math.nan
    max: Number = math.nan
    undefined: Reasons | None = None


class TaskParts(Record):
    """One number per part of a task's time (seconds, or a share of the task time)."""

    model: Number
    queue: Number
    tool: Number
    subagent: Number
    network: Number
    undefined: Reasons | None = None


class TaskSummary(Record):
    """Agent tasks: completion time, where it went, calls and tokens per task, tasks per hour."""

    task_time_s: DistributionStats
    tasks_completed: int
    tasks_failed: int
    subagent_tasks: int
    tasks_per_hour: Number
    calls_per_task: Number
    input_tokens_per_task: Number
    output_tokens_per_task: Number
    time_share: TaskParts
    mean_seconds: TaskParts
    undefined: Reasons | None = None


class ReplicaSummary(Record):
    backend: str
    busy_fraction: Number
    compute_utilisation: Number
    memory_bandwidth_utilisation: Number
    iterations: int
    undefined: Reasons | None = None


class BackendCost(Record):
    """What one backend cost over the window (per-task figures are the fleet's)."""

    basis: str
    usd_per_hour: Number
    usd: Number
    idle_usd: Number
    usd_per_million_output_tokens: Number
    joules_per_output_token: Number
    undefined: Reasons | None = None


class FleetCost(Record):
    """What the fleet cost over the window, per token and per task."""

    basis: str  # the backends' basis, or "mixed"
    usd_per_hour: Number
    usd: Number
    idle_usd: Number
    usd_per_million_output_tokens: Number
    usd_per_task: Number
    tasks_per_usd: Number
    joules_per_output_token: Number
    joules_per_task: Number
    attribution: str | None = None  # how the classes' costs were split (runs with classes)
    unattributed_usd: Number | None = None  # $ of backends no class used in the window
    undefined: Reasons | None = None


class ClassCost(Record):
    """One class's part of the fleet's cost (:mod:`simulator.results.attribution` states the rule).

    ``usd_per_task``, ``tasks_per_usd`` and ``joules_per_task`` use the class's own tasks and
    dollars, so other classes' spend is not charged to them; ``usd_by_backend`` sums to ``usd``.
    """

    usd_per_hour: Number
    usd: Number
    idle_usd: Number
    share_of_fleet_usd: Number
    joules: Number
    output_tokens: Number
    usd_per_million_output_tokens: Number
    usd_per_task: Number
    tasks_per_usd: Number
    joules_per_output_token: Number
    joules_per_task: Number
    usd_by_backend: dict[str, float]
    undefined: Reasons | None = None


class BackendSummary(Record):
    """One backend of the fleet: what it served, how busy it was, what it cost."""

    hardware: str
    model: str
    replicas: int
    chips: int
    requests_completed: int
    output_tok_s: Number
    busy_fraction: Number
    cost: BackendCost
    undefined: Reasons | None = None


class KVTransferSummary(Record):
    """A disaggregated backend's handoffs over the window: what crossed, and TTFT in parts.

    Each measured request's ``ttft_s`` is ``prefill_s + transfer_s + decode_first_s`` exactly
    (:func:`simulator.results.metrics.kv_transfer_summary`).
    """

    decode_backend: str
    handoff: str  # "kv" (the KV crosses) or "prompt" (the decode pool prefills it again)
    handoffs: int
    bytes_moved: Number
    bytes_per_handoff: Number
    prefill_s: DistributionStats  # arrival to prefill end: half trip, prefill queue, prefill
    transfer_s: DistributionStats  # prefill end to arrival at the decode pool
    decode_first_s: DistributionStats  # arrival at the decode pool to the first token at the client
    undefined: Reasons | None = None


class KVTierSummary(Record):
    """One KV tier of a backend over the whole run, summed over its replicas
    (:func:`simulator.results.metrics.kv_tier_summaries`)."""

    capacity_blocks: int  # per replica
    peak_occupancy: Number  # most blocks one replica's tier held / its capacity
    blocks_in: int  # blocks evicted into the tier (from above)
    hit_blocks: int  # blocks loaded up from the tier
    hit_tokens: int
    bytes_up: Number
    blocks_dropped: int  # pushed off the tier, out of the hierarchy (last tier only)
    undefined: Reasons | None = None


class KVTiersSummary(Record):
    """A backend's KV tiers: each tier, and what loading from them saved."""

    tiers: dict[str, KVTierSummary]
    loads: int
    loads_declined: int  # found below but computing again was faster
    blocks_lost: int  # loaded, but no room left in the serving tier
    load_s: Number  # summed over loads
    ttft_saved_s: Number  # summed over loads: recompute alone - load (an estimate)
    undefined: Reasons | None = None


class FailureSummary(Record):
    """Failures of the run (:func:`simulator.results.metrics.failure_summary`): the replicas' observed
    share of the window up, and what failed over the whole run."""

    availability: Number  # mean over the replicas of the share of the window each was up
    expected_availability: Number  # mean MTBF / (MTBF + MTTR) of the replicas that fail at random (NaN: none)
    failures: int  # replica failures over the run (drawn and planned)
    requests_retried: int  # lost to a failure and sent to another replica
    requests_failed: int  # answered with an error: lost and not retried, or arrived with no replica up
    stragglers: int  # replicas slowed for the run
    replica_availability: list[Number]  # per replica, in replica order
    undefined: Reasons | None = None


class BackendPower(Record):
    """A power-capped backend over the whole run (:func:`simulator.results.power.power_summaries`)."""

    cap_w: float  # per chip
    busy_w: float  # per chip, while its replica runs an iteration
    idle_w: float  # per chip, otherwise
    throughput_share: float  # of the uncapped throughput (the hardware's power.cap_curve)
    chips: int
    energy_j: Number  # integral of the chips' power over [0, end]
    mean_power_w: Number  # energy_j / run time, all chips
    joules_per_output_token: Number
    output_tok_s_per_kw: Number  # output tok/s over the run per kW of cap (chips x cap_w)
    undefined: Reasons | None = None


class ApiSummary(Record):
    """A hosted API backend with an ``api`` section over the whole run
    (:func:`simulator.results.api_limits.api_summaries`)."""

    requests_per_minute: int | None = None  # its limits (none: not limited)
    tokens_per_minute: int | None = None
    concurrent_requests: int | None = None
    accepted: int  # requests the provider accepted
    refused: int  # 429 answers
    retries: int  # requests sent again after a 429
    failed: int  # requests whose retries ran out
    spilled: int  # requests the router sent elsewhere because these limits would have refused them
    peak_requests_per_minute: int  # most accepted in any trailing minute
    peak_tokens_per_minute: float  # most tokens accepted in any trailing minute


class LatencyStats(Record):
    """The request latency distributions (fields shared by the run and each class)."""

    ttft_s: DistributionStats
    ttst_s: DistributionStats | None = None  # schema 3 on
    tpot_s: DistributionStats
    e2e_s: DistributionStats
    per_user_output_tok_s: DistributionStats
    normalized_tpot_s: DistributionStats
    queueing_delay_s: DistributionStats


class SpeculationSummary(Record):
    """Speculative verify passes of the window and how many drafted tokens they accepted
    (:mod:`simulator.results.metrics`: vLLM bench's ``spec_decode_*`` figures)."""

    verify_passes: int  # one per decoding sequence per verify (vLLM's num_drafts)
    draft_tokens: int
    accepted_tokens: int
    acceptance_length: Number  # tokens per verify pass: 1 + accepted / passes
    acceptance_rate: Number  # accepted / drafted
    per_position_acceptance: list[float]  # draft i: passes accepting it / passes drafting it
    undefined: Reasons | None = None


class Statistics(Record):
    """How each statistic was computed: which are exact, which come from histograms (and their bins)."""

    request_rows: str  # kept in memory (every order statistic exact) or streamed (digested)
    exact: list[str]  # metrics whose every statistic is exact
    binned: dict[str, str]  # metric -> what comes from its histogram, and the bin width
    levels: str  # the resolution of levels.csv and of the timeline figure


class ClassSummary(LatencyStats):
    """One workload class: its latencies, its goodput under its own SLOs, its tasks."""

    priority: int
    requests_completed: int
    requests_per_s: Number
    goodput_requests_per_s: Number
    slo_attainment: Number
    tasks: TaskSummary | None = None
    cost: ClassCost | None = None
    undefined: Reasons | None = None


class RunSummary(LatencyStats):
    """Everything a run measured in its window (the metrics of :mod:`simulator.results.metrics`)."""

    model_config = ConfigDict(populate_by_name=True)

    document_schema: str = Field(SUMMARY_SCHEMA, alias="schema")
    schema_version: Literal[1, 2, 3] = SCHEMA_VERSION
    itl_s: DistributionStats
    requests_completed: int
    requests_dropped: int
    requests_rejected_over_budget: int
    requests_in_flight: int  # GuideLLM's "incomplete": arrived, not answered when the run ended
    requests_failed: int = 0  # vLLM's "failed": dropped + rejected over budget (no answer)
    mean_concurrency: Number = math.nan
    peak_concurrency: Number = math.nan
    peak_output_tok_s: Number = math.nan
    speculation: SpeculationSummary | None = None  # runs that speculate (schema 3 on)
    window_s: Number
    requests_per_s: Number
    output_tok_s: Number
    input_tok_s: Number
    goodput_requests_per_s: Number
    preemptions: int
    mean_batch_size: Number
    mean_queue_length: Number
    mean_kv_occupancy: Number
    replicas: list[ReplicaSummary]
    replica_count: int
    prefix_cache_hit_rate: Number
    tasks: TaskSummary | None = None
    classes: dict[str, ClassSummary] | None = None
    backends: dict[str, BackendSummary]
    kv_transfers: dict[str, KVTransferSummary] | None = None  # per disaggregated (prefill) backend
    kv_tiers: dict[str, KVTiersSummary] | None = None  # per backend with KV tiers
    failures: FailureSummary | None = None  # with failures in the scenario
    power: dict[str, BackendPower] | None = None  # per power-capped backend
    api: dict[str, ApiSummary] | None = None  # per backend with an api section
    cost: FleetCost
    capacity_requests_per_s: Number
    offered_requests_per_s: Number | None
    overloaded: bool
    statistics: Statistics | None = None
    undefined: Reasons | None = None

    @model_validator(mode="before")
    @classmethod
    def _name_schema(cls, data: Any) -> Any:
        """A document without ``schema`` (version 1) is named by its ``schema_version``."""
        if isinstance(data, dict) and "schema" not in data and "document_schema" not in data:
            return {**data, "schema": f"infersim-summary/{data.get('schema_version', SCHEMA_VERSION)}"}
        return data

    def to_dict(self) -> dict[str, Any]:
        """The document with ``schema`` and ``schema_version`` first (then the fields in their order)."""
        data = super().to_dict()
        return {"schema": data.pop("schema"), "schema_version": data.pop("schema_version"), **data}

    def metric(self, path: str) -> float:
        """A number by its dotted path in the document (``ttft_s.p99``, ``classes.chat.tasks.tasks_completed``,
        ``replicas.0.busy_fraction``); NaN where the run has no such number."""
        node: Any = self
        for part in path.split("."):
            if isinstance(node, BaseModel) and part in type(node).model_fields:
                node = getattr(node, part)
            elif isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return math.nan
        return float(node) if isinstance(node, int | float) else math.nan
