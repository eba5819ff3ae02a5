"""Collectives on a torus (TPU ICI) and the fifth architecture built on them: laws, not numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.analytic.estimate import estimate
from simulator.analytic.placement import PlacementError, kv_budget_bytes, plan
from simulator.analytic.step_time import StepCostModel
from simulator.analytic.torus import TorusSlice, slice_shape
from simulator.api import override
from simulator.config.deployment import DEFAULT_MIN_KV_TOKENS, DeploymentSpec
from simulator.config.hardware import HardwareProfile
from simulator.config.loading import Catalog
from tests.conftest import deploy

ALPHA_S = 1e-6
CHIP_BANDWIDTH = 400e9  # B/s one way over all links: 100 GB/s per link on a 2D torus
MESSAGE = np.array([2.0e6])  # bytes per chip


def _slice(chips: int, dims: int = 2, wrap_from: int = 256) -> TorusSlice:
    return TorusSlice(chips, dims, wrap_from, CHIP_BANDWIDTH, ALPHA_S)


@given(st.integers(1, 4096), st.integers(1, 3))
def test_a_slice_holds_exactly_its_chips_on_its_axes(chips: int, dims: int) -> None:
    shape = slice_shape(chips, dims)
    assert math.prod(shape) == chips and len(shape) == dims and list(shape) == sorted(shape, reverse=True)


@pytest.mark.parametrize(("side", "dims"), [(4, 2), (16, 2), (4, 3), (8, 3)])
def test_allreduce_on_a_full_torus_is_s_over_d_b_plus_d_k_hops(side: int, dims: int) -> None:
    """Wrapped k^d torus: t = 2 (N-1)/N S / (2 d b) + 2 d ceil(k/2) alpha (Scaling Book's S / (d b) + d k alpha)."""
    n = side**dims
    torus = _slice(n, dims, wrap_from=n)
    bandwidth_s, hops_s = torus.allreduce_s(MESSAGE)
    b = CHIP_BANDWIDTH / (2 * dims)
    assert bandwidth_s[0] == pytest.approx((n - 1) / n * MESSAGE[0] / (dims * b), rel=1e-12)
    assert hops_s == pytest.approx(2 * dims * math.ceil(side / 2) * ALPHA_S, rel=1e-12)


def test_allreduce_bandwidth_term_does_not_grow_with_the_pod() -> None:
    """On wrapped tori the bandwidth term tends to S / (d b) from below: more chips, never more per-chip time."""
    times = [_slice(k * k, 2, wrap_from=k * k).allreduce_s(MESSAGE)[0][0] for k in (2, 4, 8, 16, 32)]
    assert times == sorted(times) and times[-1] < MESSAGE[0] / (2 * CHIP_BANDWIDTH / 4)


def test_an_open_slice_pays_twice_the_bandwidth_and_more_hops_than_a_ring() -> None:
    """No wraparound: one direction per axis (2x the bandwidth term) and k - 1 hops instead of ceil(k/2)."""
    ring, line = _slice(16, wrap_from=16), _slice(16, wrap_from=256)
    assert line.allreduce_s(MESSAGE)[0][0] == pytest.approx(2 * ring.allreduce_s(MESSAGE)[0][0], rel=1e-12)
    assert line.hops == 3 + 3 > ring.hops == 2 + 2


def test_alltoall_on_a_torus_is_bisection_bound_and_grows_with_the_side() -> None:
    """Wrapped k x k: t = k S / (8 b) once the bisection binds; a switch's would stay (N-1)/N S / B."""
    times = []
    for k in (4, 8, 16):
        torus = _slice(k * k, wrap_from=k * k)
        bandwidth_s, _ = torus.alltoall_s(MESSAGE)
        assert bandwidth_s[0] == pytest.approx(k * MESSAGE[0] / (8 * torus.link_bandwidth), rel=1e-12)
        times.append(bandwidth_s[0])
    assert times[2] == pytest.approx(4 * times[0], rel=1e-12)


def test_v6e_profile_reproduces_googles_pod_bisection_and_allreduce_bandwidth(catalog: Catalog) -> None:
    """3.2 TB/s bisection (2 x 16 wrapped links x b) and 102.4 TB/s all-reduce (256 x 2 d b) per v6e pod."""
    hw = catalog.hardware("google-tpu-v6e")
    pod = TorusSlice(256, 2, 256, hw.interconnect.bandwidth.value, ALPHA_S)
    assert pod.shape == (16, 16) and pod.wraps
    assert 2 * 16 * pod.link_bandwidth == pytest.approx(3.2e12, rel=1e-12)
    assert 256 * pod.injection_bandwidth == pytest.approx(102.4e12, rel=1e-12)


# -- the fifth architecture (and the other new profiles) serving llama-3.1-70b ---------------------------


def _plan_70b(hardware: HardwareProfile, catalog: Catalog, **fields: object):  # type: ignore[no-untyped-def]
    spec = DeploymentSpec(hardware=hardware.id, model="llama-3.1-70b", **fields)  # type: ignore[arg-type]
    return plan(hardware, catalog.model("llama-3.1-70b"), spec, catalog.stack(hardware.execution.default_stack))


def test_a_tpu_places_llama_70b_and_its_breakdown_names_the_torus_hops(catalog: Catalog) -> None:
    """TP8 on a 4 x 2 v6e slice (no wraparound): each all-reduce crosses 3 + 1 hops each way, two per layer."""
    d = deploy(catalog, "google-tpu-v6e", "llama-3.1-70b")
    assert d.tensor_parallel == 8 and d.chips == 8
    step = estimate(d, 1000, 1000, 1).decode_step
    alpha = d.hardware.interconnect.latency.value
    expected = d.model.num_layers * 2 * (2 * (3 + 1) * alpha)
    assert step.components_s["torus_hops"] == pytest.approx(expected, rel=1e-12)
    assert step.bottleneck == "weights_memory"


def test_gpus_have_no_torus_hops(catalog: Catalog) -> None:
    d = deploy(catalog, "nvidia-b300", "llama-3.1-70b", chips=8)
    assert estimate(d, 1000, 1000, 1).decode_step.components_s["torus_hops"] == 0.0


@pytest.mark.parametrize("hardware_id", ["google-tpu-v6e", "google-tpu-v7"])
def test_tpu_decode_is_memory_bound_and_falls_with_hbm_bandwidth(catalog: Catalog, hardware_id: str) -> None:
    """Batch-1 decode streams the weights: at the chip's own HBM bandwidth (and below) weights_memory
    dominates, and the pass shrinks strictly as bandwidth grows (the stack's per-step time stays)."""
    base = catalog.hardware(hardware_id)
    times = []
    for factor in (0.5, 1.0, 2.0, 4.0):
        hw = override(base, {"memory.hbm.bandwidth": f"{base.tier('hbm').bandwidth.value * factor} B/s"})
        step = StepCostModel(_plan_70b(hw, catalog)).pass_time([1.0], [1000.0])
        assert step.bottleneck == "weights_memory" or factor > 1.0
        times.append(step.total_s)
    assert times == sorted(times, reverse=True) and len(set(times)) == len(times)


@pytest.mark.parametrize("hardware_id", ["google-tpu-v6e", "google-tpu-v7", "nvidia-b300", "amd-mi355x"])
def test_capacity_arithmetic_places_or_refuses(catalog: Catalog, hardware_id: str) -> None:
    """kv_budget is the stack's rule (kv_memory), else chips * capacity * usable - weights; a model that
    cannot fit one chip is refused at plan time."""
    hw = catalog.hardware(hardware_id)
    hbm = hw.tier("hbm")
    room = hbm.capacity.value * hbm.usable_fraction.value
    d = _plan_70b(hw, catalog)
    assert d.kv_budget_bytes == pytest.approx(kv_budget_bytes(d.stack, hbm, d.chips, d.weight_bytes), rel=1e-12)
    if d.stack.kv_memory is None:
        assert d.kv_budget_bytes == pytest.approx(d.chips * room - d.weight_bytes, rel=1e-12)
    assert d.chips >= math.ceil(d.weight_bytes / room)
    big = catalog.model("llama-3.1-405b")
    if big.published.params_total.value * 2 > room:  # bf16 405B never fits one chip
        with pytest.raises(PlacementError, match="does not fit"):
            plan(hw, big, DeploymentSpec(hardware=hardware_id, model=big.id, chips=1), catalog.stack("vllm"))


def test_four_times_the_sram_quarters_an_lpu_rack_and_leaves_its_schedule_alone(catalog: Catalog) -> None:
    """An SRAM machine (layer-pipelined): chips = ceil((W + KV floor) / (capacity * usable)) rounded up to
    trays and to a whole layout, so 4x SRAM needs about a quarter of the chips. A pass streams each chip's
    layers at its bandwidth, ``t_weights = W * L / (chips * bw * eff)``: with the same SRAM bandwidth per
    chip, weights time x chips is invariant. The per-layer schedule (fixed latency) does not change."""
    base = catalog.hardware("groq-3-lpx")
    big = override(base, {"memory.sram.capacity": f"{base.tier('sram').capacity.value * 4} B"})
    unit = base.execution.deployment_unit_chips.value  # type: ignore[union-attr]
    steps = []
    deployments = []
    for hw in (base, big):
        d = _plan_70b(hw, catalog)
        tier = hw.tier("sram")
        need = math.ceil((d.weight_bytes + d.kv_bytes_per_token * DEFAULT_MIN_KV_TOKENS)
                         / (tier.capacity.value * tier.usable_fraction.value))  # fmt: skip
        assert need <= d.chips <= need + unit * d.tensor_parallel
        deployments.append(d)
        steps.append(StepCostModel(d).pass_time([1.0], [100.0]).components_s)
    before, after = deployments
    assert 3.0 <= before.chips / after.chips <= 4.5
    assert steps[0]["weights_memory"] * before.chips == pytest.approx(steps[1]["weights_memory"] * after.chips,
                                                                      rel=1e-9)  # fmt: skip
    assert steps[0]["fixed_latency"] == pytest.approx(steps[1]["fixed_latency"], rel=1e-12)
