"""Batch formation: which sequences run in the next iteration, and with how many tokens.

Plain Python (no SimPy): a replica's slots are lists, since a batch holds a few to a few
hundred sequences, where one pass of Python over a list costs less than the fixed overhead
of the numpy calls it would replace. Assumptions:

- **Paged KV** (:mod:`simulator.engine.kv`): a sequence holding ``n`` tokens of KV owns
  ``ceil(n / block_tokens)`` blocks; admission and growth take blocks, completion frees them.
  A model with sliding-window layers also takes its windowed layers' blocks at admission
  (:meth:`~simulator.engine.kv.BlockManager.window_blocks`) and frees them at completion.
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

The replica keeps time; its policy owns the waiting queue, the running slots, the KV blocks
and admission, behind the :class:`BatchPolicy` protocol. A policy is chosen by its config
class through :func:`batch_policy`: a new one is a config class and one registered builder.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections import deque
from collections.abc import Hashable, Iterator, Sequence
from typing import NamedTuple, Protocol

import numpy as np
import numpy.typing as npt
from mypy_extensions import mypyc_attr

from simulator.analytic.step_time import BatchShape
from simulator.config.batching import ContinuousBatching, StaticBatching
from simulator.engine.kv import BlockManager, extended
from simulator.engine.request import Request
from simulator.resolve import BackendPlan

FloatArray = npt.NDArray[np.float64]


class WaitingQueue:
    """Requests waiting for admission: highest priority first, FCFS within a priority.

    The deque operations the policies use: ``append`` (arrival), ``appendleft`` (a preempted
    request returns to the front of its priority), ``popleft`` and ``[0]`` (the next to admit).
    """

    def __init__(self) -> None:
        self._levels: dict[int, deque[Request]] = {}
        self._order: list[int] = []  # priorities present, highest first
        self._size = 0
        self.tokens = 0.0  # prompt and output tokens the waiting requests still need

    def _level(self, priority: int) -> deque[Request]:
        if priority not in self._levels:
            self._levels[priority] = deque()
            self._order = sorted(self._levels, reverse=True)
        return self._levels[priority]

    def append(self, request: Request) -> None:
        self._level(request.priority).append(request)
        self._size += 1
        self.tokens += _tokens_left(request)

    def appendleft(self, request: Request) -> None:
        self._level(request.priority).appendleft(request)
        self._size += 1
        self.tokens += _tokens_left(request)

    def _head_level(self) -> deque[Request]:
        return next(self._levels[p] for p in self._order if self._levels[p])

    def popleft(self) -> Request:
        self._size -= 1
        request = self._head_level().popleft()
        self.tokens -= _tokens_left(request)
        return request

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


def _tokens_left(request: Request) -> float:
    return float(request.input_tokens + request.output_tokens - request.generated)


class Plan:
    """One iteration as a policy formed it: the slots it schedules (ascending) and their new tokens.

    The policy's slots do not change until it applies the plan, so the views below describe
    the planned iteration whenever they are read before :meth:`BatchPolicy.apply`. Plain
    Python lists: a batch holds a few to a few hundred sequences, where a list beats an array.
    """

    def __init__(
        self, new_tokens: dict[int, float], slots: Slots, window: int | None, budget_left: int, swapped_blocks: float
    ) -> None:
        ids = self.ids = sorted(new_tokens)  # the scheduled slots, ascending
        self.new = [new_tokens[slot] for slot in ids]  # their new tokens (each > 0)
        table = slots.table
        states = self.states = [table[slot] for slot in ids]  # their slots (apply changes them)
        self.context = [state.context for state in states]  # tokens each holds in KV before the iteration
        self.decoding = [state.prompt_left == 0.0 for state in states]  # which of them decode
        self.sequences = len(self.ids)
        self.decodes = self.decoding.count(True)
        self.running = slots.count  # sequences holding a slot (scheduled or not)
        self.budget_left = budget_left  # tokens of the iteration's budget left unused
        self.swapped_blocks = swapped_blocks  # KV blocks moved to or from a slower tier, charged to this iteration
        self.window = window

    @property
    def empty(self) -> bool:
        return self.sequences == 0

    @property
    def all_decoding(self) -> bool:
        """Every scheduled sequence decodes (no prefill chunk in the iteration)."""
        return self.decodes == self.sequences

    @property
    def decode_context(self) -> FloatArray:
        """Tokens in the KV cache of each decoding sequence."""
        return np.array([c for c, decoding in zip(self.context, self.decoding) if decoding])

    @property
    def shape(self) -> BatchShape:
        """What the step-time model needs of this iteration."""
        return BatchShape.of(self.new, self.context, self.window)

    @property
    def prefill_tokens(self) -> float:
        return float(sum(new for new, decoding in zip(self.new, self.decoding) if not decoding))

    @property
    def first_tokens(self) -> float:
        """Sequences whose prompt this iteration completes (each emits its first token)."""
        return float(sum(1 for state, new, decoding in zip(self.states, self.new, self.decoding)
                         if not decoding and state.prompt_left <= new))  # fmt: skip


class PrefixHit(NamedTuple):
    """The leading prompt blocks of a request already resident, and how many of them are idle
    (cached, referenced by no running sequence: reusing one takes it out of the reclaimable pool)."""

    keys: Sequence[Hashable]  # a range for a session's keys (:class:`BlockManager`)
    idle: int


NO_HIT = PrefixHit([], 0)


class Applied(NamedTuple):
    """What an applied iteration (or run of decode steps) produced."""

    decode_tokens: list[float]  # tokens each decoding sequence emitted, in slot order
    tokens: float  # every token emitted, first tokens of finished prefills included
    completed: list[Request]  # requests that emitted their last token, their slots freed


class BatchPolicy(Protocol):
    """What a replica asks of its batching policy, which owns the queue, slots, KV and admission."""

    @property
    def queued(self) -> int:
        """Requests waiting for admission."""
        ...

    @property
    def running(self) -> int:
        """Sequences holding a slot."""
        ...

    @property
    def kv_used(self) -> int:
        """KV blocks held by running sequences."""
        ...

    @property
    def block_tokens(self) -> int:
        """Tokens of one KV block."""
        ...

    def blocks_for(self, tokens: float) -> float:
        """KV blocks that ``tokens`` of context take."""
        ...

    def tokens_left(self) -> float:
        """Prompt and output tokens still to process: running sequences plus the queue."""
        ...

    def kv_headroom(self) -> float:
        """Free KV blocks after the queue's prompts are admitted (negative: oversubscribed)."""
        ...

    def has_room(self) -> bool:
        """A slot and some KV are free: an arrival might join at the next step."""
        ...

    def enqueue(self, request: Request) -> None:
        """A request arrives at the replica."""
        ...

    def plan(self, now: float) -> Plan:
        """Form the next iteration: admit what fits, choose each slot's new tokens."""
        ...

    def can_admit(self, budget_tokens: int, first_prefill: bool = True) -> bool:
        """The head of the queue could join an iteration with ``budget_tokens`` of budget left now
        (``first_prefill``: no other prompt is in that iteration yet)."""
        ...

    def preempt(self) -> bool:
        """Evict a running sequence back to the queue to free KV; False when none runs."""
        ...

    def unchanged_steps(self, plan: Plan) -> int:
        """Decode steps the planned batch can run as it is (to a completion or a KV shortage), >= 1."""
        ...

    def apply(self, plan: Plan, now: float, decode_tokens: Sequence[float]) -> Applied:
        """The planned iteration ran until ``now``: each decoding sequence emitted ``decode_tokens``."""
        ...


class Slot:
    """One batch slot: the request in it and its token counts (plain floats, held in the object)."""

    def __init__(self) -> None:
        self.request: Request | None = None
        self.context = 0.0  # tokens whose KV is cached
        self.prompt_left = 0.0  # prefill tokens still to process
        self.out_left = 0.0  # tokens still to emit
        self.blocks = 0.0  # KV blocks it holds
        self.order = 0  # admission sequence number


class Slots:
    """The running set of one replica, one :class:`Slot` per batch slot (made as the slots are
    first used), and the slots that prefill and that decode, each list in admission order."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.table: list[Slot] = []  # by slot number
        self.prefilling: list[int] = []  # slots with prompt tokens left
        self.decoding: list[int] = []  # slots whose prompt is in KV
        self._free = list(range(capacity - 1, -1, -1))
        self._admissions = 0
        self.tokens_left = 0.0  # prompt and output tokens the running sequences still need (a running sum)

    @property
    def count(self) -> int:
        return self.capacity - len(self._free)

    def admit(self, request: Request, cached_tokens: float = 0.0, cached_blocks: int = 0) -> int:
        """Put a request in a free slot; ``cached_tokens`` of its prompt are already in KV."""
        slot = self._free.pop()
        while len(self.table) <= slot:
            self.table.append(Slot())
        state = self.table[slot]
        state.request = request
        if request.swapped is None:
            state.context = float(cached_tokens)
            state.prompt_left = float(request.input_tokens + request.generated - cached_tokens)
        else:
            state.context, state.prompt_left = request.swapped
            request.swapped = None
        state.out_left = float(request.output_tokens - request.generated)
        self.tokens_left += state.prompt_left + state.out_left
        state.blocks = float(cached_blocks)
        self._admissions += 1
        state.order = self._admissions
        (self.prefilling if state.prompt_left > 0 else self.decoding).append(slot)  # the latest admitted
        return slot

    def prefilled(self, slot: int) -> None:
        """A slot's prompt is all in KV: it decodes from now on (kept in admission order)."""
        self.prefilling.remove(slot)
        bisect.insort(self.decoding, slot, key=self._order)

    def latest(self) -> int | None:
        """The slot admitted last, None when none runs."""
        last = [lane[-1] for lane in (self.prefilling, self.decoding) if lane]
        return max(last, key=self._order) if last else None

    def _order(self, slot: int) -> int:
        return self.table[slot].order

    def release(self, slot: int) -> Request:
        state = self.table[slot]
        request = state.request
        assert request is not None
        state.request = None
        self.tokens_left -= state.prompt_left + state.out_left
        state.blocks = 0.0
        (self.prefilling if state.prompt_left > 0 else self.decoding).remove(slot)
        self._free.append(slot)
        return request


@mypyc_attr(allow_interpreted_subclasses=True)  # a policy outside the package may build on it
class PagedBatching:
    """Shared machinery of the bundled policies: the queue, the slots, paged KV with a prefix
    cache, admission and preemption. A subclass forms iterations (:meth:`plan`)."""

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
        self._swapped_blocks = 0.0  # moved out or in since the last iteration that ran (it is charged them)
        self.waiting = WaitingQueue()

    # -- the replica's view -----------------------------------------------------------------------
    @property
    def queued(self) -> int:
        return len(self.waiting)

    @property
    def running(self) -> int:
        return self.slots.count

    @property
    def kv_used(self) -> int:
        """Blocks in use, in blocks of all layers (the backend plan's ``kv_blocks``)."""
        return int(self.kv.used * self.kv.full_share)

    @property
    def block_tokens(self) -> int:
        return self.kv.block_tokens

    def blocks_for(self, tokens: float) -> float:
        return self.kv.blocks_of(tokens)

    def tokens_left(self) -> float:
        return self.slots.tokens_left + self.waiting.tokens

    def kv_headroom(self) -> float:
        kv = self.kv
        demand = sum(
            kv.blocks_of(r.input_tokens + r.generated) + kv.window_blocks(r.input_tokens + r.output_tokens)
            for r in self.waiting
        )
        return kv.available - demand

    def has_room(self) -> bool:
        return self.slots.count < self.slots.capacity and self.kv.available > 0

    def enqueue(self, request: Request) -> None:
        self.waiting.append(request)

    def plan(self, now: float) -> Plan:  # pragma: no cover - abstract
        raise NotImplementedError

    def _planned(self, new_tokens: dict[int, float]) -> Plan:
        """The plan of these new tokens (by slot, each > 0); a plan that runs takes the swaps charged so far."""
        budget_left = self.max_batched_tokens - int(sum(new_tokens.values()))
        plan = Plan(new_tokens, self.slots, self.window, budget_left, self._swapped_blocks)
        if not plan.empty:
            self._swapped_blocks = 0.0
        return plan

    def can_admit(self, budget_tokens: int, first_prefill: bool = True) -> bool:
        if not self.waiting or budget_tokens <= 0 or self.slots.count >= self.slots.capacity:
            return False
        held, new, hit = self._admission_tokens(self.waiting[0], budget_tokens, first_prefill)
        if new <= 0:
            return False
        # reusing an idle cached block takes it out of the reclaimable pool
        reclaimable = self.kv.available - hit.idle
        head = self.waiting[0]
        window = self.kv.window_blocks(head.input_tokens + head.output_tokens)
        return self.kv.blocks_of(held) + window - len(hit.keys) <= reclaimable

    def preempt(self) -> bool:
        """Evict the latest-admitted sequence to the front of the queue (recompute or swap)."""
        s = self.slots
        slot = s.latest()
        if slot is None:
            return False
        state = s.table[slot]
        if self.swap:
            request_state = (state.context, state.prompt_left)
            self._swapped_blocks += self.kv.blocks_of(state.context)
        request = self._release(slot, cache=not self.swap)
        request.published_upto = 0
        request.generated = int(request.output_tokens - state.out_left)
        request.preemptions += 1
        if self.swap:
            request.swapped = request_state
        self.waiting.appendleft(request)
        return True

    def unchanged_steps(self, plan: Plan) -> int:
        """To the first completion, or the last step whose new blocks are all available."""
        k_done = int(min([state.out_left for state in plan.states]))
        if k_done <= 1:
            return 1
        block_tokens, available = self.kv.block_tokens, self.kv.available
        blocks = [state.blocks for state in plan.states]
        if _extra_blocks(plan.context, blocks, k_done, block_tokens) <= available:
            return k_done
        low, high = 1, k_done  # extra blocks at low <= available < extra blocks at high
        while high - low > 1:
            mid = (low + high) // 2
            fits = _extra_blocks(plan.context, blocks, mid, block_tokens) <= available
            low, high = (mid, high) if fits else (low, mid)
        return low

    def apply(self, plan: Plan, now: float, decode_tokens: Sequence[float]) -> Applied:
        """Prefill chunks move into the KV (finished prompts emit their first token), decodes emit
        ``decode_tokens`` (one entry per decoding sequence, in slot order); blocks the new tokens
        fill beyond those planned are taken now."""
        s = self.slots
        block_tokens = self.kv.block_tokens
        decoded = iter(decode_tokens)
        decode_emitted: list[float] = []
        prefilled: list[int] = []  # slots that ran a prompt chunk
        finished: list[int] = []  # ... and completed their prompt in it
        prefilled_tokens = tokens = grown = 0.0
        for slot, state, new, decoding, context in zip(plan.ids, plan.states, plan.new, plan.decoding, plan.context):
            if decoding:
                emitted = next(decoded)
                if emitted > state.out_left:
                    emitted = state.out_left
                decode_emitted.append(emitted)
                context += emitted
            else:
                left = state.prompt_left = state.prompt_left - new
                context += new
                prefilled_tokens += new
                prefilled.append(slot)
                emitted = 0.0
                if left == 0:  # the first token
                    finished.append(slot)
                    emitted = min(1.0, state.out_left)
            state.context = context
            state.out_left -= emitted
            tokens += emitted
            if context > state.blocks * block_tokens:  # into a block it does not hold yet
                need = float(math.ceil(context / block_tokens))
                grown += need - state.blocks
                state.blocks = need
        if prefilled:
            s.tokens_left -= prefilled_tokens
            self._publish_prefilled(prefilled)
        for slot in finished:
            s.prefilled(slot)
            request = s.table[slot].request
            if request is not None and math.isnan(request.first_token_s):
                request.first_token_s = now
        s.tokens_left -= tokens
        allocated = self.kv.allocate(int(grown))
        assert allocated, "an iteration's blocks are sized to those available when it is planned"
        completed = []
        for slot, state in zip(plan.ids, plan.states):
            if state.out_left <= 0:
                request = self._release(slot)
                request.generated = request.output_tokens
                completed.append(request)
        return Applied(decode_emitted, tokens, completed)

    # -- helpers --------------------------------------------------------------------------------
    def _grow(self, slot_ids: Sequence[int], new_tokens: float) -> bool:
        """Allocate the blocks these slots need for ``new_tokens`` more each; False if not enough."""
        table, block_tokens = self.slots.table, self.kv.block_tokens
        grown: list[tuple[Slot, float]] = []  # (slot, blocks it needs) where more than it holds
        more = 0.0
        for slot in slot_ids:
            state = table[slot]
            tokens = state.context + new_tokens
            if tokens > state.blocks * block_tokens:  # into a block it does not hold yet
                need = float(math.ceil(tokens / block_tokens))
                grown.append((state, need))
                more += need - state.blocks
        if not self.kv.allocate(int(more)):
            return False
        for state, need in grown:
            state.blocks = need
        return True

    def _reserve(self, slot: int, tokens: float) -> bool:
        """Take the blocks of ``tokens`` of KV for a slot at once (reserve-full admission)."""
        state = self.slots.table[slot]
        need = max(self.kv.blocks_of(tokens) - state.blocks, 0.0)
        if not self.kv.allocate(int(need)):
            return False
        state.blocks += need
        return True

    def _publish_prefilled(self, slots: list[int]) -> None:
        """After a prefill chunk: the slot's newly full prompt blocks become shareable prefix KV."""
        if not self.kv.caching:
            return
        table = self.slots.table
        for slot in slots:
            request = table[slot].request
            assert request is not None
            first = len(request.shared)
            full = int(table[slot].context // self.kv.block_tokens)
            if full > first and first == request.published_upto and request.cacheable:
                keys = self.kv.publish(request.block_keys(first, full))
                request.shared = extended(request.shared, keys)
                request.published_upto = len(request.shared)

    def _release(self, slot: int, cache: bool = True) -> Request:
        """Free a slot's KV: shared blocks lose a reference, full owned blocks enter the prefix cache."""
        s = self.slots
        state = s.table[slot]
        request = state.request
        assert request is not None
        window = int(self.kv.window_blocks(request.input_tokens + request.output_tokens))
        owned = int(state.blocks) - len(request.shared) + window  # the windowed layers' blocks are never cached
        first = len(request.shared)
        full = int(state.context // self.kv.block_tokens)
        keys = request.block_keys(first, full) if cache and request.cacheable else []
        self.kv.release(request.shared, owned, keys)
        request.shared = []
        return s.release(slot)

    def _prefix_hit(self, request: Request) -> PrefixHit:
        """Keys of the leading prompt blocks already resident (at least one token is left to prefill)."""
        if not self.kv.caching or request.swapped is not None:
            return NO_HIT
        kv = self.kv
        if request.hit is not None and request.hit[:2] == (kv.version, request.generated):
            return request.hit[2]  # nothing cached has changed since it was last looked up
        prompt = request.input_tokens + request.generated
        keys = request.block_keys(0, int((prompt - 1) // kv.block_tokens))
        hit, idle = kv.leading(keys)
        found = PrefixHit(keys[:hit], idle)  # no None among resident keys
        request.hit = (kv.version, request.generated, found)
        return found

    def _chunk(self, prompt_left: float, budget: int, first_prefill: bool) -> float:
        """Prompt tokens this iteration: a chunk within the budget, or (unchunked) the whole prompt
        when it fits or opens the iteration's prefill; 0 when it must wait."""
        if self.chunked:
            return float(min(prompt_left, budget))
        return prompt_left if prompt_left <= budget or first_prefill else 0.0

    def _admission_tokens(
        self, request: Request, budget: int, first_prefill: bool = True
    ) -> tuple[float, float, PrefixHit]:
        """(KV tokens reserved at admission, new tokens this iteration, reused block keys)."""
        if request.swapped is not None:
            context, prompt_left = request.swapped
            step = min(self.decode_step_tokens, budget)
            new = self._chunk(prompt_left, budget, first_prefill) if prompt_left else step
            return context + new, new, NO_HIT
        hit = self._prefix_hit(request)
        cached = float(len(hit.keys) * self.kv.block_tokens)
        prompt = request.input_tokens + request.generated
        chunk = self._chunk(prompt - cached, budget, first_prefill)
        held = prompt + request.output_tokens - request.generated if self.reserve_full else cached + chunk
        return held, chunk, hit

    def _schedule_prefills(self, q: dict[int, float], budget: int, now: float) -> int:
        """Continue unfinished prefills (admission order), then admit new requests (FCFS)."""
        s = self.slots
        first = True  # no prefill in this iteration yet
        for slot in list(s.prefilling):
            if budget <= 0:
                return budget
            chunk = self._chunk(s.table[slot].prompt_left, budget, first)
            if chunk <= 0 or not self._grow([slot], chunk):
                return budget
            q[slot] = chunk
            budget -= int(chunk)
            first = False
        while self.can_admit(budget, first):
            request = self.waiting.popleft()
            held, new, hit = self._admission_tokens(request, budget, first)
            first = False
            if request.swapped is not None:
                self._swapped_blocks += self.kv.blocks_of(request.swapped[0])
            self.kv.acquire(hit.keys)
            request.shared = hit.keys
            request.published_upto = len(hit.keys)
            cached = float(len(hit.keys) * self.kv.block_tokens)
            slot = s.admit(request, cached, len(hit.keys))
            if math.isnan(request.admitted_s):
                request.admitted_s = now
                request.cached_tokens = int(cached)
            window = self.kv.allocate(int(self.kv.window_blocks(request.input_tokens + request.output_tokens)))
            grown = self._reserve(slot, held) if self.reserve_full else self._grow([slot], new)
            assert window and grown, "admission is sized to the blocks available"
            q[slot] = new
            budget -= int(new)
        return budget

    def _prefill_pending(self) -> bool:
        s = self.slots
        return bool(s.prefilling) or self.can_admit(self.max_batched_tokens)


def _extra_blocks(context: list[float], blocks: list[float], steps: int, block_tokens: int) -> float:
    """KV blocks that sequences holding ``context`` tokens in ``blocks`` blocks each need beyond
    those after ``steps`` more tokens each: ``sum max(ceil((c + k) / B) - b, 0)``."""
    extra = 0.0
    for c, b in zip(context, blocks):
        if c + steps > b * block_tokens:
            extra += math.ceil((c + steps) / block_tokens) - b
    return extra


@mypyc_attr(allow_interpreted_subclasses=True)  # a variant outside the package may build on it
class ContinuousBatchingPolicy(PagedBatching):
    #: While any prefill can run, iterations hold only prefill chunks (vLLM V0); else decode-first.
    prefill_first: bool = False

    def _schedule_decodes(self, q: dict[int, float], budget: int) -> int:
        s = self.slots
        step = self.decode_step_tokens
        while True:
            decoding = s.decoding[: int(budget // step)]
            if not decoding or self._grow(decoding, step):
                break
            if not self.preempt():
                break
        q.update(dict.fromkeys(decoding, step))
        return budget - int(step * len(decoding))

    def plan(self, now: float) -> Plan:
        q: dict[int, float] = {}
        budget = self.max_batched_tokens
        if not (self.prefill_first and self._prefill_pending()):
            budget = self._schedule_decodes(q, budget)
        self._schedule_prefills(q, budget, now)
        return self._planned(q)


class StaticBatchingPolicy(PagedBatching):
    def plan(self, now: float) -> Plan:
        s = self.slots
        if s.count == 0:
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
        return self._planned(q)


def paged_kv(backend: BackendPlan) -> BlockManager:
    """One replica's KV blocks, with the prefix cache when the scenario asks for it; with
    sliding-window layers a block holds the full-attention layers' KV (module docstring of
    :mod:`simulator.engine.kv`)."""
    model = backend.deployment.model
    windowed = model.attention.sliding_window_layers
    full = model.num_layers - windowed
    if not windowed or not full or model.attention.sliding_window is None:
        return BlockManager(backend.kv_blocks, backend.kv_block_tokens, caching=backend.prefix_caching)
    share = full / model.num_layers
    block_bytes = backend.kv_block_tokens * backend.deployment.kv_bytes_per_token * share
    return BlockManager(int(backend.deployment.kv_budget_bytes // block_bytes), backend.kv_block_tokens,
                        caching=backend.prefix_caching, window_tokens=model.attention.sliding_window,
                        window_blocks_per_block=windowed / full, full_share=share)  # fmt: skip


@functools.singledispatch
def batch_policy(spec: object, backend: BackendPlan) -> BatchPolicy:
    """The batching policy one replica of ``backend`` runs, chosen by the class of its config.

    A new policy is a config class and one builder registered with ``@batch_policy.register``.
    """
    raise TypeError(f"no batching policy is registered for {type(spec).__name__} (@batch_policy.register one)")


@batch_policy.register
def _continuous(spec: ContinuousBatching, backend: BackendPlan) -> BatchPolicy:
    """Continuous batching; what the config leaves empty is the deployment's serving stack's."""
    stack = backend.deployment.stack
    priority = spec.priority or stack.priority
    chunked = stack.chunked_prefill if spec.chunked_prefill is None else spec.chunked_prefill
    reserve_full = (spec.admission or stack.admission) == "reserve-full"
    policy = ContinuousBatchingPolicy(
        Slots(backend.batch_cap), paged_kv(backend), backend.max_batched_tokens, backend.decode_step_tokens,
        backend.window, swap=spec.swaps, chunked=chunked, reserve_full=reserve_full,
    )  # fmt: skip
    policy.prefill_first = priority == "prefill-first"
    return policy


@batch_policy.register
def _static(spec: StaticBatching, backend: BackendPlan) -> BatchPolicy:
    return StaticBatchingPolicy(Slots(backend.batch_cap), paged_kv(backend), backend.max_batched_tokens, 1.0,
                                backend.window)  # fmt: skip
