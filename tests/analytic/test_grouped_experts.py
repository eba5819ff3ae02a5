"""Laws of the MoE expert kernel (a grouped GEMM): tile padding, distinct experts, per-precision rates."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

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
