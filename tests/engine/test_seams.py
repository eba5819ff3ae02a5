"""The engine's seams: a batching policy, an arrival process and a cost model are plugged in from
this module alone, by registration or by replacing a resolved plan (build.py, replica.py and the
command line untouched), and each obeys the law its design implies."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Literal

import numpy as np
import pytest

from simulator.analytic.step_time import BatchAggregates, PassTimes
from simulator.config.batching import BatchingSpec
from simulator.config.scenario import ArrivalProcess
from simulator.engine.batching.paged import PagedBatching
from simulator.engine.batching.protocol import Plan
from simulator.engine.batching.registry import batch_policy
from simulator.engine.batching.slots import Slots
from simulator.engine.kv.blocks import BlockManager
from simulator.engine.load import arrival_times
from simulator.plan.resolve import BackendPlan, resolve
from simulator.runner import simulate
from tests.engine.conftest import CATALOG, scenario, service_time_s

PROMPT, ANSWER = 64, 16


# -- a batching policy: one request at a time, its whole prompt in one pass ------------------------
class OneAtATime(BatchingSpec):
    policy: Literal["one-at-a-time"] = "one-at-a-time"


class OneAtATimePolicy(PagedBatching):
    """The head of the queue runs alone: its prompt in one pass, then one token per pass."""

    def plan(self, now: float) -> Plan:
        s = self.slots
        if s.count == 0 and self.waiting:
            head = self.waiting[0]
            need = self.kv.blocks_of(head.input_tokens + head.output_tokens)
            if self.kv.allocate(int(need)):
                self.waiting.popleft()
                s.table[s.admit(head)].blocks = need
                head.admitted_s = now
        running = s.prefilling + s.decoding
        return self.planned({slot: s.table[slot].prompt_left or 1.0 for slot in running})


@batch_policy.register
def _one_at_a_time(spec: OneAtATime, backend: BackendPlan, blocks: BlockManager) -> PagedBatching:
    return OneAtATimePolicy(Slots(1), blocks, backend.max_batched_tokens, 1.0, backend.window)


def _lengths() -> dict[str, object]:
    return {
        "input_tokens": {"dist": "constant", "value": PROMPT},
        "output_tokens": {"dist": "constant", "value": ANSWER},
    }


def test_a_registered_batching_policy_serves_users_in_turn_at_n_times_the_service_time() -> None:
    """One server, deterministic service S, N users with no think time: every request after the
    first round waits for the N - 1 others, so its response time is exactly N x S."""
    users = 3
    base = scenario(load={"kind": "closed", "users": users}, requests=_lengths(), run={"seed": 1, "max_requests": 30})
    result = simulate(base.model_copy(update={"scheduler": OneAtATime()}), CATALOG)
    cost = resolve(base, CATALOG).backends[0].cost
    service_s = service_time_s(cost, PROMPT, ANSWER)  # type: ignore[arg-type]
    r = result.records.requests
    later = r["arrival_s"] > 0
    assert later.sum() == 30 - users
    assert r["done_s"][later] - r["arrival_s"][later] == pytest.approx(np.full(later.sum(), users * service_s))
    assert max(level.maximum() for level in result.records.batch) == 1.0


# -- an arrival process: bursts of a fixed size at a fixed period -----------------------------------
class Bursts(ArrivalProcess):
    """``size`` requests at once, every ``period_s`` seconds (from ``period_s``)."""

    process: Literal["bursts"] = "bursts"
    size: int
    period_s: float

    @property
    def peak_rate_per_s(self) -> float:
        return self.size / self.period_s


@arrival_times.register
def _bursts(spec: Bursts, rng: np.random.Generator) -> Iterator[float]:
    k = 1
    while True:
        yield from [k * spec.period_s] * spec.size
        k += 1


def test_a_registered_arrival_process_sends_its_bursts_and_its_offered_load_is_resolved() -> None:
    base = scenario(
        load={"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": 1.0}},
        requests=_lengths(),
        run={"seed": 1, "duration": "5.5 s"},
    )
    assert base.load is not None
    load = base.load.model_copy(update={"arrivals": Bursts(size=4, period_s=1.0)})
    result = simulate(base.model_copy(update={"load": load}), CATALOG)
    arrivals = result.records.requests["arrival_s"]
    assert sorted(arrivals.tolist()) == [float(t) for t in range(1, 6) for _ in range(4)]
    assert result.summary.offered_requests_per_s == 4.0


# -- a cost model: a constant step time makes batching free -----------------------------------------
@dataclasses.dataclass(frozen=True)
class ConstantStepCost:
    """Every iteration takes ``step_s``, whatever its batch (a test double of the CostModel protocol)."""

    step_s: float
    accepted: tuple[float, ...] = ()  # no speculative decoding

    def iteration_times(self, batch: BatchAggregates) -> PassTimes:
        n = batch.tokens.size
        return PassTimes({"fixed_latency": np.full(n, self.step_s)}, np.zeros(n), np.zeros(n))

    def draft_s(self, context_tokens: np.ndarray) -> float:
        return 0.0


@pytest.mark.parametrize("users", [1, 8])
def test_with_a_constant_step_time_every_request_takes_its_tokens_times_the_step(users: int) -> None:
    """A prompt within the token budget is one iteration (emitting the first token), then n - 1
    decode iterations: e2e = n x step, for any number of users the batch holds."""
    step_s = 0.01
    base = scenario(load={"kind": "closed", "users": users}, requests=_lengths(), run={"seed": 2, "max_requests": 40})
    resolved = resolve(base, CATALOG)
    doubled = dataclasses.replace(resolved.backends[0], cost=ConstantStepCost(step_s))
    result = simulate(dataclasses.replace(resolved, backends=(doubled,)), CATALOG)
    r = result.records.requests
    assert r["done_s"] - r["arrival_s"] == pytest.approx(np.full(40, ANSWER * step_s))
    assert result.summary.e2e_s.mean == pytest.approx(ANSWER * step_s)
