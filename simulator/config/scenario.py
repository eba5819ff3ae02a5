"""A scenario: a deployment times replicas, a scheduler, a load, request lengths, SLOs, run controls."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from simulator.config.base import Spec
from simulator.config.deployment import DeploymentSpec
from simulator.config.distributions import Constant, Distribution
from simulator.config.workload import AgentsLoad, TraceLoad
from simulator.units import Seconds

PositiveInt = Annotated[int, Field(ge=1)]
Rate = Annotated[float, Field(gt=0.0, description="requests per second")]
NonNegativeSeconds = Annotated[Seconds, Field(ge=0.0)]


class ContinuousBatching(Spec):
    """Iteration-level batching (Orca, vLLM): sequences join and leave between iterations."""

    policy: Literal["continuous"] = "continuous"
    priority: Literal["decode-first", "prefill-first"] = Field(
        "decode-first",
        description="decode-first: running decodes go first, prefill chunks fill the token budget "
        "(Sarathi, vLLM V1); prefill-first: any pending prefill runs alone and decodes wait (vLLM V0)",
    )
    max_batch_size: PositiveInt | None = Field(None, description="empty: the hardware's")
    max_batched_tokens: PositiveInt | None = Field(None, description="empty: the hardware's")
    kv_block_tokens: PositiveInt = 16
    preemption: Literal["recompute", "swap"] = Field(
        "recompute",
        description="when KV runs out the latest-admitted sequence is evicted: recompute re-prefills it later; "
        "swap moves its KV to the next slower memory tier and back",
    )


class StaticBatching(Spec):
    """A batch forms when the replica is idle and runs to completion; arrivals wait for the next."""

    policy: Literal["static"] = "static"
    max_batch_size: PositiveInt | None = None
    max_batched_tokens: PositiveInt | None = None
    kv_block_tokens: PositiveInt = 16


Scheduler = Annotated[ContinuousBatching | StaticBatching, Field(discriminator="policy")]


class Poisson(Spec):
    process: Literal["poisson"] = "poisson"
    rate_per_s: Rate


class GammaArrivals(Spec):
    """Renewal process with gamma gaps: squared coefficient of variation = ``burstiness``."""

    process: Literal["gamma"] = "gamma"
    rate_per_s: Rate
    burstiness: Annotated[float, Field(gt=0.0)] = Field(description="CV^2 of the gaps; 1 is Poisson")


class ConstantRate(Spec):
    process: Literal["constant"] = "constant"
    rate_per_s: Rate


class RateStep(Spec):
    at: NonNegativeSeconds
    rate_per_s: Annotated[float, Field(ge=0.0)]


class RateSteps(Spec):
    """Poisson with a piecewise-constant rate: each step holds from ``at`` to the next."""

    process: Literal["steps"] = "steps"
    steps: list[RateStep] = Field(min_length=1)

    @model_validator(mode="after")
    def _ordered(self) -> RateSteps:
        times = [s.at for s in self.steps]
        if times != sorted(times) or times[0] != 0.0:
            raise ValueError("steps must start at 0 s and be in time order")
        return self


class RateRamp(Spec):
    """Poisson whose rate moves linearly from ``start`` to ``end`` over ``over``, then holds."""

    process: Literal["ramp"] = "ramp"
    start_rate_per_s: Annotated[float, Field(ge=0.0)]
    end_rate_per_s: Annotated[float, Field(ge=0.0)]
    over: Annotated[Seconds, Field(gt=0.0)]


Arrivals = Annotated[Poisson | GammaArrivals | ConstantRate | RateSteps | RateRamp, Field(discriminator="process")]


class OpenLoop(Spec):
    kind: Literal["open"] = "open"
    arrivals: Arrivals


class ClosedLoop(Spec):
    """N users, each: think, send a request, wait for its last token, repeat."""

    kind: Literal["closed"] = "closed"
    users: PositiveInt
    think_time_s: Distribution = Field(default_factory=lambda: Constant(value=0.0))
    start_spread: NonNegativeSeconds = Field(
        0.0, description="users start at times spread evenly over [0, start_spread] (0: all at once)"
    )


Load = Annotated[OpenLoop | ClosedLoop | AgentsLoad | TraceLoad, Field(discriminator="kind")]


class RequestLengths(Spec):
    input_tokens: Distribution
    output_tokens: Distribution


class SLOSpec(Spec):
    ttft: NonNegativeSeconds | None = None
    tpot: NonNegativeSeconds | None = None


class RunSpec(Spec):
    seed: Annotated[int, Field(ge=0)] = 0
    duration: Annotated[Seconds, Field(gt=0.0)] | None = Field(
        None, description="arrivals (or users) stop after this much simulated time"
    )
    max_requests: PositiveInt | None = Field(None, description="arrivals stop after this many requests")
    warmup: NonNegativeSeconds = Field(0.0, description="requests arriving earlier are not measured")
    drain: bool = Field(True, description="after arrivals stop, run until every request completes")
    horizon: Annotated[Seconds, Field(gt=0.0)] | None = Field(None, description="hard stop of simulated time")

    @model_validator(mode="after")
    def _bounded(self) -> RunSpec:
        if self.duration is None and self.max_requests is None:
            raise ValueError("give run.duration or run.max_requests (or both)")
        return self


class WorkloadClass(Spec):
    """One class of traffic: its load, its lengths, its priority in the queue, its SLOs."""

    name: str
    priority: int = Field(0, description="higher is admitted first; FCFS within a priority")
    load: Load
    requests: RequestLengths | None = Field(None, description="lengths of independent requests (not for agents)")
    slo: SLOSpec = Field(default_factory=SLOSpec)

    @model_validator(mode="after")
    def _lengths_for_requests(self) -> WorkloadClass:
        if (self.requests is None) != isinstance(self.load, AgentsLoad | TraceLoad):
            raise ValueError("requests (lengths) are needed for open and closed request loads, and only for them")
        return self


class RouterSpec(Spec):
    """How requests are spread over a fleet's replicas.

    round-robin; random; join-shortest-queue (fewest requests queued or running);
    least-outstanding-tokens (fewest prompt + output tokens still to process);
    power-of-two (the less loaded of two random replicas, Mitzenmacher 2001);
    kv-aware (the most free KV blocks after its queue's demand). With ``affinity`` a session's
    later calls stick to the replica holding its prefix KV.
    """

    policy: Literal[
        "round-robin", "random", "join-shortest-queue", "least-outstanding-tokens", "power-of-two", "kv-aware"
    ] = "round-robin"
    affinity: bool = True


class CostSpec(Spec):
    """How a run's cost is counted (see :mod:`simulator.results.economics`)."""

    basis: Literal["auto", "rental", "ownership"] = Field(
        "auto", description="auto: rental when the hardware has a rental price, else ownership (capex + power)"
    )
    years: Annotated[float, Field(gt=0.0)] = Field(4.0, description="capex amortisation period")
    pue: Annotated[float, Field(ge=1.0)] = Field(1.3, description="facility power usage effectiveness (assumed)")
    usd_per_kwh: Annotated[float, Field(ge=0.0)] = Field(0.08, description="electricity price (assumed)")
    idle_power_fraction: Annotated[float, Field(ge=0.0, le=1.0)] = Field(0.3, description="idle / busy draw")


class Scenario(Spec):
    schema_version: Literal[1] = 1
    name: str
    description: str = ""
    deployment: DeploymentSpec
    replicas: PositiveInt = 1
    scheduler: Scheduler = Field(default_factory=ContinuousBatching)
    load: Load | None = Field(None, description="one class of traffic (or give classes)")
    requests: RequestLengths | None = Field(None, description="lengths of independent requests (not for agents)")
    slo: SLOSpec = Field(default_factory=SLOSpec)
    classes: list[WorkloadClass] | None = Field(None, min_length=1, description="several classes mixed in one run")
    run: RunSpec
    prefix_caching: bool = Field(
        True, description="reuse the KV of a session's earlier calls while it is resident on the replica"
    )
    cost: CostSpec = Field(default_factory=CostSpec)
    router: RouterSpec = Field(default_factory=RouterSpec)

    @model_validator(mode="after")
    def _one_way_to_give_the_load(self) -> Scenario:
        if (self.load is None) == (self.classes is None):
            raise ValueError("give load (one class) or classes (several), not both")
        if self.load is not None:
            WorkloadClass(name=self.name, load=self.load, requests=self.requests, slo=self.slo)
        else:
            names = [c.name for c in self.classes or []]
            if len(set(names)) != len(names):
                raise ValueError(f"class names must be unique, got {names}")
        return self

    @property
    def workload_classes(self) -> list[WorkloadClass]:
        if self.classes is not None:
            return self.classes
        assert self.load is not None
        return [WorkloadClass(name=self.name, load=self.load, requests=self.requests, slo=self.slo)]
