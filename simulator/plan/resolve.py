"""Resolve a scenario before it runs: every lookup, placement, price, fit check and estimate, once.

:func:`resolve` turns a validated :class:`~simulator.config.scenario.Scenario` and a
:class:`~simulator.config.loading.Catalog` into a :class:`ResolvedScenario` of frozen plans,
one per backend and one per workload class; the engine only wires them into processes
(:func:`simulator.engine.build.build`). Nothing here uses SimPy or randomness.

- **Backends.** Each backend's deployment is placed on its hardware, its layout chosen for the
  first class's question unless pinned (:func:`~simulator.analytic.layouts.deploy`); a replica
  gets the scheduler's batch cap and token budget (else its serving stack's),
  ``floor(KV budget / (block tokens x KV bytes per token))``
  KV blocks, and holds at most ``min(blocks x block tokens, context window)`` tokens of one
  request. Swap preemption moves a block to the next slower tier in
  ``block tokens x KV bytes per token / (chips x bandwidth x efficiency)`` seconds (every chip
  moves its own shard). Its price comes from its cost basis
  (:func:`~simulator.analytic.economics.resolve_pricing`).
- **Disaggregation and KV tiers.** A backend with ``decode_on`` is paired with that backend
  while both have replicas (:func:`_paired`): classes are routed to the prefill backend only,
  and it takes requests both pools can hold. A scheduler's ``kv_tiers`` become per-replica
  block capacities and load times (:func:`_tier_plan`).
- **Classes.** Each class may use its ``router.rules`` backends (else all) that have
  replicas. Its load is resolved by the function registered for the load's config class
  (:func:`load_plan`): the agent workload looked up, trace files read, the mean call that must
  fit a replica, the peak offered load and an upper bound on the calls it makes.
- **Self-contained.** The resolved scenario holds the hardware, model, serving stack and
  workload profiles it ran with (with their provenance), so written out it reruns the same after the
  catalog's profiles change.
- **Capacity.** A class offered ``lambda`` requests/s alone on its backends uses
  ``rho = lambda / sum(replicas x X)``, with ``X`` the analytic saturation throughput of one
  replica at the class's mean lengths; classes whose backends overlap share one ``rho`` (the
  sum). When every class is open loop, the fleet's capacity is ``offered / max rho``: offered
  above it, a queue grows without bound. A fleet with a disaggregated backend has no such
  estimate (NaN): its capacity is the slower of two pools doing different work.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from simulator.analytic.economics import CostError, Pricing, assumptions_of, resolve_pricing
from simulator.analytic.estimate import estimate, saturation_concurrency
from simulator.analytic.layouts import Question, deploy
from simulator.analytic.placement import Deployment, PlacementError
from simulator.analytic.power import ChipPower, PowerCapError, chip_power
from simulator.analytic.step_time import CostModel, StepCostModel
from simulator.config.api_limits import ApiBehaviour
from simulator.config.batching import BatchingSpec, KVTierSpec
from simulator.config.deployment import DeploymentSpec
from simulator.config.distributions import Constant
from simulator.config.fleet import BackendSpec, KVLinkSpec
from simulator.config.hardware import MemoryTier
from simulator.config.loading import Catalog
from simulator.config.paths import write_in
from simulator.config.scenario import ClosedLoop, Load, OpenLoop, RequestLengths, Scenario, WorkloadClass
from simulator.config.stack import ApiTime
from simulator.config.workload import AgentsLoad, AgentTaskSpec, TraceLoad
from simulator.errors import InfersimError, naming
from simulator.io.taskgraph import TaskGraph, load_task_graphs
from simulator.io.traces import Session, TraceRequest, load_azure, load_mooncake, load_weka_dir, scale_rate
from simulator.io.traces import window as clip_window
from simulator.plan.limits import RunSize, fastest_call_s


class ScenarioError(InfersimError):
    """A scenario that validates but cannot run as asked; the message says why."""


@dataclass(frozen=True)
class TierPlan:
    """One KV tier below a replica's serving tier: how many KV blocks it holds, how fast one moves
    (the engine's tier of the kind its ``spec`` registered times the moves: :mod:`simulator.engine.kv.tiers`)."""

    name: str
    blocks: int  # per replica
    s_per_block: float  # to the serving tier: block tokens x KV bytes per token / bandwidth
    latency_s: float  # fixed time of one transfer
    spec: KVTierSpec  # what the scenario asked for (its class chooses the engine's kind of tier)


@dataclass(frozen=True)
class BackendPlan:
    """One backend resolved: its deployment, the shape of each replica, its network distance, its price."""

    index: int
    name: str
    deployment: Deployment
    replicas: int
    scheduler: BatchingSpec
    batch_cap: int  # sequences per iteration
    max_batched_tokens: int  # tokens per iteration
    kv_block_tokens: int
    kv_blocks: int  # per replica
    max_tokens: int  # prompt + output one request may hold (KV or context)
    swap_tier: TierPlan | None  # where swap preemption moves KV (None: the scheduler does not swap)
    one_way_s: float  # half the network round trip (the scenario's plus a hosted API's)
    pricing: Pricing
    prefix_caching: bool
    cost: CostModel
    decode_backend: int | None = None  # disaggregated: the backend its requests decode on
    kv_link: KVLinkSpec | None = None  # ... and the link their KV crosses
    decodes_for: int | None = None  # a decode pool: the backend it decodes for (routed no requests)
    kv_tiers: tuple[TierPlan, ...] = ()  # below the serving tier, fastest first
    front_end_s: float = 0.0  # a hosted API's time before a replica sees a request (StackProfile.api)
    power: ChipPower | None = None  # the deployment's power cap: its chips' draw and step stretch
    api: ApiBehaviour | None = None  # a hosted API's per-request times, rate limits and retries

    @property
    def window(self) -> int | None:
        """The model's window (tokens; a chunked one as :class:`~simulator.config.model.ChunkedWindow`), or None."""
        return self.deployment.model.attention.window

    @property
    def decode_step_tokens(self) -> float:
        """Tokens a decode pass verifies per sequence: ``gamma + 1`` with speculative decoding, else 1."""
        spec = self.deployment.speculative
        return spec.tokens_proposed + 1.0 if spec else 1.0

    @property
    def usd_per_replica_hour(self) -> float:
        """What one replica costs per hour on a rental or ownership basis (0 when paid per token)."""
        return self.deployment.replica_chips * self.pricing.usd_per_chip_hour

    def capacity_requests_per_s(self, lengths: RequestLengths) -> float:
        """Analytic saturation throughput of one replica at the mean request lengths."""
        prompt, answer = max(1, round(lengths.input_tokens.mean)), max(1, round(lengths.output_tokens.mean))
        users = min(self.batch_cap, saturation_concurrency(self.deployment, prompt, answer))
        return estimate(self.deployment, prompt, answer, users, strict=False).aggregate_output_tok_s / answer


@dataclass(frozen=True)
class ClassRouting:
    """What the router knows about a workload class."""

    name: str
    ttft_bound_s: float | None
    tpot_bound_s: float | None
    mean_output_tokens: float | None  # None: use the request's own (trace replays carry it)


@dataclass(frozen=True)
class CallEstimate:
    """An upper bound on the model calls a load makes, with the clients it starts (run-size limits)."""

    calls: float
    users: int = 0
    agents: int = 0
    how: str = ""


@dataclass(frozen=True)
class LoadPlan:
    """A class's load resolved: what it reads, what it offers, how much it can ask for."""

    task: AgentTaskSpec | None = None  # the agent workload's task
    requests: tuple[TraceRequest, ...] | None = None  # a request trace as replayed (windowed, rate-scaled)
    sessions: tuple[Session, ...] | None = None  # agent sessions of a trace
    graphs: tuple[TaskGraph, ...] | None = None  # task graphs of a trace
    typical_call: tuple[float, float] | None = None  # mean (prompt, output) of a call; None: no fit check
    offered: tuple[float, RequestLengths] | None = None  # (peak requests/s, mean lengths) of an open load
    calls: CallEstimate | None = None  # None: finite (a trace) or unknown
    makes_tasks: bool = False  # whether it runs agent tasks

    @property
    def mean_output_tokens(self) -> float | None:
        return None if self.typical_call is None else self.typical_call[1]


@dataclass(frozen=True)
class LoadContext:
    """What a load's resolver may use: its class, the catalog, its backends, how long arrivals last."""

    klass: WorkloadClass
    catalog: Catalog
    backends: tuple[BackendPlan, ...]  # those it may use that have replicas
    duration_s: float

    def fastest_call_s(self, typical: tuple[float, float]) -> float:
        """:func:`~simulator.plan.limits.fastest_call_s` of a typical call, once it is known to fit a replica
        (the estimate's cost grows with the prompt: a length no replica holds is refused first)."""
        _check_fits(self.klass, typical, self.backends)
        return fastest_call_s([b.deployment for b in self.backends], *typical)


@dataclass(frozen=True)
class ClassPlan:
    """One workload class resolved: its load, where it may go, what it offers."""

    index: int
    name: str
    priority: int
    load: Load
    lengths: RequestLengths | None  # of independent requests (open and closed loops)
    load_plan: LoadPlan
    routing: ClassRouting
    backends: tuple[int, ...]  # indices of the backends it may use that have replicas
    max_tokens: int  # the most one of its requests may hold on any of them

    @property
    def task(self) -> AgentTaskSpec | None:
        return self.load_plan.task


@dataclass(frozen=True)
class ResolvedScenario:
    """A scenario with everything it needs resolved: what the engine wires and the limits check."""

    scenario: Scenario  # self-contained: every profile it names written in
    backends: tuple[BackendPlan, ...]
    classes: tuple[ClassPlan, ...]
    capacity_requests_per_s: float  # the fleet's saturation throughput (NaN unless every class is open)
    offered_requests_per_s: float | None  # peak offered load (None unless every class is open)
    size: RunSize = field(compare=False)

    @property
    def replicas(self) -> int:
        return sum(b.replicas for b in self.backends)


# -- backends ---------------------------------------------------------------------------------
def _swap_tier(backend: str, deployment: Deployment, tiers: tuple[TierPlan, ...], block_bytes: float) -> TierPlan:
    """Where swap preemption moves a replica's KV: its first KV tier, else the profile's next memory
    tier slower than the serving tier (every chip moving its own shard: ``chips * bandwidth * efficiency``)."""
    if tiers:
        return tiers[0]
    serving = deployment.weights_tier.bandwidth.value
    slower = [t for t in deployment.hardware.memory if t.bandwidth.value < serving]
    if not slower:
        raise ScenarioError(
            f"swap preemption needs a memory tier slower than {deployment.weights_tier.name} on "
            f"{deployment.hardware.id}, and the profile has none; use preemption: recompute"
        )
    return _tier_plan(backend, 0, KVTierSpec(name=slower[0].name), deployment, block_bytes)


def layout_question(scenario: Scenario, catalog: Catalog) -> Question:
    """What an unpinned layout is chosen for: the first class's mean lengths (an agent's mean call,
    up to the first backend's model's context) and its users or agents (saturation for open loops
    and traces)."""
    klass = scenario.workload_classes[0]
    load = klass.load
    if isinstance(load, AgentsLoad):
        task = catalog.workload(load.workload).task
        prompt, answer = task.mean_call(catalog.model(scenario.fleet[0].deployment.model).max_context_tokens)
        users = load.agents
    elif klass.requests is not None:
        prompt, answer = klass.requests.input_tokens.mean, klass.requests.output_tokens.mean
        users = load.users if isinstance(load, ClosedLoop) else None
    else:
        return Question()
    return Question(max(1, round(prompt)), max(1, round(answer)), users)


def api_round_trip_s(stack: ApiTime | None, behaviour: ApiBehaviour | None) -> float:
    """A hosted API's mean round trip: the backend's drawn one's mean, else the stack's constant, else 0."""
    if behaviour is not None and behaviour.round_trip is not None:
        return behaviour.round_trip.mean
    return stack.round_trip.value if stack is not None else 0.0


def api_front_end_s(stack: ApiTime | None, behaviour: ApiBehaviour | None) -> float:
    """A hosted API's mean front-end time: the backend's drawn one's mean, else the stack's constant, else 0."""
    if behaviour is not None and behaviour.front_end is not None:
        return behaviour.front_end.mean
    return stack.front_end.value if stack is not None else 0.0


def _deployment_field(spec: BackendSpec, scenario: Scenario) -> str:
    """Where a backend's deployment is in the scenario file: ``deployment`` or ``backends.NAME.deployment``."""
    return "deployment" if scenario.backends is None else f"backends.{spec.name}.deployment"


def _backend_deployment(spec: BackendSpec, scenario: Scenario, catalog: Catalog, question: Question) -> Deployment:
    """The backend's deployment (its layout chosen for ``question`` unless pinned); a placement
    error about a field is raised again naming the field's path in the scenario."""
    try:
        return deploy(catalog, spec.deployment, question)
    except PlacementError as exc:
        if exc.field is None:
            raise
        # the message starts with the field
        raise PlacementError(f"{_deployment_field(spec, scenario)}.{exc}") from None


def _backend_pricing(spec: BackendSpec, scenario: Scenario, deployment: Deployment) -> Pricing:
    """The backend's pricing on its cost basis (else the scenario's); a missing price is a ScenarioError."""
    try:
        return resolve_pricing(deployment.hardware, deployment.model.id, spec.cost_basis or scenario.cost.basis,
                               assumptions_of(scenario.cost))  # fmt: skip
    except CostError as exc:
        raise ScenarioError(f"backend {spec.name}: {exc}") from None


def _backend_power(spec: BackendSpec, scenario: Scenario, deployment: Deployment) -> ChipPower | None:
    """The chips' power under the deployment's ``power_cap`` (None without a cap)."""
    if spec.deployment.power_cap is None:
        return None
    where = _deployment_field(spec, scenario)
    try:
        return chip_power(deployment.hardware, spec.deployment.power_cap, f"{where}.power_cap")
    except PowerCapError as exc:
        raise ScenarioError(str(exc)) from None


def _tier_plans(backend: str, sched: BatchingSpec, deployment: Deployment, block_bytes: float) -> tuple[TierPlan, ...]:
    """The KV tiers below the serving tier (none without ``scheduler.kv_tiers``), which must be
    listed fastest first."""
    if not sched.kv_tiers:
        return ()
    tiers = tuple(_tier_plan(backend, i, t, deployment, block_bytes) for i, t in enumerate(sched.kv_tiers.tiers))
    for upper, lower in itertools.pairwise(tiers):
        if lower.s_per_block < upper.s_per_block:
            raise ScenarioError(f"backend {backend}: scheduler.kv_tiers: tier {lower.name} is faster than "
                                f"{upper.name}"
                                " above it; list the tiers fastest first")  # fmt: skip
    return tiers


def backend_plan(
    index: int, spec: BackendSpec, scenario: Scenario, catalog: Catalog, question: Question
) -> BackendPlan:
    """A backend's deployment (its layout chosen for ``question`` unless pinned), replica shape,
    transfer times and pricing; batching caps the scheduler leaves empty are the stack's."""
    deployment = _backend_deployment(spec, scenario, catalog, question)
    sched = spec.scheduler or scenario.scheduler
    kv_blocks = int(deployment.kv_budget_bytes // (sched.kv_block_tokens * deployment.kv_bytes_per_token))
    pricing = _backend_pricing(spec, scenario, deployment)
    block_bytes = sched.kv_block_tokens * deployment.kv_bytes_per_token
    tiers = _tier_plans(spec.name, sched, deployment, block_bytes)
    api = deployment.stack.api  # a hosted API: its round trip and front end (StackProfile.api)
    power = _backend_power(spec, scenario, deployment)
    swaps_to = _swap_tier(spec.name, deployment, tiers, block_bytes) if sched.swaps else None
    return BackendPlan(
        index=index,
        name=spec.name,
        deployment=deployment,
        replicas=spec.replicas,
        scheduler=sched,
        batch_cap=sched.max_batch_size or deployment.max_batch_size,
        max_batched_tokens=sched.max_batched_tokens or deployment.max_batched_tokens,
        kv_block_tokens=sched.kv_block_tokens,
        kv_blocks=kv_blocks,
        max_tokens=min(kv_blocks * sched.kv_block_tokens, deployment.model.max_context_tokens),
        swap_tier=swaps_to,
        one_way_s=(spec.network_rtt + api_round_trip_s(api, spec.api)) / 2.0,
        front_end_s=api_front_end_s(api, spec.api),
        power=power,
        api=spec.api,
        pricing=pricing,
        prefix_caching=scenario.prefix_caching,
        cost=StepCostModel(deployment),
        kv_tiers=tiers,
    )


def _tier_plan(backend: str, index: int, tier: KVTierSpec, deployment: Deployment, block_bytes: float) -> TierPlan:
    """A KV tier's blocks and load time per block: the profile's tier (times the replica's chips,
    usable share, efficiency) unless the scenario gives capacity and bandwidth; never more than the machine has."""
    where = f"backend {backend}: scheduler.kv_tiers.tiers.{index} ({tier.name})"
    hw = deployment.hardware
    profile = next((m for m in hw.memory if m.name == tier.name), None)
    capacity, bandwidth = tier.capacity, tier.bandwidth
    if profile is None:
        if capacity is None or bandwidth is None:
            names = ", ".join(m.name for m in hw.memory)
            raise ScenarioError(f"{where}: not a memory tier of {hw.id} ({names}); give its capacity and bandwidth")
    else:
        capacity, bandwidth = _profile_tier(where, tier, deployment, profile)
    assert capacity is not None and bandwidth is not None
    return TierPlan(tier.name, int(capacity // block_bytes), block_bytes / bandwidth, tier.latency, tier)


def _profile_tier(where: str, tier: KVTierSpec, deployment: Deployment, profile: MemoryTier) -> tuple[float, float]:
    """A hardware profile's memory tier as a KV tier: ``(capacity bytes, bandwidth B/s)``, the
    scenario's own where given, else ``chips x capacity x usable share`` and ``chips x bandwidth x
    efficiency``; it must be slower than the serving tier and hold what the scenario asks."""
    hw = deployment.hardware
    if profile.bandwidth.value >= deployment.weights_tier.bandwidth.value:
        raise ScenarioError(f"{where}: a KV tier must be slower than the serving tier ({deployment.weights_tier.name})")
    available = deployment.chips * profile.capacity.value * profile.usable_fraction.value
    capacity = tier.capacity
    if capacity is not None and capacity > available:
        raise ScenarioError(
            f"{where}: capacity {capacity / 1e9:.4g} GB exceeds the {available / 1e9:.4g} GB of {tier.name} "
            f"that {deployment.chips} x {hw.id} have"
        )
    capacity = available if capacity is None else capacity
    bandwidth = tier.bandwidth or deployment.chips * profile.bandwidth.value * profile.efficiency.value
    return capacity, bandwidth


def _paired(backends: tuple[BackendPlan, ...], fleet: list[BackendSpec]) -> tuple[BackendPlan, ...]:
    """Couple each prefill backend to its decode pool while both have replicas (either alone
    serves whole requests): a request it takes must fit both; a decode pool receives its KV
    from the link, never by a swap."""
    index = {b.name: b.index for b in backends}
    paired = list(backends)
    for spec, plan in zip(fleet, backends, strict=True):
        if spec.decode_on is None:
            continue
        decode = backends[index[spec.decode_on]]
        if not (plan.replicas and decode.replicas):
            continue
        if decode.scheduler.swaps:
            raise ScenarioError(
                f"backend {decode.name} decodes for {plan.name}: it preempts by recompute (its KV arrives over "
                "the link), so give it scheduler.preemption: recompute"
            )
        # a request must fit both pools: the decode pool holds its prompt and output too
        max_tokens = min(plan.max_tokens, decode.max_tokens)
        paired[plan.index] = dataclasses.replace(plan, decode_backend=decode.index, kv_link=spec.kv_link,
                                                 max_tokens=max_tokens)  # fmt: skip
        paired[decode.index] = dataclasses.replace(decode, decodes_for=plan.index)
    return tuple(paired)


# -- loads: one resolver per load config class --------------------------------------------------
@functools.singledispatch
def load_plan(load: object, context: LoadContext) -> LoadPlan:
    """What resolving needs of a class's load, by the class of its config.

    A new kind of load registers its resolver with ``@load_plan.register``; without one its
    calls are not bounded up front and its requests are checked as they arrive.
    """
    lengths = context.klass.requests
    if lengths is None:
        return LoadPlan()
    return LoadPlan(typical_call=(lengths.input_tokens.mean, lengths.output_tokens.mean))


@load_plan.register
def _open_loop(load: OpenLoop, context: LoadContext) -> LoadPlan:
    """Open loop: ``peak rate x duration`` calls."""
    lengths = context.klass.requests
    assert lengths is not None
    rate = load.arrivals.peak_rate_per_s
    calls = CallEstimate(rate * context.duration_s, how=f"{rate:g} req/s x {context.duration_s:g} s")
    return LoadPlan(
        typical_call=(lengths.input_tokens.mean, lengths.output_tokens.mean), offered=(rate, lengths), calls=calls
    )


@load_plan.register
def _closed_loop(load: ClosedLoop, context: LoadContext) -> LoadPlan:
    """Closed loop: ``users x duration / (mean think time + fastest request)`` calls."""
    lengths = context.klass.requests
    assert lengths is not None
    typical = (lengths.input_tokens.mean, lengths.output_tokens.mean)
    cycle_s = load.think_time_s.mean + context.fastest_call_s(typical)
    calls = load.users * context.duration_s / cycle_s
    how = f"{load.users:,} users x {context.duration_s:g} s / {cycle_s:.3g} s per request"
    return LoadPlan(typical_call=typical, calls=CallEstimate(calls, users=load.users, how=how))


@load_plan.register
def _agents(load: AgentsLoad, context: LoadContext) -> LoadPlan:
    """Agents: ``agents x duration / fastest call`` (tools only lower it; a task's first call is its
    shortest); open-loop tasks ``tasks_per_s x duration x mean calls per task``. The typical call is
    the mean one over a task (:meth:`~simulator.config.workload.AgentTaskSpec.mean_call`, up to the
    longest request a backend holds): its prompt grows with every call."""
    task = context.catalog.workload(load.workload).task
    first = (task.system_prompt_tokens.mean + task.first_input_tokens.mean, task.output_tokens.mean)
    duration = context.duration_s
    if load.agents is not None:
        fastest_s = context.fastest_call_s(first)  # refused first where no replica holds it
        how = f"{load.agents:,} agents x {duration:g} s / {fastest_s:.3g} s per call"
        calls = CallEstimate(load.agents * duration / fastest_s, agents=load.agents, how=how)
    else:
        _check_fits(context.klass, first, context.backends)
        assert load.tasks_per_s is not None
        per_task = task.steps.mean
        how = f"{load.tasks_per_s:g} tasks/s x {duration:g} s x {per_task:.3g} calls"
        calls = CallEstimate(load.tasks_per_s * duration * per_task, how=how)
    typical = task.mean_call(max(b.max_tokens for b in context.backends))
    return LoadPlan(task=task, typical_call=typical, calls=calls, makes_tasks=True)


def _request_trace(load: TraceLoad) -> list[TraceRequest]:
    """The requests of an Azure or Mooncake trace as replayed: windowed, then rate-scaled."""
    rows = load_azure(load.path) if load.format == "azure" else load_mooncake(load.path)
    if load.window is not None:
        with naming("load.window"):
            rows = clip_window(rows, *load.window, source=str(load.path))
    return scale_rate(rows, load.rate_scale)


def _requests_offered(load: TraceLoad, rows: list[TraceRequest]) -> tuple[float, RequestLengths] | None:
    """(mean offered requests/s over the trace, its mean lengths); None for fewer than two arrival times."""
    if len(rows) < 2 or rows[-1].arrival_s <= rows[0].arrival_s:
        return None
    rate = load.sample * (len(rows) - 1) / (rows[-1].arrival_s - rows[0].arrival_s)
    lengths = RequestLengths(
        input_tokens=Constant(value=float(np.mean([r.input_tokens for r in rows]))),
        output_tokens=Constant(value=float(np.mean([r.output_tokens for r in rows]))),
    )
    return rate, lengths


@load_plan.register
def _trace(load: TraceLoad, context: LoadContext) -> LoadPlan:
    """Traces are finite: their rows are read here, and each request is checked as it arrives."""
    if load.format == "weka":
        return LoadPlan(sessions=tuple(load_weka_dir(load.path)), makes_tasks=True)
    if load.format == "taskgraph":
        return LoadPlan(graphs=tuple(load_task_graphs(load.path)), makes_tasks=True)
    rows = _request_trace(load)
    return LoadPlan(requests=tuple(rows), offered=_requests_offered(load, rows))


# -- the whole scenario -------------------------------------------------------------------------
def _check_fits(
    klass: WorkloadClass, typical_call: tuple[float, float] | None, backends: Sequence[BackendPlan]
) -> None:
    if not backends:
        raise ScenarioError(f"{klass.name}: every backend this class may use (router.rules) has 0 replicas")
    if typical_call is None:
        return  # each request is checked on arrival (too long: dropped and reported)
    typical = sum(typical_call)
    largest = max(backends, key=lambda b: b.max_tokens)
    if typical > largest.max_tokens:
        d = largest.deployment
        raise ScenarioError(
            f"{klass.name}: requests average {typical:.0f} tokens but a replica of {d.chips} x "
            f"{d.hardware.id} holds at most {largest.max_tokens} tokens of {d.model.id} KV "
            f"(or context); use more chips (deployment.min_kv_tokens) or shorter requests"
        )


def _utilisations(shares: list[tuple[set[int], float]]) -> list[float]:
    """Offered utilisation of each group of backends that classes share: ``sum(rate_k / capacity_k)``
    over the classes whose allowed backends overlap (connected components)."""
    groups: list[tuple[set[int], float]] = []
    for backends, share in shares:
        joined = [g for g in groups if g[0] & backends]
        groups = [g for g in groups if not g[0] & backends]
        groups.append((backends.union(*(g[0] for g in joined)), share + sum(g[1] for g in joined)))
    return [utilisation for _, utilisation in groups]


def _class_plan(
    index: int, klass: WorkloadClass, scenario: Scenario, catalog: Catalog, backends: tuple[BackendPlan, ...]
) -> ClassPlan:
    rules = scenario.router.rules
    by_name = {b.name: b for b in backends}
    named = [by_name[name] for name in rules[klass.name]] if klass.name in rules else list(backends)
    allowed = [b for b in named if b.replicas and b.decodes_for is None]
    duration = scenario.run.duration if scenario.run.duration is not None else math.inf
    load = load_plan(klass.load, LoadContext(klass, catalog, tuple(allowed), duration))
    _check_fits(klass, load.typical_call, allowed)
    ttft, tpot = klass.slo.request_bounds()
    return ClassPlan(
        index=index,
        name=klass.name,
        priority=klass.priority,
        load=klass.load,
        lengths=klass.requests,
        load_plan=load,
        routing=ClassRouting(klass.name, ttft, tpot, load.mean_output_tokens),
        backends=tuple(b.index for b in allowed),
        max_tokens=max(b.max_tokens for b in allowed),
    )


def _run_size(scenario: Scenario, classes: tuple[ClassPlan, ...]) -> RunSize:
    """Upper estimates of a run's model calls, clients and memory (:mod:`simulator.plan.limits`)."""
    size = RunSize(replicas=sum(b.replicas for b in scenario.fleet))
    for klass in classes:
        calls = klass.load_plan.calls
        if calls is not None:
            size.add_requests(calls.calls, f"{klass.name}: {calls.how}")
            size.users += calls.users
            size.agents += calls.agents
    if scenario.run.max_requests is not None and size.requests > scenario.run.max_requests:
        size.requests = float(scenario.run.max_requests)
        size.how = [f"run.max_requests {scenario.run.max_requests:,}"]
    return size


def _default_stacks_named(scenario: Scenario, catalog: Catalog) -> Scenario:
    """Each deployment with its serving stack named (the hardware's default where it names none),
    so that the resolved scenario carries the stack it ran on."""

    def named(d: DeploymentSpec) -> DeploymentSpec:
        if d.stack is not None:
            return d
        return d.model_copy(update={"stack": catalog.hardware(d.hardware).execution.default_stack})

    if scenario.deployment is not None:
        return scenario.model_copy(update={"deployment": named(scenario.deployment)})
    assert scenario.backends is not None
    backends = [b.model_copy(update={"deployment": named(b.deployment)}) for b in scenario.backends]
    return scenario.model_copy(update={"backends": backends})


def _offered_shares(
    classes: tuple[ClassPlan, ...], backends: tuple[BackendPlan, ...]
) -> tuple[float, list[tuple[set[int], float]]]:
    """The open classes' total offered rate (requests/s), and each one's backends with its rate
    over their capacity alone (``replicas x capacity_requests_per_s`` summed)."""
    offered, shares = 0.0, []
    for klass in classes:
        if klass.load_plan.offered is not None:
            rate, lengths = klass.load_plan.offered
            alone = sum(backends[b].replicas * backends[b].capacity_requests_per_s(lengths) for b in klass.backends)
            offered += rate
            shares.append((set(klass.backends), rate / alone))
    return offered, shares


def resolve(scenario: Scenario, catalog: Catalog) -> ResolvedScenario:
    """Every lookup, placement, price, fit check and estimate of ``scenario``, into frozen plans.

    Raises
    ------
    ScenarioError
        If a class cannot run as asked (no replicas it may use, requests longer than any
        replica holds, a price its cost basis needs, swap without a slower memory tier).
    PlacementError, ConfigError
        If a model does not fit its hardware, or a profile, workload or trace cannot be read.
    """
    scenario = write_in(
        _default_stacks_named(write_in(scenario, catalog), catalog), catalog
    )  # ids first: errors name their field
    question = layout_question(scenario, catalog)
    plans = tuple(backend_plan(i, spec, scenario, catalog, question) for i, spec in enumerate(scenario.fleet))
    backends = _paired(plans, scenario.fleet)
    classes = tuple(
        _class_plan(i, klass, scenario, catalog, backends) for i, klass in enumerate(scenario.workload_classes)
    )
    offered, shares = _offered_shares(classes, backends)
    all_open = len(shares) == len(classes)
    worst = max(_utilisations(shares), default=0.0)
    split = any(backends[b].decode_backend is not None for k in classes for b in k.backends)  # not estimated
    return ResolvedScenario(
        scenario=scenario,
        backends=backends,
        classes=classes,
        capacity_requests_per_s=offered / worst if all_open and worst > 0 and not split else math.nan,
        offered_requests_per_s=offered if all_open else None,
        size=_run_size(scenario, classes),
    )
