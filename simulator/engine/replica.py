"""One serving replica: a SimPy process that runs scheduler iterations.

Each iteration costs ``StepCostModel.iteration_times`` of its batch (micro-batch pipelining
included) plus, with speculative decoding, ``gamma * draft_step_fraction`` decode passes of
the draft. A batch of pure decodes that nothing can join (no prefill pending, nobody
admissible) *jumps*: the per-step times of the next ``k`` steps are computed at once and the
replica waits once, where ``k`` runs to the first completion or the first block shortage. The
blocks the steps fill are allocated when the jump ends, for the steps actually run. While a
slot and some KV are free, an arrival interrupts the jump at the end of the step in progress,
exactly as iteration-level batching would admit it there.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import simpy

from simulator.analytic.step_time import BatchAggregates, StepCostModel
from simulator.config.deployment import SpeculativeSpec
from simulator.engine import ProcessGenerator
from simulator.engine.recorder import Recorder
from simulator.engine.request import Request
from simulator.engine.scheduler import BatchPolicy, Plan, Slots

FloatArray = np.ndarray


def speculative_emitted(rng: np.random.Generator, spec: SpeculativeSpec, n: int) -> FloatArray:
    """Tokens one verify pass emits per sequence: 1 + accepted drafts before the first rejection.

    ``P(1 + j) = alpha^j (1 - alpha)`` for ``j < gamma`` and ``P(1 + gamma) = alpha^gamma``,
    whose mean is ``(1 - alpha^(gamma+1)) / (1 - alpha)``.
    """
    accepted = rng.geometric(1.0 - spec.acceptance_rate, n) - 1 if spec.acceptance_rate > 0 else np.zeros(n)
    return 1.0 + np.minimum(accepted, spec.tokens_proposed)


class Replica:
    def __init__(
        self,
        env: simpy.Environment,
        index: int,
        cost: StepCostModel,
        policy: BatchPolicy,
        recorder: Recorder,
        rng: np.random.Generator,
        on_complete: Callable[[Request], None],
        swap_s_per_block: float = 0.0,
    ) -> None:
        self.env, self.index, self.cost, self.policy, self.recorder = env, index, cost, policy, recorder
        self.slots: Slots = policy.slots
        self.rng = rng
        self.on_complete = on_complete
        self.swap_s_per_block = swap_s_per_block
        self.speculative = cost.deployment.speculative
        self.window = cost.deployment.model.attention.sliding_window
        self._wake: simpy.Event | None = None
        self.in_transit, self.in_transit_tokens, self.in_transit_blocks = 0, 0.0, 0.0

    # -- entry from the router -----------------------------------------------------------------
    def reserve(self, request: Request) -> None:
        """A request routed here that is still crossing the network (counted by the load views)."""
        self.in_transit += 1
        self.in_transit_tokens += request.input_tokens + request.output_tokens
        self.in_transit_blocks += float(self.policy.kv.blocks_for(request.input_tokens))

    def submit(self, request: Request) -> None:
        if request.one_way_s > 0:  # it was reserved when routed
            self.in_transit -= 1
            self.in_transit_tokens -= request.input_tokens + request.output_tokens
            self.in_transit_blocks -= float(self.policy.kv.blocks_for(request.input_tokens))
        request.replica = self.index
        self.policy.waiting.append(request)
        self.recorder.queue[self.index].record(self.env.now, len(self.policy.waiting))
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    @property
    def outstanding(self) -> int:
        """Requests on their way, queued or running here (for routing)."""
        return self.in_transit + len(self.policy.waiting) + self.slots.count

    @property
    def outstanding_tokens(self) -> float:
        """Prompt and output tokens still to process here: queued requests plus running slots."""
        s = self.slots
        running = float((s.prompt_left[s.active] + s.out_left[s.active]).sum())
        queued = sum(r.input_tokens + r.output_tokens - r.generated for r in self.policy.waiting)
        return running + queued + self.in_transit_tokens

    @property
    def kv_headroom(self) -> float:
        """Free KV blocks after the queue's prompts are admitted (negative: oversubscribed)."""
        kv = self.policy.kv
        demand = sum(float(kv.blocks_for(r.input_tokens + r.generated)) for r in self.policy.waiting)
        return kv.available - demand - self.in_transit_blocks

    def _sleep(self) -> simpy.Event:
        self._wake = self.env.event()
        return self._wake

    # -- the process ---------------------------------------------------------------------------
    def run(self) -> ProcessGenerator:
        env = self.env
        while True:
            if self.slots.count == 0 and not self.policy.waiting:
                yield self._sleep()
                continue
            plan = self.policy.plan(env.now)
            self._record_queue()
            if not plan.scheduled.any():
                if self.slots.count == 0 or not self.policy._preempt_latest():
                    yield self._sleep()
                continue
            steps = self._jump_steps(plan) if self.policy.swapped_blocks == 0 else 1
            if steps > 1:
                yield from self._jump(plan, steps)
            else:
                yield from self._iterate(plan)

    def _record_queue(self) -> None:
        self.recorder.queue[self.index].record(self.env.now, len(self.policy.waiting))
        self.recorder.kv_blocks[self.index].record(self.env.now, self.policy.kv.used)

    def _iterate(self, plan: Plan) -> ProcessGenerator:
        start = self.env.now
        s = self.slots
        on = plan.scheduled
        times = self.cost.iteration_times(self.policy.aggregates(plan))
        duration = float(times.total_s[0]) + self._take_swap_s()
        decoding = on & (s.prompt_left == 0)
        spec = self.speculative
        if spec is not None and decoding.any():
            draft = BatchAggregates.of(np.ones(int(decoding.sum())), s.context[decoding], self.window)
            duration += (
                spec.tokens_proposed * spec.draft_step_fraction * float(self.cost.iteration_times(draft).total_s[0])
            )
        self.recorder.batch[self.index].record(start, float(s.count))
        self.recorder.iteration(self.index, np.array([duration]), times.flops, times.bytes_moved)
        prefill_tokens = float(np.where(on & ~decoding, plan.new_tokens, 0.0).sum())
        first_tokens = float((on & ~decoding & (s.prompt_left <= plan.new_tokens)).sum())
        expected_output = first_tokens + (float(decoding.sum()) * (self._mean_emitted() if spec else 1.0))
        self.recorder.tokens[self.index].span(start, start + duration, expected_output, prefill_tokens)
        yield self.env.timeout(duration)
        self._apply_iteration(plan, duration, decoding)

    def _take_swap_s(self) -> float:
        """Seconds of KV swapped out and in by the plan just made (it blocks the iteration)."""
        blocks, self.policy.swapped_blocks = self.policy.swapped_blocks, 0.0
        return blocks * self.swap_s_per_block

    def _mean_emitted(self) -> float:
        spec = self.speculative
        assert spec is not None
        alpha, gamma = spec.acceptance_rate, spec.tokens_proposed
        return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)

    def _apply_iteration(self, plan: Plan, duration: float, decoding: np.ndarray) -> None:
        s, now = self.slots, self.env.now
        on = plan.scheduled
        prefilled = np.where(on & ~decoding, plan.new_tokens, 0.0)
        s.prompt_left -= prefilled
        s.context += prefilled
        self.policy.publish_prefilled(np.flatnonzero(prefilled > 0))
        finished_prefill = on & ~decoding & (s.prompt_left == 0)
        emitted = np.zeros(s.capacity)
        emitted[finished_prefill] = 1.0
        n_decoding = int(decoding.sum())
        if n_decoding:
            if self.speculative is not None:
                emitted[decoding] = speculative_emitted(self.rng, self.speculative, n_decoding)
            else:
                emitted[decoding] = 1.0
        emitted = np.minimum(emitted, s.out_left)
        s.context[decoding] += emitted[decoding]
        s.out_left -= emitted
        for slot in np.flatnonzero(finished_prefill):
            request = s.requests[slot]
            if request is not None and math.isnan(request.first_token_s):
                request.first_token_s = now
        if n_decoding:
            per_token = emitted[decoding]
            self.recorder.inter_token(duration / per_token, per_token)
        self.recorder.tokens[self.index].amend(now, float(emitted.sum()))
        self._complete(on)

    def _jump_steps(self, plan: Plan) -> int:
        """Steps this batch can run unchanged: to the first completion or block shortage."""
        s, policy = self.slots, self.policy
        on = plan.scheduled
        if (
            self.speculative is not None
            or not np.all(s.prompt_left[on] == 0)
            or (policy.waiting and policy._admissible(policy.max_batched_tokens - int(on.sum())))
        ):
            return 1
        k_done = int(s.out_left[on].min())
        if k_done <= 1:
            return 1
        context, blocks = s.context[on], s.blocks[on]

        def extra_blocks(k: int) -> float:
            return float(np.maximum(policy.kv.blocks_for(context + k) - blocks, 0.0).sum())

        if extra_blocks(k_done) <= policy.kv.available:
            return k_done
        low, high = 1, k_done  # extra_blocks(low) <= free < extra_blocks(high)
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if extra_blocks(mid) <= policy.kv.available else (low, mid)
        return low

    def _decode_times(self, context: np.ndarray, steps: int) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Per-step seconds of ``steps`` decode steps of a fixed batch (step j: context + j)."""
        n = float(context.size)
        j = np.arange(steps, dtype=np.float64)
        held = context.sum() + n * (j + 1.0)
        if self.window is None:
            held_window = held
        else:
            w = float(self.window)
            small = context[context + 1.0 < w]
            held_window = w * (context.size - small.size) + np.minimum(small[None, :] + 1.0 + j[:, None], w).sum(axis=1)
        batch = BatchAggregates(
            tokens=np.full(steps, n),
            sequences=np.full(steps, n),
            held_full=held,
            held_window=np.asarray(held_window, dtype=np.float64),
            pairs_full=held,
            pairs_window=np.asarray(held_window, dtype=np.float64),
        )
        times = self.cost.iteration_times(batch)
        return times.total_s, times.flops, times.bytes_moved

    def _jump(self, plan: Plan, steps: int) -> ProcessGenerator:
        env, s, policy = self.env, self.slots, self.policy
        on = plan.scheduled
        start = env.now
        durations, flops, bytes_moved = self._decode_times(s.context[on], steps)
        cumulative = np.cumsum(durations)
        self.recorder.batch[self.index].record(start, float(s.count))
        batch = float(on.sum())
        self.recorder.tokens[self.index].span(start, start + float(cumulative[-1]), steps * batch, 0.0)
        # Any arrival might join at the next step boundary (a higher priority may jump the queue),
        # so the jump stops for one whenever a slot and some KV are free, exactly as stepping would.
        interruptible = s.count < s.capacity and policy.kv.available > 0
        if interruptible:
            yield env.timeout(float(cumulative[-1])) | self._sleep()
            self._wake = None
            done = int(np.searchsorted(cumulative, env.now - start, side="left")) + 1
            done = min(done, steps)
            remaining = start + float(cumulative[done - 1]) - env.now
            if done < steps:
                self.recorder.tokens[self.index].amend(start + float(cumulative[done - 1]), done * batch)
            if remaining > 0:
                yield env.timeout(remaining)
        else:
            yield env.timeout(float(cumulative[-1]))
            done = steps
        # blocks for the steps actually run (the jump was sized so that they are available)
        need = np.maximum(policy.kv.blocks_for(s.context[on] + done) - s.blocks[on], 0.0)
        allocated = policy.kv.allocate(int(need.sum()))
        assert allocated, "a jump is sized to the blocks available"
        s.blocks[on] += need
        self.recorder.iteration(self.index, durations[:done], flops[:done], bytes_moved[:done])
        s.context[on] += done
        s.out_left[on] -= done
        self.recorder.inter_token(durations[:done], batch)
        self._complete(on)

    def _complete(self, candidates: np.ndarray) -> None:
        s, now = self.slots, self.env.now
        for slot in np.flatnonzero(candidates & s.active & (s.out_left <= 0)):
            request = self.policy.release(int(slot))
            request.generated = request.output_tokens
            self.on_complete(request)
        self.recorder.kv_blocks[self.index].record(now, self.policy.kv.used)
        self.recorder.batch[self.index].record(now, float(s.count))
