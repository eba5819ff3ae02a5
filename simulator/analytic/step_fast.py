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
once per ``(tokens, sequences)`` and cached (a bounded cache: a decode batch of ``n`` sequences
is one key for every step it runs), from the reference model's iteration of that shape evaluated
in plain floats, its operations in its order, equal to its arrays to the last bit
(:class:`ShapeOnlyIteration`: a new shape, every prompt length an agent sends, costs a few
microseconds, not a hundred microseconds of numpy calls on one-entry arrays); the held-dependent
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

from simulator.analytic.moe import busiest_rank_experts, busiest_rank_pairs_hot, other_ranks
from simulator.analytic.step_time import (
    TWO_BATCH_OVERLAP_MIN_TOKENS,
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


class ShapeOnlyIteration:
    """The reference model's iteration of a shape alone (``tokens`` new tokens of ``sequences``
    sequences, nothing held), in plain floats: what :class:`FastStepCost` adds the attention core to.

    The same operations as :meth:`StepCostModel.iteration_times` and
    :meth:`StepCostModel.pass_times` on a batch of one entry, in the same order: each operator row
    ``count * overlap(weights + kv, compute)``, the six rows summed in order, the eight components
    summed pairwise as numpy sums eight numbers (``((c0 + c1) + (c2 + c3)) + ((c4 + c5) + (c6 +
    c7))``), ``x ** 2`` as ``x * x`` and ``x ** 0.5`` as a square root (as numpy evaluates them).
    So every float equals the reference's to the last bit (a test holds this for every hardware
    and model of the catalog), and a run does not depend on which of the two costed a shape. It
    applies (:meth:`of`) to the reference model itself, not a subclass, with a roofline of ``max``
    or ``p = 2`` and no torus; any other deployment's shapes are costed by the reference's arrays.
    """

    def __init__(self, reference: StepCostModel) -> None:
        d = reference.deployment
        model = d.model
        self.stages = float(reference.pipeline_stages)
        self.rank_share = 1.0 / reference.dp
        self.squared = reference.roofline_exponent is not None
        self.count = reference.op_count[:, 0].tolist()
        self.weight_s = reference.op_weight_s[:, 0].tolist()
        self.s_per_unit = reference.op_compute_s_per_unit[:, 0].tolist()
        self.flop_rate = reference.op_flop_rate[:, 0].tolist()
        self.kv_s_per_token = reference.kv_s_per_token
        self.tp, self.pp, self.dp = d.tensor_parallel, d.pipeline_parallel, reference.dp
        self.hidden, self.act_bytes = model.hidden_size, float(reference.act_bytes)
        self.alpha, self.alltoall_alpha, self.link_bw = reference.alpha, reference.alltoall_alpha, reference.link_bw
        self.moe_layers, self.dense_layers = reference.moe_layers, reference.dense_layers
        self.reductions = model.num_layers + reference.dense_layers
        dense_fabric, moe_fabric = reference.fabric_per_layer_s
        self.fabric_s = self.dense_layers * dense_fabric + self.moe_layers * moe_fabric
        self.fixed_s = reference.fixed_s
        self.bytes_per_s = self.tp * self.dp * reference.bandwidth  # all chips: bytes = this * seconds
        self.moe_cost = reference if model.moe is not None else None  # its MoE constants
        self.other_ranks = 0.0
        if model.moe is not None:
            moe = model.moe
            self.other_ranks = other_ranks(moe.num_routed_experts, moe.experts_per_token, d.expert_parallel)

    @classmethod
    def of(cls, reference: StepCostModel) -> ShapeOnlyIteration | None:
        """This evaluation of ``reference``, or None where it does not apply (see class)."""
        plain = (type(reference) is StepCostModel and reference.tp_slice is None
                 and reference.roofline_exponent in (None, 2.0))  # fmt: skip
        return cls(reference) if plain else None

    def at(self, tokens: float, sequences: float) -> tuple[float, float, float]:
        """(seconds, FLOPs, bytes) of the iteration (see class)."""
        m = 1.0
        if self.stages > 1.0:  # the batch split into micro-batches of 1 / m of it each
            m = min(max(tokens, 1.0), self.stages)
            tokens, sequences = tokens * (1.0 / m), sequences * (1.0 / m)
        rank_tokens, rank_sequences = tokens * self.rank_share, sequences * self.rank_share
        kv_s = rank_tokens * self.kv_s_per_token
        drivers = [rank_tokens, 0.0, 0.0, rank_tokens, rank_tokens, rank_sequences]
        weight_s = list(self.weight_s)
        compute_s = [drivers[row] * self.s_per_unit[row] for row in range(6)]
        expert_s = 0.0
        if self.moe_cost is not None:
            weight_s[4], compute_s[4], expert_s = self._moe_row(tokens, rank_tokens)
        weights = kv = compute = flops = moved = 0.0
        for row in range(6):
            count, row_weight_s, row_compute_s = self.count[row], weight_s[row], compute_s[row]
            row_kv_s = kv_s if row == 1 or row == 2 else 0.0
            memory_s = row_weight_s + row_kv_s
            if not self.squared:
                memory_share = 1.0 if memory_s >= row_compute_s else 0.0
                op_s = memory_s if memory_s >= row_compute_s else row_compute_s
            else:
                memory_p = memory_s * memory_s
                both = memory_p + row_compute_s * row_compute_s
                memory_share = memory_p / both if both > 0.0 else 0.0
                op_s = math.sqrt(both)
            weight_share = row_weight_s / memory_s if memory_s > 0.0 else 0.0
            weights += count * op_s * memory_share * weight_share
            kv += count * op_s * memory_share * (1.0 - weight_share)
            compute += count * op_s * (1.0 - memory_share)
            flops += count * row_compute_s * self.flop_rate[row]
            moved += count * (row_weight_s + row_kv_s)
        allreduce_s = 0.0
        if self.tp > 1:
            message = rank_tokens * self.hidden * self.act_bytes
            allreduce_s = (2 * math.ceil(math.log2(self.tp)) * self.alpha
                           + 2 * (self.tp - 1) / self.tp * message / self.link_bw)  # fmt: skip
        moe_comm_s = allreduce_s
        if self.dp > 1:  # data-parallel attention: a dispatch and a combine per MoE layer
            assert self.moe_cost is not None
            message = self.moe_cost.hot_rank * rank_tokens * self.other_ranks * self.hidden * self.act_bytes
            exchange_s = self.alltoall_alpha + message / self.link_bw
            kept = 1.0 - self.moe_cost.comm_overlap if rank_tokens >= TWO_BATCH_OVERLAP_MIN_TOKENS else 1.0
            moe_comm_s = 2 * kept * exchange_s
        communication = self.reductions * allreduce_s + self.moe_layers * moe_comm_s
        pipeline_hops = (self.pp - 1) * (self.alpha + tokens * self.hidden * self.act_bytes / self.link_bw)
        fixed = self.fixed_s + self.moe_layers * expert_s
        torus_hops = 0.0
        memory = weights + kv
        total_s = (memory + (compute + communication)) + ((torus_hops + pipeline_hops) + (self.fabric_s + fixed))
        return total_s, self.tp * self.dp * flops * m, self.bytes_per_s * moved * m

    def _moe_row(self, tokens: float, rank_tokens: float) -> tuple[float, float, float]:
        """:meth:`StepCostModel._moe_row` of one entry: (weight seconds, compute seconds, expert set-up seconds)."""
        r = self.moe_cost
        assert r is not None and r.deployment.model.moe is not None
        moe, ep = r.deployment.model.moe, r.deployment.expert_parallel
        routed = round(tokens)
        hit = busiest_rank_experts(moe.num_routed_experts, moe.experts_per_token, ep, routed)
        pairs = busiest_rank_pairs_hot(moe.experts_per_token, ep, r.hot_rank, routed) / r.expert_tp
        shared = moe.num_shared_experts / r.deployment.tensor_parallel
        weight_s = (hit / r.expert_tp + shared) * r.expert_bytes / r.expert_read_rate + r.router_weight_s
        flops = (pairs + shared * rank_tokens) * r.flops_per_expert_token
        compute_s = (flops + rank_tokens * r.router_flops_per_token) / self.flop_rate[4]
        return weight_s, compute_s, (hit + moe.num_shared_experts) * r.expert_s


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
        self.shape_only = ShapeOnlyIteration.of(reference)

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
        total_s, flops, moved = self._reference_at_zero_held(tokens, sequences)
        m = self._micro_batches(tokens)
        memory_s = tokens / m / self.dp * self.kv_s_per_token
        core_s = sum(self.count) * memory_s
        base = (total_s - core_s, flops, moved - self.chips * self.bandwidth * core_s * m)
        if len(self._base) >= BASE_CACHE_SIZE:
            self._base.clear()
        self._base[key] = base
        return base

    def _reference_at_zero_held(self, tokens: float, sequences: float) -> tuple[float, float, float]:
        """The reference model's (seconds, FLOPs, bytes) of this shape holding nothing: in plain
        floats (:class:`ShapeOnlyIteration`) where that applies, else from its arrays."""
        if self.shape_only is not None:
            return self.shape_only.at(tokens, sequences)
        zero = np.zeros(1)
        batch = BatchAggregates(np.array([tokens]), np.array([sequences]), zero, zero, zero, zero)
        times = self.reference.iteration_times(batch)
        return float(times.total_s[0]), float(times.flops[0]), float(times.bytes_moved[0])

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
