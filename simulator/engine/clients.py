"""The clients' side of a run: requests made, routed, delivered and recorded.

A :class:`RequestFactory` makes every request of a run: ids, the infeasible dropped, the
routing, the network's half round trips each way (a hosted API's round trip among them) and a
hosted API's front-end time on the way in, the record when the last token reaches the client.
Each workload class sees it through a :class:`ClassSource` (its lengths, its priority). Load
processes (:mod:`~simulator.engine.load`, :mod:`~simulator.engine.agents`,
:mod:`~simulator.engine.replay`) only submit and wait.

A client whose request is refused (too long for every backend, or over the API budget)
retries after ``REFUSED_BACKOFF_S``, as a client backing off would; it never spins.

Each class's load is started by the function registered for its config class
(:func:`start_load`): a new kind of load is a config class and one registered starter.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import SupportsIndex

import numpy as np
import numpy.typing as npt
import simpy

from simulator.config.distributions import Distribution
from simulator.config.scenario import RunSpec
from simulator.engine.api_gate import ApiGate
from simulator.engine.disaggregated import KVHandoff
from simulator.engine.fleet import Backend, Router
from simulator.engine.recorder import Recorder
from simulator.engine.replica import Replica
from simulator.engine.request import Request, SessionKeys
from simulator.plan.resolve import ClassPlan
from simulator.records.store import (
    DROPPED_OVER_BUDGET,
    DROPPED_REPLICA_FAILED,
    DROPPED_THROTTLED,
    DROPPED_TOO_LONG,
    RequestRecord,
)

LENGTH_CHUNK = 1024
PROGRESS_TICKS = 100
#: Seconds a client (user or agent) waits after a refused request before the next one.
REFUSED_BACKOFF_S = 1.0


@dataclass
class TaskCounter:
    """Global task and session ids (one per conversation), shared by every class of a run."""

    tasks: itertools.count[int]
    sessions: itertools.count[int]


class LengthSampler:
    """Integer token counts >= 1 from a distribution, drawn in chunks (a client that draws a few
    converts only those few to Python integers)."""

    def __init__(self, spec: Distribution, rng: np.random.Generator) -> None:
        self.spec, self.rng = spec, rng
        self._chunk: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._next = 0

    def draw(self) -> int:
        if self._next == len(self._chunk):
            values = np.maximum(np.rint(self.spec.sample(self.rng, LENGTH_CHUNK)), 1.0)
            self._chunk, self._next = values.astype(np.int64), 0
        value = int(self._chunk[self._next])
        self._next += 1
        return value


class RequestFactory:
    """Makes requests at the current time for every class: ids, the infeasible dropped, routing.

    A request is dropped (``dropped = 1``) when no backend its class may use can hold it and
    rejected (``dropped = 2``) when only over-budget backends could serve it. It reaches its
    replica half a network round trip after it is sent (plus a hosted API's front-end time), and
    the client sees its first and last token half a round trip after the replica emits them: an
    API adds exactly its ``round_trip + front_end`` to TTFT and E2E, one timer per request. A
    backend with an ``api`` section draws those per request and may answer 429: the client backs
    off and sends again, routed afresh, until its retries run out (``dropped = 3``).
    """

    def __init__(
        self,
        env: simpy.Environment,
        run: RunSpec,
        router: Router,
        replica_backend: list[Backend],
        recorder: Recorder,
    ) -> None:
        self.env, self.router, self.replica_backend, self.recorder = env, router, replica_backend, recorder
        self.max_requests = run.max_requests or math.inf
        self.duration_s = run.duration or math.inf
        self.count = 0
        self.dropped = 0
        self.progress: Callable[[float], None] | None = None
        self._next_tick = 1
        self.handoffs: dict[int, KVHandoff] = {}  # prefill replica index -> its backend's handoff
        self.session_keys = SessionKeys()
        self.gated: dict[int, ApiGate] = {}  # request id -> the API gate that accepted it, until delivered

    @property
    def exhausted(self) -> bool:
        return self.count >= self.max_requests

    def make(
        self,
        klass: int,
        priority: int,
        user: int,
        lengths: tuple[int, int],
        session: Hashable | None,
        task: int,
        block_hashes: tuple[int, ...] | None,
        hash_block_tokens: int,
        awaited: bool = True,
    ) -> Request | None:
        now = self.env.now
        request = Request(self.count, now, lengths[0], lengths[1], user, session, block_hashes,
                          key_base=self.session_keys.base(session))  # fmt: skip
        request.task, request.klass, request.priority = task, klass, priority
        self.count += 1
        if self.progress is not None:
            self._tick(self.progress, now)
        fits = self.router.fits_somewhere(request)
        replica = self.router.route(request, now) if fits else None
        if replica is None:
            self.dropped += 1
            why = (
                DROPPED_TOO_LONG if not fits else DROPPED_REPLICA_FAILED if self.router.none_up else DROPPED_OVER_BUDGET
            )
            self.recorder.dropped(request_record(request, dropped=why))
            return None
        if awaited:  # an event only when somebody waits on it
            request.done = self.env.event()
        self.recorder.arrival(now)
        self._send(replica, request, block_hashes is not None, hash_block_tokens)
        return request

    def _send(self, replica: Replica, request: Request, hashed: bool, hash_block_tokens: int, retries: int = 0,
              ) -> None:  # fmt: skip
        """Send ``request`` to ``replica`` now: through its API's gate (a 429 backs off, :meth:`_refused`),
        then across the network to the replica."""
        now = self.env.now
        backend = self.replica_backend[replica.index]
        gate = backend.gate
        if gate is not None and not gate.try_send(now, request.input_tokens + request.output_tokens, request.id):
            self._refused(gate, request, hashed, hash_block_tokens, retries)
            return
        block_tokens = replica.block_tokens
        if hashed:
            request.hash_ratio = max(1, hash_block_tokens // block_tokens)
        request.one_way_s = backend.one_way_s if gate is None else gate.one_way_s(backend.one_way_s)
        front_end_s = backend.front_end_s if gate is None else gate.front_end_s(backend.front_end_s)
        if gate is not None:
            self.gated[request.id] = gate
        if replica.index in self.handoffs:
            self.handoffs[replica.index].admit(request)  # prefill here, decode on the paired backend
        replica.arrive(request, request.one_way_s + front_end_s)

    def _refused(self, gate: ApiGate, request: Request, hashed: bool, hash_block_tokens: int, retries: int) -> None:
        """A 429: the client waits its backoff and sends again (routed afresh), or, its retries spent,
        the request fails."""
        self.router.refund(request)
        if gate.gives_up(retries, request.input_tokens + request.output_tokens):
            gate.failed += 1
            self._fail(request, DROPPED_THROTTLED)
            return
        gate.retries += 1

        def retry(_: simpy.Event) -> None:
            replica = self.router.route(request, self.env.now)
            if replica is None:  # only over-budget backends are left
                self._fail(request, DROPPED_OVER_BUDGET)
            else:
                self._send(replica, request, hashed, hash_block_tokens, retries + 1)

        self.env.timeout(gate.backoff_s(retries)).callbacks.append(retry)

    def _fail(self, request: Request, code: int) -> None:
        """The request leaves unanswered; whoever waits on it is woken (``request.failed``)."""
        request.failed = True
        self.recorder.gave_up(self.env.now, request_record(request, dropped=code))
        if request.done is not None:
            request.done.succeed()

    def _tick(self, progress: Callable[[float], None], now: float) -> None:
        done = max(now / self.duration_s, self.count / self.max_requests)
        while self._next_tick < PROGRESS_TICKS and done >= self._next_tick / PROGRESS_TICKS:
            progress(self._next_tick / PROGRESS_TICKS)
            self._next_tick += 1

    def complete(self, request: Request) -> None:
        if request.one_way_s > 0:
            self.env.timeout(request.one_way_s).callbacks.append(lambda _: self._deliver(request))
        else:
            self._deliver(request)

    def _deliver(self, request: Request) -> None:
        """The last token reaches the client (and frees its API concurrency slot)."""
        now = self.env.now
        gate = self.gated.pop(request.id, None) if self.gated else None
        if gate is not None:
            gate.release()
        if self.recorder.details:  # a run that records only its tasks builds no request row
            self.recorder.departure(now, request_record(request, dropped=0, done_s=now))
        self.router.charge(self.replica_backend[request.replica], request, now)
        if request.done is not None:
            request.done.succeed()


class ClassSource:
    """One workload class's view of the factory: its lengths, its priority, its index."""

    def __init__(
        self,
        factory: RequestFactory,
        klass: int,
        priority: int,
        samplers: dict[int, tuple[LengthSampler, LengthSampler]],
    ) -> None:
        self.factory, self.klass, self.priority, self.samplers = factory, klass, priority, samplers

    @property
    def exhausted(self) -> bool:
        return self.factory.exhausted

    def submit(
        self,
        user: int,
        lengths: tuple[SupportsIndex, SupportsIndex] | None = None,
        session: Hashable | None = None,
        task: int = -1,
        block_hashes: tuple[int, ...] | None = None,
        hash_block_tokens: int = 0,
        awaited: bool = True,
    ) -> Request | None:
        """A request now: lengths drawn for ``user`` unless given; a session sticks to one replica.

        Given ``lengths`` may be any integers (numpy's too: they become ``int``); anything else
        (a float) raises ``TypeError``, compiled or not (:mod:`simulator.compiled`).

        ``block_hashes`` (traces) name the prompt's KV blocks of ``hash_block_tokens`` each. A
        request that is ``awaited`` gets a ``done`` event (None when it was refused); an open-loop
        arrival nobody waits on gets none (no event scheduled at its completion).
        """
        if lengths is None:
            input_sampler, output_sampler = self.samplers.get(user, self.samplers[-1])
            tokens = (input_sampler.draw(), output_sampler.draw())
        else:
            tokens = (operator.index(lengths[0]), operator.index(lengths[1]))
        session_key = None if session is None else (self.klass, session)
        return self.factory.make(
            self.klass, self.priority, user, tokens, session_key, task, block_hashes, hash_block_tokens, awaited
        )


def request_record(request: Request, dropped: int, done_s: float = math.nan) -> RequestRecord:
    """The request's record; the first and second tokens are stamped when the client sees them."""
    return RequestRecord(
        request.id, request.replica, request.user, request.arrival_s, request.admitted_s,
        request.first_token_s + request.one_way_s, request.second_token_s + request.one_way_s, done_s,
        request.input_tokens, request.output_tokens, request.preemptions, float(dropped), request.cached_tokens,
        request.task, request.klass,
    )  # fmt: skip


@dataclass(frozen=True)
class ClassRun:
    """What the load processes of one workload class share."""

    env: simpy.Environment
    plan: ClassPlan
    source: ClassSource
    recorder: Recorder
    counter: TaskCounter
    stop_s: float  # arrivals stop here
    arrivals: np.random.SeedSequence  # the arrival process's stream
    clients: np.random.SeedSequence  # spawned into one stream per user or agent


@functools.singledispatch
def start_load(load: object, run: ClassRun) -> None:
    """Start the processes of a class's load, by the class of its config.

    A new kind of load registers its starter with ``@start_load.register``.
    """
    raise TypeError(f"no load process is registered for {type(load).__name__} (@start_load.register one)")


def start_class(
    env: simpy.Environment,
    plan: ClassPlan,
    factory: RequestFactory,
    recorder: Recorder,
    counter: TaskCounter,
    stop_s: float,
    seeds: np.random.SeedSequence,
) -> ClassSource:
    """Start one class's load; its streams are spawned from its own seed sequence."""
    arrivals_ss, lengths_ss, clients_ss = seeds.spawn(3)
    samplers: dict[int, tuple[LengthSampler, LengthSampler]] = {}
    if plan.lengths is not None:
        in_ss, out_ss = lengths_ss.spawn(2)
        samplers[-1] = (
            LengthSampler(plan.lengths.input_tokens, np.random.default_rng(in_ss)),
            LengthSampler(plan.lengths.output_tokens, np.random.default_rng(out_ss)),
        )
    source = ClassSource(factory, plan.index, plan.priority, samplers)
    start_load(plan.load, ClassRun(env, plan, source, recorder, counter, stop_s, arrivals_ss, clients_ss))
    return source
