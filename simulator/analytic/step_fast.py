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
rows are a handful of float operations. FLOPs and bytes split the same way, and are affine
in ``pairs`` and ``held``. The draft of speculative decoding is its own fast model.

The engine costs one iteration in plain floats (:meth:`FastStepCost.iteration` of a
:class:`~simulator.analytic.step_time.BatchShape`) and a decode jump the same way, step by step,
straight from its sequences' contexts (:meth:`FastStepCost.decode_jump`): a few dozen float
operations per step, which compiled (:mod:`simulator.compiled`) cost less than one numpy call.
A cost model that is not the reference one (a test double, another execution style) is used
through its array interface (:class:`ArrayCost`).
"""

from __future__ import annotations

import math
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

#: Distinct (tokens, sequences) shapes kept; the cache is cleared when it fills (memory stays flat).
BASE_CACHE_SIZE = 1 << 16


class JumpTimes(NamedTuple):
    """Seconds, FLOPs and bytes of each step of a decode jump, as lists (one float per step)."""

    total_s: list[float]
    flops: list[float]
    bytes_moved: list[float]


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

    def _overlap(self, memory_s: float, compute_s: float) -> float:
        """The roofline of one operator: ``max``, or the ``p``-norm (``p = 2``: a square root of
        correctly rounded squares, as numpy evaluates ``x**2`` and ``x**0.5``; ``pow`` may round otherwise)."""
        p = self.p
        if p is None:
            return max(memory_s, compute_s)
        if p == 2.0:
            return math.sqrt(memory_s * memory_s + compute_s * compute_s)
        return float((memory_s**p + compute_s**p) ** (1.0 / p))

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
        statistics = zip(*[getattr(batch, name).tolist() for name in BatchShape._fields], strict=True)
        columns = zip(*[self.iteration(BatchShape(*shape)) for shape in statistics], strict=True)
        return IterationTimes(*[np.array(column, dtype=np.float64) for column in columns])

    def decode_jump(self, context_tokens: Sequence[float], steps: int, window: int | None) -> JumpTimes:
        """``steps`` decode steps of a fixed batch, step by step (:func:`decode_held`), without
        building the batch's aggregates."""
        n = float(len(context_tokens))
        base = self._base_of(n, n)
        held, held_window = decode_held(context_tokens, steps, window)
        total_s, flops, moved = [], [], []
        for step in range(steps):
            seconds, step_flops, step_moved = self._with_core(base, n, held[step], held[step], held_window[step],
                                                              held_window[step])  # fmt: skip
            total_s.append(seconds)
            flops.append(step_flops)
            moved.append(step_moved)
        return JumpTimes(total_s, flops, moved)

    def iteration(self, shape: BatchShape) -> tuple[float, float, float]:
        """(seconds, FLOPs, bytes) of one iteration, in plain floats."""
        base = self._base_of(shape.tokens, shape.sequences)
        return self._with_core(base, shape.tokens, shape.held_full, shape.pairs_full, shape.held_window,
                               shape.pairs_window)  # fmt: skip

    def _with_core(
        self, base: tuple[float, float, float], tokens: float, held_full: float, pairs_full: float,
        held_window: float, pairs_window: float,
    ) -> tuple[float, float, float]:  # fmt: skip
        """(seconds, FLOPs, bytes) of one iteration: its shape's ``base`` plus the attention core
        (the rows of all layers, then of the windowed ones)."""
        totals = base
        m = self._micro_batches(tokens)
        share = 1.0 / (m * self.dp)
        rank_tokens = tokens * share
        count_full, count_window = self.count
        pair_s_full, pair_s_window = self.s_per_pair
        rate_full, rate_window = self.flop_rate
        if count_full != 0.0:
            totals = self._plus_row(totals, count_full, pair_s_full, rate_full, held_full, pairs_full, share,
                                    rank_tokens, m)  # fmt: skip
        if count_window != 0.0:
            totals = self._plus_row(totals, count_window, pair_s_window, rate_window, held_window, pairs_window,
                                    share, rank_tokens, m)  # fmt: skip
        return totals

    def _plus_row(
        self, totals: tuple[float, float, float], count: float, s_per_pair: float, flop_rate: float, held: float,
        pairs: float, share: float, rank_tokens: float, m: float,
    ) -> tuple[float, float, float]:  # fmt: skip
        """``totals`` plus one attention-core row: ``count`` operators over ``held`` tokens and ``pairs``."""
        total, flops, moved = totals
        memory_s = (held * share + rank_tokens) * self.kv_s_per_token
        compute_s = pairs * share * s_per_pair
        return (
            total + count * self._overlap(memory_s, compute_s),
            flops + self.chips * count * compute_s * flop_rate * m,
            moved + self.chips * self.bandwidth * count * memory_s * m,
        )

    def draft_s(self, context_tokens: FloatArray) -> float:
        """Seconds of one step's ``gamma`` draft passes (0 without speculative decoding)."""
        if self.draft is None:
            return 0.0
        decode = BatchAggregates.of(np.ones(context_tokens.size), context_tokens, self.draft_window)
        return float(self.draft.iteration_times(decode).total_s[0]) * len(self.accepted)


class EngineCost(Protocol):
    """What a replica asks of its step-time model: :class:`~simulator.analytic.step_time.CostModel`,
    plus one iteration in plain floats and a decode jump as lists (:class:`JumpTimes`)."""

    accepted: tuple[float, ...]

    def iteration(self, shape: BatchShape) -> tuple[float, float, float]:
        """(seconds, FLOPs, bytes) of one iteration of this shape."""
        ...

    def iteration_times(self, batch: BatchAggregates) -> IterationCost:
        """Seconds between iterations for each entry of ``batch``, with FLOPs and bytes."""
        ...

    def decode_jump(self, context_tokens: Sequence[float], steps: int, window: int | None) -> JumpTimes:
        """The ``steps`` decode steps of sequences holding ``context_tokens``, one entry per step."""
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

    def decode_jump(self, context_tokens: Sequence[float], steps: int, window: int | None) -> JumpTimes:
        times = self.cost.iteration_times(BatchAggregates.decode_steps(context_tokens, steps, window))
        return JumpTimes(times.total_s.tolist(), times.flops.tolist(), times.bytes_moved.tolist())

    def iteration(self, shape: BatchShape) -> tuple[float, float, float]:
        times = self.cost.iteration_times(BatchAggregates(*np.array(shape, dtype=np.float64)[:, None]))
        return float(times.total_s[0]), float(times.flops[0]), float(times.bytes_moved[0])


def engine_cost(cost: CostModel) -> EngineCost:
    """The reference model through :class:`FastStepCost`; any other cost model as it is."""
    return FastStepCost(cost) if isinstance(cost, StepCostModel) else ArrayCost(cost)
