"""The fleet at run time: backends of replicas, and the router that sends each request to one.

Routing is two choices. The *backend*: the class's allowed backends (``router.rules``, else
all), those whose replicas can hold the request, those within the API budget; then either
every replica of them is a candidate (``pooled``) or the SLO-aware choice below picks one
backend. The *replica*: the replica policy among the candidates (round robin, random, JSQ,
least outstanding tokens, power of two, KV-aware, least predicted latency), unless session
affinity already pins it. With ``router.balance`` a pinned session's call is routed afresh (and the
session re-pinned) while the candidates are unbalanced: the busiest up replica of the class's
usable backends has more than ``over_requests`` requests outstanding over the idlest and more
than ``ratio`` times as many (the cache-aware routers of SGLang and vLLM), both found in O(log R)
as the least-loaded choices are.
Both choices are registered under the names the config gives them (:func:`backend_choice`,
:func:`replica_choice`): a new one is one registered function.

Least predicted latency (``least-predicted-latency``, as llm-d's predicted-latency scheduling
routes): every other policy weighs load only, so in a fleet of fast and slow GPUs a slow replica
takes its share of calls even while a fast one has a free slot. This one predicts, on each candidate
backend's replica with the fewest requests, the call's ``TTFT + (O - 1) TPOT`` from that backend's
own closed form (below) and takes the least: a call goes to a slower replica only when a faster
one's load (a larger batch's longer steps, or the wait for a slot) makes the slower one the sooner.
The planner relies on that (a slower replica added never makes a fleet miss,
:mod:`simulator.studies.dominance`), and checks it on what it simulates. It is greedy, each call's
own prediction: at 2 calls/s on an H100 beside an A100 (8B, batches of 4) it keeps 93 % of them on
the H100 and cuts the mean latency 11 %, at 4 calls/s its mean is 6 % over
least-outstanding-tokens' (``tests/engine/test_routing.py``).

The least-loaded choices (JSQ, least outstanding tokens, KV-aware, and the SLO-aware
prediction's least-loaded replica) cost O(log R) per request on R replicas, not a scan: each
backend keeps a heap of ``(load, replica index)`` per load measure (:class:`LeastLoaded`), a
replica marks itself whenever its load may have changed (an arrival, an admission, an
iteration), and only marked replicas are re-pushed before the next choice. The choice is the
scan's: the least load, ties to the first candidate.

SLO-aware prediction (a router's model, not the simulator's physics, which the replicas
run): on backend ``b`` with ``n`` requests outstanding on its least-loaded replica, batch cap
``B`` and the closed-form :func:`~simulator.analytic.estimate.estimate` at ``min(n + 1, B)``
users for the request's prompt and the class's mean output ``O``,

    TPOT ~ ITL,   TTFT ~ RTT + prefill + max(0, n + 1 - B) * (prefill + (O - 1) * ITL) / B,

a request waiting for one of ``B`` slots that free at the batch's completion rate. Backends
are tried cheapest first (USD per output token at saturation for rented or owned ones, the
API price for metered ones); the first predicted to meet the class's TTFT and TPOT bounds
wins, so load spills to the next cheapest when the cheapest saturates; when none is
predicted to meet them the fastest predicted TTFT wins.

Failures (:mod:`simulator.engine.failures`): a failed replica leaves its backend's ``up``
replicas, the only ones the choices see, and returns to them at the first routing at or after its
``up_at`` (no event marks a return: a run without requests waits for none). A backend with no
replica up is not a candidate; a session pinned to a replica that is down is routed afresh.

Rate limits: a hosted API backend with ``api.limits`` and ``on_limit: spill`` is left out while
its limits would refuse the request now (the client reads its remaining quota from the provider's
headers) when another usable backend remains; each request so kept off counts a spill
(:mod:`simulator.engine.api_gate`).

Budget: a bucket refilled at ``budget_usd_per_hour`` holds at most ``budget_window`` of it; a
metered backend is a candidate while the bucket holds the request's predicted price, which
is reserved when the request is routed and settled at its actual price on completion.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import numpy as np

from simulator.analytic.economics import SECONDS_PER_HOUR, api_usd
from simulator.analytic.estimate import estimate, saturation_concurrency
from simulator.analytic.placement import Deployment
from simulator.config.fleet import RouterSpec
from simulator.config.hardware import TokenPrice
from simulator.engine.api_gate import ApiGate
from simulator.engine.replica import Replica
from simulator.engine.request import Request
from simulator.plan.resolve import BackendPlan, ClassRouting


@dataclass
class Backend:
    """One resolved backend and its running replicas, as the router sees them."""

    plan: BackendPlan
    replicas: list[Replica]
    up: list[Replica] = field(default_factory=list)  # the replicas the router may choose now (failures)
    _estimates: dict[tuple[int, int, int], tuple[float, float]] = field(default_factory=dict)
    gate: ApiGate | None = None  # a hosted API's per-request times, rate limits and retries

    @property
    def index(self) -> int:
        return self.plan.index

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def deployment(self) -> Deployment:
        return self.plan.deployment

    @property
    def max_tokens(self) -> int:
        """Prompt + output tokens one request may hold (KV or context)."""
        return self.plan.max_tokens

    @property
    def batch_cap(self) -> int:
        return self.plan.batch_cap

    @property
    def one_way_s(self) -> float:
        """Half the network round trip."""
        return self.plan.one_way_s

    @property
    def front_end_s(self) -> float:
        """A hosted API's time before a replica sees a request (admission, tokenisation, routing)."""
        return self.plan.front_end_s

    @property
    def token_price(self) -> TokenPrice | None:
        return self.plan.pricing.token_price

    @property
    def metered(self) -> bool:
        return self.token_price is not None

    @property
    def usd_per_replica_hour(self) -> float:
        return self.deployment.replica_chips * self.plan.pricing.usd_per_chip_hour

    def price_usd(self, input_tokens: float, output_tokens: float) -> float:
        """What a metered backend charges for one request (0 for rented or owned ones)."""
        return api_usd(self.token_price, input_tokens, output_tokens)

    def prefill_and_itl(self, prompt: int, output: int, users: int) -> tuple[float, float]:
        """Closed-form (prefill s, ITL s), memoised on power-of-two buckets of prompt, output, users."""
        key = (_bucket(prompt), _bucket(output), users if users <= 8 else _bucket(users))
        if key not in self._estimates:
            e = estimate(self.deployment, key[0], key[1], min(key[2], self.batch_cap), strict=False)
            self._estimates[key] = (e.prefill_s, e.itl_s or 0.0)
        return self._estimates[key]

    def usd_per_output_token(self, prompt: int, output: int) -> float:
        """Unit cost the SLO-aware router ranks by: API price, or $/h over saturated tok/s."""
        if self.token_price is not None:
            return self.price_usd(prompt, output) / output
        users = min(self.batch_cap, saturation_concurrency(self.deployment, prompt, output))
        prefill, itl = self.prefill_and_itl(prompt, output, users)
        tok_s = users * output / (prefill + (output - 1) * itl)
        return self.usd_per_replica_hour / SECONDS_PER_HOUR / tok_s


Load = Callable[[Replica], float]


class LeastLoaded:
    """The replica of one backend with the least ``load`` (ties: the lowest index), in O(log R).

    A heap of ``(load, index, stamp)`` entries with lazy deletion: a replica whose load may have
    changed is in ``changed`` (it adds itself, :attr:`Replica.watchers`); before a query each of
    those is pushed afresh with a new stamp, and entries whose stamp is not their replica's
    latest are skipped. The heap is rebuilt when stale entries outnumber live ones 4 to 1.
    """

    def __init__(self, replicas: list[Replica], load: Load) -> None:
        self.replicas = {r.index: r for r in replicas}
        self.load = load
        self.changed: set[int] = set(self.replicas)
        self.stamps = dict.fromkeys(self.replicas, 0)
        self.heap: list[tuple[float, int, int]] = []
        self.down: set[int] = set()  # failed replicas: never pushed until they return
        for replica in replicas:
            replica.watchers.append(self.changed)

    def take_down(self, index: int) -> None:
        """A replica failed: its entries go stale and it is not pushed again until :meth:`bring_up`."""
        self.down.add(index)
        self.stamps[index] += 1

    def bring_up(self, index: int) -> None:
        self.down.discard(index)
        self.changed.add(index)

    def least(self) -> tuple[float, Replica]:
        """(load, replica) of the least-loaded replica now (one is up)."""
        heap, stamps = self.heap, self.stamps
        for index in self.changed:
            if index in self.down:
                continue
            stamps[index] += 1
            heapq.heappush(heap, (self.load(self.replicas[index]), index, stamps[index]))
        self.changed.clear()
        if len(heap) > 4 * len(stamps):
            heap[:] = [entry for entry in heap if entry[2] == stamps[entry[1]]]
            heapq.heapify(heap)
        while heap[0][2] != stamps[heap[0][1]]:
            heapq.heappop(heap)
        return heap[0][0], self.replicas[heap[0][1]]


def _bucket(x: int) -> int:
    return 1 << max(0, round(math.log2(max(x, 1))))


class Router:
    """Chooses the replica for each request (see the module docstring)."""

    def __init__(self, spec: RouterSpec, classes: list[ClassRouting], rng: np.random.Generator) -> None:
        self.spec, self.classes, self.rng = spec, classes, rng
        self.allowed: list[list[Backend]] = [[] for _ in classes]  # per class, backends with replicas
        self._affinity: dict[Hashable, Replica] = {}
        self._backend_of: dict[int, Backend] = {}
        self.cursors: dict[tuple[int, ...], int] = {}  # round robin: the next turn of each candidate set
        self.bucket_usd = self._bucket_cap
        self._bucket_t = 0.0
        self._least: dict[tuple[int, Load], LeastLoaded] = {}  # per backend and load measure
        self._down: list[tuple[float, int]] = []  # heap of (up_at, replica index) of failed replicas
        self.none_up = False  # the last refusal: every backend that could serve it was down

    def bind(self, backends: list[Backend], allowed: list[tuple[int, ...]]) -> None:
        """Connect the built backends; ``allowed`` holds the backend indices each class may use."""
        self._backend_of = {r.index: b for b in backends for r in b.replicas}
        self.allowed = [[backends[i] for i in indices] for indices in allowed]
        for backend in backends:
            backend.up = list(backend.replicas)

    def take_down(self, replica: Replica) -> None:
        """A replica failed: the choices stop seeing it until its ``up_at``."""
        backend = self._backend_of[replica.index]
        if replica in backend.up:
            backend.up.remove(replica)
            for (index, _), least in self._least.items():
                if index == backend.index:
                    least.take_down(replica.index)
        heapq.heappush(self._down, (replica.up_at, replica.index))

    def _bring_up(self, now: float) -> None:
        """Return every failed replica whose ``up_at`` has come (and that has not failed again)."""
        while self._down and self._down[0][0] <= now:
            up_at, index = heapq.heappop(self._down)
            backend = self._backend_of[index]
            replica = next(r for r in backend.replicas if r.index == index)
            if replica.up_at != up_at or replica in backend.up:
                continue
            bisect.insort(backend.up, replica, key=lambda r: r.index)
            for (b, _), least in self._least.items():
                if b == backend.index:
                    least.bring_up(index)

    @property
    def _bucket_cap(self) -> float:
        rate = self.spec.budget_usd_per_hour
        return math.inf if rate is None else rate * self.spec.budget_window / SECONDS_PER_HOUR

    def fits_somewhere(self, request: Request) -> bool:
        tokens = request.input_tokens + request.output_tokens
        return any(tokens <= b.max_tokens for b in self.allowed[request.klass])

    def route(self, request: Request, now: float) -> Replica | None:
        """The replica to serve ``request``; None when only over-budget backends could.

        A session's pinned replica is kept while its backend can still hold the request and
        is within budget; otherwise the session is routed afresh and re-pinned. A metered
        backend's predicted price is reserved from the budget now and settled on completion.
        """
        klass = self.classes[request.klass]
        tokens = request.input_tokens + request.output_tokens
        output = round(klass.mean_output_tokens or request.output_tokens)
        self._refill(now)
        if self._down:
            self._bring_up(now)
        sticky = self.spec.affinity and request.session is not None
        replica = self._pinned(request, now, tokens, output) if sticky else None
        if replica is not None and self._unbalanced(request, tokens, output):
            replica = None  # load over affinity: the policy chooses, and the session follows
        if replica is None:
            replica = self._route_afresh(request, now, klass, tokens, output)
            if replica is None:
                return None
            if sticky:
                self._affinity[request.session] = replica
        self._reserve(request, self._backend_of[replica.index], output)
        return replica

    def _usable(self, b: Backend, tokens: int, prompt: int, output: int) -> bool:
        """Whether ``b`` can hold a request of ``tokens`` and, when metered, its predicted price
        (``prompt`` and ``output`` tokens) fits the budget left."""
        return tokens <= b.max_tokens and (not b.metered or b.price_usd(prompt, output) <= self.bucket_usd)

    def _pinned(self, request: Request, now: float, tokens: int, output: int) -> Replica | None:
        """The session's pinned replica while it is up and its backend usable and open now; else None."""
        pinned = self._affinity.get(request.session)
        if pinned is None or pinned.up_at > now:
            return None
        backend = self._backend_of[pinned.index]
        if self._usable(backend, tokens, request.input_tokens, output) and _open_now(backend, now, tokens):
            return pinned
        return None

    def _usable_backends(self, request: Request, tokens: int, output: int) -> list[Backend]:
        """The backends the request's class may use that can hold it within the budget (up or not)."""
        return [b for b in self.allowed[request.klass] if self._usable(b, tokens, request.input_tokens, output)]

    def _unbalanced(self, request: Request, tokens: int, output: int) -> bool:
        """Whether ``router.balance`` moves a pinned session now: the busiest and the idlest up
        replica (requests outstanding) of the class's usable backends are past its thresholds."""
        balance = self.spec.balance
        if balance is None:
            return False
        backends = [b for b in self._usable_backends(request, tokens, output) if b.up]
        if not backends:
            return False
        idlest = self.least_loaded(backends, _requests).outstanding
        busiest = self.least_loaded(backends, _fewest_requests).outstanding
        return balance.unbalanced(busiest, idlest)

    def _route_afresh(
        self, request: Request, now: float, klass: ClassRouting, tokens: int, output: int
    ) -> Replica | None:
        """The replica the backend choice and the replica policy pick among the class's usable
        backends with a replica up (the API ones whose limits would refuse it spilled, when others
        can take it); None when there is none (``none_up`` says whether one was usable but down)."""
        candidates = self._usable_backends(request, tokens, output)
        self.none_up = bool(candidates) and not any(b.up for b in candidates)
        candidates = [b for b in candidates if b.up]
        if not candidates:
            return None
        candidates = _spill(candidates, now, tokens)
        choice = BACKEND_CHOICES[self.spec.backend_choice]
        return self._choose(choice(self, candidates, klass, request.input_tokens, output), request.input_tokens, output)

    def _reserve(self, request: Request, backend: Backend, output: int) -> None:
        """Reserve a metered backend's predicted price from the budget (settled on completion)."""
        if backend.metered and self.spec.budget_usd_per_hour is not None:
            request.reserved_usd = backend.price_usd(request.input_tokens, output)
            self.bucket_usd -= request.reserved_usd

    def charge(self, backend: Backend, request: Request, now: float) -> None:
        """A completed request settles its reservation at its actual API price."""
        if backend.metered and self.spec.budget_usd_per_hour is not None:
            self._refill(now)
            settled = (
                self.bucket_usd + request.reserved_usd - backend.price_usd(request.input_tokens, request.output_tokens)
            )
            self.bucket_usd = min(self._bucket_cap, settled)

    def refund(self, request: Request) -> None:
        """A request an API refused (429) gives back the budget reserved for it when routed."""
        self.bucket_usd = min(self._bucket_cap, self.bucket_usd + request.reserved_usd)
        request.reserved_usd = 0.0

    def _refill(self, now: float) -> None:
        if self.spec.budget_usd_per_hour is not None:
            rate = self.spec.budget_usd_per_hour / SECONDS_PER_HOUR
            self.bucket_usd = min(self._bucket_cap, self.bucket_usd + rate * (now - self._bucket_t))
            self._bucket_t = now

    def _choose(self, backends: list[Backend], prompt: int, output: int) -> Replica:
        if len(backends) == 1 and len(backends[0].up) == 1:
            return backends[0].up[0]
        return REPLICA_CHOICES[self.spec.policy](self, backends, prompt, output)

    def least_loaded(self, backends: list[Backend], load: Load) -> Replica:
        """The replica of ``backends`` with the least ``load``, ties to the first (in O(B log R))."""
        best, best_load = None, math.inf
        for backend in backends:
            key = (backend.index, load)
            if key not in self._least:
                self._least[key] = LeastLoaded(backend.replicas, load)
                for replica in backend.replicas:
                    if replica not in backend.up:
                        self._least[key].take_down(replica.index)
            value, replica = self._least[key].least()
            if best is None or value < best_load:
                best, best_load = replica, value
        assert best is not None
        return best


def _open_now(b: Backend, now: float, tokens: int) -> bool:
    """False for an API whose limits would refuse ``tokens`` now (read from its headers)."""
    return b.gate is None or not b.gate.spills or b.gate.admits(now, tokens)


def _spill(candidates: list[Backend], now: float, tokens: int) -> list[Backend]:
    """The candidates an API's limits would not refuse now, when any is (each one left out counts a
    spill); all of them when every one would refuse (the request then meets the 429)."""
    opened = [b for b in candidates if _open_now(b, now, tokens)]
    if not opened or len(opened) == len(candidates):
        return candidates
    for b in candidates:
        if b.gate is not None and not _open_now(b, now, tokens):
            b.gate.spilled += 1
    return opened


def _predict(router: Router, backend: Backend, prompt: int, output: int) -> tuple[Replica, float, float]:
    """(replica, TTFT s, TPOT s): ``backend``'s replica with the fewest requests outstanding, and the
    TTFT and TPOT a request would see there now (module docstring)."""
    replica = router.least_loaded([backend], _requests)
    n, cap = replica.outstanding, backend.batch_cap
    prefill, itl = backend.prefill_and_itl(prompt, output, min(n + 1, cap))
    ahead = max(0, n + 1 - cap)
    if ahead == 0 and replica.kv_headroom < replica.blocks_for(prompt + output):
        ahead = 1
    wait = ahead * (prefill + (output - 1) * itl) / cap
    return replica, 2.0 * backend.one_way_s + wait + prefill, itl


# -- the router's choices, by the names the config gives them --------------------------------
BackendChoice = Callable[[Router, list[Backend], ClassRouting, int, int], list[Backend]]
ReplicaChoice = Callable[[Router, list[Backend], int, int], Replica]
#: ``router.backend_choice``: the backends whose replicas are candidates, from the usable ones.
BACKEND_CHOICES: dict[str, BackendChoice] = {}
#: ``router.policy``: the replica a request of ``prompt`` and (the class's mean) ``output`` tokens
#: goes to, among the candidate backends' (two or more).
REPLICA_CHOICES: dict[str, ReplicaChoice] = {}


def backend_choice(name: str) -> Callable[[BackendChoice], BackendChoice]:
    """Register a backend choice under the name ``router.backend_choice`` gives it."""

    def register(choose: BackendChoice) -> BackendChoice:
        BACKEND_CHOICES[name] = choose
        return choose

    return register


def replica_choice(name: str) -> Callable[[ReplicaChoice], ReplicaChoice]:
    """Register a replica policy under the name ``router.policy`` gives it."""

    def register(choose: ReplicaChoice) -> ReplicaChoice:
        REPLICA_CHOICES[name] = choose
        return choose

    return register


@backend_choice("pooled")
def _pooled(router: Router, backends: list[Backend], klass: ClassRouting, prompt: int, output: int) -> list[Backend]:
    """Every usable backend's replicas are candidates."""
    return backends


@backend_choice("slo-aware")
def _slo_aware(router: Router, backends: list[Backend], klass: ClassRouting, prompt: int, output: int) -> list[Backend]:
    """The cheapest backend predicted to meet the class's bounds, else the fastest predicted TTFT."""
    ranked = sorted(backends, key=lambda b: b.usd_per_output_token(prompt, max(output, 1)))
    best, best_ttft = ranked[0], math.inf
    for backend in ranked:
        _, ttft, tpot = _predict(router, backend, prompt, max(output, 1))
        if (klass.ttft_bound_s is None or ttft <= klass.ttft_bound_s) and (
            klass.tpot_bound_s is None or tpot <= klass.tpot_bound_s
        ):
            return [backend]
        if ttft < best_ttft:
            best, best_ttft = backend, ttft
    return [best]


def _requests(replica: Replica) -> float:
    return float(replica.outstanding)


def _fewest_requests(replica: Replica) -> float:
    """The busiest first: the load is minus the requests outstanding."""
    return -float(replica.outstanding)


def _tokens(replica: Replica) -> float:
    return replica.outstanding_tokens


def _kv_used(replica: Replica) -> float:
    """Least headroom first is most loaded: the load is minus the free KV after the queue."""
    return -replica.kv_headroom


def _flat(backends: list[Backend]) -> list[Replica]:
    return [r for b in backends for r in b.up]


@replica_choice("round-robin")
def _round_robin(router: Router, backends: list[Backend], prompt: int, output: int) -> Replica:
    """A cursor per candidate set, so each set is cycled evenly."""
    replicas = _flat(backends)
    key = tuple(r.index for r in replicas)
    turn = router.cursors.get(key, 0)
    router.cursors[key] = turn + 1
    return replicas[turn % len(replicas)]


@replica_choice("random")
def _random(router: Router, backends: list[Backend], prompt: int, output: int) -> Replica:
    replicas = _flat(backends)
    return replicas[int(router.rng.integers(len(replicas)))]


@replica_choice("power-of-two")
def _power_of_two(router: Router, backends: list[Backend], prompt: int, output: int) -> Replica:
    """The less loaded of two random replicas (Mitzenmacher 2001)."""
    replicas = _flat(backends)
    a, b = (replicas[int(i)] for i in router.rng.choice(len(replicas), size=2, replace=False))
    return a if a.outstanding <= b.outstanding else b


@replica_choice("join-shortest-queue")
def _shortest_queue(router: Router, backends: list[Backend], prompt: int, output: int) -> Replica:
    return router.least_loaded(backends, _requests)


@replica_choice("least-outstanding-tokens")
def _least_tokens(router: Router, backends: list[Backend], prompt: int, output: int) -> Replica:
    return router.least_loaded(backends, _tokens)


@replica_choice("kv-aware")
def _most_kv(router: Router, backends: list[Backend], prompt: int, output: int) -> Replica:
    return router.least_loaded(backends, _kv_used)


@replica_choice("least-predicted-latency")
def _least_latency(router: Router, backends: list[Backend], prompt: int, output: int) -> Replica:
    """The replica predicted to serve the call soonest, as llm-d's predicted-latency scheduling
    routes: of each backend's replica with the fewest requests, the least ``TTFT + (O - 1) TPOT``
    (:func:`_predict`, the backend's own closed form), ties to the first backend."""
    best, best_s, tokens = None, math.inf, max(output, 1)
    for backend in backends:
        replica, ttft, tpot = _predict(router, backend, prompt, tokens)
        latency_s = ttft + (tokens - 1) * tpot
        if latency_s < best_s:
            best, best_s = replica, latency_s
    assert best is not None
    return best
