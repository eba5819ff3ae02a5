"""Power caps: energy is the integral of the chips' power, never more than cap x time x chips; a
cap stretches every step by its curve's throughput share; no cap, no change."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from simulator.analytic.power import PowerCapError, chip_power, replicas_within
from simulator.config.hardware import HardwareProfile, PowerSpec
from simulator.plan.resolve import ScenarioError
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
    with pytest.raises(PowerCapError, match=r"below cerebras-cs3's idle power"):
        chip_power(CATALOG.hardware("cerebras-cs3"), 10_000.0)
    no_idle = H100.model_copy(update={"power": H100.power.model_copy(update={"idle": None})})
    with pytest.raises(PowerCapError, match=r"has no power\.idle"):
        chip_power(no_idle, 500.0)
    scenario(deployment=SMALL | {"power_cap": "500 W"})  # validates


HARDWARE = [CATALOG.hardware(hw_id) for hw_id in CATALOG.hardware_ids()]
CURVED = [hw for hw in HARDWARE if hw.power.cap_curve is not None]


@pytest.mark.parametrize("hw", HARDWARE, ids=lambda hw: hw.id)
def test_every_profile_has_an_idle_power_and_a_curve_or_a_reason(hw: HardwareProfile) -> None:
    """Idle below full power; a curve non-decreasing, from above idle to (full power, 1.0); a curve the
    profile derives (source dvfs-cube) is the documented law ((cap - idle) / (full - idle))^(1/3),
    to its three printed decimals; without a curve, a cap below full power is refused with the reason."""
    power = hw.power
    assert power.idle is not None and 0 < power.idle.value < power.chip.value
    full_w, idle_w = power.chip.value, power.idle.value
    assert chip_power(hw, full_w).throughput == chip_power(hw, 2 * full_w).throughput == 1.0
    assert chip_power(hw, 2 * full_w).busy_w == full_w
    if power.cap_curve is None:
        assert power.no_cap_reason
        with pytest.raises(PowerCapError, match=re.escape(power.no_cap_reason)):
            chip_power(hw, (idle_w + full_w) / 2)
        return
    assert power.no_cap_reason is None
    curve = power.cap_curve.value
    assert idle_w < curve.caps[0] and curve.caps[-1] == full_w and curve.throughput[-1] == 1.0
    assert np.all(np.diff(curve.throughput) >= 0)
    if power.cap_curve.source == "dvfs-cube":
        law = ((np.asarray(curve.caps) - idle_w) / (full_w - idle_w)) ** (1 / 3)
        np.testing.assert_allclose(curve.throughput, law, atol=5e-4)


@pytest.mark.parametrize(("field", "bad", "message"), [
    ("idle", {"value": "700 W", "source": "x", "confidence": "assumed"}, "must be below chip"),
    ("cap_curve", {"value": {"caps": ["200 W", "600 W"], "throughput": [0.5, 1.0]}, "source": "x",
                   "confidence": "derived"}, "must end at the chip's full power"),
    ("cap_curve", {"value": {"caps": ["50 W", "700 W"], "throughput": [0.5, 1.0]}, "source": "x",
                   "confidence": "derived"}, "must start above idle"),
    ("no_cap_reason", "no user limit", "not both"),
])  # fmt: skip
def test_an_inconsistent_power_block_is_refused(field: str, bad: Any, message: str) -> None:
    data = H100.power.model_dump(mode="json") | {field: bad}
    with pytest.raises(ValueError, match=message):
        PowerSpec.model_validate(data)


@pytest.mark.parametrize("hw", CURVED, ids=lambda hw: hw.id)
def test_energy_per_token_at_a_cap_follows_the_formula(hw: HardwareProfile) -> None:
    """One user with a fixed think time on each curved profile: at the profile's own full power the share
    is 1; at a cap c inside the curve every busy second becomes 1 / f(c) seconds at c watts and every
    idle second stays an idle second, so E(c) = n (c B / f(c) + idle (T - B)) from the full-power run's
    busy time B and span T, over the same output tokens."""
    curve = hw.power.cap_curve.value  # type: ignore[union-attr]
    full_w, cap_w = hw.power.chip.value, (curve.caps[0] + curve.caps[1]) / 2  # between two points
    one = {"load": {"kind": "closed", "users": 1, "think_time_s": {"dist": "constant", "value": 0.2}},
           "run": {"seed": 3, "max_requests": 6}}  # fmt: skip
    deployment = SMALL | {"hardware": hw.id}
    full = run(deployment=deployment | {"power_cap": f"{full_w:g} W"}, **one)
    capped = run(deployment=deployment | {"power_cap": f"{cap_w:g} W"}, **one)
    at_full, at_cap = _power(full), _power(capped)
    assert at_full.throughput_share == 1.0 and at_full.busy_w == full_w
    share = chip_power(hw, cap_w).throughput
    assert at_cap.throughput_share == share < 1.0
    busy, span = full.records.totals[0].busy_s, full.records.end_s
    assert capped.records.totals[0].busy_s == pytest.approx(busy / share, rel=1e-9)
    assert capped.records.end_s - capped.records.totals[0].busy_s == pytest.approx(span - busy, rel=1e-9)
    tokens = at_full.energy_j / at_full.joules_per_output_token
    assert at_cap.energy_j / at_cap.joules_per_output_token == pytest.approx(tokens, rel=1e-12)
    energy = at_full.chips * (cap_w * busy / share + at_cap.idle_w * (span - busy))
    assert at_cap.joules_per_output_token == pytest.approx(energy / tokens, rel=1e-9)


def test_replicas_within_a_budget() -> None:
    assert replicas_within(10_000.0, 2_500.0) == 4
    assert replicas_within(9_999.0, 2_500.0) == 3
