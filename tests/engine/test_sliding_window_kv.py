"""KV per layer kind in the engine: a sequence's windowed layers hold at most the window, its
full-attention layers the whole context (simulator/engine/kv/blocks.py), and every block comes back."""

from __future__ import annotations

import math

import pytest

from simulator.analytic.layouts import deploy
from simulator.config.deployment import DeploymentSpec
from simulator.engine.batching.continuous import ContinuousBatchingPolicy
from simulator.engine.batching.slots import Slots
from simulator.engine.kv.blocks import BlockManager, paged_kv
from simulator.engine.request import Request
from simulator.plan.resolve import resolve
from tests.engine.conftest import CATALOG, scenario

BLOCK = 16
WINDOW = 128


def _step(policy: ContinuousBatchingPolicy) -> None:
    plan = policy.plan(0.0)
    policy.apply(plan, 0.0, [1.0] * plan.decodes)


@pytest.mark.parametrize(("tokens", "ratio"), [(40, 1.0), (500, 1.0), (500, 3.0), (100, 0.5)])
def test_window_blocks_are_the_window_in_full_layer_blocks(tokens: int, ratio: float) -> None:
    kv = BlockManager(1000, BLOCK, window_tokens=WINDOW, window_blocks_per_block=ratio)
    assert kv.window_blocks(tokens) == math.ceil(math.ceil(min(tokens, WINDOW) / BLOCK) * ratio)
    assert BlockManager(1000, BLOCK).window_blocks(tokens) == 0.0


@pytest.mark.parametrize("reserve_full", [False, True])
def test_a_sequence_takes_its_window_blocks_at_admission_and_returns_every_block(reserve_full: bool) -> None:
    kv = BlockManager(100, BLOCK, window_tokens=WINDOW, window_blocks_per_block=1.0, full_share=0.5)
    policy = ContinuousBatchingPolicy(Slots(4), kv, 8192, 1.0, None, reserve_full=reserve_full)
    policy.enqueue(Request(0, 0.0, 10 * BLOCK, 3, 0))
    _step(policy)  # the prefill: 10 context blocks (11 reserved whole) and 8 window blocks
    context = 11 if reserve_full else 10
    assert kv.used == context + WINDOW // BLOCK
    assert policy.kv_used == int((context + WINDOW // BLOCK) * 0.5)  # reported in blocks of all layers
    _step(policy)
    _step(policy)
    assert policy.running == 0 and kv.free == kv.total


def test_admission_counts_the_window_blocks() -> None:
    """Ten context blocks fit eleven free ones, but not with the eight window blocks beside them."""
    kv = BlockManager(11, BLOCK, window_tokens=WINDOW, window_blocks_per_block=1.0, full_share=0.5)
    policy = ContinuousBatchingPolicy(Slots(4), kv, 8192, 1.0, None)
    policy.enqueue(Request(0, 0.0, 10 * BLOCK, 3, 0))
    assert not policy.can_admit(8192)


def test_a_replica_of_a_windowed_model_has_blocks_of_its_full_attention_layers() -> None:
    """gpt-oss-120b: 18 of 36 layers windowed, so a block of tokens is half the bytes of all layers."""
    deployment = {"hardware": "nvidia-h100-sxm", "model": "gpt-oss-120b", "chips": 1}
    backend = resolve(scenario(deployment=deployment), CATALOG).backends[0]
    kv = paged_kv(backend)
    d = deploy(CATALOG, DeploymentSpec(**deployment))
    assert kv.full_share == 0.5 and kv.window_blocks_per_block == 1.0 and kv.window_tokens == WINDOW
    assert kv.total == int(d.kv_budget_bytes // (BLOCK * d.kv_bytes_per_token * 0.5))
    dense = resolve(scenario(), CATALOG).backends[0]
    assert paged_kv(dense).total == dense.kv_blocks
