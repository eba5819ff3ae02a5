r"""One serving replica: a SimPy process that keeps time while its batching policy forms batches.

Each iteration costs the cost model's time for its batch (``iteration``, micro-batch pipelining
included), plus the time its KV tiers give the swaps the plan carries
(:meth:`~simulator.engine.kv.tiers.KVTiers.swap_s`) and, with speculative decoding, the draft's
``gamma`` passes over the decoding sequences (the cost model's ``draft_s``). A batch of pure
decodes that nothing can join (no prefill pending, nobody admissible) *jumps*: it runs the next
``k`` steps waiting on one event, where ``k`` runs to the first completion or the first block
shortage (the policy says), their per-step times costed without an iteration each
(``decode_steps``). The blocks the steps fill are taken when the jump ends, for the steps actually
run. While a slot and some KV are free, an arrival cuts the jump at the end of the step in
progress, exactly as iteration-level batching would admit it there: the replica's wait moves
from the jump's end to a timeout at that step's end (the callbacks of the one move to the other,
so a cut costs one event, and the jump's own end fires later with nobody waiting on it). Most such
jumps are cut early, so their steps are costed a chunk at a time (:data:`FIRST_CHUNK_STEPS`, then
:data:`CHUNK_GROWTH` times as many in all at each chunk's end reached uncut, one event each); the
end of the last chunk is the end the jump would have had costed at once (the same running sum),
and so are every step's time, the records and the totals (``tests/engine/test_jumps.py``).

Speculative decoding: each decoding sequence of a verify pass emits ``1 + j`` tokens, ``j`` the
drafts accepted before the first rejection (position ``i`` accepted with the cost model's
``accepted[i]``; :func:`~simulator.analytic.speculation.draw_emitted`); the recorder counts the
draws of the verify passes that end after the warm-up (:meth:`Recorder.verified`).

Arrival hooks: a request routed here :meth:`~Replica.arrive`\ s; its prefix blocks found in the
KV tiers below start their load then (:meth:`~simulator.engine.kv.tiers.KVTiers.fetch`), and it
reaches the queue after the network, a hosted API's front end and that load, when the loaded
blocks land in the serving tier (:meth:`~simulator.engine.kv.tiers.KVTiers.land`).

Failures (:mod:`simulator.engine.failures`): :meth:`Replica.fail` hands back every request the
replica held and gives it an empty policy (its KV is gone); the iteration or jump in progress
ends at once without applying (its ``epoch`` moved on; one event), and the replica is down
until ``up_at``: a request reaching it meanwhile is handed to ``on_lost`` as well. A straggler's
steps take ``slowdown`` times as long.

The second token: a request whose first token came (its prompt's last chunk ran) waits for its
second; it gets it at the end of the next iteration that emits for it (its first decode step,
or the end of a re-run prompt after a preemption), or at the end of the first step of a jump.
Only the iterations that finish a prompt, or run while some request waits for its second token,
look at their sequences for it, so the engine keeps one timestamp per request, none per token.

Recording: with the recorder's ``details`` off (a run that records only its tasks, as a plan's
runs do where their verdicts read nothing else) the replica records no levels, token spans,
inter-token gaps, second tokens, FLOPs, bytes or busy time; it runs the same steps.
"""

from __future__ import annotations

from collections.abc import Callable
from math import ceil, fsum

import numpy as np
import simpy

from simulator.analytic.speculation import draw_emitted, tokens_per_verify
from simulator.analytic.step_fast import EngineCost, StretchedSteps
from simulator.engine import ProcessGenerator
from simulator.engine.batching.paged import PagedBatching
from simulator.engine.batching.protocol import Plan
from simulator.engine.kv.tiers import KVTiers
from simulator.engine.recorder import Recorder
from simulator.engine.request import Request

#: Steps of a jump an arrival may cut costed at first, and the growth of the steps costed when the
#: jump reaches their end uncut. On ``scenarios/plan-coding-agents.yaml`` over half the steps its
#: jumps costed were never run (an arrival cut them: a jump ran ~50 of ~110); costing 96 steps
#: first, then twice as many in all each time, leaves ~30 % of the costed steps unrun, for one event
#: more every ~6 jumps.
FIRST_CHUNK_STEPS = 96
CHUNK_GROWTH = 2.0


class Replica:
    """Runs iterations of ``policy``'s batches for ``cost`` seconds each, and records them;
    ``tiers`` (if any) hold KV below the serving tier and time the moves to and from them."""

    def __init__(
        self,
        env: simpy.Environment,
        index: int,
        cost: EngineCost,
        policy: PagedBatching,
        recorder: Recorder,
        rng: np.random.Generator,
        on_complete: Callable[[Request], None],
        tiers: KVTiers | None = None,
    ) -> None:
        self.env, self.index, self.cost, self.policy, self.recorder = env, index, cost, policy, recorder
        self.rng = rng
        self.on_complete = on_complete
        self.tiers = tiers
        self._wake: simpy.Event | None = None  # what an arrival triggers while the replica sleeps
        self._cuttable: Jump | None = None  # the jump in progress, until it ends or an arrival cuts it
        self.in_transit, self.in_transit_tokens, self.in_transit_blocks = 0, 0.0, 0.0
        self.watchers: list[set[int]] = []  # routers' sets of replicas whose load may have changed
        self.up_at = 0.0  # down before this time (failures)
        self.epoch = 0  # failures so far: a step begun in an earlier epoch is void
        self.slowdown = 1.0  # step time multiplier (a straggler's > 1)
        self.stepping = False  # an iteration or jump is in progress
        self._step: simpy.Event | None = None  # what the process waits on while stepping (failures end it early)
        self.on_lost: Callable[[Request], None] | None = None  # takes the requests a failure loses
        self._awaiting: set[Request] = set()  # requests with a first token here and no second yet
        self.first_chunk_steps = FIRST_CHUNK_STEPS  # steps of a jump an arrival may cut costed at first
        self.details = recorder.details  # levels, tokens, gaps, second tokens and work recorded (or only tasks)

    def _load_changed(self) -> None:
        for changed in self.watchers:
            changed.add(self.index)

    # -- entry from the router -----------------------------------------------------------------
    @property
    def block_tokens(self) -> int:
        return self.policy.block_tokens

    def blocks_for(self, tokens: float) -> float:
        """KV blocks ``tokens`` of context take here: ``ceil(tokens / block_tokens)``."""
        return float(ceil(tokens / self.policy.block_tokens))

    def arrive(self, request: Request, delay_s: float) -> None:
        """A request routed here reaches the queue ``delay_s`` from now (the network, a hosted API's
        front end) plus the load of its prefix blocks found in the KV tiers below, if any."""
        load_s = self.tiers.fetch(request, self.env.now) if self.tiers is not None else 0.0
        if request.one_way_s > 0:
            self._reserve(request)  # load-aware routers see it while it crosses the network
        delay_s += load_s
        if delay_s > 0:
            self.env.timeout(delay_s).callbacks.append(lambda _: self._land(request))
        else:
            self.submit(request)

    def _land(self, request: Request) -> None:
        """The request reaches the queue, its prefix blocks loaded from below (if any) landed."""
        if self.tiers is not None:
            self.tiers.land(request, self.env.now)
        self.submit(request)

    def _reserve(self, request: Request) -> None:
        """A request routed here that is still crossing the network (counted by the load views)."""
        self.in_transit += 1
        self.in_transit_tokens += request.input_tokens + request.output_tokens
        self.in_transit_blocks += self.blocks_for(request.input_tokens)
        self._load_changed()

    def submit(self, request: Request) -> None:
        if request.one_way_s > 0:  # it was reserved when routed
            self.in_transit -= 1
            self.in_transit_tokens -= request.input_tokens + request.output_tokens
            self.in_transit_blocks -= self.blocks_for(request.input_tokens)
        if self.env.now < self.up_at and self.on_lost is not None:  # it failed while the request was on its way
            self._load_changed()
            self.on_lost(request)
            return
        request.replica = self.index
        self.policy.enqueue(request)
        self._load_changed()
        now = self.env.now
        if self.details:
            self.recorder.queue[self.index].record(now, self.policy.queued)
        if self._wake is not None:
            _trigger(self._wake)
        elif self._cuttable is not None:  # the first arrival cuts it
            self._step = self._cuttable.cut_at(self.env, now)
            self._cuttable = None

    @property
    def outstanding(self) -> int:
        """Requests on their way, queued or running here (for routing)."""
        return self.in_transit + self.policy.queued + self.policy.running

    @property
    def outstanding_tokens(self) -> float:
        """Prompt and output tokens still to process here: queued requests plus running slots."""
        return self.policy.tokens_left() + self.in_transit_tokens

    @property
    def kv_headroom(self) -> float:
        """Free KV blocks after the queue's prompts are admitted (negative: oversubscribed)."""
        return self.policy.kv_headroom() - self.in_transit_blocks

    def _sleep(self) -> ProcessGenerator:
        """Wait for an arrival (:meth:`submit` triggers the event)."""
        self._wake = self.env.event()
        yield self._wake
        self._wake = None

    # -- the process ---------------------------------------------------------------------------
    def run(self) -> ProcessGenerator:
        while True:
            policy = self.policy  # a new one after a failure
            self._load_changed()  # the iteration that ended (or a preemption) changed it
            if policy.running == 0 and policy.queued == 0:
                yield from self._sleep()
                continue
            now = self.env.now
            plan = policy.plan(now)
            self._load_changed()  # admissions
            self._record_queue(now)
            if plan.empty:
                if policy.running == 0 or not policy.preempt():
                    yield from self._sleep()
                continue
            steps = self._unchanged_steps(plan)
            if steps > 1:
                yield from self._jump(plan, steps, now)
            else:
                yield from self._iterate(plan, now)

    def _unchanged_steps(self, plan: Plan) -> int:
        """Steps the planned batch runs as it is: 1 unless it only decodes and nothing can join."""
        if self.cost.accepted or plan.swapped_blocks or not plan.all_decoding:
            return 1
        return self.policy.unchanged_steps(plan)

    def _record_queue(self, now: float) -> None:
        if not self.details:
            return
        self.recorder.queue[self.index].record(now, self.policy.queued)
        self.recorder.kv_blocks[self.index].record(now, self.policy.kv_used)

    def _iterate(self, plan: Plan, start: float) -> ProcessGenerator:
        duration, flops, bytes_moved = self.cost.iteration(plan.shape)
        if plan.swapped_blocks and self.tiers is not None:
            duration += self.tiers.swap_s(plan.swapped_blocks)
        accepted, decodes = self.cost.accepted, plan.decodes
        if accepted and decodes:
            duration += self.cost.draft_s(plan.decode_context)
        if self.slowdown != 1.0:
            duration *= self.slowdown
        details = self.details
        if details:
            self.recorder.batch[self.index].record(start, float(plan.running))
            self.recorder.iteration(self.index, duration, flops, bytes_moved)
            per_decode = tokens_per_verify(accepted) if accepted else 1.0
            expected_output = plan.first_tokens + float(decodes) * per_decode
            self.recorder.tokens[self.index].span(start, start + duration, expected_output, plan.prefill_tokens)
        epoch, self.stepping = self.epoch, True
        step = self._step = self.env.timeout(duration)
        yield step
        self.stepping = False
        if self.epoch != epoch:  # the replica failed during the iteration: nothing it did stands
            return
        now = self.env.now
        stamped = details and (bool(self._awaiting) or not plan.all_decoding)
        firsts, seconds = self._emitting(plan) if stamped else ([], [])
        if accepted and decodes:
            drawn = draw_emitted(self.rng, accepted, decodes)
            if details and now >= self.recorder.warmup_s:
                self.recorder.verified(len(accepted), drawn)
            applied = self.policy.apply(plan, now, drawn.tolist())
            emitted = applied.decode_tokens
            if details:
                self.recorder.inter_token([duration / tokens for tokens in emitted], emitted)
        else:  # one token per decode: as many gaps of the iteration's duration
            applied = self.policy.apply(plan, now, [1.0] * decodes)
            if details and decodes:
                self.recorder.inter_token_gaps(duration, float(decodes))
        if details:
            self.recorder.tokens[self.index].amend(now, applied.tokens)
            self._stamp(firsts, seconds, now)
        self._complete(applied.completed, now)

    def _emitting(self, plan: Plan) -> tuple[list[Request], list[Request]]:
        """The planned iteration's requests that will emit their first token (their prompt's last
        chunk runs) and those that will emit their second (waiting for it, and decoding or
        finishing a re-run prompt)."""
        awaiting = self._awaiting
        firsts: list[Request] = []
        seconds: list[Request] = []
        for state, new, decoding in zip(plan.states, plan.new, plan.decoding, strict=True):
            request = state.request
            if request is None:
                continue
            if request in awaiting:
                if decoding or state.prompt_left <= new:
                    seconds.append(request)
            elif not decoding and state.prompt_left <= new:
                firsts.append(request)
        return firsts, seconds

    def _stamp(self, firsts: list[Request], seconds: list[Request], now: float) -> None:
        """Second tokens emitted at ``now``; first tokens emitted at ``now`` wait for their second."""
        for request in seconds:
            request.second_token_s = now
            self._awaiting.discard(request)
        for request in firsts:
            if request.output_tokens > 1 and request.first_token_s == now:
                self._awaiting.add(request)

    def _jump(self, plan: Plan, steps: int, start: float) -> ProcessGenerator:
        env = self.env
        costs = self.cost.decode_steps(plan.context, steps, plan.window)
        if self.slowdown != 1.0:
            costs = StretchedSteps(costs, self.slowdown)
        # Any arrival might join at the next step boundary (a higher priority may jump the queue),
        # so an arrival cuts the jump (submit) whenever a slot and some KV are free, exactly as
        # stepping would; such a jump is costed a chunk of steps at a time (most are cut early).
        cuttable = self.policy.has_room()
        costs.extend(self.first_chunk_steps if cuttable else steps)
        durations = costs.total_s
        details = self.details
        batch = float(plan.decodes)
        tokens = self.recorder.tokens[self.index]
        if details:
            self.recorder.batch[self.index].record(start, float(plan.running))
            tokens.span(start, start + costs.elapsed_s, len(durations) * batch, 0.0)
        end = self._step = env.timeout(costs.elapsed_s)
        epoch, self.stepping = self.epoch, True
        if cuttable:
            jump = self._cuttable = Jump(start, durations, costs.elapsed_s, end)
            while True:
                yield jump.end  # the end of the steps costed so far, or of the step an arrival came in
                if self.epoch != epoch:  # the replica failed during the jump: nothing it did stands
                    self.stepping = False
                    return
                if jump.cut or len(durations) == steps:
                    break
                costs.extend(ceil(len(durations) * CHUNK_GROWTH))
                jump.done, jump.elapsed_s = len(durations), costs.elapsed_s
                if details:
                    tokens.amend(start + costs.elapsed_s, len(durations) * batch)
                # at start + elapsed to the last bit: the delay's two roundings cancel (a tie in
                # both could leave it an ulp off, where no delay reaches it)
                jump.end = self._step = env.timeout(start + costs.elapsed_s - env.now)
            self.stepping = False
            self._cuttable = None
            done = jump.done
            if details and done < steps:
                tokens.amend(start + jump.elapsed_s, done * batch)
        else:
            yield end
            self.stepping = False
            if self.epoch != epoch:
                return
            done = steps
        now = env.now
        if self._awaiting:  # their second token came at the end of the jump's first step
            self._stamp([], self._emitting(plan)[1], start + durations[0])
        applied = self.policy.apply(plan, now, [float(done)] * plan.decodes)
        if details:
            flops, bytes_moved = costs.work().totals(done)
            self.recorder.iteration(self.index, fsum(durations[:done]), flops, bytes_moved, done)
            self.recorder.inter_token_steps(durations, done, batch)
        self._complete(applied.completed, now)

    def fail(self, policy: PagedBatching, up_at: float) -> list[Request]:
        """Fail now, down until ``up_at`` with the empty ``policy``: the requests it held (queued
        first, then running), its KV gone; the step in progress ends at its boundary, void."""
        now = self.env.now
        held = self.policy.held()
        self._awaiting.clear()  # their second tokens will come from another replica, if any
        self.policy, self.up_at, self.epoch = policy, up_at, self.epoch + 1
        self._cuttable = None
        if self.stepping and self._step is not None:  # the step ends now, void; its tokens were never delivered
            ended = self.env.timeout(0.0)
            ended.callbacks, self._step.callbacks = self._step.callbacks, []
            if self.details:
                self.recorder.tokens[self.index].amend(now, 0.0)
        self._record_queue(now)
        if self.details:
            self.recorder.batch[self.index].record(now, 0.0)
        self._load_changed()
        return held

    def _complete(self, completed: list[Request], now: float) -> None:
        for request in completed:
            self.on_complete(request)
        if self.details:
            self.recorder.kv_blocks[self.index].record(now, self.policy.kv_used)
            self.recorder.batch[self.index].record(now, float(self.policy.running))


class Jump:
    """A decode jump in progress: its start, the seconds of its steps costed so far, the timeout of
    their end, the steps it runs (those costed, unless an arrival cut it) and their seconds (added
    left to right, as the replica's clock waits for them: :func:`~simulator.analytic.step_fast.running_sum`)."""

    def __init__(self, start: float, durations: list[float], elapsed_s: float, end: simpy.Timeout) -> None:
        self.start, self.durations, self.end = start, durations, end
        self.done, self.elapsed_s = len(durations), elapsed_s
        self.cut = False

    def cut_at(self, env: simpy.Environment, now: float) -> simpy.Timeout:
        """End the jump with the step in progress at ``now`` (the first whose end is not before
        ``now``): whoever waits on the jump's end is moved to a timeout at that step's end (at once
        when it has just ended), which is returned."""
        since = now - self.start
        elapsed, done = 0.0, 0
        for step_s in self.durations:
            elapsed += step_s
            done += 1
            if elapsed >= since:
                break
        self.done, self.elapsed_s, self.cut = done, elapsed, True
        boundary = env.timeout(max(self.start + elapsed - now, 0.0))
        boundary.callbacks, self.end.callbacks = self.end.callbacks, []
        return boundary


def _trigger(event: simpy.Event) -> None:
    """Succeed ``event`` unless something already did."""
    if not event.triggered:
        event.succeed()
