"""Failures of a run: replicas that fail and come back, and replicas that run slow.

With ``failures`` set on a scenario, each replica of a backend whose hardware states its
``reliability`` fails at random (:mod:`simulator.analytic.availability` gives its rate and its time
down), and ``outages`` take named replicas down at given times (a planned test: "kill the largest
replica mid-way"). A failed replica loses its queued and running requests and its KV; the router
sends each lost request to another replica (``on_failure: retry``, where it prefills its prompt
and the tokens it had already streamed again) or answers it with an error (``fail``). While a
replica is down the router does not see it. ``stragglers`` make some replicas slow for the whole
run. Without ``failures`` nothing of this runs and results are those of a fleet that never fails.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from simulator.config.base import Spec
from simulator.units import Seconds

NonNegativeInt = Annotated[int, Field(ge=0)]


class Outage(Spec):
    """One replica down over a span of simulated time (a planned failure, not a drawn one)."""

    backend: str = Field(description="the backend's name")
    replica: NonNegativeInt = Field(0, description="which of its replicas (0 is the first)")
    at: Annotated[Seconds, Field(ge=0.0)] = Field(description="when it fails")
    down_for: Annotated[Seconds, Field(gt=0.0)] | None = Field(
        None,
        description="how long it stays down (empty: its hardware's restart plus its weights' reload); "
        "longer than the run: it never returns",
    )


class Stragglers(Spec):
    """Replicas slowed by a slow chip: each is one with ``probability``, for the whole run, and then
    every step it runs takes ``slowdown`` times as long (a tensor-parallel step waits for its slowest chip)."""

    probability: Annotated[float, Field(ge=0.0, le=1.0)]
    slowdown: Annotated[float, Field(ge=1.0, le=100.0)] = Field(description="step time multiplier of a straggler")


class FailureSpec(Spec):
    """Failures, repairs and stragglers of a run (module docstring)."""

    random: bool = Field(True, description="draw failures from each backend's hardware reliability")
    on_failure: Literal["retry", "fail"] = Field(
        "retry",
        description="what the router does with a failed replica's requests: send them to another "
        "replica, or answer them with an error",
    )
    outages: list[Outage] = Field(default_factory=list, description="replicas taken down at given times")
    stragglers: Stragglers | None = None

    @model_validator(mode="after")
    def _something_happens(self) -> FailureSpec:
        if not self.random and not self.outages and self.stragglers is None:
            raise ValueError("random: false with no outages and no stragglers simulates no failure; remove failures")
        return self
