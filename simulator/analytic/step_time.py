"""Time of one pass of a batch through a deployed model: prefill chunks and decode tokens alike.

A batch is, per sequence, the new tokens it processes this pass (``q``: 1 for a decode,
the chunk length for prefill, ``gamma + 1`` for a speculative verify) and the tokens already
in its KV cache (``c``). Assumptions:

- **Operators.** Per layer: attention projections, the attention core (scores and values
  over the KV), the FFN (dense, or MoE: the busiest expert-parallel rank's experts, see
  :mod:`simulator.analytic.moe`); once per pass the LM head. Each operator runs at its own
  roofline of ``m = bytes / (bandwidth * eff)`` and ``c = flops / (rate * eff)``: ``max(m, c)``
  on an ideal machine, ``(m^p + c^p)^(1/p)`` with the hardware's ``roofline_exponent`` ``p``
  (measured kernels overlap memory and compute imperfectly near the ridge: p = 2 fits Vidur's
  A100 kernel profiles). Bytes are read from the tier the deployment keeps weights and KV in,
  FLOPs run at each tensor group's matmul path (:mod:`simulator.analytic.precision`).
- **Data-parallel attention** (``attention_dp`` ranks): each rank runs attention, dense layers
  and the LM head on its ``1/dp`` share of the batch with its own weights; experts are spread
  over ``expert_parallel`` ranks and reached by a dispatch and a combine all-to-all per MoE
  layer (each token sent once per distinct other rank), partly hidden by two-batch overlap
  when the stack does it.
- **Tensor parallelism** shards weights, FLOPs and KV over ``tp`` chips and costs two
  all-reduces per layer, each ``2 ceil(log2 tp) alpha + 2 (tp-1)/tp * msg / (bw * eff)`` with
  ``msg = tokens * hidden * activation bytes``: the latency of recursive doubling and the
  bandwidth of a ring (Thakur, Rabenseifner & Gropp 2005, the regimes small decode messages
  and large prefill messages sit in). An expert-parallel MoE layer replaces its all-reduce
  with a dispatch and a combine all-to-all, each ``ceil(log2 ep) alpha + (ep-1)/ep * msg_k /
  (bw * eff)`` (Bruck's latency), where ``msg_k`` carries k copies of every token.
- **Torus interconnects** (an ``interconnect.torus``, TPU ICI): the same collectives cross the
  slice hop by hop (:mod:`simulator.analytic.torus`); their hop latency is its own component,
  ``torus_hops``, their bytes stay under ``communication``.
- **Pipeline hops**: ``pp - 1`` chip-to-chip transfers per pass, ``alpha + msg / (bw * eff)``
  (on a torus one hop over one link).
- **Fixed latency**: per layer, the hardware's ``layer_latency`` (the per-layer slot of a
  deterministic schedule on an LPU) plus the serving stack's (kernel launches and syncs on a
  GPU), and the stack's ``step_overhead`` per pass. Per MoE layer, the stack's
  ``expert_latency`` per distinct expert the busiest chip runs: its routed experts the batch
  hits (all it holds a slice of, when experts are split tensor-parallel) plus the shared ones,
  ``expert_latency * (E_busiest(tokens) + shared)``.
- **Fabric traversal** (spatial chips with a ``fabric``): a token crosses the cores that
  hold the weights it uses; on a 2D mesh that is ``sqrt(cores spanned)`` hops per layer, at
  ``hop_latency`` each, with ``cores spanned = active layer bytes / SRAM per core``.
- **Layer-pipelined execution** (``layer_pipelined``): each layer owns a region of its
  chip, so an operator gets ``1 / layers per chip`` of the chip's compute and bandwidth, and
  up to ``num_layers`` micro-batches can be in flight, a prompt's tokens among them in causal
  chunks (see :meth:`StepCostModel.iteration_times`).
- Terms add (no overlap of communication with compute): a conservative, explainable choice.
- Not modelled: activation traffic, norms and rotary embeddings, expert load balancers
  (EPLB: redundant hot experts), logits all-gather, and host-side network time.

On SRAM machines the bandwidth terms are tiny and latency dominates: a bandwidth-only
roofline would predict them about 100x too fast.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np
import numpy.typing as npt
from mypy_extensions import mypyc_attr

from simulator.analytic.architecture import FLOPS_PER_MAC, layer_shapes
from simulator.analytic.moe import (
    DEFAULT_EXPERT_LOAD_CV,
    busiest,
    busiest_rank_experts,
    busiest_rank_pairs_hot,
    hot_rank_factor,
    other_ranks,
)
from simulator.analytic.placement import Deployment, kv_replication
from simulator.analytic.precision import BYTES_PER_ELEMENT, compute_path
from simulator.analytic.speculation import acceptance, tokens_per_verify
from simulator.analytic.torus import TorusSlice
from simulator.config.base import Precision
from simulator.config.model import TensorGroup

COMPONENTS = (
    "weights_memory",
    "kv_memory",
    "compute",
    "communication",
    "torus_hops",
    "fabric",
    "pipeline_hops",
    "fixed_latency",
)

FloatArray = npt.NDArray[np.float64]

#: Tokens per attention rank below which two-batch overlap does not pay: SGLang measured a 27 %
#: loss at 32 tokens per GPU and a gain from 64-128 up (lmsys.org/blog/2025-05-05-large-scale-ep).
TWO_BATCH_OVERLAP_MIN_TOKENS = 128


@dataclass(frozen=True)
class StepTime:
    """Seconds for one pass, and where they go (the components add up to ``total_s``)."""

    components_s: dict[str, float] = field(default_factory=dict)

    @property
    def total_s(self) -> float:
        return float(sum(self.components_s.values()))

    @property
    def bottleneck(self) -> str:
        return max(self.components_s, key=lambda k: self.components_s[k])

    def scaled(self, factor: float) -> StepTime:
        return StepTime({k: v * factor for k, v in self.components_s.items()})

    def plus(self, other: StepTime) -> StepTime:
        keys = dict.fromkeys([*self.components_s, *other.components_s])  # in order, not a set's hash order
        return StepTime({k: self.components_s.get(k, 0.0) + other.components_s.get(k, 0.0) for k in keys})


class BatchShape(NamedTuple):
    """The statistics of :class:`BatchAggregates` for one batch, as floats (the engine's iterations)."""

    tokens: float
    sequences: float
    held_full: float
    held_window: float
    pairs_full: float
    pairs_window: float

    @classmethod
    def of(cls, new_tokens: Sequence[float], context_tokens: Sequence[float], window: int | None) -> BatchShape:
        """:meth:`BatchAggregates.of` in plain Python, for the few sequences of one iteration
        (whole or half token counts: every sum is exact, so both agree to the last bit)."""
        tokens = float(sum(new_tokens))
        held = float(sum(context_tokens)) + tokens
        pairs = float(sum(q * (c + (q + 1.0) / 2.0) for q, c in zip(new_tokens, context_tokens)))
        if window is None:
            return cls(tokens, float(len(new_tokens)), held, held, pairs, pairs)
        w = float(window)
        held_window = float(sum(min(c + q, w) for q, c in zip(new_tokens, context_tokens)))
        pairs_window = float(sum(q * min(c + (q + 1.0) / 2.0, w) for q, c in zip(new_tokens, context_tokens)))
        return cls(tokens, float(len(new_tokens)), held, held_window, pairs, pairs_window)


@dataclass(frozen=True)
class BatchAggregates:
    """Sufficient statistics of batches for the step-time model: arrays, one entry per pass.

    With ``q`` new and ``c`` cached tokens per sequence and window ``W``:
    ``tokens = sum q``; ``held_full = sum (c + q)``; ``held_window = sum min(c + q, W)``;
    ``pairs_full = sum q (c + (q + 1) / 2)`` (causal query-key pairs);
    ``pairs_window = sum q min(c + (q + 1) / 2, W)``.
    """

    tokens: FloatArray
    sequences: FloatArray
    held_full: FloatArray
    held_window: FloatArray
    pairs_full: FloatArray
    pairs_window: FloatArray

    @classmethod
    def of(cls, new_tokens: npt.ArrayLike, context_tokens: npt.ArrayLike, window: int | None) -> BatchAggregates:
        """Aggregates of one batch given per-sequence new and cached tokens.

        (Token counts are whole or half numbers, so every sum below is exact in any order.)
        """
        q = np.asarray(new_tokens, dtype=np.float64)
        c = np.asarray(context_tokens, dtype=np.float64)
        causal = c + (q + 1.0) / 2.0
        tokens = float(q.sum())
        held, pairs = float(c.sum()) + tokens, float(q @ causal)
        held_window, pairs_window = held, pairs
        if window is not None:
            w = float(window)
            held_window, pairs_window = float(np.minimum(c + q, w).sum()), float(q @ np.minimum(causal, w))
        return cls(*np.array([[tokens], [float(q.size)], [held], [held_window], [pairs], [pairs_window]]))

    @classmethod
    def decode_steps(cls, context_tokens: Sequence[float], steps: int, window: int | None) -> BatchAggregates:
        """Aggregates of ``steps`` decode steps of a fixed batch, one entry per step
        (:func:`decode_held`; a decode's causal pairs equal what it holds)."""
        held, held_window = [np.array(h, dtype=np.float64) for h in decode_held(context_tokens, steps, window)]
        batch = np.full(steps, float(len(context_tokens)))
        return cls(tokens=batch, sequences=batch, held_full=held, held_window=held_window, pairs_full=held,
                   pairs_window=held_window)  # fmt: skip

    def scaled(self, factor: FloatArray | float) -> BatchAggregates:
        """Every statistic times ``factor`` (one micro-batch of an evenly split batch)."""
        return BatchAggregates(*[getattr(self, f) * factor for f in self.__dataclass_fields__])


def decode_held(context_tokens: Sequence[float], steps: int, window: int | None) -> tuple[list[float], list[float]]:
    """Tokens held in KV at each of ``steps`` decode steps of a fixed batch: (all layers, windowed layers).

    Step ``j`` (from 0) decodes one token for each sequence, whose cache then holds ``c + j + 1``
    tokens: ``held_full = sum c + n (j + 1)``; with a window ``W``, ``held_window = sum min(c + j + 1, W)
    = W (n - k) + sum_below c + k (j + 1)``, where the ``k`` sequences still below the window
    (``c + j + 1 < W``) are the smallest (the largest of them reaches it first). Token counts are
    whole (or half) numbers, so every sum here is exact, in any order.
    """
    n = float(len(context_tokens))
    total = float(sum(context_tokens))
    held = [total + n * (j + 1.0) for j in range(steps)]
    if window is None:
        return held, held
    w = float(window)
    below = sorted(c for c in context_tokens if c + 1.0 < w)
    k, below_sum = len(below), float(sum(below))
    held_window = []
    for j in range(steps):
        step = j + 1.0
        while k and below[k - 1] + step >= w:
            k -= 1
            below_sum -= below[k]
        held_window.append(w * (n - k) + below_sum + k * step)
    return held, held_window


@dataclass
class PassTimes:
    """Per-pass seconds by component, and the FLOPs and bytes all chips did (arrays)."""

    components_s: dict[str, FloatArray]
    flops: FloatArray
    bytes_moved: FloatArray

    @property
    def total_s(self) -> FloatArray:
        total: FloatArray = np.sum(list(self.components_s.values()), axis=0)
        return total

    def step(self, index: int = 0) -> StepTime:
        return StepTime({k: float(v[index]) for k, v in self.components_s.items()})

    def scaled(self, factor: float) -> PassTimes:
        """Every time, FLOP and byte count times ``factor`` (``factor`` identical passes)."""
        return PassTimes({k: v * factor for k, v in self.components_s.items()}, self.flops * factor,
                         self.bytes_moved * factor)  # fmt: skip


class IterationCost(Protocol):
    """Iterations' times as arrays: seconds, FLOPs and bytes, one entry each (what a cost model returns)."""

    @property
    def total_s(self) -> FloatArray: ...

    @property
    def flops(self) -> FloatArray: ...

    @property
    def bytes_moved(self) -> FloatArray: ...


class CostModel(Protocol):
    """What the engine asks of a step-time model: the seconds (and the work) of iterations.

    :class:`StepCostModel` is the roofline model of this module (the engine runs it through
    :class:`~simulator.analytic.step_fast.FastStepCost`); a test double (a constant step time)
    or another execution style implements the same method.
    """

    #: Acceptance of each draft position with speculative decoding; empty without it.
    accepted: tuple[float, ...]

    def iteration_times(self, batch: BatchAggregates) -> IterationCost:
        """Seconds between iterations for each entry of ``batch``, with FLOPs and bytes."""
        ...

    def draft_s(self, context_tokens: FloatArray) -> float:
        """Seconds the draft takes to propose for decoding sequences holding ``context_tokens``."""
        ...


@mypyc_attr(allow_interpreted_subclasses=True)  # a variant of the physics may build on it
class StepCostModel:
    """Pure step-time model of one deployment: batch state in, seconds out.

    Parameters
    ----------
    deployment
        A resolved :class:`~simulator.analytic.placement.Deployment`.
    """

    def __init__(self, deployment: Deployment) -> None:
        d = self.deployment = deployment
        hw, model = d.hardware, d.model
        self.shapes = layer_shapes(model)
        tp = d.tensor_parallel
        self.share = 1.0 / max(1.0, d.layers_per_stage) if hw.execution.layer_pipelined else 1.0
        tier = d.weights_tier
        self.bandwidth = tier.bandwidth.value * tier.efficiency.value * self.share  # B/s per chip (KV, weights)

        def read_rate(group: TensorGroup) -> float:
            return d.read_rate(group) * self.share

        def flop_rate(precision: Precision) -> float:
            return compute_path(hw, precision, d.activations).flops(hw) * self.share

        self.act_bytes = BYTES_PER_ELEMENT[d.activations]
        self.kv_bytes_per_token_layer = (
            self.shapes.kv_elements_per_token * BYTES_PER_ELEMENT[d.kv_cache] * kv_replication(model, tp) / tp
        )
        s = self.shapes
        self.attn_weight_bytes = s.attention_params * d.bytes_per_param("attention") / tp
        self.dense_weight_bytes = s.dense_ffn_params * d.bytes_per_param("dense_ffn") / tp
        self.expert_bytes = s.expert_params * d.bytes_per_param("experts")  # one whole expert
        self.lm_head_bytes = s.lm_head_params * d.bytes_per_param("lm_head") / tp
        moe = model.moe
        self.moe_layers = moe.num_moe_layers if moe else 0
        self.window_layers = model.attention.sliding_window_layers
        link = hw.interconnect
        self.link_bw = link.bandwidth.value * link.efficiency.value
        self.alpha = link.latency.value
        self.alltoall_alpha = (link.alltoall_latency or link.latency).value
        self.dp = d.attention_dp
        torus = link.torus
        self.tp_slice = self.ep_slice = None
        if torus is not None:
            dims, wrap = torus.dimensions.value, torus.wraparound_min_chips.value
            self.tp_slice = TorusSlice(tp, dims, wrap, self.link_bw, self.alpha)
            self.ep_slice = TorusSlice(d.expert_parallel, dims, wrap, self.link_bw, self.alpha)
        self.expert_tp = tp * self.dp // d.expert_parallel  # chips each expert is split over
        self.comm_overlap = d.stack.moe_comm_overlap.value
        load_cv = moe.expert_load_cv.value if moe and moe.expert_load_cv else DEFAULT_EXPERT_LOAD_CV
        self.hot_rank = hot_rank_factor(moe.num_routed_experts, d.expert_parallel, load_cv) if moe else 1.0
        exponent = hw.compute.roofline_exponent
        self.roofline_exponent = None if exponent is None else exponent.value
        # speculative decoding: the draft's own cost model and the acceptance of each draft position
        self.draft = StepCostModel(d.draft) if d.draft is not None else None
        self.accepted = acceptance(d.speculative) if d.speculative is not None else ()
        self.fabric_per_layer_s = self._fabric_per_layer()
        # Operator table, one row each: attention projections, attention core over full and
        # windowed layers, dense FFN, MoE FFN, LM head. ``count`` is how often a pass runs it.
        layers = model.num_layers
        self.dense_layers = layers - self.moe_layers
        self.op_count = np.array(
            [layers, layers - self.window_layers, self.window_layers, self.dense_layers, self.moe_layers, 1.0]
        )[:, None]
        self.op_weight_bytes = np.array(
            [self.attn_weight_bytes, 0.0, 0.0, self.dense_weight_bytes, 0.0, self.lm_head_bytes]
        )[:, None]
        attention_core = flop_rate(d.activations)
        self.op_flop_rate = np.array(
            [flop_rate(d.precision["attention"]), attention_core, attention_core, flop_rate(d.precision["dense_ffn"]),
             flop_rate(d.precision["experts"]), flop_rate(d.precision["lm_head"])]
        )[:, None]  # fmt: skip
        self.flops_per_pair = FLOPS_PER_MAC * s.num_heads * (s.attention_score_dim + s.attention_value_dim) / tp
        # FLOPs per token of each row on one chip (the MoE row's are set per pass: busiest rank)
        self.flops_per_token = FLOPS_PER_MAC / tp * np.array([s.attention_params, s.dense_ffn_params, 0.0,
                                                              s.lm_head_params])  # fmt: skip
        self.flops_per_expert_token = FLOPS_PER_MAC * s.expert_params
        self.router_flops_per_token = FLOPS_PER_MAC * s.router_params / tp
        self.router_weight_s = s.router_params * d.bytes_per_param("router") / tp / read_rate("router")
        layer_s = hw.execution.layer_latency.value + d.stack.layer_latency.value
        self.fixed_s = layers * layer_s + d.stack.step_overhead.value
        self.expert_s = d.stack.expert_latency.value
        # Batch-independent parts of the operator terms, in seconds per unit of their driver.
        row_rates = [read_rate("attention"), 1.0, 1.0, read_rate("dense_ffn"), read_rate("experts"),
                     read_rate("lm_head")]  # fmt: skip
        self.op_weight_s = self.op_weight_bytes / np.array(row_rates)[:, None]
        self.expert_read_rate = row_rates[4]
        self.op_compute_s_per_unit = (
            np.array([self.flops_per_token[0], self.flops_per_pair, self.flops_per_pair, *self.flops_per_token[1:]])[
                :, None
            ]
            / self.op_flop_rate
        )
        self.kv_s_per_token = self.kv_bytes_per_token_layer / self.bandwidth

    # -- terms ---------------------------------------------------------------------------------
    def _fabric_per_layer(self) -> tuple[float, float]:
        """Traversal seconds per (dense, MoE) layer: hop_latency * sqrt(cores spanned)."""
        d, hw, s = self.deployment, self.deployment.hardware, self.shapes
        if hw.fabric is None:
            return 0.0, 0.0
        cores = hw.compute.cores.value
        sram_per_core = d.weights_tier.capacity.value / cores
        moe = d.model.moe
        active_experts = (moe.experts_per_token + moe.num_shared_experts) if moe else 0
        attention = s.attention_params * d.bytes_per_param("attention")

        def traversal(ffn_bytes: float) -> float:
            active = (attention + ffn_bytes) / d.tensor_parallel
            return hw.fabric.hop_latency.value * math.sqrt(min(cores, active / sram_per_core))  # type: ignore[union-attr]

        dense = s.dense_ffn_params * d.bytes_per_param("dense_ffn")
        return traversal(dense), traversal(active_experts * s.expert_params * d.bytes_per_param("experts"))

    def _allreduce_s(self, tokens: FloatArray, tp: int) -> tuple[FloatArray, float]:
        """(seconds, torus hop seconds) of one tensor-parallel all-reduce of ``tokens`` activations."""
        msg = tokens * self.deployment.model.hidden_size * self.act_bytes
        if self.tp_slice is not None:
            return self.tp_slice.allreduce_s(msg)
        if tp == 1:
            return np.zeros_like(tokens), 0.0
        return 2 * math.ceil(math.log2(tp)) * self.alpha + 2 * (tp - 1) / tp * msg / self.link_bw, 0.0

    def _alltoall_s(self, tokens_per_rank: FloatArray) -> tuple[FloatArray, float]:
        """(seconds, torus hop seconds) of one dispatch (or combine): each rank sends its tokens once
        to every distinct other rank holding one of their experts, and the busiest rank receives ``h``
        (hot experts) times the mean: ``alltoall_latency + h * tokens * other_ranks * hidden * bytes /
        bw`` through a switch, the torus's all-to-all of those bytes on a torus."""
        moe = self.deployment.model.moe
        assert moe is not None
        ranks = other_ranks(moe.num_routed_experts, moe.experts_per_token, self.deployment.expert_parallel)
        msg = self.hot_rank * tokens_per_rank * ranks * self.deployment.model.hidden_size * self.act_bytes
        if self.ep_slice is not None:
            return self.ep_slice.alltoall_s(msg)
        return self.alltoall_alpha + msg / self.link_bw, 0.0

    def _overlap(self, memory_s: FloatArray, compute_s: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(operator seconds, share of them charged to memory): ``max(m, c)`` on an ideal roofline,
        ``(m^p + c^p)^(1/p)`` with the hardware's exponent (operators near the ridge overlap memory
        and compute imperfectly), split in proportion ``m^p : c^p``."""
        p = self.roofline_exponent
        if p is None:
            memory_bound = memory_s >= compute_s
            return np.where(memory_bound, memory_s, compute_s), memory_bound.astype(np.float64)
        memory_p, compute_p = np.power(memory_s, p), np.power(compute_s, p)
        total = memory_p + compute_p
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(total > 0, memory_p / total, 0.0)
        return np.power(total, 1.0 / p), share

    def _moe_row(self, tokens: FloatArray, tokens_per_rank: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        """(weight seconds, compute seconds, expert set-up seconds) of one MoE layer on the busiest chip.

        The router's weights are read once. Routed experts: the busiest expert-parallel rank's distinct
        experts (weights read) and token-expert pairs (FLOPs, hot experts included), each expert split
        over ``expert_tp`` chips; shared experts run on every attention rank's own tokens, split like
        the dense layers (``tp``).
        """
        d = self.deployment
        moe = d.model.moe
        assert moe is not None
        e, k, ep = moe.num_routed_experts, moe.experts_per_token, d.expert_parallel
        hit = busiest(busiest_rank_experts, tokens, e, k, ep)  # distinct routed experts the chip runs
        experts = hit / self.expert_tp
        pairs = busiest(busiest_rank_pairs_hot, tokens, k, ep, self.hot_rank) / self.expert_tp
        shared = moe.num_shared_experts / d.tensor_parallel
        weight_s = (experts + shared) * self.expert_bytes / self.expert_read_rate + self.router_weight_s
        flops = (pairs + shared * tokens_per_rank) * self.flops_per_expert_token
        compute_s = (flops + tokens_per_rank * self.router_flops_per_token) / self.op_flop_rate[4, 0]
        return weight_s, compute_s, (hit + moe.num_shared_experts) * self.expert_s

    # -- public API ----------------------------------------------------------------------------
    def pass_times(self, batch: BatchAggregates) -> PassTimes:
        """Seconds of one pass through every layer, for each entry of ``batch`` (vectorised).

        Each operator row is bound by ``max(bytes / bandwidth, FLOPs / FLOP rate)``; its time
        goes to the memory components (weights and KV by their bytes) or to compute. (The engine
        evaluates a shape holding nothing in plain floats,
        :class:`~simulator.analytic.step_fast.ShapeOnlyIteration`, the same operations in this
        order: a test holds the two equal bit for bit, so a change here is made there too.)
        """
        d, model = self.deployment, self.deployment.model
        tp, pp, dp = d.tensor_parallel, d.pipeline_parallel, self.dp
        tokens = batch.tokens
        n = tokens.size
        rank = batch.scaled(1.0 / dp)  # one attention rank's share of the batch
        weight_s = np.repeat(self.op_weight_s, n, axis=1)
        kv_s = np.zeros((6, n))
        kv_s[1] = (rank.held_full + rank.tokens) * self.kv_s_per_token
        kv_s[2] = (rank.held_window + rank.tokens) * self.kv_s_per_token
        drivers = np.empty((6, n))
        drivers[0] = drivers[3] = drivers[4] = rank.tokens
        drivers[1], drivers[2], drivers[5] = rank.pairs_full, rank.pairs_window, rank.sequences
        compute_s = drivers * self.op_compute_s_per_unit
        expert_s = np.zeros(n)
        if self.moe_layers:
            weight_s[4], compute_s[4], expert_s = self._moe_row(tokens, rank.tokens)
        count = self.op_count
        memory_s = weight_s + kv_s
        op_s, memory_share = self._overlap(memory_s, compute_s)
        with np.errstate(invalid="ignore", divide="ignore"):
            weight_share = np.where(memory_s > 0, weight_s / memory_s, 0.0)
        parts = {
            "weights_memory": (count * op_s * memory_share * weight_share).sum(axis=0),
            "kv_memory": (count * op_s * memory_share * (1.0 - weight_share)).sum(axis=0),
            "compute": (count * op_s * (1.0 - memory_share)).sum(axis=0),
        }
        allreduce, allreduce_hops = self._allreduce_s(rank.tokens, tp)
        if dp > 1:  # data-parallel attention: experts reached by a dispatch and a combine per MoE layer
            exchange, exchange_hops = self._alltoall_s(rank.tokens)
            overlapped = rank.tokens >= TWO_BATCH_OVERLAP_MIN_TOKENS
            kept = np.where(overlapped, 1.0 - self.comm_overlap, 1.0)
            moe_comm, moe_hops = 2 * kept * exchange, 2 * kept * exchange_hops
        else:  # tensor-parallel attention: every chip holds every token, the MoE output is all-reduced
            moe_comm, moe_hops = allreduce, np.full(n, allreduce_hops)
        reductions = model.num_layers + self.dense_layers
        parts["communication"] = reductions * allreduce + self.moe_layers * moe_comm
        parts["torus_hops"] = reductions * allreduce_hops + self.moe_layers * moe_hops
        msg = tokens * model.hidden_size * self.act_bytes
        hop = self.alpha + msg / self.link_bw if self.tp_slice is None else self.tp_slice.neighbour_s(msg)
        parts["pipeline_hops"] = (pp - 1) * hop
        dense_fabric, moe_fabric = self.fabric_per_layer_s
        parts["fabric"] = np.full(n, self.dense_layers * dense_fabric + self.moe_layers * moe_fabric)
        parts["fixed_latency"] = self.fixed_s + self.moe_layers * expert_s
        chips = tp * dp
        total_flops = chips * (count * compute_s * self.op_flop_rate).sum(axis=0)
        total_bytes = chips * self.bandwidth * (count * (weight_s + kv_s)).sum(axis=0)
        return PassTimes(parts, total_flops, total_bytes)

    def pass_time(self, new_tokens: npt.ArrayLike, context_tokens: npt.ArrayLike) -> StepTime:
        """One pass of a batch through every layer: the latency one micro-batch sees.

        Parameters
        ----------
        new_tokens
            Tokens each sequence processes this pass (1 for decode), shape (B,).
        context_tokens
            Tokens already in each sequence's KV cache, shape (B,).
        """
        window = self.deployment.model.attention.sliding_window
        return self.pass_times(BatchAggregates.of(new_tokens, context_tokens, window)).step()

    def iteration_times(self, batch: BatchAggregates) -> PassTimes:
        """Seconds between iterations when ``batch`` is split over the pipeline's stages.

        The batch's tokens are split into ``n = min(tokens, stages)`` micro-batches of ``1/n``
        of it each: a decode's one token is indivisible, but a prompt's (or a verify's) tokens
        stream through the stages in causal order, chunk after chunk, so one prompt alone fills
        the pipeline. Every micro-batch comes back once per ``pass(batch/n)`` (with ``n <=
        stages`` no stage holds more than a pass's worth of work). The fill of an idle pipeline
        (the last micro-batch entering ``(n - 1) / stages`` of a pass late) is not charged. With
        one stage (a GPU) this is ``pass(batch)``.
        """
        stages = self.pipeline_stages
        if stages == 1:
            return self.pass_times(batch)
        micro_batches = np.clip(batch.tokens, 1.0, stages)
        micro = self.pass_times(batch.scaled(1.0 / micro_batches))
        return PassTimes(micro.components_s, micro.flops * micro_batches, micro.bytes_moved * micro_batches)

    def draft_times(self, context_tokens: FloatArray) -> PassTimes:
        """Seconds of the ``gamma`` draft passes of one speculative step over sequences holding
        ``context_tokens`` (one token per sequence each)."""
        assert self.draft is not None
        window = self.draft.deployment.model.attention.sliding_window
        decode = BatchAggregates.of(np.ones(context_tokens.size), context_tokens, window)
        return self.draft.iteration_times(decode).scaled(float(len(self.accepted)))

    def draft_s(self, context_tokens: FloatArray) -> float:
        """Seconds of one step's draft passes (0 without speculative decoding)."""
        return float(self.draft_times(context_tokens).total_s[0]) if self.draft is not None else 0.0

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens a decode step emits per sequence: 1, or a verify's with speculation."""
        return tokens_per_verify(self.accepted) if self.accepted else 1.0

    @property
    def pipeline_stages(self) -> int:
        """How many micro-batches can be in flight: one per layer on spatial machines."""
        d = self.deployment
        return d.model.num_layers if d.hardware.execution.layer_pipelined else d.pipeline_parallel

    def cycle_time(self, batch_size: int, context_tokens: float, new_tokens: float = 1.0) -> tuple[float, StepTime]:
        """Seconds between successive tokens of each of ``batch_size`` identical sequences.

        Returns
        -------
        (iteration seconds, its StepTime)
        """
        window = self.deployment.model.attention.sliding_window
        batch = BatchAggregates.of(np.full(batch_size, new_tokens), np.full(batch_size, context_tokens), window)
        step = self.iteration_times(batch).step()
        return step.total_s, step
