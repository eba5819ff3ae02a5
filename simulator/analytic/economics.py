"""What a run costs: dollars and joules per token and per task.

Assumptions:

- **Rental** (default when the profile has it): the fleet is paid for all the time it is up,
  ``$/h = replicas * chips * rental_usd_per_chip_hour``; idle capacity costs the same.
- **Ownership**: capex amortised linearly over ``years`` plus energy,
  ``$/h = replicas * chips * (capex / (years * 8766 h) + power * PUE * $/kWh / 1000)``.
- **API** (per-token price of a provider serving the model on this hardware): each measured
  request costs ``input * $/1M in + output * $/1M out``; nothing is paid while idle.
- **Idle cost**: the part of a rented or owned backend's cost spent while a replica was idle,
  ``sum over replicas of chips * $/chip-h * (window - busy)``.
- **Energy**: each chip draws its profile power while its replica is busy and
  ``idle_power_fraction`` of it while idle; facility overhead is ``PUE``.
  ``J = PUE * chips * power * (busy_s + idle_fraction * (window_s - busy_s))`` per replica.
- Per-token and per-task figures divide the window's cost by the output tokens (or completed
  tasks) of the same window; the idle cost of an under-used fleet is therefore included.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from simulator.config.fleet import CostSpec
from simulator.config.hardware import HardwareProfile, TokenPrice
from simulator.errors import InfersimError

HOURS_PER_YEAR = 8766.0  # 365.25 days
SECONDS_PER_HOUR = 3600.0
JOULES_PER_KWH = 3.6e6
TOKENS_PER_MILLION = 1e6


@dataclass(frozen=True)
class CostAssumptions:
    basis: Literal["rental", "ownership"] = "rental"
    years: float = 4.0  # amortisation period for capex
    pue: float = 1.3  # facility power usage effectiveness (assumed; typical modern data centre)
    usd_per_kwh: float = 0.08  # industrial electricity price (assumed)
    idle_power_fraction: float = 0.3  # idle draw / busy draw (assumed)


def assumptions_of(spec: CostSpec) -> CostAssumptions:
    """A scenario's cost section as assumptions (its basis is resolved per backend)."""
    return CostAssumptions("rental", spec.years, spec.pue, spec.usd_per_kwh, spec.idle_power_fraction)


class CostError(InfersimError):
    """A price the cost basis needs is missing from the profile."""


@dataclass(frozen=True)
class Pricing:
    """How one backend is paid for: per chip-hour (rental, ownership) or per token (api)."""

    basis: Literal["rental", "ownership", "api"]
    usd_per_chip_hour: float  # 0 on the api basis
    token_price: TokenPrice | None  # the api basis only


def api_usd(price: TokenPrice | None, input_tokens: float, output_tokens: float) -> float:
    """The API bill ``(input * $/1M in + output * $/1M out) / 1e6`` (0 when not metered)."""
    if price is None:
        return 0.0
    usd = input_tokens * price.input_usd_per_million_tokens.value
    return (usd + output_tokens * price.output_usd_per_million_tokens.value) / TOKENS_PER_MILLION


def resolve_pricing(hardware: HardwareProfile, model_id: str, basis: str, assumptions: CostAssumptions) -> Pricing:
    """The pricing of ``model_id`` on ``hardware``; ``auto`` prefers rental, then ownership, then api."""
    price = hardware.price
    if basis == "auto":
        basis = (
            "rental" if price.rental_usd_per_chip_hour is not None
            else "ownership" if price.capex_usd_per_chip is not None else "api"
        )  # fmt: skip
    if basis == "api":
        token_price = price.api.get(model_id)
        if token_price is None:
            offered = ", ".join(sorted(price.api)) or "none"
            raise CostError(
                f"{hardware.id} has no API price for {model_id} (API prices for: {offered}); "
                f"use the rental or ownership basis"
            )
        return Pricing("api", 0.0, token_price)
    chip_basis: Literal["rental", "ownership"] = "rental" if basis == "rental" else "ownership"
    chosen = dataclasses.replace(assumptions, basis=chip_basis)
    return Pricing(chip_basis, usd_per_chip_hour(hardware, chosen), None)


def usd_per_chip_hour(hardware: HardwareProfile, assumptions: CostAssumptions) -> float:
    """Hourly cost of one chip on the chosen basis."""
    price = hardware.price
    if assumptions.basis == "rental":
        if price.rental_usd_per_chip_hour is None:
            raise CostError(f"{hardware.id} has no rental price; use the ownership basis (capex) instead")
        return price.rental_usd_per_chip_hour.value
    if price.capex_usd_per_chip is None:
        raise CostError(f"{hardware.id} has no capex price; use the rental basis instead")
    capital = price.capex_usd_per_chip.value / (assumptions.years * HOURS_PER_YEAR)
    energy = hardware.power.chip.value * assumptions.pue * assumptions.usd_per_kwh / 1000.0
    return capital + energy


def energy_joules(
    hardware: HardwareProfile, chips: int, busy_s: float, window_s: float, assumptions: CostAssumptions
) -> float:
    """Facility energy of one replica over a window with ``busy_s`` busy seconds."""
    power = hardware.power.chip.value * chips
    idle_s = max(window_s - busy_s, 0.0)
    return assumptions.pue * power * (busy_s + assumptions.idle_power_fraction * idle_s)


@dataclass(frozen=True)
class RunCost:
    usd_per_hour: float
    usd: float
    joules: float
    output_tokens: float
    tasks: int
    idle_usd: float = 0.0

    @property
    def usd_per_million_output_tokens(self) -> float:
        return self.usd / self.output_tokens * TOKENS_PER_MILLION if self.output_tokens else float("nan")

    @property
    def joules_per_output_token(self) -> float:
        return self.joules / self.output_tokens if self.output_tokens else float("nan")

    @property
    def usd_per_task(self) -> float:
        return self.usd / self.tasks if self.tasks else float("nan")

    @property
    def joules_per_task(self) -> float:
        return self.joules / self.tasks if self.tasks else float("nan")

    @property
    def tasks_per_usd(self) -> float:
        return self.tasks / self.usd if self.usd else float("nan")

    def plus(self, other: RunCost) -> RunCost:
        """Two parts of a fleet over the same window (tasks are counted once, fleet-wide)."""
        return RunCost(
            self.usd_per_hour + other.usd_per_hour, self.usd + other.usd, self.joules + other.joules,
            self.output_tokens + other.output_tokens, self.tasks, self.idle_usd + other.idle_usd,
        )  # fmt: skip


def run_cost(
    hardware: HardwareProfile,
    chips_per_replica: int,
    busy_s_per_replica: list[float],
    window_s: float,
    output_tokens: float,
    tasks: int,
    assumptions: CostAssumptions,
    pricing: Pricing | None = None,
    api_usd: float = 0.0,
    joules: float | None = None,
) -> RunCost:
    """Cost and energy of identical replicas over a window (``api_usd``: the metered bill; ``joules``:
    the energy when known otherwise, e.g. under a power cap, else :func:`energy_joules`)."""
    if pricing is None:
        pricing = Pricing(assumptions.basis, usd_per_chip_hour(hardware, assumptions), None)
    if joules is None:
        joules = sum(energy_joules(hardware, chips_per_replica, busy, window_s, assumptions)
                     for busy in busy_s_per_replica)  # fmt: skip
    if pricing.basis == "api":
        per_hour = api_usd / window_s * SECONDS_PER_HOUR if window_s > 0 else 0.0
        return RunCost(per_hour, api_usd, joules, output_tokens, tasks)
    chip_usd_per_s = chips_per_replica * pricing.usd_per_chip_hour / SECONDS_PER_HOUR
    per_hour = len(busy_s_per_replica) * chip_usd_per_s * SECONDS_PER_HOUR
    idle = sum(chip_usd_per_s * max(window_s - busy, 0.0) for busy in busy_s_per_replica)
    return RunCost(per_hour, per_hour * window_s / SECONDS_PER_HOUR, joules, output_tokens, tasks, idle)
