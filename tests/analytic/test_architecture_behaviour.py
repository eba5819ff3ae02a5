"""The two behaviours the physics must produce: SRAM pipelines hold per-user speed under load,
GPUs trade per-user speed for aggregate throughput; and the article's speed gap."""

from __future__ import annotations

import pytest

from simulator.analytic.estimate import estimate
from simulator.analytic.speculation import acceptance, tokens_per_verify
from simulator.config.loading import Catalog
from simulator.config.speculation import SpeculativeSpec
from tests.conftest import deploy

INPUT, OUTPUT = 1000, 1000


def test_layer_pipelined_per_user_speed_holds_while_aggregate_grows(catalog: Catalog) -> None:
    d = deploy(catalog, "cerebras-cs3", "llama-3.1-70b")
    one = estimate(d, INPUT, OUTPUT, 1)
    users = one.max_concurrency  # as many as the SRAM left for KV holds
    many = estimate(d, INPUT, OUTPUT, users)
    assert users >= 8 and not many.capacity_limited
    assert many.per_user_output_tok_s >= 0.85 * one.per_user_output_tok_s
    assert many.aggregate_output_tok_s >= 0.8 * users * one.aggregate_output_tok_s


def test_beyond_the_kv_capacity_users_queue_by_the_response_time_law(catalog: Catalog) -> None:
    """Above M sequences, X = M / S and R = N / X - Z: TTFT grows, speeds hold. ``S`` is a request's
    time at the replica, ``E2E(M)`` less the hosted API's time ``Z`` spent outside it (the law's think
    time; 0 without an API)."""
    d = deploy(catalog, "cerebras-cs3", "llama-3.1-70b")
    full = estimate(d, INPUT, OUTPUT, estimate(d, INPUT, OUTPUT, 1).max_concurrency)
    think = d.api_s
    service = full.e2e_s - think
    users = 4 * full.concurrency
    over = estimate(d, INPUT, OUTPUT, users)
    assert over.capacity_limited and "wait" in over.capacity_note()
    assert over.aggregate_output_tok_s == pytest.approx(full.concurrency * OUTPUT / service, rel=1e-12)  # X = M / S
    assert over.per_user_output_tok_s == full.per_user_output_tok_s
    # R at the replica = N / X - Z; the user sees R + Z
    assert over.e2e_s - think == pytest.approx(users / (full.concurrency / service) - think, rel=1e-12)
    assert over.ttft_s == pytest.approx(full.ttft_s + 3 * service - think, rel=1e-12)


def test_gpu_per_user_speed_falls_as_the_batch_grows(catalog: Catalog) -> None:
    d = deploy(catalog, "nvidia-h100-sxm", "llama-3.1-70b", chips=4)
    speeds = [estimate(d, INPUT, OUTPUT, c).per_user_output_tok_s for c in (1, 32, 128, 256)]
    aggregates = [estimate(d, INPUT, OUTPUT, c).aggregate_output_tok_s for c in (1, 32, 128, 256)]
    assert speeds == sorted(speeds, reverse=True) and speeds[-1] < 0.6 * speeds[0]
    assert aggregates == sorted(aggregates)


def test_the_article_speed_gap_on_gpt_oss_120b(catalog: Catalog) -> None:
    """Cerebras ~3,000 tok/s per user, Groq ~480; a GPU below both, and far below once it serves load.

    Single-stream, one H100 streams gpt-oss-120b's ~5B active parameters fast; at 16 users each
    decode step reads most of the 128 experts, while SRAM pipelines keep their per-user speed.
    """

    def speed(hw: str, users: int) -> float:
        d = deploy(catalog, hw, "gpt-oss-120b", weights="mxfp4")
        return estimate(d, INPUT, OUTPUT, users).per_user_output_tok_s

    assert speed("cerebras-cs3", 1) == pytest.approx(3000, rel=0.2)
    assert speed("groq-lpu", 1) == pytest.approx(480, rel=0.2)
    assert speed("nvidia-h100-sxm", 1) < speed("groq-lpu", 1) < speed("cerebras-cs3", 1) / 5
    assert speed("nvidia-h100-sxm", 16) < 0.25 * speed("groq-lpu", 16)


@pytest.mark.parametrize("hardware_id", ["nvidia-h100-sxm", "nvidia-b200", "nvidia-h200"])
def test_gpu_clouds_serve_the_frontier_stand_in_at_about_50_to_60(catalog: Catalog, hardware_id: str) -> None:
    """The article's ~50-60 tok/s for frontier models on batched GPU serving, from first principles."""
    d = deploy(catalog, hardware_id, "frontier-moe")
    assert 40 <= estimate(d, INPUT, OUTPUT, 1).per_user_output_tok_s <= 75


def test_speculative_tokens_per_step_law() -> None:
    """tau = 1 + sum_i prod_{j<=i} a_j: (1 - a^(g+1)) / (1 - a) at constant a; 1 at a = 0, -> g + 1 as a -> 1."""
    assert tokens_per_verify([0.0] * 5) == 1.0
    assert tokens_per_verify([0.999999] * 5) == pytest.approx(6.0, rel=1e-5)
    assert tokens_per_verify([0.7] * 4) == pytest.approx((1 - 0.7**5) / (1 - 0.7), rel=1e-12)
    assert tokens_per_verify([0.9, 0.5]) == pytest.approx(1 + 0.9 + 0.45, rel=1e-12)


@pytest.mark.parametrize(
    "draft",
    [{"draft": "model", "draft_model": "llama-3.1-8b", "tokens_proposed": 4},
     {"draft": "eagle", "tokens_proposed": 3}],
)  # fmt: skip
def test_speculative_decoding_speeds_a_memory_bound_gpu(catalog: Catalog, draft: dict[str, object]) -> None:
    """A verify pass of g + 1 tokens costs about one decode pass when memory-bound, and the draft's
    passes cost what its shape costs: faster than plain decoding, slower than tau times it."""
    plain = deploy(catalog, "nvidia-h100-sxm", "llama-3.1-70b", chips=4)
    spec = deploy(catalog, "nvidia-h100-sxm", "llama-3.1-70b", chips=4, speculative=SpeculativeSpec(**draft))
    base, fast = estimate(plain, INPUT, OUTPUT, 1), estimate(spec, INPUT, OUTPUT, 1)
    tau = tokens_per_verify(acceptance(SpeculativeSpec(**draft)))
    assert 1.0 < fast.per_user_output_tok_s / base.per_user_output_tok_s < tau
    assert spec.weight_bytes > plain.weight_bytes and spec.kv_budget_bytes < plain.kv_budget_bytes
