"""Roofline lower bounds and the single-stream ceiling, for every bundled hardware profile."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.analytic.estimate import estimate
from simulator.analytic.roofline import decode_lower_bound_s, deployment_ceiling_tok_s, ridge_point
from simulator.analytic.step_time import StepCostModel
from simulator.config.loading import Catalog
from tests.conftest import deploy

HARDWARE = Catalog().hardware_ids()
MODELS = ("llama-3.1-8b", "gpt-oss-120b", "mixtral-8x7b")


@pytest.mark.parametrize("hardware_id", HARDWARE)
@pytest.mark.parametrize("model_id", MODELS)
@pytest.mark.parametrize("batch", [1, 8, 64])
def test_pass_time_is_at_least_both_roofline_bounds(
    catalog: Catalog, hardware_id: str, model_id: str, batch: int
) -> None:
    """t_pass >= active bytes / (tp bw eff) and t_pass >= 2 P_active B / (tp peak eff)."""
    d = deploy(catalog, hardware_id, model_id)
    step = StepCostModel(d).pass_time(np.ones(batch), np.full(batch, 512.0))
    memory_s, compute_s = decode_lower_bound_s(d, batch)
    assert step.total_s >= memory_s * (1 - 1e-12)
    assert step.total_s >= compute_s * (1 - 1e-12)


@pytest.mark.parametrize("hardware_id", HARDWARE)
@pytest.mark.parametrize("model_id", MODELS)
def test_single_stream_speed_never_exceeds_the_bandwidth_ceiling(
    catalog: Catalog, hardware_id: str, model_id: str
) -> None:
    """Batch-1 tok/s <= chips * peak bandwidth / active weight bytes."""
    d = deploy(catalog, hardware_id, model_id)
    assert estimate(d, 1000, 1000, 1).per_user_output_tok_s <= deployment_ceiling_tok_s(d)


def test_h100_ridge_point_is_about_295_flop_per_byte(catalog: Catalog) -> None:
    h100 = catalog.hardware("nvidia-h100-sxm")
    assert ridge_point(h100.compute.peak["bf16"].value, h100.tier("hbm").bandwidth.value) == pytest.approx(
        989.4e12 / 3.35e12, rel=1e-12
    )


def test_decode_turns_compute_bound_past_the_ridge_point(h100_70b_tp4) -> None:
    """At batch 1 the weight stream dominates; at batches far past B* the matmuls do."""
    cost = StepCostModel(h100_70b_tp4)
    assert cost.pass_time([1.0], [0.0]).bottleneck == "weights_memory"
    big = 4096
    assert cost.pass_time(np.ones(big), np.zeros(big)).bottleneck == "compute"


def test_longer_context_lowers_arithmetic_intensity(h100_70b_tp4) -> None:
    """More KV bytes per FLOP: the KV share of the pass grows monotonically with context."""
    cost = StepCostModel(h100_70b_tp4)
    shares = []
    for context in (0, 1_000, 10_000, 100_000):
        step = cost.pass_time(np.ones(32), np.full(32, float(context)))
        shares.append(step.components_s["kv_memory"] / step.total_s)
    assert shares == sorted(shares) and shares[-1] > shares[0]


def test_bandwidth_only_roofline_is_about_100x_too_fast_on_sram_machines(catalog: Catalog) -> None:
    """SRAM bandwidth would allow ~10^5 tok/s; the latency terms hold real speed near 10^3."""
    for hardware_id, model_id in (("cerebras-cs3", "llama-3.1-70b"), ("groq-lpu", "llama-3.1-8b")):
        d = deploy(catalog, hardware_id, model_id)
        speed = estimate(d, 1000, 1000, 1).per_user_output_tok_s
        assert deployment_ceiling_tok_s(d) / speed > 50
        step = estimate(d, 1000, 1000, 1).decode_step
        assert step.bottleneck in {"fabric", "fixed_latency", "communication", "pipeline_hops"}
