"""Static batching: a batch forms only when the replica is empty, with the whole ``input +
output`` KV of each member reserved at admission, and runs to completion without preemption;
arrivals wait for the next batch. Prompts run first (within the token budget), then every
member decodes one token a pass."""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from simulator.config.batching import StaticBatching
from simulator.engine.batching.paged import PagedBatching
from simulator.engine.batching.protocol import Plan
from simulator.engine.batching.registry import batch_policy
from simulator.engine.batching.slots import Slots
from simulator.engine.kv.blocks import BlockManager
from simulator.plan.resolve import BackendPlan


@mypyc_attr(allow_interpreted_subclasses=True)  # a variant outside the package may build on it
class StaticBatchingPolicy(PagedBatching):
    """A batch admitted into an empty replica runs to completion."""

    def _admit_batch(self, now: float) -> None:
        """Admit the queue's head, in order, while slots and their whole KV are free."""
        s = self.slots
        while self.waiting and s.count < s.capacity:
            head = self.waiting[0]
            need = int(self.kv.blocks_of(head.input_tokens + head.output_tokens))
            window = int(self.kv.window_blocks(head.input_tokens + head.output_tokens))
            if not self.kv.allocate(need + window):
                break
            self.waiting.popleft()
            slot = s.admit(head)
            head.admitted_s = now
            s.table[slot].blocks = float(need)

    def plan(self, now: float) -> Plan:
        s = self.slots
        if s.count == 0:
            self._admit_batch(now)
        q: dict[int, float] = {}
        budget = self.max_batched_tokens
        prefilling = list(s.prefilling)
        for slot in prefilling:
            if budget <= 0:
                break
            q[slot] = min(s.table[slot].prompt_left, float(budget))
            budget -= int(q[slot])
        if not prefilling:
            q.update(dict.fromkeys(s.decoding, 1.0))
        return self.planned(q)


def _static(spec: StaticBatching, backend: BackendPlan, blocks: BlockManager) -> PagedBatching:
    return StaticBatchingPolicy(Slots(backend.batch_cap), blocks, backend.max_batched_tokens, 1.0, backend.window)


# registered by a call, not ``@batch_policy.register``: mypyc cannot compile that decorator in this module
batch_policy.register(StaticBatching, _static)
