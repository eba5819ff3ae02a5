"""A decode jump runs the steps step-by-step iteration-level batching would, and an arrival that
finds room cuts it at the end of the step in progress, where stepping would admit it."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import simpy

from simulator.analytic.layouts import deploy
from simulator.analytic.step_fast import engine_cost
from simulator.analytic.step_time import StepCostModel
from simulator.config.deployment import DeploymentSpec
from simulator.engine.batching.continuous import ContinuousBatchingPolicy
from simulator.engine.batching.protocol import Plan
from simulator.engine.batching.slots import Slots
from simulator.engine.kv.blocks import BlockManager
from simulator.engine.recorder import Recorder
from simulator.engine.replica import Replica
from simulator.engine.request import Request
from tests.engine.conftest import CATALOG, SMALL

COST = engine_cost(StepCostModel(deploy(CATALOG, DeploymentSpec(**SMALL))))


class SteppingPolicy(ContinuousBatchingPolicy):
    """The same batching, one iteration at a time: never a jump."""

    def unchanged_steps(self, plan: Plan) -> int:
        return 1


class CountingEnvironment(simpy.Environment):
    """An environment that counts the events it processes."""

    def __init__(self) -> None:
        super().__init__()
        self.events = 0

    def step(self) -> None:
        self.events += 1
        super().step()


def _serve(
    policy_class: type[ContinuousBatchingPolicy], seed: int, slots: int, chunk: int | None = None,
    recorder: Recorder | None = None,
) -> tuple[list[tuple[float, ...]], int]:  # fmt: skip
    """(admission, first token and completion of each request, events processed) of one replica
    serving random arrivals (``chunk``: the steps of a cuttable jump costed at first)."""
    rng = np.random.default_rng(seed)
    env = CountingEnvironment()
    policy = policy_class(Slots(slots), BlockManager(2000, 16), 8192, 1.0, None)
    done: dict[int, float] = {}
    replica = Replica(env, 0, COST, policy, recorder or Recorder(1), np.random.default_rng(0),
                      lambda r: done.update({r.id: env.now}))  # fmt: skip
    if chunk is not None:
        replica.first_chunk_steps = chunk
    env.process(replica.run())
    arrivals = np.cumsum(rng.exponential(0.15, 30))
    requests = [Request(i, float(t), int(rng.integers(8, 400)), int(rng.integers(2, 120)), 0)
                for i, t in enumerate(arrivals)]  # fmt: skip

    def arrive() -> simpy.events.ProcessGenerator:
        for request in requests:
            yield env.timeout(request.arrival_s - env.now)
            replica.submit(request)

    env.process(arrive())
    env.run()
    return [(r.admitted_s, r.first_token_s, done[r.id]) for r in requests], env.events


@pytest.mark.parametrize("slots", [4, 64])  # arrivals wait for a slot (no room: no cut), or cut jumps
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_jumps_and_their_cuts_give_the_times_of_stepping(seed: int, slots: int) -> None:
    jumped, jump_events = _serve(ContinuousBatchingPolicy, seed, slots)
    stepped, step_events = _serve(SteppingPolicy, seed, slots)
    # the same iterations at the same times (a jump adds its step times up as one sum: rounding apart)
    np.testing.assert_allclose(jumped, stepped, rtol=1e-9, atol=1e-12)
    assert jump_events < step_events / 3  # and the jumps did run: one event for many steps


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_jump_costed_in_chunks_runs_as_one_costed_at_once(seed: int) -> None:
    """An uncut jump costs its steps a chunk at a time (an event at each chunk's end); every time,
    record and total is the same to the last bit as with all its steps costed at once."""
    runs = []
    for chunk in (1, 3, 10**9):
        recorder = Recorder(1)
        times, events = _serve(ContinuousBatchingPolicy, seed, 64, chunk, recorder)
        frozen = recorder.freeze(1e9, 0.0, [], 0, 0.0, None)
        totals = frozen.totals[0]
        tokens = frozen.tokens[0]
        runs.append((times, frozen.itl_counts.tolist(), (totals.busy_s, totals.iterations, totals.flops,
                     totals.bytes_moved), (list(tokens.times), list(tokens.output)), events))  # fmt: skip
    assert runs[0][:4] == runs[1][:4] == runs[2][:4]
    assert runs[0][4] > runs[1][4] > runs[2][4]  # the small chunks ran: an event at each one's end


def _woken_at(times: list[float], event: simpy.Event) -> None:
    times.append(event.env.now)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_cut_ends_the_step_in_progress_at_its_end(seed: int) -> None:
    """A cut at ``now`` keeps the steps up to the first whose end (the running sum of the step
    seconds) is at or after ``now``, and moves the jump's waiters to that end: ``start + C[done - 1]``,
    ``done = min(bisect_left(C, now - start) + 1, n)`` over the running sums ``C`` (at once when a
    step has just ended)."""
    from bisect import bisect_left
    from itertools import accumulate

    from simulator.engine.replica import Jump

    rng = np.random.default_rng(seed)
    for _ in range(200):
        env = simpy.Environment(initial_time=float(rng.uniform(0.0, 1e4)))
        start = env.now
        durations = rng.uniform(1e-4, 0.05, int(rng.integers(1, 120))).tolist()
        sums = list(accumulate(durations))
        end = env.timeout(sums[-1])
        woken: list[float] = []
        end.callbacks.append(partial(_woken_at, woken))
        jump = Jump(start, durations, sums[-1], end)
        cut = start + float(rng.choice([rng.uniform(0.0, sums[-1]), sums[int(rng.integers(len(sums)))]]))
        env.run(until=cut)  # the arrival comes at ``cut``, before the jump's end fires
        jump.cut_at(env, env.now)
        done = min(bisect_left(sums, env.now - start) + 1, len(sums))
        assert (jump.done, jump.elapsed_s) == (done, sums[done - 1])
        env.run()
        assert len(woken) == 1 and woken[0] >= cut
        assert woken[0] == pytest.approx(start + sums[done - 1], rel=1e-15, abs=0.0)  # up to one rounding of the delay
