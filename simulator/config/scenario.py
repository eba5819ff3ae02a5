"""A scenario: a fleet (one deployment times replicas, or named backends), a scheduler, a load,
request lengths, SLOs, run controls, and the search space of the planner."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_serializer, field_validator, model_validator

from simulator.config.base import Spec
from simulator.config.batching import ContinuousBatching, Scheduler
from simulator.config.deployment import DeploymentSpec
from simulator.config.distributions import Constant, Distribution, TokenCounts
from simulator.config.failures import FailureSpec
from simulator.config.fleet import BackendSpec, CostSpec, RouterSpec
from simulator.config.workload import AgentsLoad, TraceLoad
from simulator.units import Seconds, parse_quantity

PositiveInt = Annotated[int, Field(ge=1)]
#: Slowest steady arrival rate: one request in about eleven days (slower, a run of any plausible length
#: holds no request and measures nothing); the fastest is bounded by the run-size limits.
MIN_RATE_PER_S = 1e-6
#: Shortest run: a microsecond (no request is served faster, so a shorter run measures nothing).
MIN_RUN_S = 1e-6
#: Fastest arrival rate: a billion requests per second, beyond any fleet (the run-size limits bind far sooner).
MAX_RATE_PER_S = 1e9
Rate = Annotated[float, Field(ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S, description="requests per second")]
NonNegativeSeconds = Annotated[Seconds, Field(ge=0.0)]


class ArrivalProcess(Spec):
    """An open-loop arrival process, tagged by ``process``; the engine draws its times
    (``simulator.engine.load.arrival_times``, one registered generator per process)."""

    process: str

    @property
    def peak_rate_per_s(self) -> float:
        """The highest rate the process reaches (requests per second): what capacity must meet."""
        raise NotImplementedError


class SteadyRate(ArrivalProcess):
    """A process with one rate throughout."""

    rate_per_s: Rate

    @property
    def peak_rate_per_s(self) -> float:
        return self.rate_per_s


class Poisson(SteadyRate):
    process: Literal["poisson"] = "poisson"


class GammaArrivals(SteadyRate):
    """Renewal process with gamma gaps: squared coefficient of variation = ``burstiness``."""

    process: Literal["gamma"] = "gamma"
    burstiness: Annotated[float, Field(gt=0.0)] = Field(description="CV^2 of the gaps; 1 is Poisson")


class ConstantRate(SteadyRate):
    process: Literal["constant"] = "constant"


class RateStep(Spec):
    at: NonNegativeSeconds
    rate_per_s: Annotated[float, Field(ge=0.0, le=MAX_RATE_PER_S)]


class RateSteps(ArrivalProcess):
    """Poisson with a piecewise-constant rate: each step holds from ``at`` to the next."""

    process: Literal["steps"] = "steps"
    steps: list[RateStep] = Field(min_length=1)

    @property
    def peak_rate_per_s(self) -> float:
        return max(step.rate_per_s for step in self.steps)

    @model_validator(mode="after")
    def _ordered(self) -> RateSteps:
        times = [s.at for s in self.steps]
        if times != sorted(times) or times[0] != 0.0:
            raise ValueError("steps must start at 0 s and be in time order")
        return self


class RateRamp(ArrivalProcess):
    """Poisson whose rate moves linearly from ``start`` to ``end`` over ``over``, then holds."""

    process: Literal["ramp"] = "ramp"
    start_rate_per_s: Annotated[float, Field(ge=0.0, le=MAX_RATE_PER_S)]
    end_rate_per_s: Annotated[float, Field(ge=0.0, le=MAX_RATE_PER_S)]
    over: Annotated[Seconds, Field(gt=0.0)]

    @property
    def peak_rate_per_s(self) -> float:
        return max(self.start_rate_per_s, self.end_rate_per_s)


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
    """Prompt and output tokens per request (drawn, rounded, at least 1 each)."""

    input_tokens: TokenCounts
    output_tokens: TokenCounts

    @model_validator(mode="after")
    def _at_least_a_token(self) -> RequestLengths:
        for name in ("input_tokens", "output_tokens"):
            mean = getattr(self, name).mean
            if mean < 1:
                raise ValueError(f"{name}: a request has at least 1 token; this distribution's mean is {mean:g}")
        return self


SLOMetric = Literal["ttft_s", "tpot_s", "e2e_s", "queueing_delay_s", "per_user_output_tok_s", "task_time_s"]
_TIME_METRICS = {"ttft_s", "tpot_s", "e2e_s", "queueing_delay_s", "task_time_s"}


class SLOTarget(Spec):
    """A statistic of a metric over a class's measured requests (or tasks) and its bound.

    e.g. ``{metric: ttft_s, stat: p99, max: 1 s}`` or ``{metric: per_user_output_tok_s, stat: p50, min: 100}``
    (times with a unit, speeds in tokens per second).
    """

    metric: SLOMetric
    stat: Literal["mean", "p50", "p90", "p95", "p99"] = "p99"
    max: float | None = None
    min: float | None = None

    @field_validator("max", "min", mode="before")
    @classmethod
    def _in_si(cls, value: object, info: ValidationInfo) -> object:
        metric = info.data.get("metric")
        si_number = isinstance(value, int | float) and bool(info.context and info.context.get("si_numbers"))
        return value if value is None or metric is None or si_number else _bound_value(str(metric), value)

    @field_serializer("max", "min")
    def _with_unit(self, value: float | None) -> float | str | None:
        return f"{value:.12g} s" if value is not None and self.metric in _TIME_METRICS else value

    @model_validator(mode="after")
    def _one_bound(self) -> SLOTarget:
        if (self.max is None) == (self.min is None):
            raise ValueError("give max or min (one bound)")
        return self

    @property
    def bound(self) -> float:
        value = self.max if self.max is not None else self.min
        assert value is not None
        return value

    @property
    def upper(self) -> bool:
        return self.max is not None

    def describe(self) -> str:
        unit = " s" if self.metric in _TIME_METRICS else " tok/s"
        return f"{self.stat} {self.metric} {'<=' if self.upper else '>='} {self.bound:.4g}{unit}"


def _bound_value(metric: str, value: object) -> float:
    """A bound in SI: times need a unit ('1 s'); speeds are tokens per second (100 or '100 tok/s')."""
    if metric in _TIME_METRICS:
        if not isinstance(value, str):
            raise ValueError(f"a bound on {metric} needs a unit, e.g. '1 s' or '200 ms'")
        return parse_quantity(value, "time")
    if isinstance(value, str):
        number, _, unit = value.partition(" ")
        try:
            if unit.strip() not in ("tok/s", "tokens/s", ""):
                raise ValueError
            return float(number)
        except ValueError:
            raise ValueError(f"a bound on {metric} is in tokens per second, e.g. 100 or '100 tok/s'") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"a bound on {metric} is a number of tokens per second")
    return float(value)


#: The targets a request's own bounds come from: metric -> (the bound it gives, whether the target
#: is a ``max``); the first such target of each bound counts.
_REQUEST_BOUNDS = {"ttft_s": ("ttft", True), "tpot_s": ("tpot", True), "per_user_output_tok_s": ("tpot", False)}


class SLOSpec(Spec):
    """Per-request bounds (goodput, SLO-aware routing) and statistical targets (the planner)."""

    ttft: NonNegativeSeconds | None = Field(None, description="a request meets its SLO when TTFT <= this")
    tpot: NonNegativeSeconds | None = Field(None, description="... and TPOT <= this")
    targets: list[SLOTarget] = Field(default_factory=list, description="what `infersim plan` must meet")
    tolerate_failures: Annotated[int, Field(ge=0)] = Field(
        0,
        description="`infersim plan`: the targets must hold with this many of the largest replicas down "
        "(the scenario's slo; N+k sizing)",
    )

    def request_bounds(self) -> tuple[float | None, float | None]:
        """(TTFT, TPOT) a single request should meet: the explicit bounds, else the targets'."""
        bounds = {"ttft": self.ttft, "tpot": self.tpot}
        for t in self.targets:
            slot, upper = _REQUEST_BOUNDS.get(t.metric, (None, None))
            if slot is not None and t.upper == upper and bounds[slot] is None:
                bounds[slot] = t.bound if upper else 1.0 / t.bound  # a least tok/s per user: at most 1 / it s
        return bounds["ttft"], bounds["tpot"]


class RunSpec(Spec):
    seed: Annotated[int, Field(ge=0)] = 0
    duration: Annotated[Seconds, Field(ge=MIN_RUN_S)] | None = Field(
        None, description="arrivals (or users) stop after this much simulated time"
    )
    max_requests: PositiveInt | None = Field(None, description="arrivals stop after this many requests")
    warmup: NonNegativeSeconds = Field(0.0, description="requests arriving earlier are not measured")
    drain: bool = Field(True, description="after arrivals stop, run until every request completes")
    horizon: Annotated[Seconds, Field(ge=MIN_RUN_S)] | None = Field(None, description="hard stop of simulated time")

    @model_validator(mode="after")
    def _bounded(self) -> RunSpec:
        if self.duration is None and self.max_requests is None:
            raise ValueError("give run.duration or run.max_requests (or both)")
        if not self.drain and self.duration is None and self.horizon is None:
            raise ValueError("drain: false stops at run.duration (or run.horizon): give one of them")
        for name in ("duration", "horizon"):
            end = getattr(self, name)
            if end is not None and self.warmup >= end:
                raise ValueError(
                    f"warmup ({self.warmup:g} s) must end before run.{name} ({end:g} s): nothing would be measured"
                )
        return self


def _check_pools(fleet: list[BackendSpec], names: list[str]) -> None:
    """A prefill backend's ``decode_on`` names another backend, which serves the same model,
    hands off to no one and decodes for this backend alone."""
    by_name = {b.name: b for b in fleet}
    for b in fleet:
        if b.decode_on is None:
            continue
        decode = by_name.get(b.decode_on)
        if decode is None:
            raise ValueError(f"backends.{b.name}.decode_on: no backend named {b.decode_on!r} (backends: {names})")
        if decode.decode_on is not None:
            raise ValueError(f"backends.{b.name}.decode_on: {decode.name} prefills for {decode.decode_on}; "
                             "a decode pool cannot itself hand off")  # fmt: skip
        if decode.deployment.model_id != b.deployment.model_id:
            raise ValueError(
                f"backends.{b.name}.decode_on: {decode.name} serves {decode.deployment.model_id} but {b.name} "
                f"prefills {b.deployment.model_id}; KV is only meaningful to the model that made it"
            )
    decoders = [b.decode_on for b in fleet if b.decode_on is not None]
    if len(set(decoders)) != len(decoders):
        raise ValueError(f"decode_on: each decode pool serves one prefill backend, got {decoders}")


def _check_outages(failures: FailureSpec, replicas: dict[str, int]) -> None:
    """Each outage names a backend (``replicas``: name -> replica count) and one of its replicas."""
    for i, outage in enumerate(failures.outages):
        if outage.backend not in replicas:
            raise ValueError(f"failures.outages.{i}.backend: no backend named {outage.backend!r} "
                             f"(backends: {list(replicas)})")  # fmt: skip
        if outage.replica >= replicas[outage.backend]:
            raise ValueError(f"failures.outages.{i}.replica: {outage.backend} has {replicas[outage.backend]} "
                             f"replica(s), numbered from 0; got {outage.replica}")  # fmt: skip


def _check_rules(rules: dict[str, list[str]], classes: list[str], names: list[str]) -> None:
    """``router.rules`` name workload classes and, for each, backends of the fleet."""
    for klass, allowed in rules.items():
        if klass not in classes:
            raise ValueError(f"router.rules.{klass}: no workload class is named {klass!r} (classes: {classes})")
        unknown = [name for name in allowed if name not in names]
        if unknown:
            raise ValueError(f"router.rules.{klass}: no backend named {unknown[0]!r} (backends: {names})")


def _check_failures(scenario: Scenario) -> None:
    """Outages name a backend and one of its replicas; drawn failures need an end to draw up to; the
    failures a plan tolerates are the whole fleet's (the scenario's slo), not a class's."""
    for i, klass in enumerate(scenario.classes or []):
        if klass.slo.tolerate_failures:
            raise ValueError(f"classes.{i}.slo.tolerate_failures: failures are the fleet's; give slo.tolerate_failures "
                             "on the scenario")  # fmt: skip
    failures = scenario.failures
    if failures is None:
        return
    _check_outages(failures, {b.name: b.replicas for b in scenario.fleet})
    if failures.random and scenario.run.duration is None and scenario.run.horizon is None:
        raise ValueError("failures.random: failures are drawn up to run.duration (or run.horizon): give one")


def _check_ramps(scenario: Scenario) -> None:
    """Agents ramping in join before ``run.duration``: one joining later never starts a task."""
    end_s = scenario.run.duration
    for i, klass in enumerate(scenario.workload_classes):
        load = klass.load
        if isinstance(load, AgentsLoad) and end_s is not None and load.ramp_s > end_s:
            where = "load" if scenario.classes is None else f"classes.{i}.load"
            raise ValueError(f"{where}.ramp_s: {load.ramp_s:g} s is past run.duration ({end_s:g} s): the agents "
                             "joining after it would never start a task; give at most the duration")  # fmt: skip


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


class PlanSpec(Spec):
    """The search space of `infersim plan`: replicas per backend, replications per candidate."""

    max_replicas: dict[str, Annotated[int, Field(ge=0)]] = Field(
        default_factory=dict, description="backend name -> most replicas to try (others: default_max_replicas)"
    )
    default_max_replicas: Annotated[int, Field(ge=1)] = 8
    replications: PositiveInt = Field(2, description="seeds per candidate; a candidate must meet its SLOs in all")
    max_usd_per_hour: Annotated[float, Field(gt=0.0)] | None = Field(None, description="budget cap on a fleet")
    budget_kw: Annotated[float, Field(gt=0.0)] | None = Field(
        None, description="site power budget: a fleet's full-load draw (chips x power or cap x PUE) at most this"
    )
    max_candidates: PositiveInt | None = Field(
        None,
        description="stop the search after simulating this many candidates: the answer is then the cheapest fleet "
        "found that meets, with the least cost a fleet not yet settled could have (the gap to the proven cheapest)",
    )
    confidence: Annotated[float, Field(gt=0.5, lt=1.0)] | None = Field(
        None,
        description="a fleet meets a target when the mean of its ratio over the replications' seeds is under 1 "
        "with this one-sided confidence (Student's t over the seeds' spread; needs 2 replications or more, and runs "
        "each to its end); none: when every seed's ratio is",
    )
    check_seeds: Annotated[int, Field(ge=0)] = Field(
        2,
        description="where the answer meets by less than two sampling errors, run it on this many more seeds "
        "(after the replications') and report its worst ratio on each; the answer stands (0: no check)",
    )

    @model_validator(mode="after")
    def _seeds_for_a_confidence(self) -> PlanSpec:
        if self.confidence is not None and self.replications < 2:
            raise ValueError(
                "plan.confidence is read off the spread of the seeds' ratios: give plan.replications of 2 or more"
            )
        return self


class Scenario(Spec):
    schema_version: Literal[1] = 1
    name: str
    description: str = ""
    deployment: DeploymentSpec | None = Field(None, description="one backend (or give backends)")
    replicas: PositiveInt = 1
    backends: list[BackendSpec] | None = Field(None, min_length=1, description="a fleet of named backends")
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
    plan: PlanSpec = Field(default_factory=PlanSpec)
    failures: FailureSpec | None = Field(None, description="replicas that fail and return, or run slow (empty: none)")
    provenance: dict[str, str | int] | None = Field(
        None, description="written into resolved scenarios (version, seed); not read by the simulation"
    )

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
        _check_ramps(self)
        return self

    @model_validator(mode="after")
    def _one_way_to_give_the_fleet(self) -> Scenario:
        if (self.deployment is None) == (self.backends is None):
            raise ValueError("give deployment (one backend) or backends (a fleet), not both")
        names = [b.name for b in self.fleet]
        if len(set(names)) != len(names):
            raise ValueError(f"backend names must be unique, got {names}")
        if not any(b.replicas for b in self.fleet):
            raise ValueError("every backend has 0 replicas: nothing would serve the load")
        _check_rules(self.router.rules, [c.name for c in self.workload_classes], names)
        _check_pools(self.fleet, names)
        for name in self.plan.max_replicas:
            if name not in names:
                raise ValueError(f"plan.max_replicas.{name}: no backend named {name!r} (backends: {names})")
        _check_failures(self)
        return self

    @property
    def fleet(self) -> list[BackendSpec]:
        """The backends; a single ``deployment`` is one backend named after its hardware."""
        if self.backends is not None:
            return self.backends
        assert self.deployment is not None
        return [BackendSpec(name=self.deployment.hardware_id, deployment=self.deployment, replicas=self.replicas)]

    @property
    def workload_classes(self) -> list[WorkloadClass]:
        if self.classes is not None:
            return self.classes
        assert self.load is not None
        return [WorkloadClass(name=self.name, load=self.load, requests=self.requests, slo=self.slo)]
