"""Laws of the MoE expert kernel (a grouped GEMM): tile padding, distinct experts, per-precision rates."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError
from scipy import stats

from simulator.analytic.moe import distinct_experts
from simulator.analytic.step_time import MatmulRates, grouped_experts_s, padded_rows_per_expert
from simulator.config.hardware import GroupedGemmSpec
from simulator.config.loading import Catalog

H200 = Catalog().hardware("nvidia-h200")
RATE = H200.tier("hbm").bandwidth.value * H200.tier("hbm").efficiency.value


@pytest.mark.parametrize("tokens", [1, 3, 16, 100, 1000, 5000])
@pytest.mark.parametrize("tile", [1, 16, 64, 128])
def test_padding_adds_at_most_a_tile_per_hit_expert_and_never_removes_rows(tokens: int, tile: int) -> None:
    experts, k = 128, 8
    rows = tokens * k
    padded = experts * padded_rows_per_expert(tokens, experts, k, tile)
    hit = float(distinct_experts(experts, k, tokens))
    assert rows - 1e-6 <= padded <= rows + tile * hit + 1e-6
    if tile == 1:
        assert padded == pytest.approx(rows)


@pytest.mark.parametrize(
    ("tokens", "experts", "k", "tile"),
    [(1, 128, 4, 16), (64, 128, 4, 16), (1000, 32, 4, 64), (4096, 256, 8, 128), (300, 8, 2, 32)],
)
def test_padded_rows_are_the_expectation_of_the_rows_rounded_up_to_a_tile(
    tokens: int, experts: int, k: int, tile: int
) -> None:
    """``tile E[ceil(X / tile)]`` for ``X ~ Binomial(T, k/E)``, summed over the binomial's mass directly."""
    rows = np.arange(tokens + 1)
    expected = tile * float((np.ceil(rows / tile) * stats.binom.pmf(rows, tokens, k / experts)).sum())
    assert padded_rows_per_expert(tokens, experts, k, tile) == pytest.approx(expected, rel=1e-9)


def test_one_token_fills_a_tile_for_each_of_its_experts() -> None:
    assert 128 * padded_rows_per_expert(1, 128, 8, 64) == pytest.approx(8 * 64)


def test_fp8_experts_stream_faster_than_bf16_but_not_twice_as_fast() -> None:
    """Weight-bound (few tokens), an FP8 expert layer reads half the bytes at a lower streaming
    fraction: 1.5-1.7x faster on the H200 kernel table, not 2x."""
    params = 3.0 * 4096 * 1536
    times = {}
    for precision, size in (("bf16", 2.0), ("fp8", 1.0)):
        rates = MatmulRates.of(H200, RATE, precision, precision)
        times[precision] = grouped_experts_s(rates, 256, 128, 8, params * size, 2.0 * params, 3.0)
    assert 1.4 < times["bf16"] / times["fp8"] < 1.8


def test_a_precision_without_its_own_entry_takes_the_bf16_kernels() -> None:
    grouped = H200.compute.grouped_gemm
    assert grouped is not None
    assert grouped.streaming("mxfp4", "bf16") == grouped.streaming_efficiency["bf16"].value
    with pytest.raises(ValidationError, match="bf16"):
        GroupedGemmSpec.model_validate({**grouped.model_dump(mode="json"), "compute_efficiency": {
            "fp8": {"value": 0.4, "source": "h200-kernels", "confidence": "measured"}}})  # fmt: skip


GPT_OSS_EXPERT = 3.0 * 2880 * 2880  # parameters of one gpt-oss-120b expert (SwiGLU)


@pytest.mark.parametrize("rows_per_expert", [0.01, 0.5, 1.0, 7.0, 16.0, 17.0, 100.0, 128.0, 129.0, 1e5])
def test_a_dequantising_kernel_picks_the_smallest_power_of_two_tile_holding_its_rows(rows_per_expert: float) -> None:
    """W4A16 MoE kernels choose block M from the mean rows per expert, within their range: the
    tile is a power of two, inside [smallest, largest], and holds the rows unless it is the largest."""
    rates = MatmulRates.of(H200, RATE, "mxfp4", "bf16")
    path = H200.compute.weight_only["mxfp4"].expert_tile
    assert path is not None
    smallest, largest = path.smallest.value, path.largest.value
    tile = rates.expert_tile(rows_per_expert)
    assert smallest <= tile <= largest and tile & (tile - 1) == 0
    assert tile >= rows_per_expert or tile == largest
    assert tile == smallest or tile < 2 * rows_per_expert  # never a tile twice what it needs


def test_a_native_grouped_gemm_keeps_its_one_tile() -> None:
    rates = MatmulRates.of(H200, RATE, "bf16", "bf16")
    assert {rates.expert_tile(x) for x in (0.1, 10.0, 1000.0)} == {H200.compute.grouped_gemm.m_tile.value}  # type: ignore[union-attr]


def test_the_adaptive_tile_spares_a_decode_the_fixed_tiles_padding_but_not_a_prefill() -> None:
    """At 4 decode tokens (1/8 row per expert) a 16-row tile computes a quarter of a 64-row tile's
    padded rows; at 8,192 prompt tokens (256 rows per expert) each expert pads to 64 or 128 rows,
    a small share of its 256 either way."""
    rates = MatmulRates.of(H200, RATE, "mxfp4", "bf16")
    fixed = MatmulRates(rates.read, rates.flops, rates.grouped_read, rates.grouped_flops, 64, 64)
    expert_bytes, flops = GPT_OSS_EXPERT * 4.25 / 8, 2.0 * GPT_OSS_EXPERT

    def layer_s(r: MatmulRates, tokens: int) -> float:
        return grouped_experts_s(r, tokens, 128, 4, expert_bytes, flops, 3.0)

    assert layer_s(rates, 4) < 0.6 * layer_s(fixed, 4)
    assert layer_s(rates, 8192) == pytest.approx(layer_s(fixed, 8192), rel=0.15)


def test_dequantised_experts_compute_slower_than_bf16_experts_but_stream_a_quarter_of_the_bytes() -> None:
    """MXFP4 experts on Hopper: weight-bound they read 4.25 / 16 of BF16's bytes; compute-bound they
    run below the BF16 grouped GEMM (the weights are dequantised in the kernel: no FP4 engine)."""
    mxfp4, bf16 = MatmulRates.of(H200, RATE, "mxfp4", "bf16"), MatmulRates.of(H200, RATE, "bf16", "bf16")
    assert mxfp4.grouped_read == bf16.grouped_read
    assert mxfp4.grouped_flops < bf16.grouped_flops
    few = grouped_experts_s(mxfp4, 1, 128, 4, GPT_OSS_EXPERT * 4.25 / 8, 2.0 * GPT_OSS_EXPERT, 3.0)
    few_bf16 = grouped_experts_s(bf16, 1, 128, 4, GPT_OSS_EXPERT * 2.0, 2.0 * GPT_OSS_EXPERT, 3.0)
    assert few < 0.5 * few_bf16
