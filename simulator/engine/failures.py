"""Replicas that fail and come back: one SimPy process per replica, one event per failure.

With ``failures.random``, each replica of a backend whose hardware states its reliability draws its
times between failures from an exponential of mean ``MTBF_r`` (:mod:`simulator.analytic.availability`),
each counted from its return: it fails at ``t``, is down until ``t + MTTR``, and its next failure
comes ``MTTR + Exp(MTBF_r)`` after ``t`` (one timeout per failure; the return schedules nothing, the
router sees it at its first choice after ``up_at``). Failures are drawn up to ``run.duration`` (or
``run.horizon``), so a draining run ends when its last request does. ``failures.outages`` fail named
replicas at given times, each one timeout. Metered (API) backends do not fail here: a provider's
failures are its own.

A failure (:meth:`~simulator.engine.replica.Replica.fail`) takes every request the replica held,
queued or running, and its KV. With ``on_failure: retry`` the router sends each to another replica
it may use: the news of the failure takes the old backend's half round trip to reach the router,
then the request crosses to its new replica; there it prefills its prompt and the tokens it had
already streamed (as a recomputed preemption does) and goes on. With ``fail``, or when no replica
that could serve it is up, it is answered with an error (``dropped = 3``), as is an arrival while
every replica that could serve it is down; a client waiting on it goes on as after an answer.

Stragglers: each replica is one with ``stragglers.probability`` (drawn once, for the run), and its
steps take ``slowdown`` times as long.

Randomness: one stream spawned from the run's seed after every other stream (so turning failures on
perturbs no other draw), split into one per replica.
"""

from __future__ import annotations

import numpy as np
import simpy

from simulator.analytic.availability import replica_reliability
from simulator.config.failures import FailureSpec, Outage
from simulator.engine import ProcessGenerator
from simulator.engine.batching.registry import batch_policy
from simulator.engine.clients import RequestFactory, request_record
from simulator.engine.fleet import Backend, Router
from simulator.engine.kv.blocks import paged_kv
from simulator.engine.recorder import Recorder
from simulator.engine.replica import Replica
from simulator.engine.request import Request
from simulator.plan.resolve import ScenarioError
from simulator.records.store import DROPPED_REPLICA_FAILED, FailureRecords


def _check_plain(backend: Backend) -> None:
    """Failures are simulated on plain backends only: no KV tiers, no disaggregated pool."""
    plan = backend.plan
    if plan.kv_tiers or plan.decode_backend is not None or plan.decodes_for is not None:
        raise ScenarioError(f"failures: backend {backend.name} has KV tiers or a disaggregated pool; "
                            "failures are simulated on plain backends only")  # fmt: skip


class Failures:
    """The failure processes of a run, and what they did (:meth:`freeze`)."""

    def __init__(
        self,
        env: simpy.Environment,
        spec: FailureSpec,
        router: Router,
        factory: RequestFactory,
        recorder: Recorder,
        backends: list[Backend],
    ) -> None:
        self.env, self.spec, self.router, self.factory, self.recorder = env, spec, router, factory, recorder
        self.backend_of = {r.index: b for b in backends for r in b.replicas}
        self.down: dict[int, list[tuple[float, float]]] = {}
        self.failures = self.retried = self.failed = 0
        self.expected: dict[int, float] = {}
        self.stragglers: list[int] = []

    def start(self, backends: list[Backend], seeds: np.random.SeedSequence, stop_s: float) -> None:
        """Draw the stragglers, start each replica's failure process and schedule the outages."""
        replicas = [r for b in backends for r in b.replicas]
        for replica, seed in zip(replicas, seeds.spawn(len(replicas)), strict=True):
            backend = self.backend_of[replica.index]
            replica.on_lost = self.lose
            _check_plain(backend)
            rng = np.random.default_rng(seed)
            self._draw_straggler(replica, rng)
            self._start_random(replica, backend, rng, stop_s)
        for outage in self.spec.outages:
            self._schedule(outage, backends)

    def _draw_straggler(self, replica: Replica, rng: np.random.Generator) -> None:
        """With ``stragglers``, the replica runs slow with their probability (one draw of its stream)."""
        stragglers = self.spec.stragglers
        if stragglers is not None and rng.random() < stragglers.probability:
            replica.slowdown = stragglers.slowdown
            self.stragglers.append(replica.index)

    def _start_random(self, replica: Replica, backend: Backend, rng: np.random.Generator, stop_s: float) -> None:
        """With ``random`` failures, start the replica's failure process when its hardware states a
        reliability (an API backend's replicas never fail here)."""
        reliability = replica_reliability(backend.deployment)
        if self.spec.random and not backend.metered and reliability is not None:
            self.expected[replica.index] = reliability.availability
            self.env.process(self._random(replica, reliability.mtbf_s, reliability.mttr_s, rng, stop_s))

    def _random(self, replica: Replica, mtbf_s: float, mttr_s: float, rng: np.random.Generator,
                stop_s: float) -> ProcessGenerator:  # fmt: skip
        """Fail after Exp(MTBF_r) of up time, be down MTTR, again, up to ``stop_s``."""
        wait = float(rng.exponential(mtbf_s))
        while self.env.now + wait < stop_s:
            yield self.env.timeout(wait)
            self.fail(replica, mttr_s)
            wait = mttr_s + float(rng.exponential(mtbf_s))

    def _schedule(self, outage: Outage, backends: list[Backend]) -> None:
        backend = next(b for b in backends if b.name == outage.backend)
        if outage.replica >= len(backend.replicas):
            return  # a planner's candidate with fewer replicas than the scenario names
        replica = backend.replicas[outage.replica]
        down_s = outage.down_for
        if down_s is None:
            reliability = replica_reliability(backend.deployment)
            if reliability is None:
                raise ScenarioError(f"failures.outages: {backend.deployment.hardware.id} states no reliability "
                                    "(restart time); give the outage's down_for")  # fmt: skip
            down_s = reliability.mttr_s
        self.env.timeout(outage.at).callbacks.append(lambda _: self.fail(replica, down_s))

    def fail(self, replica: Replica, down_s: float) -> None:
        """The replica fails now and is back ``down_s`` later (later still if it was already down
        for longer); every request it held is lost (:meth:`lose`)."""
        now = self.env.now
        self.failures += 1
        self.down.setdefault(replica.index, []).append((now, now + down_s))
        if now < replica.up_at:  # down already: it holds nothing; it may stay down longer
            replica.up_at = max(replica.up_at, now + down_s)
            self.router.take_down(replica)
            return
        backend = self.backend_of[replica.index]
        lost = replica.fail(batch_policy(backend.plan.scheduler, backend.plan, paged_kv(backend.plan)), now + down_s)
        self.router.take_down(replica)
        for request in lost:
            self.lose(request)

    def lose(self, request: Request) -> None:
        """A request its replica lost (with its KV): to another replica, or answered with an error."""
        request.swapped, request.shared, request.hit, request.published_upto = None, [], None, 0
        if self.spec.on_failure == "fail":
            self.answer_with_error(request)
            return
        now, old_one_way_s = self.env.now, request.one_way_s
        replica = self.router.route(request, now)
        if replica is None:
            self.answer_with_error(request)
            return
        self.retried += 1
        backend = self.backend_of[replica.index]
        request.one_way_s = backend.one_way_s
        replica.arrive(request, old_one_way_s + backend.one_way_s + backend.front_end_s)  # the error back, then out

    def answer_with_error(self, request: Request) -> None:
        """The client gets an error now: the request leaves, recorded as failed."""
        self.failed += 1
        self.recorder.departure(self.env.now, request_record(request, dropped=DROPPED_REPLICA_FAILED))
        if request.done is not None:
            request.done.succeed()

    def freeze(self) -> FailureRecords:
        return FailureRecords(
            self.down, self.failures, self.retried, self.failed, self.expected, tuple(self.stragglers),
        )  # fmt: skip
