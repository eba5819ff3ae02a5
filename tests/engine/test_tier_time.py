"""KV tiers own their time: every move between the serving tier and a tier below takes that tier's
``blocks x block_bytes / bandwidth + latency`` (simulator/engine/kv/tiers.py). A swap-preempted
sequence moves to the scenario's first KV tier, so that tier's bandwidth sets the swap time; a new
kind of tier is one class and one registration, and times its moves by its own law."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import simpy
import yaml

import simulator
from simulator.analytic.layouts import deploy
from simulator.analytic.step_fast import engine_cost
from simulator.analytic.step_time import StepCostModel
from simulator.config.batching import KVTierSpec, KVTiersSpec
from simulator.config.deployment import DeploymentSpec
from simulator.engine.batching.continuous import ContinuousBatchingPolicy
from simulator.engine.batching.protocol import Plan
from simulator.engine.batching.slots import Slots
from simulator.engine.build import build
from simulator.engine.kv.blocks import BlockManager
from simulator.engine.kv.tiers import KVTier, KVTiers, kv_tier
from simulator.engine.recorder import Recorder
from simulator.engine.replica import Replica
from simulator.engine.request import Request
from simulator.plan.resolve import TierPlan, resolve
from simulator.runner import simulate
from tests.engine.conftest import CATALOG, SMALL, scenario
from tests.engine.test_kv_tiers import SCENARIO, SMALL_HBM

MODEL = StepCostModel(deploy(CATALOG, DeploymentSpec(**SMALL)))
COST = engine_cost(MODEL)
BLOCK_TOKENS = 16
BLOCK_BYTES = 1.0e6  # bytes of one KV block (any figure: the law is linear in it)


def _gb_per_s(bandwidth: float) -> str:
    return f"{bandwidth / 1e9:g} GB/s"


def _swap_tier(bandwidth: float, latency_s: float) -> KVTier:
    spec = KVTierSpec(name="ssd", capacity="1 TB", bandwidth=_gb_per_s(bandwidth), latency=f"{latency_s * 1e6:g} us")
    return KVTier(TierPlan("ssd", 10**6, BLOCK_BYTES / bandwidth, latency_s, spec))


class SwapLog(ContinuousBatchingPolicy):
    """Continuous batching that notes the blocks swapped in or out that each iteration run waits for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.swapped: list[float] = []

    def planned(self, new_tokens: dict[int, float]) -> Plan:
        plan = super().planned(new_tokens)
        if plan.swapped_blocks:
            self.swapped.append(plan.swapped_blocks)
        return plan


def _serve_with_swaps(swap: KVTier | None) -> tuple[float, list[float]]:
    """(end time, blocks each swapping iteration moved) of one replica whose KV is too small for its
    sequences, every request there at time 0 (so the order of iterations does not depend on time)."""
    env = simpy.Environment()
    blocks = BlockManager(60, BLOCK_TOKENS)
    policy = SwapLog(Slots(8), blocks, 8192, 1.0, None, swap=True)
    tiers = None if swap is None else KVTiers([], blocks, MODEL, None, BLOCK_BYTES, swap)
    replica = Replica(env, 0, COST, policy, Recorder(1), np.random.default_rng(0), lambda r: None, tiers)
    env.process(replica.run())
    for i in range(8):
        replica.submit(Request(i, 0.0, 80 + 16 * i, 90, 0))
    env.run()
    return env.now, policy.swapped


@pytest.mark.parametrize("latency_s", [0.0, 1e-3])
def test_an_iteration_waits_for_its_swaps_by_the_tier_law_and_a_tenfold_bandwidth_cuts_it_tenfold(
    latency_s: float,
) -> None:
    """Swaps change no decision here, only time: end(B) - end(no charge) = sum over swapping
    iterations of (blocks x block_bytes / B + latency), at B and at 10 B."""
    untimed_end, swapped = _serve_with_swaps(None)
    assert swapped, "the KV is small enough that sequences swap"
    bandwidth = 5e9
    for b in (bandwidth, 10 * bandwidth):
        end, again = _serve_with_swaps(_swap_tier(b, latency_s))
        assert again == swapped
        law_s = sum(blocks * BLOCK_BYTES / b + latency_s for blocks in swapped)
        assert end - untimed_end == pytest.approx(law_s, rel=1e-9)


def _swapping(tiers: list[dict[str, Any]] | None) -> KVTiers:
    """The KV tiers of the first replica of a swapping scenario with these ``tiers``."""
    parts: dict[str, Any] = {"policy": "continuous", "preemption": "swap"}
    if tiers is not None:
        parts["kv_tiers"] = {"tiers": tiers}
    simulation = build(resolve(scenario(scheduler=parts), CATALOG))
    found = simulation.replicas[0].tiers
    assert found is not None
    return found


def test_swaps_go_to_the_first_kv_tier_at_its_bandwidth_and_latency() -> None:
    """time = bytes / bandwidth + latency of the scenario's tier (not the profile's host link)."""
    block_bytes = BLOCK_TOKENS * resolve(scenario(), CATALOG).backends[0].deployment.kv_bytes_per_token
    for bandwidth in (2e9, 20e9):
        tier = {"name": "ssd", "capacity": "100 GB", "bandwidth": _gb_per_s(bandwidth), "latency": "100 us"}
        tiers = _swapping([tier])
        assert tiers.swap_s(250.0) == pytest.approx(250.0 * block_bytes / bandwidth + 100e-6, rel=1e-12)


def test_without_kv_tiers_swaps_go_to_the_profiles_next_slower_tier() -> None:
    deployment = resolve(scenario(), CATALOG).backends[0].deployment
    serving = deployment.weights_tier.bandwidth.value
    host = next(t for t in deployment.hardware.memory if t.bandwidth.value < serving)
    bandwidth = deployment.chips * host.bandwidth.value * host.efficiency.value
    block_bytes = BLOCK_TOKENS * deployment.kv_bytes_per_token
    assert _swapping(None).swap_s(250.0) == pytest.approx(250.0 * block_bytes / bandwidth, rel=1e-12)


# -- a new kind of tier: compressed blocks (one class, one registration) ----------------------------
class CompressedTierSpec(KVTierSpec):
    """A tier that keeps KV compressed ``ratio`` times: as many more blocks fit, and a load moves
    ``1 / ratio`` of the bytes (decompression hidden behind the transfer)."""

    ratio: float = 2.0


class CompressedTier(KVTier):
    def __init__(self, plan: TierPlan, ratio: float) -> None:
        super().__init__(plan)
        self.ratio = ratio
        self.capacity_blocks = int(plan.blocks * ratio)

    def stream_s(self, blocks: float) -> float:
        return blocks * self.s_per_block / self.ratio


@kv_tier.register
def _compressed(spec: CompressedTierSpec, plan: TierPlan) -> KVTier:
    return CompressedTier(plan, spec.ratio)


@pytest.mark.parametrize("tier", [KVTierSpec, CompressedTierSpec])
def test_a_registered_tier_kind_holds_and_loads_by_its_own_law(tier: type[KVTierSpec], tmp_path: Path) -> None:
    """Every load is ``blocks x block_bytes / (ratio x bandwidth) + latency`` (ratio 1: the bundled
    tier), so summed over loads: loaded blocks x block_bytes / (ratio x bandwidth) + loads x latency."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    base = simulator.load_scenario(path, SMALL_HBM)
    bandwidth, latency_s = 20e9, 50e-6
    spec = tier(name="cxl", capacity="2 GB", bandwidth=_gb_per_s(bandwidth), latency="50 us")
    scheduler = base.scheduler.model_copy(update={"kv_tiers": KVTiersSpec(tiers=[spec])})
    result = simulate(base.model_copy(update={"scheduler": scheduler}), CATALOG)
    (records,) = result.records.kv_tiers
    ratio = getattr(spec, "ratio", 1.0)
    assert records.capacity_blocks == (int(int(2e9 // records.block_bytes) * ratio),)
    loads = records.load_pairs_s
    assert loads.shape[0] > 0
    law_s = records.loaded.sum() * records.block_bytes / (ratio * bandwidth) + loads.shape[0] * latency_s
    assert loads[:, 0].sum() == pytest.approx(law_s, rel=1e-9)
