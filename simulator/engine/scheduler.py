"""Batch formation: which sequences run in the next iteration, and with how many tokens.

Pure Python and numpy (no SimPy). Assumptions:

- **Paged KV.** The budget is ``floor(kv_budget / (block_tokens * kv bytes per token))``
  blocks; a sequence holding ``n`` tokens of KV owns ``ceil(n / block_tokens)`` blocks.
  (Sliding-window layers are charged like full ones: conservative for gpt-oss.)
- **Continuous batching** (Orca, vLLM). Each iteration has a token budget
  (``max_batched_tokens``) and a sequence cap (``max_batch_size``). *decode-first*: every
  running decode takes one token (``gamma + 1`` with speculation), then unfinished prefills
  and new admissions (FCFS) fill the budget with chunks (Sarathi-Serve). *prefill-first*: if
  any prefill can run, the iteration holds only prefill chunks and decodes wait (vLLM V0).
  Without chunked prefill a prompt is never split: it runs whole in one iteration if it fits
  the budget left, or alone beyond the budget when it is the iteration's first prefill (as
  TensorRT-LLM sizes ``max_num_tokens`` >= the longest prompt).
- **Admission.** *on-demand*: a request is admitted when the KV of its prompt (chunk) fits;
  blocks are added as it decodes. *reserve-full* (TensorRT-LLM's guaranteed-no-evict): it is
  admitted only when the blocks of its whole prompt and output fit, all taken at admission,
  so a decode never runs short and nothing is preempted.
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
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from simulator.analytic.step_time import BatchAggregates

if TYPE_CHECKING:
    import simpy

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class Request:
    """One model call and its timestamps (seconds). ``generated`` counts emitted tokens."""

    __slots__ = (
        "admitted_s",
        "arrival_s",
        "block_hashes",
        "cached_tokens",
        "done",
        "first_token_s",
        "generated",
        "hash_ratio",
        "id",
        "input_tokens",
        "klass",
        "one_way_s",
        "output_tokens",
        "preemptions",
        "priority",
        "published_upto",
        "replica",
        "reserved_usd",
        "session",
        "shared",
        "swapped",
        "task",
        "user",
    )  # fmt: skip

    def __init__(
        self,
        request_id: int,
        arrival_s: float,
        input_tokens: int,
        output_tokens: int,
        user: int,
        session: Hashable | None = None,
        block_hashes: Sequence[Hashable] | None = None,
        hash_ratio: int = 1,
    ) -> None:
        self.id = request_id
        self.arrival_s = arrival_s
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.user = user
        self.generated = 0
        self.admitted_s = math.nan
        self.first_token_s = math.nan
        self.preemptions = 0
        self.replica = -1
        self.done: simpy.Event | None = None  # when somebody waits on the request
        self.swapped: tuple[float, float] | None = None  # (context, prompt_left) while swapped out
        self.session = session  # conversation id: block i of its context is (session, i)
        self.block_hashes = block_hashes  # explicit prompt block hashes (traces), first
        self.hash_ratio = hash_ratio  # our KV blocks per trace hash block
        self.cached_tokens = 0  # prompt tokens served from the prefix cache at first admission
        self.shared: list[Hashable] = []  # cached blocks this request references while running
        self.task = -1  # the agent task this call belongs to
        self.klass = 0  # workload class index
        self.priority = 0  # higher is admitted first
        self.published_upto = 0  # leading blocks of this request that are shared prefix KV
        self.one_way_s = 0.0  # half the network round trip to its backend
        self.reserved_usd = 0.0  # API budget reserved for it when routed

    @property
    def cacheable(self) -> bool:
        """Whether any of its blocks has a key (a session or trace hashes): else none is shared."""
        return self.session is not None or self.block_hashes is not None

    def block_key(self, index: int) -> Hashable | None:
        """Key of the KV block covering tokens [index * bs, (index + 1) * bs) of this context."""
        if self.block_hashes is not None:
            trace_block, part = divmod(index, self.hash_ratio)
            if trace_block < len(self.block_hashes):
                return (self.session, self.block_hashes[trace_block], part)
            return None
        return None if self.session is None else (self.session, index)


BlockKey = Hashable


class BlockManager:
    """Paged KV: free blocks, blocks in use, and a prefix cache of reusable full blocks.

    A cached block is identified by its key (a block hash, or ``(session, index)``); blocks in
    use by running sequences are reference-counted, so sequences sharing a prefix share its
    blocks. Unreferenced cached blocks are kept in LRU order and are reclaimed, oldest first,
    only when an allocation finds no free block.
    """

    def __init__(self, total_blocks: int, block_tokens: int, caching: bool = False) -> None:
        self.total = total_blocks
        self.free = total_blocks
        self.block_tokens = block_tokens
        self.caching = caching
        self.evictable: OrderedDict[BlockKey, None] = OrderedDict()
        self.in_use: dict[BlockKey, int] = {}

    def blocks_for(self, tokens: FloatArray | float) -> FloatArray:
        return np.ceil(np.asarray(tokens, dtype=np.float64) / self.block_tokens)

    @property
    def used(self) -> int:
        """Blocks holding KV of running sequences (cached, unreferenced blocks excluded)."""
        return self.total - self.free - len(self.evictable)

    @property
    def available(self) -> int:
        return self.free + len(self.evictable)

    def allocate(self, blocks: int) -> bool:
        """Take ``blocks`` free blocks, reclaiming LRU cached ones if needed."""
        if blocks > self.available:
            return False
        while self.free < blocks:
            self.evictable.popitem(last=False)
            self.free += 1
        self.free -= blocks
        return True

    def acquire(self, keys: Sequence[BlockKey]) -> None:
        """Reference resident blocks for a sequence that reuses them."""
        for key in keys:
            if key in self.evictable:
                del self.evictable[key]
            self.in_use[key] = self.in_use.get(key, 0) + 1

    def publish(self, keys: Sequence[BlockKey | None]) -> list[BlockKey]:
        """Make freshly computed full blocks shareable; returns the keys now referenced.

        A key another sequence already published stays that sequence's; this copy remains a
        private block of its owner (it was computed twice).
        """
        published = []
        for key in keys:
            if key is None or key in self.in_use or key in self.evictable:
                break
            self.in_use[key] = 1
            published.append(key)
        return published

    def release(self, shared: Sequence[BlockKey], owned: int, keys: Sequence[BlockKey | None]) -> None:
        """A sequence leaves: drop its references, cache its full ``keys`` blocks, free the rest.

        ``keys`` names the owned full blocks in order (None: not cacheable); owned blocks beyond
        them (a partial last block) are freed. Blocks enter the LRU tail first (as vLLM frees
        them in reverse), so eviction trims a cached context from its end and keeps its prefix.
        """
        cached = 0
        if self.caching:
            for key in reversed(keys[:owned]):
                if key is not None and key not in self.evictable and key not in self.in_use:
                    self.evictable[key] = None
                    cached += 1
        for key in reversed(shared):
            count = self.in_use[key] - 1
            if count:
                self.in_use[key] = count
            else:
                del self.in_use[key]
                self.evictable[key] = None
        self.free += owned - cached


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
        chunked: bool = True,
        reserve_full: bool = False,
    ) -> None:
        self.slots = slots
        self.kv = blocks
        self.max_batched_tokens = max_batched_tokens
        self.decode_step_tokens = decode_step_tokens
        self.window = window
        self.swap = swap
        self.chunked = chunked
        self.reserve_full = reserve_full
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

    def _reserve(self, slot: int, tokens: float) -> bool:
        """Take the blocks of ``tokens`` of KV for a slot at once (reserve-full admission)."""
        s = self.slots
        need = max(float(self.kv.blocks_for(tokens)) - float(s.blocks[slot]), 0.0)
        if not self.kv.allocate(int(need)):
            return False
        s.blocks[slot] += need
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

    def _chunk(self, prompt_left: float, budget: int, first_prefill: bool) -> float:
        """Prompt tokens this iteration: a chunk within the budget, or (unchunked) the whole prompt
        when it fits or opens the iteration's prefill; 0 when it must wait."""
        if self.chunked:
            return float(min(prompt_left, budget))
        return prompt_left if prompt_left <= budget or first_prefill else 0.0

    def _admission_tokens(
        self, request: Request, budget: int, first_prefill: bool = True
    ) -> tuple[float, float, list[Hashable]]:
        """(KV tokens reserved at admission, new tokens this iteration, reused block keys)."""
        if request.swapped is not None:
            context, prompt_left = request.swapped
            step = min(self.decode_step_tokens, budget)
            new = self._chunk(prompt_left, budget, first_prefill) if prompt_left else step
            return context + new, new, []
        hit = self._prefix_hit(request)
        cached = float(len(hit) * self.kv.block_tokens)
        prompt = request.input_tokens + request.generated
        chunk = self._chunk(prompt - cached, budget, first_prefill)
        held = prompt + request.output_tokens - request.generated if self.reserve_full else cached + chunk
        return held, chunk, hit

    def _admissible(self, budget: int, first_prefill: bool = True) -> bool:
        if not self.waiting or budget <= 0 or self.slots.count >= self.slots.capacity:
            return False
        held, new, hit = self._admission_tokens(self.waiting[0], budget, first_prefill)
        if new <= 0:
            return False
        # reusing an idle cached block takes it out of the reclaimable pool
        reclaimable = self.kv.available - sum(key in self.kv.evictable for key in hit)
        return float(self.kv.blocks_for(held)) - len(hit) <= reclaimable

    def _schedule_prefills(self, q: FloatArray, budget: int, now: float) -> int:
        """Continue unfinished prefills (admission order), then admit new requests (FCFS)."""
        s = self.slots
        first = True  # no prefill in this iteration yet
        pending = np.flatnonzero(s.active & (s.prompt_left > 0) & (q == 0))
        for slot in pending[np.argsort(s.order[pending])]:
            if budget <= 0:
                return budget
            chunk = self._chunk(float(s.prompt_left[slot]), budget, first)
            if chunk <= 0 or not self._grow(np.array([slot]), np.array([chunk])):
                return budget
            q[slot] = chunk
            budget -= int(chunk)
            first = False
        while self._admissible(budget, first):
            request = self.waiting.popleft()
            held, new, hit = self._admission_tokens(request, budget, first)
            first = False
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
            grown = self._reserve(slot, held) if self.reserve_full else self._grow(np.array([slot]), np.array([new]))
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
