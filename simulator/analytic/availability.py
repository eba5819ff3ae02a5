"""Failures and availability of replicas and fleets, in closed form.

A replica of ``c`` chips on hardware whose failure unit holds ``u`` chips spans ``n = ceil(c / u)``
units (a replica never shares a unit with a part of itself on other hardware). Each unit fails at
the constant rate ``1 / MTBF`` (exponential lifetimes), and the replica fails when any of its units
does, so its times between failures are exponential with

    rate = n / MTBF                       (failures per second of up time)

After a failure it is down for

    MTTR = restart + W / (c * b)          (seconds)

the hardware's restart (repair, swap or reboot) and then its weights' reload: the stored weight
bytes ``W`` of the replica, each chip loading its ``W / c`` at ``b``, the hardware's
``reliability.reload_bandwidth`` or else its slowest memory tier's bandwidth (the host link of a
GPU). Up and down times alternate (an alternating renewal process), so the long-run share of time
a replica is up is

    A = MTBF_r / (MTBF_r + MTTR),   MTBF_r = 1 / rate = MTBF / n

and a fleet of independent replicas with availabilities ``A_i`` has at most ``k`` of them down
with probability ``P(sum_i X_i <= k)``, ``X_i ~ Bernoulli(1 - A_i)`` (the Poisson-binomial
distribution, summed exactly by dynamic programming). Correlated failures (a switch, a power
feed, a rack) are not modelled: they make ``P`` smaller than this.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from simulator.analytic.placement import Deployment
from simulator.config.hardware import ReliabilitySpec

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class ReplicaReliability:
    """One replica's failure rate and time down (module docstring)."""

    units: int  # failure units it spans
    failures_per_s: float  # while up
    restart_s: float
    reload_s: float

    @property
    def mtbf_s(self) -> float:
        return 1.0 / self.failures_per_s

    @property
    def mttr_s(self) -> float:
        return self.restart_s + self.reload_s

    @property
    def availability(self) -> float:
        """Long-run share of time up: MTBF / (MTBF + MTTR)."""
        return self.mtbf_s / (self.mtbf_s + self.mttr_s)


def reload_s(deployment: Deployment) -> float:
    """Seconds to load a replica's weights back after a restart: ``(W / c) / b`` (module docstring)."""
    hw = deployment.hardware
    spec = hw.reliability
    link = spec.reload_bandwidth.value if spec and spec.reload_bandwidth else min(t.bandwidth.value for t in hw.memory)
    return deployment.weight_bytes / deployment.chips / link


def replica_reliability(deployment: Deployment) -> ReplicaReliability | None:
    """The replica's failure rate and time down; None when its hardware states no reliability."""
    spec: ReliabilitySpec | None = deployment.hardware.reliability
    if spec is None:
        return None
    units = math.ceil(deployment.replica_chips / spec.unit_chips.value)
    rate = units / (spec.mtbf_hours.value * SECONDS_PER_HOUR)
    return ReplicaReliability(units, rate, spec.restart.value, reload_s(deployment))


def down_distribution(availabilities: Sequence[float]) -> list[float]:
    """P(exactly j of independent replicas are down), j = 0..n, replica ``i`` up with probability ``A_i``."""
    down = [1.0]
    for a in availabilities:
        nxt = [0.0] * (len(down) + 1)
        for j, p in enumerate(down):
            nxt[j] += p * a
            nxt[j + 1] += p * (1.0 - a)
        down = nxt
    return down


def at_most_down(availabilities: Sequence[float], k: int) -> float:
    """P(at most ``k`` of independent replicas are down)."""
    return math.fsum(down_distribution(availabilities)[: k + 1])


def more_than_down(availabilities: Sequence[float], k: int) -> float:
    """P(more than ``k`` down), summed from its own terms (``1 - at_most_down`` loses them to rounding)."""
    return math.fsum(down_distribution(availabilities)[k + 1 :])
