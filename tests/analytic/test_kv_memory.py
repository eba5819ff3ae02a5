"""The KV budget follows each serving stack's documented rule (``StackProfile.kv_memory``):
TensorRT-LLM a fraction of the memory free after weights and its runtime reserve, vLLM a
fraction of total memory less both, SGLang its static pool less the weights."""

from __future__ import annotations

import pytest

from simulator.analytic.architecture import total_params
from simulator.config.base import Sourced
from simulator.config.loading import Catalog
from simulator.config.stack import KvMemory
from tests.conftest import deploy

GB = 1e9


def _rule(rule: str, fraction: float, reserve_gb: float) -> KvMemory:
    return KvMemory(
        rule=rule,  # type: ignore[arg-type]
        fraction=Sourced(value=fraction, source="s", confidence="assumed"),
        reserve=Sourced(value=f"{reserve_gb} GB", source="s", confidence="assumed"),
    )


@pytest.mark.parametrize(("stack_id", "rule"), [("trtllm", "of-free"), ("vllm", "of-total"), ("sglang", "of-total")])
def test_each_gpu_stack_states_its_rule(catalog: Catalog, stack_id: str, rule: str) -> None:
    memory = catalog.stack(stack_id).kv_memory
    assert memory is not None and memory.rule == rule
    assert memory.fraction.source in catalog.stack(stack_id).sources


@pytest.mark.parametrize("stack_id", ["trtllm", "vllm", "sglang"])
def test_kv_budget_by_hand_on_four_h100s(catalog: Catalog, stack_id: str) -> None:
    """Llama 3.1 70B bf16 on 4 x H100: TensorRT-LLM f x (4C - W - 4R), vLLM and SGLang 4fC - W - 4R."""
    d = deploy(catalog, "nvidia-h100-sxm", "llama-3.1-70b", chips=4, stack=stack_id)
    memory = d.stack.kv_memory
    assert memory is not None
    f, r, c = memory.fraction.value, memory.reserve.value, d.hardware.tier("hbm").capacity.value
    weights = total_params(d.model) * 2
    expected = f * (4 * c - weights - 4 * r) if memory.rule == "of-free" else 4 * f * c - weights - 4 * r
    assert d.kv_budget_bytes == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("free_gb", [10.0, 30.0, 70.0])
def test_free_fraction_kv_is_proportional_to_free_memory(free_gb: float) -> None:
    """of-free: twice the free memory (after weights and reserve) gives twice the KV."""
    memory = _rule("of-free", 0.9, 3.0)
    one = memory.kv_bytes(2, 80 * GB, 2 * (80 - 3 - free_gb) * GB)
    two = memory.kv_bytes(2, 80 * GB, 2 * (80 - 3 - 2 * free_gb) * GB)
    assert one == pytest.approx(0.9 * 2 * free_gb * GB, rel=1e-12) and two == pytest.approx(2 * one, rel=1e-12)


@pytest.mark.parametrize("weights_gb", [10.0, 40.0, 60.0])
def test_a_weight_byte_costs_the_fraction_of_a_kv_byte_of_free_and_a_whole_one_of_total(weights_gb: float) -> None:
    """Weights come out of the free memory before the fraction (TensorRT-LLM) but out of the
    engine's share after it (vLLM): one more GB of weights costs 0.9 GB of KV and 1 GB."""
    free, total = _rule("of-free", 0.9, 3.0), _rule("of-total", 0.9, 3.0)
    for memory, cost in ((free, 0.9), (total, 1.0)):
        before = memory.kv_bytes(1, 80 * GB, weights_gb * GB)
        after = memory.kv_bytes(1, 80 * GB, (weights_gb + 1) * GB)
        assert before - after == pytest.approx(cost * GB, rel=1e-9)
    # at the same fraction and reserve the free-memory rule leaves more: f (C - W - R) - (f C - W - R) = (1 - f)(W + R)
    assert free.kv_bytes(1, 80 * GB, weights_gb * GB) > total.kv_bytes(1, 80 * GB, weights_gb * GB)


def test_more_memory_gives_proportionally_more_kv_blocks(catalog: Catalog) -> None:
    """KV blocks = floor(budget / block bytes): the budget's growth with capacity is f x chips per byte."""
    small = deploy(catalog, "nvidia-h100-sxm", "llama-3.1-8b", chips=1)
    big = deploy(catalog, "nvidia-h200", "llama-3.1-8b", chips=1)
    assert small.stack.id == big.stack.id == "trtllm" and small.kv_bytes_per_token == big.kv_bytes_per_token
    memory = small.stack.kv_memory
    assert memory is not None
    grown = big.weights_tier.capacity.value - small.weights_tier.capacity.value
    assert big.kv_budget_bytes - small.kv_budget_bytes == pytest.approx(memory.fraction.value * grown, rel=1e-9)


def test_a_stack_without_a_rule_keeps_the_tiers_usable_share(catalog: Catalog) -> None:
    d = deploy(catalog, "cerebras-cs3", "llama-3.1-70b")
    assert d.stack.kv_memory is None
    tier = d.weights_tier
    assert d.kv_budget_bytes == pytest.approx(d.chips * tier.capacity.value * tier.usable_fraction.value
                                              - d.weight_bytes, rel=1e-12)  # fmt: skip
