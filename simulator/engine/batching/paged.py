"""The machinery the bundled batching policies share: the waiting queue, the running slots,
paged KV with a prefix cache, admission and preemption. A policy built on it forms iterations
(:meth:`PagedBatching.plan`) from its public methods; assumptions:

- **Paged KV** (:mod:`simulator.engine.kv.blocks`): a sequence holding ``n`` tokens of KV owns
  ``ceil(n / block_tokens)`` blocks; admission and growth take blocks, completion frees them.
  A model with sliding-window layers also takes its windowed layers' blocks at admission
  (:meth:`~simulator.engine.kv.blocks.BlockManager.window_blocks`) and frees them at completion.
- **Token budget.** Each iteration has a token budget (``max_batched_tokens``) and a sequence
  cap (the slots). Without chunked prefill a prompt is never split: it runs whole in one
  iteration if it fits the budget left, or alone beyond the budget when it is the iteration's
  first prefill (as TensorRT-LLM sizes ``max_num_tokens`` >= the longest prompt).
- **Admission.** *on-demand*: a request is admitted when the KV of its prompt (chunk) fits;
  blocks are added as it decodes. *reserve-full* (TensorRT-LLM's guaranteed-no-evict): it is
  admitted only when the blocks of its whole prompt and output fit, all taken at admission,
  so a decode never runs short and nothing is preempted.
- **Preemption.** A decode that needs a block when none is free evicts the latest-admitted
  sequence, which returns to the front of the queue. *recompute*: its blocks are freed and it
  later re-prefills its prompt and the tokens it had generated. *swap*: its KV bytes move to a
  slower tier and move back when it is re-admitted; the plan of the next iteration that runs
  carries the blocks moved, and the replica charges their transfer (:mod:`simulator.engine.kv.tiers`).
- A prefill pass emits the sequence's next token; a decode pass emits one (or the accepted
  speculative tokens).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from mypy_extensions import mypyc_attr

from simulator.engine.batching.protocol import Applied, Plan, Slot
from simulator.engine.batching.queue import WaitingQueue
from simulator.engine.batching.slots import Slots
from simulator.engine.kv.blocks import NO_HIT, BlockManager, PrefixHit, extended
from simulator.engine.request import Request


@mypyc_attr(allow_interpreted_subclasses=True)  # a policy outside the package may build on it
class PagedBatching:
    """A replica's batching policy: the queue, the slots, paged KV with a prefix cache, admission
    and preemption. The replica reads its load views (``queued``, ``running``, ``kv_used``,
    ``tokens_left``, ``kv_headroom``, ``has_room``) and runs ``plan``, ``unchanged_steps`` and
    ``apply``. A subclass forms iterations (:meth:`plan`) from the public methods below (``grow``,
    ``schedule_prefills``, ``prefill_pending``, ``can_admit``, ``preempt``) and hands them back
    through :meth:`planned`."""

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
        """Requests waiting for admission."""
        return len(self.waiting)

    def held(self) -> list[Request]:
        """Every request the policy holds, waiting first, then running (what a failure loses)."""
        return [*self.waiting, *(slot.request for slot in self.slots.table if slot.request is not None)]

    @property
    def running(self) -> int:
        """Sequences holding a slot."""
        return self.slots.count

    @property
    def kv_used(self) -> int:
        """Blocks in use, in blocks of all layers (the backend plan's ``kv_blocks``)."""
        return int(self.kv.used * self.kv.full_share)

    @property
    def block_tokens(self) -> int:
        """Tokens of one KV block."""
        return self.kv.block_tokens

    def tokens_left(self) -> float:
        """Prompt and output tokens still to process: running sequences plus the queue."""
        return self.slots.tokens_left + self.waiting.tokens

    def kv_headroom(self) -> float:
        """Free KV blocks after the queue's prompts are admitted (negative: oversubscribed)."""
        kv = self.kv
        demand = sum(
            kv.blocks_of(r.input_tokens + r.generated) + kv.window_blocks(r.input_tokens + r.output_tokens)
            for r in self.waiting
        )
        return kv.available - demand

    def has_room(self) -> bool:
        """A slot and some KV are free: an arrival might join at the next step."""
        return self.slots.count < self.slots.capacity and self.kv.available > 0

    def enqueue(self, request: Request) -> None:
        """A request arrives at the replica."""
        self.waiting.append(request)

    def plan(self, now: float) -> Plan:  # pragma: no cover - abstract
        """Form the next iteration: admit what fits, choose each slot's new tokens (an empty plan
        with sequences running: the replica calls :meth:`preempt` and asks again)."""
        raise NotImplementedError

    def planned(self, new_tokens: dict[int, float]) -> Plan:
        """The plan of these new tokens (by slot, each > 0); a plan that runs takes the swaps charged so far."""
        planned_tokens = 0.0
        for tokens in new_tokens.values():  # a compiled loop: sum() of a view is a Python call
            planned_tokens += tokens
        budget_left = self.max_batched_tokens - int(planned_tokens)
        s = self.slots
        plan = Plan(new_tokens, s.table, s.count, self.window, budget_left, self._swapped_blocks)
        if not plan.empty:
            self._swapped_blocks = 0.0
        return plan

    def can_admit(self, budget_tokens: int, first_prefill: bool = True) -> bool:
        """The head of the queue could join an iteration with ``budget_tokens`` of budget left now
        (``first_prefill``: no other prompt is in that iteration yet)."""
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
        """1 when a waiting request could join the next step; else to the first completion, or
        the last step whose new blocks are all available."""
        if self.can_admit(plan.budget_left):
            return 1
        fewest_left = math.inf  # tokens the first sequence to finish has left (min() is a Python call)
        for state in plan.states:
            if state.out_left < fewest_left:
                fewest_left = state.out_left
        k_done = int(fewest_left)
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
        self._first_tokens(finished, now)
        s.tokens_left -= tokens
        allocated = self.kv.allocate(int(grown))
        assert allocated, "an iteration's blocks are sized to those available when it is planned"
        return Applied(decode_emitted, tokens, self._complete(plan))

    def _first_tokens(self, slots: list[int], now: float) -> None:
        """These slots' prompts are all in KV: they decode from now on, their first token out at ``now``."""
        s = self.slots
        for slot in slots:
            s.prefilled(slot)
            request = s.table[slot].request
            if request is not None and math.isnan(request.first_token_s):
                request.first_token_s = now

    def _complete(self, plan: Plan) -> list[Request]:
        """Release the planned slots that emitted their last token; their requests, in slot order."""
        completed = []
        for slot, state in zip(plan.ids, plan.states):
            if state.out_left <= 0:
                request = self._release(slot)
                request.generated = request.output_tokens
                completed.append(request)
        return completed

    # -- for the policies built on it, and their helpers ---------------------------------------------
    def grow(self, slot_ids: Sequence[int], new_tokens: float) -> bool:
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

    def schedule_prefills(self, q: dict[int, float], budget: int, now: float) -> int:
        """Continue unfinished prefills (admission order), then admit new requests (FCFS)."""
        s = self.slots
        first = True  # no prefill in this iteration yet
        for slot in list(s.prefilling):
            if budget <= 0:
                return budget
            chunk = self._chunk(s.table[slot].prompt_left, budget, first)
            if chunk <= 0 or not self.grow([slot], chunk):
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
            grown = self._reserve(slot, held) if self.reserve_full else self.grow([slot], new)
            assert window and grown, "admission is sized to the blocks available"
            q[slot] = new
            budget -= int(new)
        return budget

    def prefill_pending(self) -> bool:
        """A prompt is being prefilled, or the head of the queue could be admitted."""
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
