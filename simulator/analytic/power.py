"""A chip under a power limit: how much slower it steps, what it draws, what a run's energy is.

Assumptions (each number is the hardware profile's, sourced there):

- **Stretch.** Under a power limit ``cap`` the firmware lowers the clock until the draw fits
  (DVFS). The profile's ``power.cap_curve`` gives the share ``f(cap)`` of the uncapped
  throughput kept at each cap (linear between its points); every step of a replica takes
  ``t / f(cap)``. A cap at or above the chip's full-load power changes nothing (``f = 1``); a
  cap below the curve's lowest point is refused, and so is any cap below full power on a chip
  without a curve (``power.no_cap_reason`` says why, e.g. a wafer system without a user power
  limit). The curve is for a chip at full load: a memory-bound decode step that draws less than
  the cap is stretched all the same, so the stretch is an upper bound for decode-heavy runs
  (H200 decode draws 137-300 W of 700 W, arXiv:2605.11999).
- **Draw.** A chip draws ``busy_w = min(cap, full)`` while its replica runs an iteration and
  ``idle_w`` (the profile's ``power.idle``) otherwise. So one replica of ``n`` chips over
  ``[0, T]`` with ``B`` busy seconds uses ``E = n (busy_w B + idle_w (T - B))`` joules (the
  integral of its power), which is at most ``n cap T`` whenever ``idle_w <= cap``.
- **Site power.** A fleet's provisioned draw is ``sum over backends of replicas x chips x
  busy_w`` times the facility's PUE; ``plan.budget_kw`` bounds it (:func:`replicas_within`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simulator.analytic.step_fast import EngineCost, FloatArray, IterationTimes, JumpSteps, StretchedSteps
from simulator.analytic.step_time import BatchAggregates, IterationCost, ShapeFloats
from simulator.config.hardware import HardwareProfile
from simulator.errors import InfersimError


class PowerCapError(InfersimError):
    """A power cap the hardware profile cannot model (no curve, below it, no idle power)."""


@dataclass(frozen=True)
class ChipPower:
    """One chip's draw and speed under a cap (W, W, W, share of the uncapped throughput)."""

    cap_w: float
    busy_w: float
    idle_w: float
    throughput: float

    @property
    def stretch(self) -> float:
        """Factor on every step time: ``1 / f(cap)``."""
        return 1.0 / self.throughput


def chip_power(hardware: HardwareProfile, cap_w: float, where: str = "power_cap") -> ChipPower:
    """The draw and speed of one ``hardware`` chip limited to ``cap_w`` (module docstring)."""
    power = hardware.power
    full_w = power.chip.value
    if power.idle is None:
        raise PowerCapError(f"{where}: {hardware.id} has no power.idle, so a capped run's energy is unknown")
    if cap_w < power.idle.value:
        raise PowerCapError(f"{where}: {cap_w:g} W is below {hardware.id}'s idle power ({power.idle.value:g} W)")
    if cap_w >= full_w:
        return ChipPower(cap_w, full_w, power.idle.value, 1.0)
    if power.cap_curve is None:
        why = power.no_cap_reason or f"no power.cap_curve, so a cap below {full_w:g} W is unknown"
        raise PowerCapError(f"{where}: {hardware.id} takes no cap below its full {full_w:g} W: {why}")
    curve = power.cap_curve.value
    if cap_w < curve.caps[0]:
        raise PowerCapError(f"{where}: {cap_w:g} W is below {hardware.id}'s power.cap_curve (from {curve.caps[0]:g} W)")
    throughput = float(np.interp(cap_w, curve.caps, curve.throughput))
    return ChipPower(cap_w, cap_w, power.idle.value, throughput)


def replica_energy_j(chip: ChipPower, chips: int, busy_s: float, span_s: float) -> float:
    """Joules one replica of ``chips`` chips uses over ``span_s`` with ``busy_s`` of it busy."""
    busy = min(max(busy_s, 0.0), span_s)
    return chips * (chip.busy_w * busy + chip.idle_w * (span_s - busy))


#: Relative allowance when a fleet's draw is compared with a site budget: float sums of replica
#: draws that equal the budget exactly must fit it.
BUDGET_ROUNDING = 1e-9


def replicas_within(budget_kw: float, replica_kw: float) -> int:
    """The most replicas drawing ``replica_kw`` (> 0) each that fit in ``budget_kw``."""
    return math.floor(budget_kw / replica_kw * (1.0 + BUDGET_ROUNDING))


class CappedCost(EngineCost):
    """A replica's :class:`~simulator.analytic.step_fast.EngineCost` with every step ``stretch`` times
    longer (the work, FLOPs and bytes, unchanged)."""

    def __init__(self, cost: EngineCost, stretch: float) -> None:
        self.cost, self.stretch = cost, stretch
        self.accepted = cost.accepted

    def iteration(self, shape: ShapeFloats) -> tuple[float, float, float]:
        seconds, flops, bytes_moved = self.cost.iteration(shape)
        return seconds * self.stretch, flops, bytes_moved

    def iteration_times(self, batch: BatchAggregates) -> IterationCost:
        times = self.cost.iteration_times(batch)
        return IterationTimes(np.asarray(times.total_s) * self.stretch, times.flops, times.bytes_moved)

    def decode_steps(self, context_tokens: Sequence[float], steps: int, window: int | None) -> JumpSteps:
        return StretchedSteps(self.cost.decode_steps(context_tokens, steps, window), self.stretch)

    def draft_s(self, context_tokens: FloatArray) -> float:
        return self.cost.draft_s(context_tokens) * self.stretch
