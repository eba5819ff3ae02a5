"""The step-time model of :mod:`simulator.analytic.step_time`, evaluated the fast way for the engine.

Same physics, same numbers (to floating-point rounding; a test holds both equal on random
batches of dense, MoE, windowed, layer-pipelined and speculative deployments): only the
order of the arithmetic differs. Of the operator table of
:meth:`~simulator.analytic.step_time.StepCostModel.pass_times`, only the attention core
(full and windowed layers) depends on the tokens a batch *holds*; every other term (weights,
projections, FFN and MoE rows, LM head, all-reduces, all-to-alls, pipeline hops, fabric,
fixed latency) and the micro-batch count ``m = clip(tokens, 1, stages)`` depend on the
batch's ``tokens`` and ``sequences`` alone. So for one iteration

    total(batch) = base(tokens, sequences) + sum_row count_row * overlap(mem_row, comp_row)

with ``mem = (held / (m dp) + tokens / (m dp)) * kv_s_per_token``, ``comp = pairs / (m dp) *
s_per_pair`` and ``overlap`` the hardware's roofline (``max``, or the ``p``-norm), where
``base`` is the reference model's iteration at zero held tokens minus its attention-core
rows there (``mem = tokens / (m dp) * kv_s_per_token``, ``comp = 0``). ``base`` is computed
once per ``(tokens, sequences)`` by the reference model itself and cached (a bounded cache:
a decode batch of ``n`` sequences is one key for every step it runs); the held-dependent
rows are a handful of array operations. FLOPs and bytes split the same way, and are affine
in ``pairs`` and ``held``. The draft of speculative decoding is its own fast model.

The engine costs one iteration in plain floats (:meth:`FastStepCost.iteration` of a
:class:`~simulator.analytic.step_time.BatchShape`) and a decode jump as arrays, straight from
its sequences' contexts (:meth:`FastStepCost.decode_jump`); a cost model that is not the reference one (a test
double, another execution style) is used through its array interface (:class:`ArrayCost`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from simulator.analytic.step_time import (
    BatchAggregates,
    BatchShape,
    CostModel,
    IterationCost,
    StepCostModel,
    decode_held,
)

FloatArray = npt.NDArray[np.float64]
Number = float | FloatArray  # one iteration, or the steps of a jump

#: Distinct (tokens, sequences) shapes kept; the cache is cleared when it fills (memory stays flat).
BASE_CACHE_SIZE = 1 << 16


class IterationTimes(NamedTuple):
    """Seconds between iterations, and the FLOPs and bytes all chips did, one entry per iteration."""

    total_s: FloatArray
    flops: FloatArray
    bytes_moved: FloatArray


class FastStepCost:
    """:class:`StepCostModel`'s ``iteration_times`` and ``draft_s``, evaluated as described above."""

    def __init__(self, reference: StepCostModel) -> None:
        self.reference = reference
        self.accepted = reference.accepted
        d = reference.deployment
        self.stages = reference.pipeline_stages
        self.dp = float(reference.dp)
        self.chips = float(d.tensor_parallel * reference.dp)
        self.p = reference.roofline_exponent
        self.kv_s_per_token = reference.kv_s_per_token
        self.count = (float(reference.op_count[1, 0]), float(reference.op_count[2, 0]))
        self.s_per_pair = (float(reference.op_compute_s_per_unit[1, 0]), float(reference.op_compute_s_per_unit[2, 0]))
        self.flop_rate = (float(reference.op_flop_rate[1, 0]), float(reference.op_flop_rate[2, 0]))
        self.bandwidth = reference.bandwidth
        self.draft = FastStepCost(reference.draft) if reference.draft is not None else None
        self.draft_window = reference.draft.deployment.model.attention.sliding_window if reference.draft else None
        self._base: dict[tuple[float, float], tuple[float, float, float]] = {}

    def _overlap(self, memory_s: Number, compute_s: Number) -> Number:
        """The roofline of one operator, on floats (one iteration) or arrays (a jump)."""
        p = self.p
        if p is None:
            return np.maximum(memory_s, compute_s) if isinstance(memory_s, np.ndarray) else max(memory_s, compute_s)
        return (memory_s**p + compute_s**p) ** (1.0 / p)

    def _micro_batches(self, tokens: float) -> float:
        return 1.0 if self.stages == 1 else min(max(tokens, 1.0), float(self.stages))

    def _base_of(self, tokens: float, sequences: float) -> tuple[float, float, float]:
        """(seconds, FLOPs, bytes) of an iteration of this shape, without its attention-core rows."""
        key = (tokens, sequences)
        hit = self._base.get(key)
        if hit is not None:
            return hit
        zero = np.zeros(1)
        batch = BatchAggregates(np.array([tokens]), np.array([sequences]), zero, zero, zero, zero)
        times = self.reference.iteration_times(batch)
        m = self._micro_batches(tokens)
        memory_s = tokens / m / self.dp * self.kv_s_per_token
        core_s = sum(self.count) * memory_s
        base = (
            float(times.total_s[0]) - core_s,
            float(times.flops[0]),
            float(times.bytes_moved[0]) - self.chips * self.bandwidth * core_s * m,
        )
        if len(self._base) >= BASE_CACHE_SIZE:
            self._base.clear()
        self._base[key] = base
        return base

    def iteration_times(self, batch: BatchAggregates) -> IterationTimes:
        """Seconds between iterations for each entry of ``batch``, with FLOPs and bytes (see module)."""
        tokens, sequences = batch.tokens, batch.sequences
        t0, s0 = float(tokens[0]), float(sequences[0])
        if tokens.size == 1:  # one iteration: scalars
            rows = [x.item() for x in (batch.held_full, batch.pairs_full, batch.held_window, batch.pairs_window)]
            return IterationTimes(*np.array(self._with_core(t0, s0, *rows))[:, None])
        if (tokens == t0).all() and (sequences == s0).all():  # one shape (a decode jump): arrays
            jump = self._with_core(t0, s0, batch.held_full, batch.pairs_full, batch.held_window, batch.pairs_window)
            return IterationTimes(*[np.asarray(x, dtype=np.float64) for x in jump])
        entries = zip(tokens.tolist(), sequences.tolist(), batch.held_full.tolist(), batch.pairs_full.tolist(),
                      batch.held_window.tolist(), batch.pairs_window.tolist(), strict=True)  # fmt: skip
        columns = zip(*[self._with_core(*e) for e in entries], strict=True)
        return IterationTimes(*[np.array(column) for column in columns])

    def decode_jump(self, context_tokens: Sequence[float], steps: int, window: int | None) -> IterationTimes:
        """:meth:`iteration_times` of ``steps`` decode steps of a fixed batch (:func:`decode_held`),
        without building the batch's aggregates."""
        n = float(len(context_tokens))
        held, held_window = decode_held(context_tokens, steps, window)
        jump = self._with_core(n, n, held, held, held_window, held_window)
        return IterationTimes(*[np.asarray(x, dtype=np.float64) for x in jump])

    def iteration(self, shape: BatchShape) -> tuple[float, float, float]:
        """(seconds, FLOPs, bytes) of one iteration, in plain floats."""
        one = self._with_core(shape.tokens, shape.sequences, shape.held_full, shape.pairs_full, shape.held_window,
                              shape.pairs_window)  # fmt: skip
        return float(one[0]), float(one[1]), float(one[2])

    def _with_core(
        self, tokens: float, sequences: float, held_full: Number, pairs_full: Number, held_window: Number,
        pairs_window: Number,
    ) -> tuple[Number, Number, Number]:  # fmt: skip
        """(seconds, FLOPs, bytes) of iterations of one shape: the cached base plus the attention core."""
        total: Number
        flops: Number
        moved: Number
        total, flops, moved = self._base_of(tokens, sequences)
        m = self._micro_batches(tokens)
        share = 1.0 / (m * self.dp)
        rank_tokens = tokens * share
        for row, (held, pairs) in enumerate(((held_full, pairs_full), (held_window, pairs_window))):
            count = self.count[row]
            if count == 0.0:
                continue
            memory_s = (held * share + rank_tokens) * self.kv_s_per_token
            compute_s = pairs * share * self.s_per_pair[row]
            total = total + count * self._overlap(memory_s, compute_s)
            flops = flops + self.chips * count * compute_s * self.flop_rate[row] * m
            moved = moved + self.chips * self.bandwidth * count * memory_s * m
        return total, flops, moved

    def draft_s(self, context_tokens: FloatArray) -> float:
        """Seconds of one step's ``gamma`` draft passes (0 without speculative decoding)."""
        if self.draft is None:
            return 0.0
        decode = BatchAggregates.of(np.ones(context_tokens.size), context_tokens, self.draft_window)
        return float(self.draft.iteration_times(decode).total_s[0]) * len(self.accepted)


class EngineCost(Protocol):
    """What a replica asks of its step-time model: :class:`~simulator.analytic.step_time.CostModel`
    plus one iteration in plain floats."""

    accepted: tuple[float, ...]

    def iteration(self, shape: BatchShape) -> tuple[float, float, float]:
        """(seconds, FLOPs, bytes) of one iteration of this shape."""
        ...

    def iteration_times(self, batch: BatchAggregates) -> IterationCost:
        """Seconds between iterations for each entry of ``batch``, with FLOPs and bytes."""
        ...

    def decode_jump(self, context_tokens: Sequence[float], steps: int, window: int | None) -> IterationCost:
        """:meth:`iteration_times` of ``steps`` decode steps of sequences holding ``context_tokens``."""
        ...

    def draft_s(self, context_tokens: FloatArray) -> float:
        """Seconds the draft takes to propose for decoding sequences holding ``context_tokens``."""
        ...


class ArrayCost:
    """Any :class:`~simulator.analytic.step_time.CostModel` as an :class:`EngineCost`: one iteration
    is a batch of one entry."""

    def __init__(self, cost: CostModel) -> None:
        self.cost = cost
        self.accepted = cost.accepted
        self.iteration_times = cost.iteration_times
        self.draft_s = cost.draft_s

    def decode_jump(self, context_tokens: Sequence[float], steps: int, window: int | None) -> IterationCost:
        return self.cost.iteration_times(BatchAggregates.decode_steps(context_tokens, steps, window))

    def iteration(self, shape: BatchShape) -> tuple[float, float, float]:
        times = self.cost.iteration_times(BatchAggregates(*np.array(shape, dtype=np.float64)[:, None]))
        return float(times.total_s[0]), float(times.flops[0]), float(times.bytes_moved[0])


def engine_cost(cost: CostModel) -> EngineCost:
    """The reference model through :class:`FastStepCost`; any other cost model as it is."""
    return FastStepCost(cost) if isinstance(cost, StepCostModel) else ArrayCost(cost)
