"""Power caps: energy is the integral of the chips' power, never more than cap x time x chips; a
cap stretches every step by its curve's throughput share; no cap, no change."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from simulator.analytic.power import PowerCapError, chip_power, replicas_within
from simulator.resolve import ScenarioError
from tests.engine.conftest import CATALOG, SMALL, run, scenario

H100 = CATALOG.hardware("nvidia-h100-sxm")
OPEN: dict[str, Any] = {
    "load": {"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": 4.0}},
    "run": {"seed": 5, "max_requests": 120},
}


def _capped(cap: str | None, **parts: Any) -> Any:
    deployment = SMALL | ({"power_cap": cap} if cap else {})
    return run(deployment=deployment, **(OPEN | parts))


def _power(result: Any) -> Any:
    """The power figures of the run's one backend."""
    (power,) = result.summary.power.values()
    return power


def test_energy_is_the_hand_integral_of_power_over_the_iterations() -> None:
    """A closed loop of one user: the replica is busy exactly while an iteration runs; the energy is
    busy_w over the summed iteration times plus idle_w over the rest of the run, per chip."""
    result = run(deployment=SMALL | {"power_cap": "500 W"}, load={"kind": "closed", "users": 1, "think_time_s":
                 {"dist": "constant", "value": 0.5}}, run={"seed": 1, "max_requests": 20})  # fmt: skip
    power = _power(result)
    records = result.records
    chip = chip_power(H100, 500.0)
    busy = records.totals[0].busy_s
    assert 0 < busy < records.end_s  # the trace has both busy and idle time
    by_hand = chip.busy_w * busy + chip.idle_w * (records.end_s - busy)
    assert power.energy_j == pytest.approx(by_hand, rel=1e-12)
    assert power.mean_power_w == pytest.approx(by_hand / records.end_s, rel=1e-12)
    assert chip.idle_w <= power.mean_power_w <= chip.busy_w * (1 + 1e-12)
    # The fleet's cost counts the same energy at the facility (PUE 1.3), over the same tokens (no warm-up).
    tokens, _ = records.tokens_in_window(0.0, records.end_s)
    assert result.summary.cost.joules_per_output_token == pytest.approx(1.3 * by_hand / tokens, rel=1e-9)


@pytest.mark.parametrize("cap", ["250 W", "450 W", "700 W"])
def test_energy_never_exceeds_cap_times_time_times_chips(cap: str) -> None:
    result = _capped(cap)
    power = _power(result)
    assert power.energy_j <= power.cap_w * result.records.end_s * power.chips * (1 + 1e-12)
    assert power.energy_j >= power.idle_w * result.records.end_s * power.chips * (1 - 1e-12)


def test_a_cap_stretches_every_step_by_its_curve() -> None:
    """One request alone (no batching interplay): its TTFT and decode time grow by 1 / f(cap) exactly."""
    one = {"load": {"kind": "closed", "users": 1}, "run": {"seed": 2, "max_requests": 1}}
    free = run(deployment=SMALL, **one).records.requests
    capped = run(deployment=SMALL | {"power_cap": "400 W"}, **one).records.requests
    stretch = chip_power(H100, 400.0).stretch
    assert stretch == pytest.approx(1 / 0.802)
    for start, end in (("arrival_s", "first_token_s"), ("first_token_s", "done_s")):
        np.testing.assert_allclose(capped[end] - capped[start], (free[end] - free[start]) * stretch, rtol=1e-9)


def test_a_lower_cap_is_never_faster_and_never_draws_more() -> None:
    shares = [chip_power(H100, w).throughput for w in (200.0, 300.0, 450.0, 600.0, 700.0, 900.0)]
    assert shares == sorted(shares) and shares[-1] == shares[-2] == 1.0
    results = [_capped(cap) for cap in ("300 W", "500 W", "700 W")]
    e2e = [r.summary.e2e_s.mean for r in results]
    assert e2e[0] >= e2e[1] >= e2e[2]
    draw = [_power(r).busy_w for r in results]
    assert draw == [300.0, 500.0, 700.0]


def test_without_a_cap_the_run_is_the_same_and_reports_no_power() -> None:
    """A cap at the chip's full power stretches nothing: the same requests, to the bit."""
    free, full = _capped(None), _capped("700 W")
    assert free.summary.power is None and "power" not in free.summary.to_dict()
    for column in ("arrival_s", "first_token_s", "done_s"):
        assert np.array_equal(free.records.requests[column], full.records.requests[column])


def test_a_cap_the_profile_cannot_model_is_a_clear_error() -> None:
    with pytest.raises(ScenarioError, match=r"deployment\.power_cap: 100 W is below nvidia-h100-sxm's power.cap_curve"):
        _capped("100 W")
    with pytest.raises(PowerCapError, match=r"has no power\.idle"):
        chip_power(CATALOG.hardware("cerebras-cs3"), 10_000.0)
    scenario(deployment=SMALL | {"power_cap": "500 W"})  # validates


def test_replicas_within_a_budget() -> None:
    assert replicas_within(10_000.0, 2_500.0) == 4
    assert replicas_within(9_999.0, 2_500.0) == 3
