"""Metamorphic laws of the step-time model over generated hardware (hypothesis)."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.analytic.placement import Deployment
from simulator.analytic.step_time import StepCostModel
from simulator.config.loading import Catalog
from simulator.config.paths import get_path, with_values
from tests.conftest import deploy

CATALOG = Catalog()
BASE = {
    "gpu": deploy(CATALOG, "nvidia-h100-sxm", "mixtral-8x7b", chips=2),
    "wafer": deploy(CATALOG, "cerebras-cs3", "gpt-oss-120b", weights="mxfp4"),
    "lpu": deploy(CATALOG, "groq-lpu", "llama-3.1-8b", weights="fp8"),
}


def _scaled(d: Deployment, rate_factor: float, latency_factor: float) -> Deployment:
    """The deployment on hardware whose bandwidths and FLOP/s are x rate, latencies x latency."""
    hw = d.hardware
    rates = [f"memory.{t.name}.bandwidth" for t in hw.memory] + [f"compute.peak.{p}" for p in hw.compute.peak]
    rates.append("interconnect.bandwidth")
    latencies = ["interconnect.latency", "execution.layer_latency"]
    if hw.fabric is not None:
        latencies.append("fabric.hop_latency")
    for paths, factor in ((rates, rate_factor), (latencies, latency_factor)):
        hw = with_values(hw, {path: get_path(hw, path).value * factor for path in paths}, mark=None)
    software = ("layer_latency", "step_overhead", "expert_latency")  # the serving stack's software latencies
    stack = with_values(d.stack, {path: get_path(d.stack, path).value * latency_factor for path in software}, mark=None)
    tier = next(t for t in hw.memory if t.name == d.weights_tier.name)
    return dataclasses.replace(d, hardware=hw, weights_tier=tier, stack=stack)


batches = st.lists(st.tuples(st.integers(1, 2048), st.integers(0, 32_000)), min_size=1, max_size=12).map(
    lambda pairs: (np.array([q for q, _ in pairs], float), np.array([c for _, c in pairs], float))
)


@pytest.mark.parametrize("kind", BASE)
@given(batch=batches, k=st.floats(0.25, 8.0))
def test_scaling_rates_by_k_and_latencies_by_1_over_k_scales_time_by_1_over_k(kind: str, batch, k: float) -> None:
    """Every term is bytes/bandwidth, FLOPs/peak or a latency: t(k*rates, lat/k) = t/k exactly."""
    q, c = batch
    base = StepCostModel(BASE[kind]).pass_time(q, c).total_s
    scaled = StepCostModel(_scaled(BASE[kind], k, 1.0 / k)).pass_time(q, c).total_s
    assert scaled == pytest.approx(base / k, rel=1e-9)  # (m^p + c^p)^(1/p) rounds at p = 3


@pytest.mark.parametrize("kind", BASE)
@given(batch=batches, k=st.floats(1.0, 8.0))
def test_more_bandwidth_and_flops_never_slow_a_step(kind: str, batch, k: float) -> None:
    q, c = batch
    base = StepCostModel(BASE[kind]).pass_time(q, c).total_s
    assert StepCostModel(_scaled(BASE[kind], k, 1.0)).pass_time(q, c).total_s <= base * (1 + 1e-12)


@pytest.mark.parametrize("kind", BASE)
@given(batch=batches, extra_tokens=st.integers(1, 512), extra_context=st.integers(1, 8192))
def test_step_time_is_non_decreasing_in_batch_and_context(
    kind: str, batch, extra_tokens: int, extra_context: int
) -> None:
    q, c = batch
    cost = StepCostModel(BASE[kind])
    base = cost.pass_time(q, c).total_s
    assert cost.pass_time(np.append(q, extra_tokens), np.append(c, 0.0)).total_s >= base
    assert cost.pass_time(q, c + extra_context).total_s >= base


@given(context=st.integers(0, 16_000))
def test_gpu_decode_throughput_is_non_decreasing_in_batch(context: int) -> None:
    """B / t(B) grows with B: fixed and weight-streaming costs are shared by the batch."""
    cost = StepCostModel(BASE["gpu"])
    batch_sizes = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256])
    throughput = [b / cost.cycle_time(int(b), float(context))[0] for b in batch_sizes]
    assert all(a <= b * (1 + 1e-12) for a, b in itertools.pairwise(throughput))


def test_components_add_up_to_the_total() -> None:
    step = StepCostModel(BASE["gpu"]).pass_time([1.0, 300.0], [100.0, 0.0])
    assert sum(step.components_s.values()) == step.total_s
