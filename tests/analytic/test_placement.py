"""Capacity arithmetic of the memory plan, and placement that matches published deployments."""

from __future__ import annotations

import math

import pytest

from simulator.analytic.architecture import total_params
from simulator.analytic.placement import PlacementError, routed_expert_params
from simulator.config.deployment import DEFAULT_MIN_KV_TOKENS as MIN_KV_TOKENS
from simulator.config.loading import Catalog
from tests.conftest import deploy


def test_kv_bytes_per_token_by_hand(h100_70b_tp4) -> None:
    """Llama 3.1 70B, bf16 KV: 80 layers x 2 (K,V) x 8 heads x 128 dims x 2 B = 327,680 B."""
    assert h100_70b_tp4.kv_bytes_per_token == 80 * 2 * 8 * 128 * 2


def test_kv_budget_is_the_stacks_share_of_free_memory(h100_70b_tp4) -> None:
    """TensorRT-LLM: kv_budget = f * (chips * capacity - weights - chips * reserve);
    max tokens = floor(budget / per token)."""
    d = h100_70b_tp4
    hbm, memory = d.hardware.tier("hbm"), d.stack.kv_memory
    assert memory is not None and memory.rule == "of-free"
    budget = memory.fraction.value * (4 * hbm.capacity.value - total_params(d.model) * 2 - 4 * memory.reserve.value)
    assert d.kv_budget_bytes == pytest.approx(budget, rel=1e-12)
    assert d.max_kv_tokens == math.floor(budget / d.kv_bytes_per_token)


def test_max_sequences_is_budget_over_sequence_kv_capped_by_batch(h100_70b_tp4) -> None:
    d = h100_70b_tp4
    for context in (128, 2_000, 20_000):
        fit = math.floor(d.kv_budget_bytes / (d.kv_bytes_per_token * context))
        assert d.max_sequences(context) == min(fit, d.stack.max_batch_size.value)


def test_mla_latent_is_replicated_across_tensor_parallel_chips(catalog: Catalog) -> None:
    d = deploy(catalog, "nvidia-h200", "deepseek-r1", chips=8, attention_parallel="tensor")
    assert d.kv_bytes_per_token == pytest.approx(61 * (512 + 64) * 1.0 * 8, rel=1e-12)


def test_data_parallel_attention_stores_kv_once_and_replicates_the_rest(catalog: Catalog) -> None:
    """Under DP attention every chip keeps its own copy of attention, dense layers and embeddings
    and 1/ep of the routed experts; each sequence's latent lives on one chip only."""
    tp = deploy(catalog, "nvidia-h200", "deepseek-r1", chips=8, attention_parallel="tensor")
    dp = deploy(catalog, "nvidia-h200", "deepseek-r1", chips=8, attention_parallel="data")
    assert dp.attention_dp == 8 and dp.tensor_parallel == 1 and dp.expert_parallel == 8
    assert dp.kv_bytes_per_token == pytest.approx(61 * (512 + 64) * 1.0, rel=1e-12)
    routed = routed_expert_params(dp.model) * dp.bytes_per_param("experts")
    assert dp.weight_bytes == pytest.approx(8 * (tp.weight_bytes - routed) + routed, rel=1e-12)
    assert dp.max_batch_size == 8 * dp.stack.max_batch_size.value


def test_cerebras_needs_four_wafers_for_70b_bf16_as_published(catalog: Catalog) -> None:
    d = deploy(catalog, "cerebras-cs3", "llama-3.1-70b")
    assert d.chips == 4 and d.weights_tier.name == "sram" and d.pipeline_parallel == 4


def test_groq_spreads_70b_over_hundreds_of_sram_chips(catalog: Catalog) -> None:
    d = deploy(catalog, "groq-lpu", "llama-3.3-70b", weights="fp8")
    assert 300 <= d.chips <= 700 and d.weights_tier.name == "sram"


def test_sambanova_serves_from_hbm_and_keeps_ddr_for_resident_models(catalog: Catalog) -> None:
    d = deploy(catalog, "sambanova-sn40l", "llama-3.1-70b")
    assert d.weights_tier.name == "hbm" and d.chips == 16
    assert [t.name for t in d.resident_tiers] == ["ddr"] and d.resident_models_capacity_bytes > 10e12


@pytest.mark.parametrize(
    ("hardware_id", "model_id"),
    [("groq-lpu", "llama-3.1-8b"), ("groq-lpu", "llama-3.3-70b"), ("cerebras-cs3", "llama-3.1-405b")],
)
def test_automatic_placement_is_the_smallest_layout_that_fits(
    catalog: Catalog, hardware_id: str, model_id: str
) -> None:
    """Weights plus the KV floor fit, and one pipeline stage fewer (tp chips fewer) would not."""
    d = deploy(catalog, hardware_id, model_id, weights="fp8")
    tier = d.weights_tier
    per_chip = tier.capacity.value * tier.usable_fraction.value
    need = d.weight_bytes + MIN_KV_TOKENS * d.kv_bytes_per_token
    assert d.chips * per_chip >= need
    assert (d.chips - d.tensor_parallel) * per_chip < need


def test_a_model_that_does_not_fit_says_how_many_chips_it_needs(catalog: Catalog) -> None:
    with pytest.raises(PlacementError, match=r"needs at least \d+ chips"):
        deploy(catalog, "nvidia-h100-sxm", "llama-3.1-405b", chips=2)


def test_weights_beyond_the_fast_tier_are_split_not_moved_whole(catalog: Catalog) -> None:
    """Kimi-K2 (1 TB of fp8) on one 16-socket SambaNova rack: the fast tier keeps everything but the
    embedding and the share of the experts that does not fit, which is read from DDR; each share is
    timed on its tier (the experts' read rate lies between DDR's and HBM's)."""
    d = deploy(catalog, "sambanova-sn40l", "kimi-k2", chips=16)
    hbm, ddr = d.hardware.tier("hbm"), d.hardware.tier("ddr")
    assert d.weights_tier is hbm and d.spilled["embeddings"] == (ddr, 1.0)
    _, share = d.spilled["experts"]
    assert 0 < share < 1 and set(d.spilled) == {"embeddings", "experts"}
    fast = hbm.bandwidth.value * hbm.efficiency.value
    slow = ddr.bandwidth.value * ddr.efficiency.value
    assert slow < d.read_rate("experts") < fast and d.read_rate("attention") == fast
    assert d.kv_budget_bytes >= d.kv_bytes_per_token * MIN_KV_TOKENS


def test_weights_that_fit_the_fast_tier_never_spill(catalog: Catalog) -> None:
    assert deploy(catalog, "sambanova-sn40l", "deepseek-r1", chips=16).spilled == {}
