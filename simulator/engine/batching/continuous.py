"""Continuous batching (Orca, vLLM): sequences join and leave between iterations.

Each iteration fills a token budget. *decode-first*: every running decode takes one token
(``gamma + 1`` with speculation), then unfinished prefills and new admissions (FCFS) fill the
budget with chunks (Sarathi-Serve); a decode that finds no free block preempts the latest
admitted sequence. *prefill-first*: if any prefill can run, the iteration holds only prefill
chunks and decodes wait (vLLM V0: :class:`PrefillFirstBatchingPolicy`). Admission, chunking and
preemption are :class:`~simulator.engine.batching.paged.PagedBatching`'s.
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from simulator.config.batching import ContinuousBatching
from simulator.engine.batching.paged import PagedBatching
from simulator.engine.batching.protocol import Plan
from simulator.engine.batching.registry import batch_policy
from simulator.engine.batching.slots import Slots
from simulator.engine.kv.blocks import BlockManager
from simulator.plan.resolve import BackendPlan


@mypyc_attr(allow_interpreted_subclasses=True)  # a variant outside the package may build on it
class ContinuousBatchingPolicy(PagedBatching):
    """Decode-first: running decodes take their tokens first, prefill chunks fill the budget left."""

    def _prefills_only(self) -> bool:
        """Whether the next iteration holds only prefill chunks (never, decode-first)."""
        return False

    def _schedule_decodes(self, q: dict[int, float], budget: int) -> int:
        s = self.slots
        step = self.decode_step_tokens
        while True:
            decoding = s.decoding[: int(budget // step)]
            if not decoding or self.grow(decoding, step):
                break
            if not self.preempt():
                break
        for index in decoding:  # a compiled loop; dict.fromkeys is a Python call
            q[index] = step
        return budget - int(step * len(decoding))

    def plan(self, now: float) -> Plan:
        q: dict[int, float] = {}
        budget = self.max_batched_tokens
        if not self._prefills_only():
            budget = self._schedule_decodes(q, budget)
        self.schedule_prefills(q, budget, now)
        return self.planned(q)


@mypyc_attr(allow_interpreted_subclasses=True)  # a variant outside the package may build on it
class PrefillFirstBatchingPolicy(ContinuousBatchingPolicy):
    """Prefill-first (vLLM V0): while any prefill can run, iterations hold only prefill chunks."""

    def _prefills_only(self) -> bool:
        return self.prefill_pending()


def _continuous(spec: ContinuousBatching, backend: BackendPlan, blocks: BlockManager) -> PagedBatching:
    """Continuous batching; what the config leaves empty is the deployment's serving stack's."""
    stack = backend.deployment.stack
    priority = spec.priority or stack.priority
    chunked = stack.chunked_prefill if spec.chunked_prefill is None else spec.chunked_prefill
    reserve_full = (spec.admission or stack.admission) == "reserve-full"
    policy = PrefillFirstBatchingPolicy if priority == "prefill-first" else ContinuousBatchingPolicy
    return policy(
        Slots(backend.batch_cap), blocks, backend.max_batched_tokens, backend.decode_step_tokens, backend.window,
        swap=spec.swaps, chunked=chunked, reserve_full=reserve_full,
    )  # fmt: skip


# registered by a call, not ``@batch_policy.register``: mypyc cannot compile that decorator in this module
batch_policy.register(ContinuousBatching, _continuous)
