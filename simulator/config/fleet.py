"""A fleet: named backends (a deployment times replicas), how requests reach them, what they cost.

A backend is one deployment (hardware, model, layout) replicated ``replicas`` times, reached
over a network round trip ``network_rtt``. The router picks a backend for each request, then a
replica within it (see :class:`RouterSpec`).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from simulator.config.api_limits import ApiBehaviour
from simulator.config.base import Spec
from simulator.config.batching import Scheduler
from simulator.config.deployment import DeploymentSpec
from simulator.units import MAX_LATENCY_S, BytesPerSecond, Seconds

NonNegativeInt = Annotated[int, Field(ge=0)]
#: A fixed latency: at most a day (:data:`simulator.units.MAX_LATENCY_S`).
NonNegativeSeconds = Annotated[Seconds, Field(ge=0.0, le=MAX_LATENCY_S)]
CostBasis = Literal["auto", "rental", "ownership", "api"]
BackendName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+$", description="letters, digits, _ . -")]


class KVLinkSpec(Spec):
    """The link a disaggregated backend's prompt KV crosses to its decode pool (physics and
    sourced figures in :mod:`simulator.analytic.kv_transfer`)."""

    bandwidth: Annotated[BytesPerSecond, Field(gt=0.0)] = Field(
        description="one link, one direction, e.g. '50 GB/s' (InfiniBand NDR 400 Gb/s per port)"
    )
    links: Annotated[int, Field(ge=1)] = Field(1, description="links a transfer uses in parallel (NICs per replica)")
    latency: NonNegativeSeconds = Field(0.0, description="one-way latency of the link")
    per_transfer: NonNegativeSeconds = Field(0.0, description="fixed cost of one transfer (handshake, registration)")
    streaming: Literal["layer", "whole"] = Field(
        "layer", description="layer: each layer's KV leaves as its prefill ends (overlapped); whole: after the prefill"
    )
    handoff: Literal["auto", "kv", "prompt"] = Field(
        "auto",
        description="kv: the decode pool imports the KV; prompt: it receives the prompt and prefills it again; "
        "auto: prompt for wafer-scale and LPU decode pools (no KV import path), else kv",
    )


class BackendSpec(Spec):
    """One deployment times a replica count, at a network distance from the clients."""

    #: A backend's ``hardware`` and ``model`` are its deployment's (field paths may say either).
    path_aliases: ClassVar[dict[str, str]] = {"hardware": "deployment.hardware", "model": "deployment.model"}

    name: BackendName
    deployment: DeploymentSpec
    replicas: NonNegativeInt = Field(1, description="0: the backend is listed but serves nothing")
    network_rtt: NonNegativeSeconds = Field(
        0.0,
        description="client <-> backend round trip: half before the replica sees a request, half before the "
        "client sees its first (and last) token; a hosted stack's own api time comes on top of it",
    )
    scheduler: Scheduler | None = Field(None, description="empty: the scenario's scheduler")
    cost_basis: CostBasis | None = Field(
        None, description="empty: the scenario's cost.basis; api: pay the provider's per-token price"
    )
    decode_on: BackendName | None = Field(
        None,
        description="disaggregated: this backend prefills and the named backend decodes (while both have "
        "replicas; either alone serves whole requests)",
    )
    kv_link: KVLinkSpec | None = Field(None, description="the link to decode_on (needed with it)")
    api: ApiBehaviour | None = Field(
        None,
        description="a hosted API as clients meet it: per-request round trip and front end, rate limits (429) "
        "and client retries (simulator.config.api_limits)",
    )

    @model_validator(mode="after")
    def _link_with_decode_pool(self) -> BackendSpec:
        if self.decode_on is not None and self.kv_link is None:
            raise ValueError(f"decode_on: {self.decode_on} needs kv_link (bandwidth, latency, ...)")
        if self.kv_link is not None and self.decode_on is None:
            raise ValueError("kv_link is only used with decode_on (the backend that decodes)")
        if self.decode_on == self.name:
            raise ValueError(f"decode_on: a backend cannot decode for itself ({self.name})")
        return self


class AffinityBalance(Spec):
    """When session affinity gives way to load, as in the cache-aware routers of SGLang and vLLM
    (``--balance-abs-threshold 64``, ``--balance-rel-threshold 1.5``, their defaults): while the
    busiest candidate replica has more than ``over_requests`` requests outstanding over the idlest
    and more than ``ratio`` times as many, a session's call goes where the replica policy sends it."""

    over_requests: Annotated[int, Field(ge=0)] = Field(64, description="requests the busiest has over the idlest")
    ratio: Annotated[float, Field(ge=1.0)] = Field(1.5, description="times the idlest's requests the busiest has")

    def unbalanced(self, busiest: float, idlest: float) -> bool:
        """Whether replicas with ``busiest`` and ``idlest`` requests outstanding are past both thresholds."""
        return busiest - idlest > self.over_requests and busiest > self.ratio * idlest


#: Replica policies that weigh a replica's speed, not only its load: they may send a call to a slower
#: replica only where they predict it is served sooner there.
SPEED_AWARE_POLICIES = frozenset({"least-predicted-latency"})


class RouterSpec(Spec):
    """How requests are spread over a fleet: first a backend, then a replica of it.

    Backend: ``rules`` restrict a class to named backends. ``backend_choice: pooled`` lets the
    replica policy choose among every replica of the allowed backends; ``slo-aware`` takes the
    cheapest allowed backend (USD per output token at saturation, or its API price) whose
    predicted TTFT and TPOT meet the class's SLO at its current load, spilling over to the next
    cheapest when it saturates, and the fastest predicted when none meets it.

    Replica: round-robin; random; join-shortest-queue (fewest requests queued or running);
    least-outstanding-tokens (fewest prompt + output tokens still to process);
    power-of-two (the less loaded of two random replicas, Mitzenmacher 2001);
    kv-aware (the most free KV blocks after its queue's demand); least-predicted-latency (the least
    predicted TTFT + (O - 1) TPOT from each backend's closed form: speed, not only load). With
    ``affinity`` a session's later calls stick to the replica holding its prefix KV; with
    ``balance`` too, only while the candidate replicas' loads are not too unbalanced
    (:class:`AffinityBalance`): else the call goes where the policy sends it, leaving its prefix KV
    behind, and the session follows it.

    Budget: with ``budget_usd_per_hour`` the spend on per-token (API) backends is capped by a
    token bucket refilled at that rate and holding at most ``budget_window`` of it; a request
    whose only allowed backends are over budget is rejected.
    """

    policy: Literal[
        "round-robin", "random", "join-shortest-queue", "least-outstanding-tokens", "power-of-two", "kv-aware",
        "least-predicted-latency",
    ] = "round-robin"  # fmt: skip
    affinity: bool = True
    balance: AffinityBalance | None = Field(
        None, description="with affinity: let load unbalanced past these thresholds move a session (none: it stays)"
    )
    backend_choice: Literal["pooled", "slo-aware"] = "pooled"
    rules: dict[str, list[BackendName]] = Field(
        default_factory=dict, description="class name -> the backends it may use (others: every backend)"
    )
    budget_usd_per_hour: Annotated[float, Field(gt=0.0)] | None = None
    budget_window: Annotated[Seconds, Field(gt=0.0)] = Field(60.0, description="burst the budget bucket holds")


class CostSpec(Spec):
    """How a run's cost is counted (see :mod:`simulator.analytic.economics`)."""

    basis: CostBasis = Field(
        "auto",
        description="auto: rental when the hardware has a rental price, else ownership (capex + power); "
        "api: the provider's per-token price for the model",
    )
    years: Annotated[float, Field(gt=0.0)] = Field(4.0, description="capex amortisation period")
    pue: Annotated[float, Field(ge=1.0)] = Field(1.3, description="facility power usage effectiveness (assumed)")
    usd_per_kwh: Annotated[float, Field(ge=0.0)] = Field(0.08, description="electricity price (assumed)")
    idle_power_fraction: Annotated[float, Field(ge=0.0, le=1.0)] = Field(0.3, description="idle / busy draw")
