"""Elaboration: build the replicas and the load from a validated scenario, connect, run.

Randomness: ``SeedSequence(run.seed)`` is spawned into independent streams for the arrival
process, the request lengths of open-loop arrivals, each replica's speculative draws, the
router, and each closed-loop user (think times and lengths), so adding a user or a replica
does not perturb the others (common random numbers for what-if comparisons).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import simpy

from simulator.analytic.economics import CostError, Pricing, assumptions_of, resolve_pricing
from simulator.analytic.estimate import estimate, saturation_concurrency
from simulator.analytic.placement import Deployment, plan
from simulator.analytic.precision import matmul_precision
from simulator.analytic.step_time import StepCostModel
from simulator.config.batching import ContinuousBatching
from simulator.config.distributions import Constant
from simulator.config.fleet import BackendSpec, CostSpec
from simulator.config.loading import Catalog
from simulator.config.scenario import (
    Arrivals,
    OpenLoop,
    RateRamp,
    RateSteps,
    RequestLengths,
    Scenario,
    WorkloadClass,
)
from simulator.config.workload import AgentsLoad, AgentTaskSpec, TraceLoad
from simulator.engine.agents import AgentRuntime, closed_loop_agent, open_loop_tasks
from simulator.engine.clients import ClassSource, LengthSampler, RequestFactory, TaskCounter
from simulator.engine.fleet import Backend, ClassRouting, Router
from simulator.engine.load import closed_loop_user, open_loop
from simulator.engine.recorder import Recorder
from simulator.engine.replay import REQUEST_FORMATS, request_trace, start_replay
from simulator.engine.replica import Replica
from simulator.engine.scheduler import batch_policy
from simulator.errors import InfersimError
from simulator.limits import Limits, RunSize, class_calls
from simulator.limits import check as check_size
from simulator.records import BackendRecord, RunRecords
from simulator.resolve import BackendPlan
from simulator.traces import TraceRequest


class ScenarioError(InfersimError):
    """A scenario that validates but cannot run as asked; the message says why."""


@dataclass
class Simulation:
    """A built, not yet run, simulation: everything wired, processes started."""

    scenario: Scenario
    backends: list[Backend]
    env: simpy.Environment
    recorder: Recorder
    replicas: list[Replica]
    factory: RequestFactory
    capacity_requests_per_s: float
    offered_requests_per_s: float | None

    def run(self, progress: Callable[[float], None] | None = None) -> float:
        """Run to the end the scenario asks for; returns the simulated end time (s).

        ``progress`` is called with the fraction of the arrivals made (of ``run.duration`` or
        ``run.max_requests``), in steps of 1 / ``PROGRESS_TICKS``, and with 1.0 at the end; it
        schedules no events, so a run reports the same results with or without it.
        """
        run = self.scenario.run
        until = run.horizon
        if not run.drain:
            until = min(x for x in (run.horizon, run.duration) if x is not None)
        self.factory.progress = progress
        self.env.run(until=until)
        if progress is not None:
            progress(1.0)
        return float(self.env.now)

    def records(self, end_s: float) -> RunRecords:
        """What the run recorded, frozen (call once, after :meth:`run`)."""
        backends = []
        for b in self.backends:
            d, hw = b.deployment, b.deployment.hardware
            backends.append(BackendRecord(
                name=b.name, hardware=hw, model_id=d.model.id, chips_per_replica=d.chips,
                replicas=[r.index for r in b.replicas], kv_blocks_per_replica=b.plan.kv_blocks,
                max_batch_size=b.batch_cap,
                peak_flops_per_chip=hw.compute.peak[matmul_precision(hw, d.weights, d.activations)].value,
                peak_bandwidth_per_chip=d.weights_tier.bandwidth.value,
                pricing=b.plan.pricing,
            ))  # fmt: skip
        return self.recorder.freeze(
            end_s, self.scenario.run.warmup, backends, self.factory.count - self.recorder.request_count,
            self.capacity_requests_per_s, self.offered_requests_per_s,
        )  # fmt: skip


def swap_bandwidth(deployment: Deployment) -> float:
    """Bytes/s a replica moves KV to and from the next tier slower than its serving tier.

    Every chip moves its own shard in parallel: ``chips * bandwidth * efficiency``.
    """
    serving = deployment.weights_tier.bandwidth.value
    slower = [t for t in deployment.hardware.memory if t.bandwidth.value < serving]
    if not slower:
        raise ScenarioError(
            f"swap preemption needs a memory tier slower than {deployment.weights_tier.name} on "
            f"{deployment.hardware.id}, and the profile has none; use preemption: recompute"
        )
    tier = slower[0]
    return deployment.chips * tier.bandwidth.value * tier.efficiency.value


def _backend(index: int, spec: BackendSpec, scenario: Scenario, catalog: Catalog) -> BackendPlan:
    """A backend's deployment, KV budget, limits and pricing."""
    d = spec.deployment
    deployment = plan(catalog.hardware(d.hardware), catalog.model(d.model), d)
    sched = spec.scheduler or scenario.scheduler
    batch_cap = sched.max_batch_size or deployment.hardware.execution.max_batch_size.value
    kv_blocks = int(deployment.kv_budget_bytes // (sched.kv_block_tokens * deployment.kv_bytes_per_token))
    max_tokens = min(kv_blocks * sched.kv_block_tokens, deployment.model.max_context_tokens)
    swap_s_per_block = 0.0
    if isinstance(sched, ContinuousBatching) and sched.preemption == "swap":
        swap_s_per_block = sched.kv_block_tokens * deployment.kv_bytes_per_token / swap_bandwidth(deployment)
    return BackendPlan(
        index, spec.name, deployment, spec.replicas, sched, batch_cap,
        sched.max_batched_tokens or deployment.hardware.execution.max_batched_tokens.value, sched.kv_block_tokens,
        kv_blocks, max_tokens, swap_s_per_block, spec.network_rtt / 2.0,
        backend_pricing(deployment, spec, scenario.cost), scenario.prefix_caching, StepCostModel(deployment),
    )  # fmt: skip


def backend_pricing(deployment: Deployment, spec: BackendSpec, cost: CostSpec) -> Pricing:
    """How a backend is paid for; a price its basis needs but the profile lacks is a ScenarioError."""
    try:
        return resolve_pricing(deployment.hardware, deployment.model.id, spec.cost_basis or cost.basis,
                               assumptions_of(cost))  # fmt: skip
    except CostError as exc:
        raise ScenarioError(f"backend {spec.name}: {exc}") from None


def _class_routing(klass: WorkloadClass, task: AgentTaskSpec | None) -> ClassRouting:
    ttft, tpot = klass.slo.request_bounds()
    mean_output = task.output_tokens.mean if task else klass.requests.output_tokens.mean if klass.requests else None
    return ClassRouting(klass.name, ttft, tpot, mean_output)


def build(scenario: Scenario, catalog: Catalog, limits: Limits | None = None) -> Simulation:
    """Construct every component, connect them, start the processes (nothing runs yet).

    With ``limits``, a run estimated to exceed them raises :class:`~simulator.limits.RunTooLargeError`
    before any process exists.
    """
    classes = scenario.workload_classes
    tasks = [catalog.workload(c.load.workload).task if isinstance(c.load, AgentsLoad) else None for c in classes]
    env = simpy.Environment()
    fleet = scenario.fleet
    total_replicas = sum(b.replicas for b in fleet)
    if limits is not None:
        check_size(run_size(scenario, catalog), limits)
    recorder = Recorder(total_replicas)
    root = np.random.SeedSequence(scenario.run.seed)
    replicas_ss, router_ss, *class_seeds = root.spawn(2 + len(classes))
    replica_seeds = replicas_ss.spawn(total_replicas)
    backends: list[Backend] = []
    replicas: list[Replica] = []
    replica_backend: list[Backend] = []
    routing = [_class_routing(c, t) for c, t in zip(classes, tasks, strict=True)]
    router = Router(scenario.router, routing, np.random.default_rng(router_ss))
    factory = RequestFactory(env, scenario, router, replica_backend, recorder)
    for index, spec in enumerate(fleet):
        backend_plan = _backend(index, spec, scenario, catalog)
        backend = Backend(backend_plan, [])
        for _ in range(spec.replicas):
            policy = batch_policy(backend_plan.scheduler, backend_plan)
            rng = np.random.default_rng(replica_seeds[len(replicas)])
            replica = Replica(env, len(replicas), backend_plan.cost, policy, recorder, rng, factory.complete,
                              backend_plan.deployment.speculative, backend_plan.swap_s_per_block)  # fmt: skip
            replicas.append(replica)
            backend.replicas.append(replica)
            replica_backend.append(backend)
            env.process(replica.run())
        backends.append(backend)
    router.bind(backends)
    for klass_index, (klass, task) in enumerate(zip(classes, tasks, strict=True)):
        _check_fits(klass, task, router.allowed[klass_index])
    stop_s = scenario.run.duration if scenario.run.duration is not None else math.inf
    counter = TaskCounter(itertools.count(), itertools.count())
    offered, shares = 0.0, []
    for index, (klass, task, class_ss) in enumerate(zip(classes, tasks, class_seeds, strict=True)):
        max_tokens = max(b.max_tokens for b in router.allowed[index])
        rows = _request_trace(klass)
        _start_class(env, klass, index, task, factory, recorder, counter, max_tokens, stop_s, class_ss, rows)
        offered_load = _offered(klass, rows)
        if offered_load is not None:
            rate, lengths = offered_load
            alone = sum(len(b.replicas) * _capacity_requests_per_s(b.deployment, lengths, b.batch_cap)
                        for b in router.allowed[index])  # fmt: skip
            offered += rate
            shares.append(({b.index for b in router.allowed[index]}, rate / alone))
    all_open = len(shares) == len(classes)
    worst = max(_utilisations(shares), default=0.0)
    capacity = offered / worst if all_open and worst > 0 else math.nan
    return Simulation(
        scenario, backends, env, recorder, replicas, factory, capacity, offered if all_open else None,
    )  # fmt: skip


def run_size(scenario: Scenario, catalog: Catalog) -> RunSize:
    """Upper estimates of a run's model calls, clients and memory (:mod:`simulator.limits`),
    from its placements alone: nothing is built."""
    size = RunSize(replicas=sum(b.replicas for b in scenario.fleet))
    deployments = {
        b.name: plan(catalog.hardware(b.deployment.hardware), catalog.model(b.deployment.model), b.deployment)
        for b in scenario.fleet
        if b.replicas
    }
    duration = scenario.run.duration if scenario.run.duration is not None else math.inf
    rules = scenario.router.rules
    for klass in scenario.workload_classes:
        names = rules.get(klass.name, list(deployments))
        allowed = [deployments[n] for n in names if n in deployments]
        if isinstance(klass.load, AgentsLoad):
            task = catalog.workload(klass.load.workload).task
            lengths = (task.system_prompt_tokens.mean + task.first_input_tokens.mean, task.output_tokens.mean)
            calls_per_task = task.steps.mean
        elif klass.requests is not None:
            lengths, calls_per_task = (klass.requests.input_tokens.mean, klass.requests.output_tokens.mean), 1.0
        else:
            continue  # a trace: finite rows, known once loaded
        if not allowed:
            continue  # reported by the fit check when the run is built
        calls, users, agents, how = class_calls(klass.load, *lengths, calls_per_task, allowed, duration)
        size.add_requests(calls, f"{klass.name}: {how}")
        size.users += users
        size.agents += agents
    if scenario.run.max_requests is not None and size.requests > scenario.run.max_requests:
        size.requests = float(scenario.run.max_requests)
        size.how = [f"run.max_requests {scenario.run.max_requests:,}"]
    return size


def _request_trace(klass: WorkloadClass) -> list[TraceRequest] | None:
    """An Azure or Mooncake trace's requests, read once (None for other loads)."""
    load = klass.load
    return request_trace(load) if isinstance(load, TraceLoad) and load.format in REQUEST_FORMATS else None


def _offered(klass: WorkloadClass, rows: list[TraceRequest] | None) -> tuple[float, RequestLengths] | None:
    """(peak offered requests/s, lengths) of an open-loop class or a request trace; None for closed loops."""
    if isinstance(klass.load, OpenLoop) and klass.requests is not None:
        return _peak_rate(klass.load.arrivals), klass.requests
    if rows is not None and len(rows) > 1 and rows[-1].arrival_s > rows[0].arrival_s:
        assert isinstance(klass.load, TraceLoad)
        rate = klass.load.sample * (len(rows) - 1) / (rows[-1].arrival_s - rows[0].arrival_s)
        lengths = RequestLengths(
            input_tokens=Constant(value=float(np.mean([r.input_tokens for r in rows]))),
            output_tokens=Constant(value=float(np.mean([r.output_tokens for r in rows]))),
        )
        return rate, lengths
    return None


def _utilisations(shares: list[tuple[set[int], float]]) -> list[float]:
    """Offered utilisation of each group of backends that classes share: ``sum(rate_k / capacity_k)``
    over the classes whose allowed backends overlap (connected components)."""
    groups: list[tuple[set[int], float]] = []
    for backends, share in shares:
        joined = [g for g in groups if g[0] & backends]
        groups = [g for g in groups if not g[0] & backends]
        groups.append((backends.union(*(g[0] for g in joined)), share + sum(g[1] for g in joined)))
    return [utilisation for _, utilisation in groups]


def _check_fits(klass: WorkloadClass, task: AgentTaskSpec | None, backends: list[Backend]) -> None:
    if not backends:
        raise ScenarioError(f"{klass.name}: every backend this class may use (router.rules) has 0 replicas")
    if isinstance(klass.load, TraceLoad):
        return  # each trace request is checked on arrival (too long: dropped and reported)
    if task is not None:
        typical = task.system_prompt_tokens.mean + task.first_input_tokens.mean + task.output_tokens.mean
    else:
        assert klass.requests is not None
        typical = klass.requests.input_tokens.mean + klass.requests.output_tokens.mean
    largest = max(backends, key=lambda b: b.max_tokens)
    if typical > largest.max_tokens:
        d = largest.deployment
        raise ScenarioError(
            f"{klass.name}: requests average {typical:.0f} tokens but a replica of {d.chips} x "
            f"{d.hardware.id} holds at most {largest.max_tokens} tokens of {d.model.id} KV "
            f"(or context); use more chips (deployment.min_kv_tokens) or shorter requests"
        )


def _start_class(
    env: simpy.Environment,
    klass: WorkloadClass,
    index: int,
    task: AgentTaskSpec | None,
    factory: RequestFactory,
    recorder: Recorder,
    counter: TaskCounter,
    max_tokens: int,
    stop_s: float,
    seeds: np.random.SeedSequence,
    trace_rows: list[TraceRequest] | None = None,
) -> ClassSource:
    """Start one class's load processes; its streams are spawned from its own seed sequence."""
    arrivals_ss, lengths_ss, users_ss = seeds.spawn(3)
    samplers: dict[int, tuple[LengthSampler, LengthSampler]] = {}
    lengths = klass.requests
    if lengths is not None:
        in_ss, out_ss = lengths_ss.spawn(2)
        samplers[-1] = (
            LengthSampler(lengths.input_tokens, np.random.default_rng(in_ss)),
            LengthSampler(lengths.output_tokens, np.random.default_rng(out_ss)),
        )
    source = ClassSource(factory, index, klass.priority, samplers)
    load = klass.load
    if isinstance(load, OpenLoop):
        env.process(open_loop(env, load.arrivals, np.random.default_rng(arrivals_ss), source, stop_s))
    elif isinstance(load, AgentsLoad):
        assert task is not None
        runtime = AgentRuntime(env, source, recorder, counter, max_tokens, stop_s, index)
        _start_agents(runtime, load, task, arrivals_ss, users_ss)
    elif isinstance(load, TraceLoad):
        rng = np.random.default_rng(arrivals_ss)
        start_replay(env, load, source, recorder, rng, stop_s, counter, index, trace_rows)
    else:
        assert lengths is not None
        for user, ss in enumerate(users_ss.spawn(load.users)):
            think_ss, in_u, out_u = ss.spawn(3)
            samplers[user] = (
                LengthSampler(lengths.input_tokens, np.random.default_rng(in_u)),
                LengthSampler(lengths.output_tokens, np.random.default_rng(out_u)),
            )
            env.process(closed_loop_user(env, load, user, np.random.default_rng(think_ss), source, stop_s))
    return source


def _start_agents(
    rt: AgentRuntime,
    load: AgentsLoad,
    task: AgentTaskSpec,
    arrivals_ss: np.random.SeedSequence,
    agents_ss: np.random.SeedSequence,
) -> None:
    if load.agents is None:
        rt.env.process(open_loop_tasks(rt, load, task, np.random.default_rng(arrivals_ss)))
        return
    for agent, ss in enumerate(agents_ss.spawn(load.agents)):
        rt.env.process(closed_loop_agent(rt, load, task, agent, np.random.default_rng(ss)))


def _capacity_requests_per_s(deployment: Deployment, lengths: RequestLengths, batch_cap: int) -> float:
    """Analytic saturation throughput of one replica at the mean request lengths."""
    prompt, answer = max(1, round(lengths.input_tokens.mean)), max(1, round(lengths.output_tokens.mean))
    users = min(batch_cap, saturation_concurrency(deployment, prompt, answer))
    return estimate(deployment, prompt, answer, users, strict=False).aggregate_output_tok_s / answer


def _peak_rate(arrivals: Arrivals) -> float:
    if isinstance(arrivals, RateSteps):
        return max(step.rate_per_s for step in arrivals.steps)
    if isinstance(arrivals, RateRamp):
        return max(arrivals.start_rate_per_s, arrivals.end_rate_per_s)
    return arrivals.rate_per_s
