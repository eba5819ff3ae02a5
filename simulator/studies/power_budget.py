"""A site's power budget as a planning constraint (``plan.budget_kw``).

A replica of a backend the site runs draws, at full load, ``chips x busy_w x PUE`` (``busy_w``:
the chip's power cap when the deployment sets one below its full power, else the profile's
``power.chip``; :mod:`simulator.analytic.power`); a per-token (API) backend draws nothing on
the site. A fleet fits the budget when its replicas' draws sum to at most ``budget_kw``: the
provisioned (nameplate) draw, not the mean, since a site's breakers must hold the peak.
"""

from __future__ import annotations

from simulator.analytic.power import BUDGET_ROUNDING, replicas_within
from simulator.plan.resolve import BackendPlan


def replica_kw(plan: BackendPlan, pue: float) -> float:
    """Facility kW one replica of ``plan`` draws at full load (0 for a per-token backend)."""
    if plan.pricing.token_price is not None:
        return 0.0
    chip_w = plan.power.busy_w if plan.power is not None else plan.deployment.hardware.power.chip.value
    return plan.deployment.replica_chips * chip_w * pue / 1000.0


def within_budget(counts: tuple[int, ...], kw: tuple[float, ...], budget_kw: float | None) -> bool:
    """Whether replica counts drawing ``kw`` each fit ``budget_kw`` (always, without a budget)."""
    if budget_kw is None:
        return True
    return sum(n * k for n, k in zip(counts, kw, strict=True)) <= budget_kw * (1.0 + BUDGET_ROUNDING)


def power_limits(limits: tuple[tuple[int, int], ...], kw: tuple[float, ...], budget_kw: float | None,
                 ) -> tuple[tuple[int, int], ...]:  # fmt: skip
    """Each backend's (least, most) replicas, the most lowered to what fits ``budget_kw`` alone."""
    if budget_kw is None:
        return limits
    return tuple((low, min(high, replicas_within(budget_kw, k)) if k > 0 else high)
                 for (low, high), k in zip(limits, kw, strict=True))  # fmt: skip
