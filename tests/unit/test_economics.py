"""Cost arithmetic is exact: rental, ownership, energy, per token and per task."""

from __future__ import annotations

import pytest

from simulator.analytic.economics import CostAssumptions, CostError, energy_joules, run_cost, usd_per_chip_hour
from simulator.config.loading import Catalog

H100 = Catalog().hardware("nvidia-h100-sxm")


def test_rental_cost_per_token_by_hand() -> None:
    """2 replicas x 4 chips x $2.50/h for 1 h, 10M output tokens: $20 -> $2.00 per 1M tokens."""
    cost = run_cost(H100, 4, [3600.0, 1800.0], 3600.0, 10e6, 40, CostAssumptions())
    assert cost.usd_per_hour == pytest.approx(2 * 4 * 2.5, rel=1e-12)
    assert cost.usd == pytest.approx(20.0, rel=1e-12)
    assert cost.usd_per_million_output_tokens == pytest.approx(2.0, rel=1e-12)
    assert cost.usd_per_task == pytest.approx(0.5, rel=1e-12)


def test_ownership_is_amortised_capex_plus_energy() -> None:
    a = CostAssumptions(basis="ownership", years=4.0, pue=1.25, usd_per_kwh=0.10)
    expected = 30000 / (4 * 8766) + 700 * 1.25 * 0.10 / 1000
    assert usd_per_chip_hour(H100, a) == pytest.approx(expected, rel=1e-12)


def test_energy_counts_busy_and_idle_draw() -> None:
    """4 chips x 700 W, busy 600 s of 1000 s, idle at 30 %, PUE 1.3."""
    a = CostAssumptions(pue=1.3, idle_power_fraction=0.3)
    assert energy_joules(H100, 4, 600.0, 1000.0, a) == pytest.approx(1.3 * 2800 * (600 + 0.3 * 400), rel=1e-12)
    cost = run_cost(H100, 4, [600.0], 1000.0, 1e5, 0, a)
    assert cost.joules_per_output_token == pytest.approx(cost.joules / 1e5, rel=1e-12)
    assert cost.usd_per_task != cost.usd_per_task  # no tasks: NaN, not a division error


def test_a_missing_price_is_named() -> None:
    groq = Catalog().hardware("groq-lpu")
    assert groq.price.rental_usd_per_chip_hour is None
    with pytest.raises(CostError, match="groq-lpu has no rental price"):
        usd_per_chip_hour(groq, CostAssumptions())
