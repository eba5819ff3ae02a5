"""Elaboration: wire a resolved scenario's plans into processes, then run.

Everything a run needs was resolved before (:func:`simulator.plan.resolve.resolve`): placements,
prices, KV budgets, trace rows. Here each backend's replicas get their KV blocks, the KV tiers
below them (each of the kind its config class registered, :func:`~simulator.engine.kv.tiers.kv_tier`),
the batching policy its scheduler's config class registered
(:func:`~simulator.engine.batching.registry.batch_policy`), and
each class's load the processes its config class registered
(:func:`~simulator.engine.clients.start_load`); nothing is dispatched by hand.

Randomness: ``SeedSequence(run.seed)`` is spawned into independent streams for the replicas'
speculative draws (one each), the router, and each class; a class spawns its own for its
arrival process, its request lengths and each closed-loop user or agent (think times and
lengths), so adding a user or a replica does not perturb the others (common random numbers
for what-if comparisons). Failures (:mod:`simulator.engine.failures`) take one more stream,
spawned after all of these.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import simpy

from simulator.analytic.power import CappedCost
from simulator.analytic.precision import matmul_precision
from simulator.analytic.step_fast import EngineCost, engine_cost
from simulator.config.scenario import Scenario

# The bundled loads' modules register their processes with start_load when imported.
from simulator.engine import agents, load, replay  # noqa: F401
from simulator.engine.api_gate import ApiGate
from simulator.engine.batching.registry import batch_policy
from simulator.engine.clients import RequestFactory, TaskCounter, start_class
from simulator.engine.disaggregated import KVHandoff, couple
from simulator.engine.failures import Failures
from simulator.engine.fleet import Backend, Router
from simulator.engine.kv.blocks import paged_kv
from simulator.engine.kv.tiers import KVTiers, replica_tiers
from simulator.engine.recorder import Recorder
from simulator.engine.replica import Replica
from simulator.plan.resolve import BackendPlan, ResolvedScenario
from simulator.records.store import REQUEST_ROWS_KEPT, BackendRecord, RunRecords

#: Events stepped between two looks at the wall clock before a :class:`StopWhen`'s first check
#: (about 10-30 ms of CPU).
DEADLINE_EVENTS = 20_000


class OutOfTimeError(Exception):
    """A run abandoned at its :class:`StopWhen`'s ``deadline``: it has no result."""

    @classmethod
    def at(cls, now_s: float) -> OutOfTimeError:
        return cls(f"stopped at {now_s:g} s of simulated time: the wall clock passed its deadline")


def _never(recorder: Recorder, at_s: float) -> bool:
    return False


@dataclass(frozen=True)
class StopWhen:
    """Stop a run once ``settled(recorder, at_s)`` says its outcome is decided: asked at simulated times
    ``at_s = from_s, from_s + every_s, ...`` (before the run's own end), each time after every event
    up to that time has run (so the state it sees is the run's at ``at_s``). The run stops at its
    last event so far; nothing is scheduled for the
    checks, so a run never stopped is the same run as without them.

    ``deadline``: a wall-clock time (``time.time()``) past which the run is abandoned, looked at every
    :data:`DEADLINE_EVENTS` events before ``from_s`` and at every check after
    (:class:`OutOfTimeError` is raised: a command's time limit, not an outcome)."""

    from_s: float
    every_s: float
    settled: Callable[[Recorder, float], bool]
    deadline: float | None = None

    @classmethod
    def at_deadline(cls, deadline: float) -> StopWhen:
        """Only the deadline: no outcome is ever settled."""
        return cls(math.inf, math.inf, _never, deadline)


@dataclass
class Simulation:
    """A built, not yet run, simulation: everything wired, processes started."""

    resolved: ResolvedScenario
    backends: list[Backend]
    env: simpy.Environment
    recorder: Recorder
    replicas: list[Replica]
    factory: RequestFactory
    handoffs: list[KVHandoff] = field(default_factory=list)
    tiers: dict[int, KVTiers] = field(default_factory=dict)  # replica index -> its KV tiers
    failures: Failures | None = None  # with ``failures`` in the scenario
    stopped: bool = False  # stopped by a StopWhen before its end

    def run(self, progress: Callable[[float], None] | None = None, stop: StopWhen | None = None) -> float:
        """Run to the end the scenario asks for, or until ``stop`` settles it (then ``stopped`` is
        True); returns the simulated end time (s).

        ``progress`` is called with the fraction of the arrivals made (of ``run.duration`` or
        ``run.max_requests``), in steps of 1 / ``clients.PROGRESS_TICKS``, and with 1.0 at the end; it
        schedules no events, so a run reports the same results with or without it.
        """
        run = self.resolved.scenario.run
        until = run.horizon
        if not run.drain:
            until = min(x for x in (run.horizon, run.duration) if x is not None)
        self.factory.progress = progress
        if stop is not None and self._settled(stop, math.inf if until is None else until):
            self.stopped = True
            return float(self.env.now)
        self.env.run(until=until)
        if progress is not None:
            progress(1.0)
        return float(self.env.now)

    def _settled(self, stop: StopWhen, until: float) -> bool:
        """Step the events up to each check time before ``until`` (never past the last event, so
        the run can go on as if unchecked) and ask ``stop``; True once it says settled. Raises
        :class:`OutOfTimeError` once the wall clock passes ``stop.deadline``."""
        env, at = self.env, stop.from_s
        if stop.deadline is not None:
            self._before(min(at, until), stop.deadline)
        while at < until:
            while env.peek() <= at:
                env.step()
            if env.peek() == math.inf:
                return False  # nothing left to run: the run ends as it would unchecked
            if stop.deadline is not None and time.time() >= stop.deadline:
                raise OutOfTimeError.at(env.now)
            if stop.settled(self.recorder, at):  # the state at ``at``: no event falls in (now, at]
                return True
            at += stop.every_s
        return False

    def _before(self, until: float, deadline: float) -> None:
        """Step the events before ``until``, looking at the wall clock first and every
        :data:`DEADLINE_EVENTS` events."""
        env = self.env
        while True:
            if time.time() >= deadline:
                raise OutOfTimeError.at(env.now)
            for _ in range(DEADLINE_EVENTS):
                if env.peek() >= until:
                    return
                env.step()

    def records(self, end_s: float) -> RunRecords:
        """What the run recorded, frozen (call once, after :meth:`run`)."""
        resolved = self.resolved
        records = self.recorder.freeze(
            end_s, resolved.scenario.run.warmup, [_record(b) for b in self.backends],
            self.factory.count - self.recorder.request_count, resolved.capacity_requests_per_s,
            resolved.offered_requests_per_s,
        )  # fmt: skip
        tiers = tuple(t.freeze(self.factory.replica_backend[i].name, i) for i, t in self.tiers.items())
        failures = self.failures.freeze() if self.failures is not None else None
        api = tuple(b.gate.freeze() for b in self.backends if b.gate is not None)
        return dataclasses.replace(records, kv_transfers=tuple(h.freeze() for h in self.handoffs), kv_tiers=tiers,
                                   failures=failures, api=api)  # fmt: skip


def _record(backend: Backend) -> BackendRecord:
    """What the metrics need to know of a backend."""
    plan: BackendPlan = backend.plan
    d, hw = plan.deployment, plan.deployment.hardware
    return BackendRecord(
        name=plan.name,
        hardware=hw,
        model_id=d.model.id,
        chips_per_replica=d.replica_chips,
        replicas=[r.index for r in backend.replicas],
        kv_blocks_per_replica=plan.kv_blocks,
        max_batch_size=plan.batch_cap,
        peak_flops_per_chip=hw.compute.peak[matmul_precision(hw, d.weights, d.activations)].value,
        peak_bandwidth_per_chip=d.weights_tier.bandwidth.value,
        pricing=plan.pricing,
        power=plan.power,
    )


def _gate_apis(backends: list[Backend], scenario: Scenario, root: np.random.SeedSequence) -> None:
    """Give each backend with an ``api`` section its gate (:mod:`simulator.engine.api_gate`), each with a
    stream of its own, spawned after every other stream (so a run without gates draws as before)."""
    gated = [b for b in backends if b.plan.api is not None]
    if not gated:
        return
    network_rtt = {spec.name: spec.network_rtt for spec in scenario.fleet}
    for backend, seed in zip(gated, root.spawn(1)[0].spawn(len(gated)), strict=True):
        assert backend.plan.api is not None
        backend.gate = ApiGate(backend.name, backend.plan.api, network_rtt.get(backend.name, 0.0) / 2.0,
                               np.random.default_rng(seed))  # fmt: skip


def _rows_kept(resolved: ResolvedScenario, rows_kept: int | None) -> int | None:
    """``rows_kept``, or None (keep all) when a backend hands its decode to another: the KV
    handoffs join their records to the request rows by id."""
    if any(plan.decode_backend is not None for plan in resolved.backends):
        return None
    return rows_kept


def _replica_cost(plan: BackendPlan) -> EngineCost:
    """The backend's step-cost model, slowed by its chips' power cap when it has one."""
    cost = engine_cost(plan.cost)
    if plan.power is not None and plan.power.stretch != 1.0:
        return CappedCost(cost, plan.power.stretch)  # the chips' power cap slows every step
    return cost


def _replica(
    env: simpy.Environment, plan: BackendPlan, index: int, cost: EngineCost, recorder: Recorder,
    replica_seeds: list[np.random.SeedSequence], factory: RequestFactory,
) -> tuple[Replica, KVTiers | None]:  # fmt: skip
    """Replica ``index`` of a backend (its own random stream, paged KV and batching policy) and
    the KV tiers below its serving tier (None without)."""
    rng = np.random.default_rng(replica_seeds[index])
    blocks = paged_kv(plan)
    tiers = replica_tiers(plan, blocks)
    policy = batch_policy(plan.scheduler, plan, blocks)
    return Replica(env, index, cost, policy, recorder, rng, factory.complete, tiers), tiers


def _handoff_by_replica(handoffs: list[KVHandoff]) -> dict[int, KVHandoff]:
    """Each prefill replica's index -> the KV handoff its requests leave by."""
    return {r.index: h for h in handoffs for r in h.prefill.replicas}


def _start_failures(
    env: simpy.Environment, scenario: Scenario, router: Router, factory: RequestFactory, recorder: Recorder,
    backends: list[Backend], root: np.random.SeedSequence,
) -> Failures | None:  # fmt: skip
    """The failure processes, started until the run's end (None without ``failures``); their
    stream is spawned after every other, so the rest draw as without it."""
    if scenario.failures is None:
        return None
    failures = Failures(env, scenario.failures, router, factory, recorder, backends)
    until = min(x for x in (scenario.run.duration, scenario.run.horizon, math.inf) if x is not None)
    failures.start(backends, root.spawn(1)[0], until)
    return failures


def build(resolved: ResolvedScenario, rows_kept: int | None = REQUEST_ROWS_KEPT, points: int | None = None,
          details: bool = True) -> Simulation:  # fmt: skip
    """Construct every component, connect them, start the processes (nothing runs yet).

    ``rows_kept``: request rows held in memory before they stream (:class:`~simulator.records.store.RequestRows`;
    None keeps all); a fleet with disaggregated backends keeps all (its KV handoffs join them by id).
    ``points``: the buckets of each level and token series (:mod:`simulator.records.series`; default
    :func:`~simulator.records.series.points_per_series`). ``details`` False records only the tasks
    (:class:`~simulator.engine.recorder.Recorder`): the same simulation, for a caller that reads
    nothing else (a plan's task-time verdicts).
    """
    scenario = resolved.scenario
    env = simpy.Environment()
    recorder = Recorder(resolved.replicas, scenario.run.warmup, _rows_kept(resolved, rows_kept), points, details)
    root = np.random.SeedSequence(scenario.run.seed)
    replicas_ss, router_ss, *class_seeds = root.spawn(2 + len(resolved.classes))
    replica_seeds = replicas_ss.spawn(resolved.replicas)
    router = Router(scenario.router, [c.routing for c in resolved.classes], np.random.default_rng(router_ss))
    replica_backend: list[Backend] = []
    factory = RequestFactory(env, scenario.run, router, replica_backend, recorder)
    backends: list[Backend] = []
    replicas: list[Replica] = []
    kept_tiers: dict[int, KVTiers] = {}  # replica index -> the KV tiers below its serving tier
    for plan in resolved.backends:
        backend = Backend(plan, [])
        cost = _replica_cost(plan)
        for _ in range(plan.replicas):
            replica, tiers = _replica(env, plan, len(replicas), cost, recorder, replica_seeds, factory)
            if tiers is not None and plan.kv_tiers:
                kept_tiers[len(replicas)] = tiers
            replicas.append(replica)
            backend.replicas.append(replica)
            replica_backend.append(backend)
            env.process(replica.run())
        backends.append(backend)
    _gate_apis(backends, scenario, root)
    router.bind(backends, [c.backends for c in resolved.classes])
    handoffs = couple(env, backends)
    factory.handoffs = _handoff_by_replica(handoffs)
    stop_s = scenario.run.duration if scenario.run.duration is not None else math.inf
    counter = TaskCounter(itertools.count(), itertools.count())
    for plan_of_class, seeds in zip(resolved.classes, class_seeds, strict=True):
        start_class(env, plan_of_class, factory, recorder, counter, stop_s, seeds)
    failures = _start_failures(env, scenario, router, factory, recorder, backends, root)
    return Simulation(resolved, backends, env, recorder, replicas, factory, handoffs, kept_tiers, failures)
