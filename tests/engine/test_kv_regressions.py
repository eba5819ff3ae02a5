"""Regressions found in review: KV admission with cached prefixes, and decode jumps vs arrivals.

Each compares the engine with what step-by-step iteration-level batching must do.
"""

from __future__ import annotations

import numpy as np
import simpy

from simulator.analytic.layouts import deploy
from simulator.analytic.step_fast import engine_cost
from simulator.analytic.step_time import StepCostModel
from simulator.config.deployment import DeploymentSpec
from simulator.engine.batching.continuous import ContinuousBatchingPolicy
from simulator.engine.batching.slots import Slots
from simulator.engine.kv.blocks import BlockManager
from simulator.engine.recorder import Recorder
from simulator.engine.replica import Replica
from simulator.engine.request import Request, SessionKeys
from tests.engine.conftest import CATALOG, SMALL

BLOCK = 16
COST = StepCostModel(deploy(CATALOG, DeploymentSpec(**SMALL)))


def _step(policy: ContinuousBatchingPolicy) -> None:
    """Plan one iteration and apply it: prefills move into the KV, finished prompts emit a token."""
    plan = policy.plan(0.0)
    policy.apply(plan, 0.0, [1.0] * plan.decodes)


def test_reusing_idle_cached_blocks_does_not_over_commit_kv() -> None:
    """A prefix hit on idle cached blocks removes them from the pool: admission must count that."""
    kv = BlockManager(6, BLOCK, caching=True)
    keys = SessionKeys()
    policy = ContinuousBatchingPolicy(Slots(4), kv, 1000, 1.0, None)
    policy.enqueue(Request(0, 0.0, 5 * BLOCK, 1, 0, session="s", key_base=keys.base("s")))
    _step(policy)  # a 1-token answer: done after its prefill, leaving five cached blocks and one free
    assert policy.running == 0 and kv.free == 1 and kv.idle == 5
    policy.enqueue(Request(1, 0.0, 10, 100, 0, session="other", key_base=keys.base("other")))
    _step(policy)  # takes the free block
    # hits 5, needs 1 more: none left
    policy.enqueue(Request(2, 0.0, 6 * BLOCK, 1, 0, session="s", key_base=keys.base("s")))
    assert not policy.can_admit(1000)
    _step(policy)
    assert kv.free >= 0 and kv.used <= kv.total
    assert policy.running == 1


def _replica(total_blocks: int) -> tuple[simpy.Environment, Replica, dict[int, float]]:
    env = simpy.Environment()
    policy = ContinuousBatchingPolicy(Slots(8), BlockManager(total_blocks, BLOCK), 8192, 1.0, None)
    done: dict[int, float] = {}
    replica = Replica(
        env, 0, engine_cost(COST), policy, Recorder(1), np.random.default_rng(0), lambda r: done.update({r.id: env.now})
    )
    env.process(replica.run())
    return env, replica, done


def test_a_decode_jump_leaves_its_future_blocks_free_for_arrivals() -> None:
    """A long decode holds only the blocks of the tokens it has: a small arrival joins at once."""
    env, replica, done = _replica(total_blocks=26)  # the long decode will need all 26 eventually
    replica.submit(Request(0, 0.0, 16, 400, 0))
    late = Request(1, 0.05, 16, 2, 0)

    def arrive() -> simpy.events.Event:
        yield env.timeout(0.05)
        replica.submit(late)

    env.process(arrive())
    env.run()
    step = COST.pass_time([1.0], [16.0]).total_s
    assert late.admitted_s - 0.05 <= 1.5 * step
    assert done[1] < done[0]


def test_a_higher_priority_arrival_interrupts_a_jump_behind_a_blocked_queue() -> None:
    """The queue's head cannot fit; a later, higher-priority request that fits joins at the next step."""
    env, replica, done = _replica(total_blocks=100)
    replica.submit(Request(0, 0.0, 16, 400, 0))
    blocked = Request(2, 0.01, 1584, 2, 0)  # 99 blocks with the decode's: never fits beside it
    urgent = Request(1, 0.05, 16, 2, 0)
    urgent.priority = 5

    def arrive() -> simpy.events.Event:
        yield env.timeout(0.01)
        replica.submit(blocked)
        yield env.timeout(0.04)
        replica.submit(urgent)

    env.process(arrive())
    env.run()
    step = COST.pass_time([1.0], [16.0]).total_s
    assert urgent.admitted_s - 0.05 <= 1.5 * step
    assert done[1] < done[0] < done[2]
