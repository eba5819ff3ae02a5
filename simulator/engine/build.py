"""Elaboration: build the replicas and the load from a validated scenario, connect, run.

Randomness: ``SeedSequence(run.seed)`` is spawned into independent streams for the arrival
process, the request lengths of open-loop arrivals, each replica's speculative draws, and
each closed-loop user (think times and lengths), so adding a user does not perturb the
others (common random numbers for what-if comparisons).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import simpy

from simulator.analytic.estimate import estimate, saturation_concurrency
from simulator.analytic.placement import Deployment, plan
from simulator.analytic.step_time import StepCostModel
from simulator.config.distributions import Distribution
from simulator.config.loading import Catalog
from simulator.config.scenario import Arrivals, ClosedLoop, ContinuousBatching, OpenLoop, RateRamp, RateSteps, Scenario
from simulator.engine.load import closed_loop_user, open_loop
from simulator.engine.recorder import Recorder
from simulator.engine.replica import Replica
from simulator.engine.scheduler import (
    BatchPolicy,
    BlockManager,
    ContinuousBatchingPolicy,
    Request,
    Slots,
    StaticBatchingPolicy,
)

LENGTH_CHUNK = 1024


class ScenarioError(ValueError):
    """A scenario that validates but cannot run as asked; the message says why."""


class LengthSampler:
    """Integer token counts >= 1 from a distribution, drawn in chunks."""

    def __init__(self, spec: Distribution, rng: np.random.Generator) -> None:
        self.spec, self.rng = spec, rng
        self._buffer: list[int] = []

    def draw(self) -> int:
        if not self._buffer:
            values = np.maximum(np.rint(self.spec.sample(self.rng, LENGTH_CHUNK)), 1.0)
            self._buffer = values.astype(np.int64)[::-1].tolist()
        return self._buffer.pop()


class RequestFactory:
    """Makes requests at the current time, drops the infeasible, routes the rest."""

    def __init__(
        self,
        env: simpy.Environment,
        scenario: Scenario,
        replicas: list[Replica],
        recorder: Recorder,
        samplers: dict[int, tuple[LengthSampler, LengthSampler]],
        max_tokens_per_request: int,
        closed: bool,
    ) -> None:
        self.env, self.replicas, self.recorder = env, replicas, recorder
        self.samplers = samplers
        self.max_requests = scenario.run.max_requests or math.inf
        self.max_tokens_per_request = max_tokens_per_request
        self.closed = closed
        self.count = 0
        self.dropped = 0
        self._next_replica = 0

    @property
    def exhausted(self) -> bool:
        return self.count >= self.max_requests

    def submit(self, user: int) -> Request | None:
        input_sampler, output_sampler = self.samplers.get(user, self.samplers[-1])
        request = Request(self.count, self.env.now, input_sampler.draw(), output_sampler.draw(), user)
        self.count += 1
        if request.input_tokens + request.output_tokens > self.max_tokens_per_request:
            self.dropped += 1
            self.recorder.dropped(record_fields(request, dropped=True))
            return None
        if self.closed:
            request.done = self.env.event()
        self.recorder.arrival(self.env.now)
        replica = self.replicas[self._next_replica]
        self._next_replica = (self._next_replica + 1) % len(self.replicas)
        replica.submit(request)
        return request

    def complete(self, request: Request) -> None:
        self.recorder.departure(self.env.now, record_fields(request, dropped=False, done_s=self.env.now))
        if request.done is not None:
            request.done.succeed()


def record_fields(request: Request, dropped: bool, done_s: float = math.nan) -> tuple[float, ...]:
    return (
        request.id, request.replica, request.user, request.arrival_s, request.admitted_s, request.first_token_s,
        done_s, request.input_tokens, request.output_tokens, request.preemptions, float(dropped),
    )  # fmt: skip


@dataclass
class Simulation:
    """A built, not yet run, simulation: everything wired, processes started."""

    scenario: Scenario
    deployment: Deployment
    env: simpy.Environment
    recorder: Recorder
    replicas: list[Replica]
    factory: RequestFactory
    kv_blocks_per_replica: int
    max_batch_size: int
    capacity_requests_per_s: float
    offered_requests_per_s: float | None

    def run(self) -> float:
        """Run to the end the scenario asks for; returns the simulated end time (s)."""
        run = self.scenario.run
        until = run.horizon
        if not run.drain:
            until = min(x for x in (run.horizon, run.duration) if x is not None)
        self.env.run(until=until)
        return float(self.env.now)


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


def _policy(scenario: Scenario, deployment: Deployment, blocks: BlockManager, batch_cap: int) -> BatchPolicy:
    sched = scenario.scheduler
    hw = deployment.hardware.execution
    tokens = sched.max_batched_tokens or hw.max_batched_tokens.value
    spec = deployment.speculative
    step = spec.tokens_proposed + 1.0 if spec else 1.0
    window = deployment.model.attention.sliding_window
    slots = Slots(batch_cap)
    if isinstance(sched, ContinuousBatching):
        prefill_first, swap = sched.priority == "prefill-first", sched.preemption == "swap"
        return ContinuousBatchingPolicy(slots, blocks, tokens, step, window, prefill_first=prefill_first, swap=swap)
    return StaticBatchingPolicy(slots, blocks, tokens, 1.0, window)


def build(scenario: Scenario, catalog: Catalog) -> Simulation:
    """Construct every component, connect them, start the processes (nothing runs yet)."""
    spec = scenario.deployment
    deployment = plan(catalog.hardware(spec.hardware), catalog.model(spec.model), spec)
    cost = StepCostModel(deployment)
    sched = scenario.scheduler
    batch_cap = sched.max_batch_size or deployment.hardware.execution.max_batch_size.value
    block_tokens = sched.kv_block_tokens
    kv_blocks = int(deployment.kv_budget_bytes // (block_tokens * deployment.kv_bytes_per_token))
    max_tokens = min(kv_blocks * block_tokens, deployment.model.max_context_tokens)
    lengths = scenario.requests
    if lengths.input_tokens.mean + lengths.output_tokens.mean > max_tokens:
        raise ScenarioError(
            f"requests average {lengths.input_tokens.mean + lengths.output_tokens.mean:.0f} tokens but a replica "
            f"of {deployment.chips} x {deployment.hardware.id} holds at most {max_tokens} tokens of "
            f"{deployment.model.id} KV (or context); use more chips or shorter requests"
        )

    swap_s_per_block = 0.0
    if isinstance(sched, ContinuousBatching) and sched.preemption == "swap":
        swap_s_per_block = block_tokens * deployment.kv_bytes_per_token / swap_bandwidth(deployment)
    env = simpy.Environment()
    recorder = Recorder(scenario.replicas)
    root = np.random.SeedSequence(scenario.run.seed)
    arrivals_ss, lengths_ss, replicas_ss, users_ss = root.spawn(4)
    replicas: list[Replica] = []
    load = scenario.load
    closed = isinstance(load, ClosedLoop)
    samplers: dict[int, tuple[LengthSampler, LengthSampler]] = {}
    in_ss, out_ss = lengths_ss.spawn(2)
    samplers[-1] = (
        LengthSampler(lengths.input_tokens, np.random.default_rng(in_ss)),
        LengthSampler(lengths.output_tokens, np.random.default_rng(out_ss)),
    )
    factory = RequestFactory(env, scenario, replicas, recorder, samplers, max_tokens, closed)
    for index, ss in enumerate(replicas_ss.spawn(scenario.replicas)):
        policy = _policy(scenario, deployment, BlockManager(kv_blocks, block_tokens), batch_cap)
        replica = Replica(
            env, index, cost, policy, recorder, np.random.default_rng(ss), factory.complete, swap_s_per_block
        )
        replicas.append(replica)
        env.process(replica.run())
    stop_s = scenario.run.duration if scenario.run.duration is not None else math.inf
    if isinstance(load, OpenLoop):
        env.process(open_loop(env, load.arrivals, np.random.default_rng(arrivals_ss), factory, stop_s))
    else:
        for user, ss in enumerate(users_ss.spawn(load.users)):
            think_ss, in_u, out_u = ss.spawn(3)
            samplers[user] = (
                LengthSampler(lengths.input_tokens, np.random.default_rng(in_u)),
                LengthSampler(lengths.output_tokens, np.random.default_rng(out_u)),
            )
            env.process(closed_loop_user(env, load, user, np.random.default_rng(think_ss), factory, stop_s))
    capacity = scenario.replicas * _capacity_requests_per_s(deployment, scenario, batch_cap)
    offered = _peak_rate(load.arrivals) if isinstance(load, OpenLoop) else None
    return Simulation(scenario, deployment, env, recorder, replicas, factory, kv_blocks, batch_cap, capacity, offered)


def _capacity_requests_per_s(deployment: Deployment, scenario: Scenario, batch_cap: int) -> float:
    """Analytic saturation throughput of one replica at the mean request lengths."""
    lengths = scenario.requests
    prompt, answer = max(1, round(lengths.input_tokens.mean)), max(1, round(lengths.output_tokens.mean))
    users = min(batch_cap, saturation_concurrency(deployment, prompt, answer))
    return estimate(deployment, prompt, answer, users).aggregate_output_tok_s / answer


def _peak_rate(arrivals: Arrivals) -> float:
    if isinstance(arrivals, RateSteps):
        return max(step.rate_per_s for step in arrivals.steps)
    if isinstance(arrivals, RateRamp):
        return max(arrivals.start_rate_per_s, arrivals.end_rate_per_s)
    return arrivals.rate_per_s
