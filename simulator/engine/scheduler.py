"""Batch formation: which sequences run in the next iteration, and with how many tokens.

Pure Python and numpy (no SimPy). Assumptions:

- **Paged KV** (:mod:`simulator.engine.kv`): a sequence holding ``n`` tokens of KV owns
  ``ceil(n / block_tokens)`` blocks; admission and growth take blocks, completion frees them.
- **Continuous batching** (Orca, vLLM). Each iteration has a token budget
  (``max_batched_tokens``) and a sequence cap (``max_batch_size``). *decode-first*: every
  running decode takes one token (``gamma + 1`` with speculation), then unfinished prefills
  and new admissions (FCFS) fill the budget with chunks (Sarathi-Serve). *prefill-first*: if
  any prefill can run, the iteration holds only prefill chunks and decodes wait (vLLM V0).
- **Preemption.** A decode that needs a block when none is free evicts the latest-admitted
  sequence, which returns to the front of the queue. *recompute*: its blocks are freed and it
  later re-prefills its prompt and the tokens it had generated. *swap*: its KV bytes move to a
  slower tier and move back when it is re-admitted; the replica charges both transfers.
- **Static batching.** Admission only into an empty replica, with the whole
  ``input + output`` KV reserved, so the batch runs to completion without preemption.
- A prefill pass emits the sequence's next token; a decode pass emits one (or the accepted
  speculative tokens).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from simulator.analytic.step_time import BatchAggregates
from simulator.engine.kv import BlockManager
from simulator.engine.request import Request

if TYPE_CHECKING:
    pass

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class WaitingQueue:
    """Requests waiting for admission: highest priority first, FCFS within a priority.

    The deque operations the policies use: ``append`` (arrival), ``appendleft`` (a preempted
    request returns to the front of its priority), ``popleft`` and ``[0]`` (the next to admit).
    """

    def __init__(self) -> None:
        self._levels: dict[int, deque[Request]] = {}
        self._order: list[int] = []  # priorities present, highest first
        self._size = 0

    def _level(self, priority: int) -> deque[Request]:
        if priority not in self._levels:
            self._levels[priority] = deque()
            self._order = sorted(self._levels, reverse=True)
        return self._levels[priority]

    def append(self, request: Request) -> None:
        self._level(request.priority).append(request)
        self._size += 1

    def appendleft(self, request: Request) -> None:
        self._level(request.priority).appendleft(request)
        self._size += 1

    def _head_level(self) -> deque[Request]:
        return next(self._levels[p] for p in self._order if self._levels[p])

    def popleft(self) -> Request:
        self._size -= 1
        return self._head_level().popleft()

    def __getitem__(self, index: int) -> Request:
        assert index == 0, "only the head of the queue is visible"
        return self._head_level()[0]

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __iter__(self) -> Iterator[Request]:
        """Every waiting request, in admission order."""
        for priority in self._order:
            yield from self._levels[priority]


@dataclass
class Plan:
    """New tokens per slot for one iteration (0: not scheduled) and the mask of scheduled slots."""

    new_tokens: FloatArray
    decode_step_tokens: float

    def __post_init__(self) -> None:
        self.scheduled: npt.NDArray[np.bool_] = self.new_tokens > 0


class Slots:
    """The running set of one replica as fixed arrays, one entry per batch slot."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.context = np.zeros(capacity)  # tokens whose KV is cached
        self.prompt_left = np.zeros(capacity)  # prefill tokens still to process
        self.out_left = np.zeros(capacity)  # tokens still to emit
        self.blocks = np.zeros(capacity)
        self.order = np.zeros(capacity, dtype=np.int64)  # admission sequence number
        self.active = np.zeros(capacity, dtype=bool)
        self.requests: list[Request | None] = [None] * capacity
        self._free = list(range(capacity - 1, -1, -1))
        self._admissions = 0

    @property
    def count(self) -> int:
        return self.capacity - len(self._free)

    def admit(self, request: Request, cached_tokens: float = 0.0, cached_blocks: int = 0) -> int:
        """Put a request in a free slot; ``cached_tokens`` of its prompt are already in KV."""
        slot = self._free.pop()
        self.requests[slot] = request
        if request.swapped is None:
            self.context[slot] = cached_tokens
            self.prompt_left[slot] = request.input_tokens + request.generated - cached_tokens
        else:
            self.context[slot], self.prompt_left[slot] = request.swapped
            request.swapped = None
        self.out_left[slot] = request.output_tokens - request.generated
        self.blocks[slot] = float(cached_blocks)
        self._admissions += 1
        self.order[slot] = self._admissions
        self.active[slot] = True
        return slot

    def release(self, slot: int) -> Request:
        request = self.requests[slot]
        assert request is not None
        self.requests[slot] = None
        self.active[slot] = False
        self.blocks[slot] = 0.0
        self._free.append(slot)
        return request


class BatchPolicy:
    """Shared machinery of the batching policies: budgets, block allocation, preemption."""

    def __init__(
        self,
        slots: Slots,
        blocks: BlockManager,
        max_batched_tokens: int,
        decode_step_tokens: float,
        window: int | None,
        swap: bool = False,
    ) -> None:
        self.slots = slots
        self.kv = blocks
        self.max_batched_tokens = max_batched_tokens
        self.decode_step_tokens = decode_step_tokens
        self.window = window
        self.swap = swap
        self.swapped_blocks = 0.0  # blocks moved out or in by the current plan (the replica charges them)
        self.waiting = WaitingQueue()

    # -- helpers --------------------------------------------------------------------------------
    def _grow(self, slot_ids: IntArray, new_tokens: FloatArray) -> bool:
        """Allocate the blocks these slots need for ``new_tokens`` more; False if not enough."""
        s = self.slots
        need = np.maximum(self.kv.blocks_for(s.context[slot_ids] + new_tokens) - s.blocks[slot_ids], 0.0)
        if not self.kv.allocate(int(need.sum())):
            return False
        s.blocks[slot_ids] += need
        return True

    def publish_prefilled(self, slots: IntArray) -> None:
        """After a prefill chunk: the slot's newly full prompt blocks become shareable prefix KV."""
        if not self.kv.caching:
            return
        s = self.slots
        for slot in slots:
            request = s.requests[slot]
            assert request is not None
            first = len(request.shared)
            full = int(s.context[slot] // self.kv.block_tokens)
            if full > first and first == request.published_upto and request.cacheable:
                keys = self.kv.publish([request.block_key(i) for i in range(first, full)])
                request.shared.extend(keys)
                request.published_upto = len(request.shared)

    def release(self, slot: int, cache: bool = True) -> Request:
        """Free a slot's KV: shared blocks lose a reference, full owned blocks enter the prefix cache."""
        s = self.slots
        request = s.requests[slot]
        assert request is not None
        owned = int(s.blocks[slot]) - len(request.shared)
        first = len(request.shared)
        full = int(s.context[slot] // self.kv.block_tokens)
        keys = [request.block_key(i) for i in range(first, full)] if cache and request.cacheable else []
        self.kv.release(request.shared, owned, keys)
        request.shared = []
        return s.release(slot)

    def _preempt_latest(self) -> bool:
        s = self.slots
        if not s.active.any():
            return False
        slot = int(np.argmax(np.where(s.active, s.order, -1)))
        if self.swap:
            request_state = (float(s.context[slot]), float(s.prompt_left[slot]))
            self.swapped_blocks += float(self.kv.blocks_for(s.context[slot]))
        request = self.release(slot, cache=not self.swap)
        request.published_upto = 0
        request.generated = int(request.output_tokens - s.out_left[slot])
        request.preemptions += 1
        if self.swap:
            request.swapped = request_state
        self.waiting.appendleft(request)
        return True

    def _prefix_hit(self, request: Request) -> list[Hashable]:
        """Keys of the leading prompt blocks already resident (at least one token is left to prefill)."""
        if not self.kv.caching or request.swapped is not None:
            return []
        prompt = request.input_tokens + request.generated
        evictable, in_use = self.kv.evictable, self.kv.in_use
        keys = []
        for index in range(int((prompt - 1) // self.kv.block_tokens)):
            key = request.block_key(index)
            # blocks without a key (past a trace's hashes) cannot be matched; the hit ends at a miss
            if key is None or (key not in evictable and key not in in_use):
                break
            keys.append(key)
        return keys

    def _admission_tokens(self, request: Request, budget: int) -> tuple[float, float, list[Hashable]]:
        """(KV tokens held after admission, new tokens this iteration, reused block keys)."""
        if request.swapped is not None:
            context, prompt_left = request.swapped
            new = min(prompt_left, budget) if prompt_left else min(self.decode_step_tokens, budget)
            return context + new, new, []
        hit = self._prefix_hit(request)
        cached = float(len(hit) * self.kv.block_tokens)
        chunk = float(min(request.input_tokens + request.generated - cached, budget))
        return cached + chunk, chunk, hit

    def _admissible(self, budget: int) -> bool:
        if not self.waiting or budget <= 0 or self.slots.count >= self.slots.capacity:
            return False
        held, _, hit = self._admission_tokens(self.waiting[0], budget)
        # reusing an idle cached block takes it out of the reclaimable pool
        reclaimable = self.kv.available - sum(key in self.kv.evictable for key in hit)
        return float(self.kv.blocks_for(held)) - len(hit) <= reclaimable

    def _schedule_prefills(self, q: FloatArray, budget: int, now: float) -> int:
        """Continue unfinished prefills (admission order), then admit new requests (FCFS)."""
        s = self.slots
        pending = np.flatnonzero(s.active & (s.prompt_left > 0) & (q == 0))
        for slot in pending[np.argsort(s.order[pending])]:
            if budget <= 0:
                return budget
            chunk = min(float(s.prompt_left[slot]), float(budget))
            if not self._grow(np.array([slot]), np.array([chunk])):
                return budget
            q[slot] = chunk
            budget -= int(chunk)
        while self._admissible(budget):
            request = self.waiting.popleft()
            _, new, hit = self._admission_tokens(request, budget)
            if request.swapped is not None:
                self.swapped_blocks += float(self.kv.blocks_for(request.swapped[0]))
            self.kv.acquire(hit)
            request.shared = hit
            request.published_upto = len(hit)
            cached = float(len(hit) * self.kv.block_tokens)
            slot = s.admit(request, cached, len(hit))
            if math.isnan(request.admitted_s):
                request.admitted_s = now
                request.cached_tokens = int(cached)
            grown = self._grow(np.array([slot]), np.array([new]))
            assert grown, "admission is sized to the blocks available"
            q[slot] = new
            budget -= int(new)
        return budget

    def prefill_pending(self) -> bool:
        s = self.slots
        return bool((s.active & (s.prompt_left > 0)).any()) or self._admissible(self.max_batched_tokens)

    def aggregates(self, plan: Plan) -> BatchAggregates:
        s = self.slots
        on = plan.scheduled
        return BatchAggregates.of(plan.new_tokens[on], s.context[on], self.window)

    def plan(self, now: float) -> Plan:  # pragma: no cover - abstract
        raise NotImplementedError


class ContinuousBatchingPolicy(BatchPolicy):
    def __init__(self, *args: object, prefill_first: bool, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.prefill_first = prefill_first

    def _schedule_decodes(self, q: FloatArray, budget: int) -> int:
        s = self.slots
        step = self.decode_step_tokens
        while True:
            decoding = np.flatnonzero(s.active & (s.prompt_left == 0))
            decoding = decoding[np.argsort(s.order[decoding])][: int(budget // step)]
            if decoding.size == 0 or self._grow(decoding, np.full(decoding.size, step)):
                break
            if not self._preempt_latest():
                break
        q[decoding] = step
        return budget - int(step * decoding.size)

    def plan(self, now: float) -> Plan:
        q = np.zeros(self.slots.capacity)
        budget = self.max_batched_tokens
        if not (self.prefill_first and self.prefill_pending()):
            budget = self._schedule_decodes(q, budget)
        self._schedule_prefills(q, budget, now)
        return Plan(q, self.decode_step_tokens)


class StaticBatchingPolicy(BatchPolicy):
    def plan(self, now: float) -> Plan:
        s = self.slots
        if s.count == 0:
            while self.waiting and s.count < s.capacity:
                head = self.waiting[0]
                need = int(self.kv.blocks_for(head.input_tokens + head.output_tokens))
                if not self.kv.allocate(need):
                    break
                self.waiting.popleft()
                slot = s.admit(head)
                head.admitted_s = now
                s.blocks[slot] = need
        q = np.zeros(s.capacity)
        budget = self.max_batched_tokens
        prefilling = np.flatnonzero(s.active & (s.prompt_left > 0))
        for slot in prefilling[np.argsort(s.order[prefilling])]:
            if budget <= 0:
                break
            q[slot] = min(float(s.prompt_left[slot]), float(budget))
            budget -= int(q[slot])
        if prefilling.size == 0:
            q[s.active] = 1.0
        return Plan(q, 1.0)
