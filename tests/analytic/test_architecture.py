"""Architecture arithmetic: KV bytes per token by hand, expected experts against Monte Carlo."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.analytic.architecture import expected_distinct_experts, kv_tokens_held, layer_shapes
from simulator.config.loading import Catalog


def test_gqa_kv_elements_per_token(catalog: Catalog) -> None:
    """Llama 3.1 70B: K and V, 8 KV heads x 128 dims, per layer: 2 * 8 * 128 = 2048 elements."""
    assert layer_shapes(catalog.model("llama-3.1-70b")).kv_elements_per_token == 2 * 8 * 128


def test_mla_caches_the_latent_not_the_heads(catalog: Catalog) -> None:
    """DeepSeek-R1: kv_lora_rank 512 + rope key 64 per token and layer, not 2 * 128 heads * 128."""
    assert layer_shapes(catalog.model("deepseek-r1")).kv_elements_per_token == 512 + 64


def test_sliding_window_layers_hold_at_most_the_window(catalog: Catalog) -> None:
    """gpt-oss-120b: 18 full layers hold the context, 18 windowed layers at most 128 tokens."""
    model = catalog.model("gpt-oss-120b")
    assert float(kv_tokens_held(model, 10_000)) == 18 * 10_000 + 18 * 128
    assert float(kv_tokens_held(model, 100)) == 36 * 100


@pytest.mark.parametrize(("experts", "k", "tokens"), [(8, 2, 1), (8, 2, 3), (128, 4, 16), (256, 8, 64)])
def test_expected_distinct_experts_matches_monte_carlo(experts: int, k: int, tokens: int) -> None:
    """E[distinct] = E (1 - (1 - k/E)^T) for uniform top-k routing; simulated mean within 4 SE."""
    rng = np.random.default_rng(7)
    trials = 4000
    distinct = np.empty(trials)
    for i in range(trials):
        picks = np.argsort(rng.random((tokens, experts)), axis=1)[:, :k]
        distinct[i] = np.unique(picks).size
    standard_error = distinct.std(ddof=1) / np.sqrt(trials)
    theory = float(expected_distinct_experts(experts, k, tokens))
    assert abs(distinct.mean() - theory) <= 4 * standard_error + 1e-12


def test_expected_experts_saturates_and_starts_at_k() -> None:
    t = np.arange(1, 5000)
    hit = expected_distinct_experts(128, 4, t)
    assert hit[0] == pytest.approx(4.0, rel=1e-12)
    assert np.all(np.diff(hit) >= 0) and hit[-1] <= 128
