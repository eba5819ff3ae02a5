"""Time of one pass of a batch through a deployed model: prefill chunks and decode tokens alike.

A batch is, per sequence, the new tokens it processes this pass (``q``: 1 for a decode,
the chunk length for prefill, ``gamma + 1`` for a speculative verify) and the tokens already
in its KV cache (``c``). Assumptions:

- **Operators.** Per layer: attention projections, the attention core (scores and values
  over the KV; a windowed layer over its window's keys only: the last ``W`` with a sliding window,
  those since the chunk boundary, ``(p mod W) + 1`` at position ``p``, with chunked local
  attention, Llama 4's ``attention_chunk_size`` on all but every 4th layer: transformers'
  ``Llama4TextConfig``, datasheet confidence; :class:`BatchAggregates`), the FFN (dense, or
  MoE: the busiest expert-parallel rank's experts, see :mod:`simulator.analytic.moe`); once per
  pass the LM head. Each operator runs at its own
  roofline of ``m = bytes / (bandwidth * eff)`` and ``c = flops / (rate * eff)``: ``max(m, c)``
  on an ideal machine, ``(m^p + c^p)^(1/p)`` with the hardware's ``roofline_exponent`` ``p``
  (measured kernels overlap memory and compute imperfectly near the ridge: p = 2 fits Vidur's
  A100 kernel profiles, p = 3 the H200 kernel table). Bytes are read from the tier the deployment
  keeps weights and KV in, FLOPs run at each tensor group's matmul path
  (:mod:`simulator.analytic.precision`). Each mechanism is one plain-float function
  (:func:`roofline_s`, :func:`gemm_terms`, :func:`grouped_experts_s`, :meth:`StepCostModel.core_row`)
  that the step model and the prediction of a single kernel both call.
- **MoE experts run as a grouped GEMM** (the hardware's ``compute.grouped_gemm``): the experts'
  weights stream at a fraction of the dense read rate and their FLOPs run at a fraction of the
  dense matmul rate, each by the experts' precision (measured on an H200: BF16 experts stream
  2.6-3.2 TB/s where a dense read gets 4.2, FP8 experts 1.5-1.7x BF16 when weight-bound, not 2x;
  compute-bound grouped GEMMs reach 460-540 of the dense 770 TFLOP/s), and each hit expert's
  rows are padded up to the kernel's M tile (``tile * E[ceil(X / tile)]``, ``X ~ Binomial(T k,
  1/E)``). A dequantising expert kernel (weight-only MXFP4 on Hopper, Marlin on Ampere: the
  ``weight_only`` path's ``expert_tile``) picks its tile from the mean rows per expert, the power
  of two at or above ``T k / E`` within its range, so a decode pads to 8-16 rows, not 64.
  Without ``grouped_gemm`` (SRAM machines) experts run as dense matmuls.
- **A serving step reaches a share of the kernel rate.** ``compute.efficiency`` is a GEMM
  benchmark's (the H200's measured cuBLAS 8192^3); between its GEMMs a served step runs norms,
  activations, rotary, sampling and mixed prefill-decode batches of uneven shapes, so its matmuls
  run at ``rate * eff * s`` with the serving stack's ``matmul_share`` ``s`` (1 when the stack
  states none: the SRAM machines' stacks, whose efficiencies are fitted on served rows).
- **A kernel launched alone** (the measured kernel tables) adds the hardware's ``kernel_latency``;
  in a served step the launches are the stack's per-layer latency (CUDA graphs), not added again.
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

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple, Protocol, TypeVar

import numpy as np
import numpy.typing as npt
from mypy_extensions import mypyc_attr

from simulator.analytic.architecture import FLOPS_PER_MAC, layer_shapes
from simulator.analytic.kept import Kept
from simulator.analytic.moe import (
    DEFAULT_EXPERT_LOAD_CV,
    busiest_rank_experts,
    busiest_rank_pairs_hot,
    distinct_experts,
    hot_rank_factor,
    other_ranks,
)
from simulator.analytic.placement import Deployment, kv_replication
from simulator.analytic.precision import BYTES_PER_ELEMENT, compute_path
from simulator.analytic.speculation import acceptance, tokens_per_verify
from simulator.analytic.torus import TorusSlice
from simulator.config.base import Precision
from simulator.config.hardware import HardwareProfile, InterconnectSpec
from simulator.config.model import ChunkedWindow, MoESpec, TensorGroup

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

#: (weight seconds, compute seconds, FLOPs, weight bytes, expert set-up seconds) of one MoE layer
#: (:meth:`StepCostModel.moe_row`).
MoERow = tuple[float, float, float, float, float]
#: MoE rows kept per deployment (:meth:`StepCostModel.moe_row`; ~400 bytes each); cleared when full.
MOE_ROWS_KEPT = 1 << 15
#: Deployments whose results stay kept between runs (:func:`deployment_cache`), least recently used
#: out: a plan's backends all stay.
SHARED_DEPLOYMENTS = 8
_moe_rows: Kept[Deployment, dict[tuple[float, float], MoERow]] = Kept(SHARED_DEPLOYMENTS)

CacheKey = TypeVar("CacheKey")
CacheValue = TypeVar("CacheValue")


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


#: One batch's statistics as plain floats, in :class:`BatchShape`'s order (``tokens, sequences,
#: held_full, held_window, pairs_full, pairs_window``): what the engine hands its step-time model
#: every iteration (compiled, a tuple of floats is passed unboxed; a :class:`BatchShape` is one too).
ShapeFloats = tuple[float, float, float, float, float, float]


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
        """:func:`batch_shape` as a :class:`BatchShape`."""
        return cls(*batch_shape(new_tokens, context_tokens, window))


def batch_shape(new_tokens: Sequence[float], context_tokens: Sequence[float], window: int | None) -> ShapeFloats:
    """:meth:`BatchAggregates.of` in plain Python, for the few sequences of one iteration
    (whole or half token counts: every sum is exact, so both agree to the last bit). With a window,
    one pass over the sequences takes the three sums that need both counts, each in their order."""
    tokens = float(sum(new_tokens))
    held = float(sum(context_tokens)) + tokens
    if window is None or isinstance(window, ChunkedWindow):
        pairs = float(sum(q * (c + (q + 1.0) / 2.0) for q, c in zip(new_tokens, context_tokens)))
        if window is None:
            return tokens, float(len(new_tokens)), held, held, pairs, pairs
        w = float(window)
        held_window = float(sum(chunk_held(q, c, w) for q, c in zip(new_tokens, context_tokens)))
        pairs_window = float(sum(chunk_pairs(c + q, w) - chunk_pairs(c, w)
                                 for q, c in zip(new_tokens, context_tokens)))  # fmt: skip
        return tokens, float(len(new_tokens)), held, held_window, pairs, pairs_window
    w = float(window)
    pairs = held_window = pairs_window = 0.0
    for q, c in zip(new_tokens, context_tokens):
        causal = c + (q + 1.0) / 2.0
        pairs += q * causal
        held_after = c + q
        held_window += w if w < held_after else held_after  # min(c + q, W)
        pairs_window += q * (w if w < causal else causal)
    return tokens, float(len(new_tokens)), held, held_window, pairs, pairs_window


def chunk_held(new: float, cached: float, chunk: float) -> float:
    """Keys a pass of ``new`` tokens after ``cached`` ones reads in a chunked layer: from the start of
    the first new token's chunk to the last new token, ``c + q - W floor(c / W)`` (a decode:
    ``(c mod W) + 1``)."""
    return cached + new - chunk * math.floor(cached / chunk)


def chunk_pairs(tokens: float, chunk: float) -> float:
    """Causal query-key pairs of the first ``n`` positions in a chunked layer, position ``p`` attending
    to ``(p mod W) + 1`` keys: ``floor(n / W) W (W + 1) / 2 + r (r + 1) / 2`` with ``r = n mod W``."""
    full = math.floor(tokens / chunk)
    rest = tokens - full * chunk
    return full * chunk * (chunk + 1.0) / 2.0 + rest * (rest + 1.0) / 2.0


@dataclass(frozen=True)
class BatchAggregates:
    """Sufficient statistics of batches for the step-time model: arrays, one entry per pass.

    With ``q`` new and ``c`` cached tokens per sequence and window ``W``:
    ``tokens = sum q``; ``held_full = sum (c + q)``; ``held_window = sum min(c + q, W)``;
    ``pairs_full = sum q (c + (q + 1) / 2)`` (causal query-key pairs);
    ``pairs_window = sum q min(c + (q + 1) / 2, W)``. A :class:`ChunkedWindow` (chunked local
    attention) holds :func:`chunk_held` and pairs ``chunk_pairs(c + q) - chunk_pairs(c)`` instead.
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
        if isinstance(window, ChunkedWindow):
            shape = BatchShape.of(q.tolist(), c.tolist(), window)
            held_window, pairs_window = shape.held_window, shape.pairs_window
        elif window is not None:
            w = float(window)
            held_window, pairs_window = float(np.minimum(c + q, w).sum()), float(q @ np.minimum(causal, w))
        return cls(*np.array([[tokens], [float(q.size)], [held], [held_window], [pairs], [pairs_window]]))

    @classmethod
    def decode_steps(cls, context_tokens: Sequence[float], steps: int, window: int | None) -> BatchAggregates:
        """Aggregates of ``steps`` decode steps of a fixed batch, one entry per step
        (:func:`decode_held`; a decode's causal pairs equal what it holds)."""
        held, held_window = decode_held(context_tokens, steps, window)
        batch = np.full(steps, float(len(context_tokens)))
        return cls(tokens=batch, sequences=batch, held_full=held, held_window=held_window, pairs_full=held,
                   pairs_window=held_window)  # fmt: skip

    def scaled(self, factor: FloatArray | float) -> BatchAggregates:
        """Every statistic times ``factor`` (one micro-batch of an evenly split batch)."""
        return BatchAggregates(*[getattr(self, f) * factor for f in self.__dataclass_fields__])


def decode_held(context_tokens: Sequence[float], steps: int, window: int | None) -> tuple[FloatArray, FloatArray]:
    """Tokens held in KV at each of ``steps`` decode steps of a fixed batch, as arrays (the array
    interface's decode steps): (all layers, :func:`decode_held_full`; windowed layers,
    :func:`decode_held_window`)."""
    total, n = float(sum(context_tokens)), float(len(context_tokens))
    held = np.array([decode_held_full(total, n, j) for j in range(steps)], dtype=np.float64)
    windowed = decode_held_window(context_tokens, steps, window)
    if windowed is None:
        return held, held
    if isinstance(windowed, float):
        return held, np.full(steps, windowed)
    return held, np.array(windowed, dtype=np.float64)


def decode_held_full(total: float, sequences: float, step: int) -> float:
    """Tokens all layers hold at decode step ``step`` (from 0) of ``sequences`` sequences that held
    ``total`` before the first: ``total + n (step + 1)``."""
    return total + sequences * float(step + 1)


def decode_held_window(context_tokens: Sequence[float], steps: int, window: int | None) -> list[float] | float | None:
    """Tokens the windowed layers hold at each of ``steps`` decode steps of a fixed batch: None
    without a window (they hold what all layers do); one float when every step holds the same
    (every sequence already at a sliding window: ``W n``); else a list, one per step.

    With a sliding window ``W``, ``held_window = sum min(c + j + 1, W) = W (n - k) + sum_below c +
    k (j + 1)``, where the ``k`` sequences still below the window (``c + j + 1 < W``) are the
    smallest (the largest of them reaches it first, at the first step where ``c + j + 1 >= W``:
    ``sum_below`` drops it then). Token counts are whole (or half) numbers, so every sum here is
    exact, in any order. Plain floats: a jump runs tens to hundreds of steps, where numpy's set-up
    per call costs more than its loops save.
    """
    if window is None:
        return None
    n = float(len(context_tokens))
    w = float(window)
    if isinstance(window, ChunkedWindow):
        return _chunk_decode_held(context_tokens, steps, w)
    below = sorted(c for c in context_tokens if c + 1.0 < w)
    if not below:
        return w * n
    k, below_sum = len(below), float(sum(below))
    held_window: list[float] = []
    j = 0
    while j < steps:
        reached = steps
        if k:  # the first step from j at which the largest sequence below reaches the window
            largest = below[k - 1]
            reached = min(max(j, math.ceil(w - largest) - 1), steps)
            while reached > j and largest + reached >= w:
                reached -= 1
            while reached < steps and largest + (reached + 1.0) < w:
                reached += 1
        count = float(k)
        above = w * (n - count) + below_sum
        held_window.extend([above + count * float(i + 1) for i in range(j, reached)])
        if reached < steps:
            k -= 1
            below_sum -= below[k]
        j = reached
    return held_window


def _chunk_decode_held(context_tokens: Sequence[float], steps: int, chunk: float) -> list[float]:
    """Keys read in a chunked layer at each of ``steps`` decode steps: step ``j`` reads
    ``((c + j) mod W) + 1`` per sequence. With the residues ``r = c mod W`` sorted and ``s = j mod W``,
    ``sum ((r + s) mod W) = sum r + n s - W #{r >= W - s}`` (a residue wraps once), so each step costs
    a bisection, not a pass over the batch."""
    residues = sorted(c - chunk * math.floor(c / chunk) for c in context_tokens)
    n, total = float(len(residues)), float(sum(residues))
    held = []
    for j in range(steps):
        shift = float(j) - chunk * math.floor(j / chunk)
        wrapped = len(residues) - bisect.bisect_left(residues, chunk - shift)
        held.append(total + n * shift - chunk * wrapped + n)
    return held


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


class Terms:
    """Seconds of one pass by component, and the FLOPs and bytes all chips did, as plain floats."""

    def __init__(self, weights: float = 0.0, kv: float = 0.0, compute: float = 0.0, communication: float = 0.0,
                 torus_hops: float = 0.0, fabric: float = 0.0, pipeline_hops: float = 0.0, fixed: float = 0.0,
                 flops: float = 0.0, moved: float = 0.0) -> None:  # fmt: skip
        self.weights, self.kv, self.compute, self.communication = weights, kv, compute, communication
        self.torus_hops, self.fabric, self.pipeline_hops, self.fixed = torus_hops, fabric, pipeline_hops, fixed
        self.flops, self.moved = flops, moved

    def copy(self) -> Terms:
        return Terms(self.weights, self.kv, self.compute, self.communication, self.torus_hops, self.fabric,
                     self.pipeline_hops, self.fixed, self.flops, self.moved)  # fmt: skip

    def seconds(self) -> list[float]:
        """The components in the order of :data:`COMPONENTS`."""
        return [self.weights, self.kv, self.compute, self.communication, self.torus_hops, self.fabric,
                self.pipeline_hops, self.fixed]  # fmt: skip

    @property
    def total_s(self) -> float:
        return (((self.weights + self.kv) + (self.compute + self.communication))
                + ((self.torus_hops + self.fabric) + (self.pipeline_hops + self.fixed)))  # fmt: skip


# -- one operator: the mechanisms, in plain floats (the step model's rows and single kernels alike) --------
def roofline_s(memory_s: float, compute_s: float, exponent: float) -> tuple[float, float]:
    """(seconds, share charged to memory) of one operator: ``max(m, c)`` on an ideal machine
    (``exponent`` 0), else the soft knee ``(m^p + c^p)^(1/p)`` split in proportion ``m^p : c^p``."""
    if exponent == 0.0:
        return (memory_s, 1.0) if memory_s >= compute_s else (compute_s, 0.0)
    if exponent == 2.0:
        memory_p, compute_p = memory_s * memory_s, compute_s * compute_s
        total = memory_p + compute_p
        return math.sqrt(total), memory_p / total if total > 0.0 else 0.0
    memory_p, compute_p = math.pow(memory_s, exponent), math.pow(compute_s, exponent)  # compiled: C's pow
    total = memory_p + compute_p
    return math.pow(total, 1.0 / exponent), memory_p / total if total > 0.0 else 0.0


def padded_rows_per_expert(tokens: int, experts: int, experts_per_token: int, tile: int) -> float:
    """Expected rows a grouped GEMM computes for one expert when ``tokens`` are routed uniformly
    (each to ``k`` distinct experts of ``E``, so each token picks a given expert with probability
    ``k/E``, independently of the other tokens): its ``X ~ Binomial(T, k/E)`` rows padded up to a
    multiple of the M tile, ``tile * E[ceil(X / tile)] = tile * sum_{j >= 0} P(X > j tile)``."""
    return _padded_rows(tokens, experts_per_token / experts, max(1, tile))


@lru_cache(maxsize=65536)
def _padded_rows(tokens: int, probability: float, tile: int) -> float:
    if tokens <= 0:
        return 0.0
    if tile == 1:
        return tokens * probability
    from scipy import special  # a dense model's run never needs scipy

    cuts = np.arange(0, tokens // tile + 1) * tile
    # P(X > j) = I_p(j + 1, T - j), the regularised incomplete beta function (what scipy.stats.binom.sf
    # evaluates, bit for bit, without its argument checks); 0 at j = T
    above = np.zeros(cuts.size)
    inside = cuts < tokens
    above[inside] = special.betainc(cuts[inside] + 1.0, (tokens - cuts[inside]).astype(np.float64), probability)
    return float(tile * above.sum())


@dataclass(frozen=True)
class MatmulRates:
    """Achievable rates of one tensor group's matmuls on one chip (B/s and FLOP/s), dense and grouped.

    ``grouped_*`` are the expert kernel's (the hardware's ``grouped_gemm`` fractions of the dense
    rates, looked up by weight precision); ``m_tile`` and ``m_tile_max`` the M tiles it pads each
    expert's rows to (:meth:`expert_tile`: one fixed tile when they are equal); without a
    ``grouped_gemm`` they equal the dense rates, tile 1.
    """

    read: float
    flops: float
    grouped_read: float
    grouped_flops: float
    m_tile: int
    m_tile_max: int

    @classmethod
    def of(cls, hardware: HardwareProfile, read_rate: float, weights: Precision, activations: Precision) -> MatmulRates:
        """Rates of ``weights`` on ``hardware`` read at ``read_rate`` (its matmul path: :func:`compute_path`);
        a dequantising path with its own ``expert_tile`` chooses its tile, others take ``grouped_gemm.m_tile``."""
        compute = hardware.compute
        path = compute_path(hardware, weights, activations)
        flops = path.flops(hardware)
        grouped = compute.grouped_gemm
        if grouped is None:
            return cls(read_rate, flops, read_rate, flops, 1, 1)
        smallest = largest = grouped.m_tile.value
        dequantised = compute.weight_only.get(weights) if not path.native else None
        adaptive = dequantised.expert_tile if dequantised is not None else None
        if adaptive is not None:
            smallest, largest = adaptive.smallest.value, adaptive.largest.value
        return cls(read_rate, flops, read_rate * grouped.streaming(weights, path.precision),
                   flops * grouped.compute(weights, path.precision), smallest, largest)  # fmt: skip

    def expert_tile(self, rows_per_expert: float) -> int:
        """The M tile at ``rows_per_expert`` mean rows per expert: the power of two at or above it,
        clamped to ``[m_tile, m_tile_max]`` (triton_kernels' ``opt_flags`` and vLLM's Marlin MoE choose
        their block M so); ``m_tile`` when the two are equal."""
        if self.m_tile == self.m_tile_max:
            return self.m_tile
        wanted = 1 << max(0, math.ceil(math.log2(max(rows_per_expert, 1.0))))
        return min(max(wanted, self.m_tile), self.m_tile_max)

    def compute_scaled(self, share: float) -> MatmulRates:
        """Rates with ``share`` of the FLOP rates (a serving stack's :attr:`matmul_share`), reads as they are."""
        return MatmulRates(self.read, self.flops * share, self.grouped_read, self.grouped_flops * share,
                           self.m_tile, self.m_tile_max)  # fmt: skip

    def scaled(self, share: float) -> MatmulRates:
        """Rates of ``share`` of the chip (a layer's region on a layer-pipelined machine)."""
        return MatmulRates(self.read * share, self.flops * share, self.grouped_read * share,
                           self.grouped_flops * share, self.m_tile, self.m_tile_max)  # fmt: skip


def gemm_terms(rates: MatmulRates, weight_bytes: float, flops: float) -> tuple[float, float]:
    """(memory seconds, compute seconds) of a dense matmul reading ``weight_bytes`` and doing ``flops``."""
    return weight_bytes / rates.read, flops / rates.flops


def gemm_s(rates: MatmulRates, weight_bytes: float, flops: float, exponent: float) -> float:
    """Seconds of a dense matmul: :func:`roofline_s` of its :func:`gemm_terms`."""
    memory_s, compute_s = gemm_terms(rates, weight_bytes, flops)
    return roofline_s(memory_s, compute_s, exponent)[0]


def routed_experts_terms(rates: MatmulRates, experts_hit: float, rows: float, expert_bytes: float,
                         flops_per_row: float) -> tuple[float, float]:  # fmt: skip
    """(weight seconds, compute seconds) of a grouped GEMM over ``experts_hit`` experts computing
    ``rows`` (padded) token rows: their weights streamed at the grouped read rate, their FLOPs at the
    grouped FLOP rate."""
    return experts_hit * expert_bytes / rates.grouped_read, rows * flops_per_row / rates.grouped_flops


def grouped_experts_s(rates: MatmulRates, tokens: int, experts: int, experts_per_token: int, expert_bytes: float,
                      flops_per_row: float, exponent: float) -> float:  # fmt: skip
    """Seconds of one MoE layer's routed experts on one chip holding all ``E`` of them, at ``tokens``
    tokens routed uniformly: ``E (1 - (1 - k/E)^T)`` distinct experts read, ``E`` experts' padded
    rows (:func:`padded_rows_per_expert`) computed, through the soft knee."""
    hit = float(distinct_experts(experts, experts_per_token, tokens))
    tile = rates.expert_tile(tokens * experts_per_token / experts)
    rows = experts * padded_rows_per_expert(tokens, experts, experts_per_token, tile)
    weight_s, compute_s = routed_experts_terms(rates, hit, rows, expert_bytes, flops_per_row)
    return roofline_s(weight_s, compute_s, exponent)[0]


def _stage_share(d: Deployment) -> float:
    """The share of a chip's rates one pass gets: ``1 / layers per stage`` on hardware that
    pipelines layers (every stage busy with another micro-batch), else 1."""
    return 1.0 / max(1.0, d.layers_per_stage) if d.hardware.execution.layer_pipelined else 1.0


def _torus_slice(link: InterconnectSpec, chips: int, link_bw: float, alpha: float) -> TorusSlice | None:
    """The torus slice ``chips`` chips of a group span on a torus interconnect (None on a switch)."""
    torus = link.torus
    if torus is None:
        return None
    return TorusSlice(chips, torus.dimensions.value, torus.wraparound_min_chips.value, link_bw, alpha)


def _expert_skew(moe: MoESpec | None, expert_parallel: int) -> tuple[float, float]:
    """(the busiest expert-parallel rank's load over the mean, the other ranks a token's experts
    reach) at the model's expert-load CV (else :data:`DEFAULT_EXPERT_LOAD_CV`); (1, 0) when dense."""
    if moe is None:
        return 1.0, 0.0
    load_cv = moe.expert_load_cv.value if moe.expert_load_cv else DEFAULT_EXPERT_LOAD_CV
    hot = hot_rank_factor(moe.num_routed_experts, expert_parallel, load_cv)
    return hot, other_ranks(moe.num_routed_experts, moe.experts_per_token, expert_parallel)


def deployment_cache(
    kept: Kept[Deployment, dict[CacheKey, CacheValue]], model: StepCostModel
) -> dict[CacheKey, CacheValue]:
    """Where ``model`` keeps results that depend on its deployment alone: one dict shared by the
    reference models of equal deployments, so the runs of one process that hold the same backend (a
    plan's candidates, a sweep's points) compute each once; a dict of its own for a subclass, whose
    results may depend on more."""
    if type(model) is not StepCostModel:
        return {}
    cache = kept.get(model.deployment)
    return cache if cache is not None else kept.keep(model.deployment, {})


@mypyc_attr(allow_interpreted_subclasses=True)  # a variant of the physics may build on it
class StepCostModel:
    """Pure step-time model of one deployment: batch state in, seconds out.

    One definition, in plain floats: :meth:`shape_terms` (every operator that depends on a batch's
    new tokens and sequences alone) plus :meth:`core_row` for the attention core over what it holds
    (:meth:`pass_terms`). The array methods (:meth:`pass_times`, :meth:`iteration_times`) evaluate it
    entry by entry; the engine's :class:`~simulator.analytic.step_fast.FastStepCost` caches
    :meth:`shape_terms` and adds the core rows, calling the same methods (so a subclass overriding a
    mechanism is seen by both).

    Parameters
    ----------
    deployment
        A resolved :class:`~simulator.analytic.placement.Deployment`.
    """

    def __init__(self, deployment: Deployment) -> None:
        d = self.deployment = deployment
        #: How many micro-batches can be in flight: one per layer on spatial machines.
        self.pipeline_stages = d.model.num_layers if d.hardware.execution.layer_pipelined else d.pipeline_parallel
        hw, model = d.hardware, d.model
        self.shapes = s = layer_shapes(model)
        tp = d.tensor_parallel
        self.share = _stage_share(d)
        tier = d.weights_tier
        self.bandwidth = tier.bandwidth.value * tier.efficiency.value * self.share  # B/s per chip (KV, weights)
        self.act_bytes = BYTES_PER_ELEMENT[d.activations]
        self.kv_bytes_per_token_layer = (
            s.kv_elements_per_token * BYTES_PER_ELEMENT[d.kv_cache] * kv_replication(model, tp) / tp
        )
        self.rates = {group: self._rates(group) for group in ("attention", "dense_ffn", "experts", "lm_head")}
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
        self.tp_slice: TorusSlice | None = _torus_slice(link, tp, self.link_bw, self.alpha)
        self.ep_slice: TorusSlice | None = _torus_slice(link, d.expert_parallel, self.link_bw, self.alpha)
        self.expert_tp = tp * self.dp // d.expert_parallel  # chips each expert is split over
        self.comm_overlap = d.stack.moe_comm_overlap.value
        self.hot_rank, self.other_ranks = _expert_skew(moe, d.expert_parallel)
        exponent = hw.compute.roofline_exponent
        self.roofline_exponent = None if exponent is None else exponent.value
        self.exponent = 0.0 if exponent is None else exponent.value  # 0: the ideal max(m, c)
        # speculative decoding: the draft's own cost model and the acceptance of each draft position
        self.draft = StepCostModel(d.draft) if d.draft is not None else None
        self.accepted = acceptance(d.speculative) if d.speculative is not None else ()
        self.fabric_per_layer_s = self._fabric_per_layer()
        #: MoE rows by their arguments (:meth:`moe_row`), shared by equal deployments (:func:`deployment_cache`).
        self.moe_rows: dict[tuple[float, float], MoERow] = deployment_cache(_moe_rows, self)
        layers = model.num_layers
        self.dense_layers = layers - self.moe_layers
        self.reductions = layers + self.dense_layers  # all-reduces per pass (MoE layers' are their own)
        # attention core: seconds per query-key pair (FLOPs at the activations' rate) and per KV token
        self.core_counts = (float(layers - self.window_layers), float(self.window_layers))
        self.core_flop_rate = compute_path(hw, d.activations, d.activations).flops(hw) * self.share
        self.flops_per_pair = FLOPS_PER_MAC * s.num_heads * (s.attention_score_dim + s.attention_value_dim) / tp
        self.s_per_pair = self.flops_per_pair / self.core_flop_rate
        self.kv_s_per_token = self.kv_bytes_per_token_layer / self.bandwidth
        # weight-streaming operators: (count per pass, weight bytes, FLOPs per driver unit, rates)
        self.attention_flops_per_token = FLOPS_PER_MAC * s.attention_params / tp
        self.dense_flops_per_token = FLOPS_PER_MAC * s.dense_ffn_params / tp
        self.lm_head_flops_per_sequence = FLOPS_PER_MAC * s.lm_head_params / tp
        self.flops_per_expert_token = FLOPS_PER_MAC * s.expert_params
        self.router_flops_per_token = FLOPS_PER_MAC * s.router_params / tp
        self.router_bytes = s.router_params * d.bytes_per_param("router") / tp
        self.router_weight_s = self.router_bytes / (d.read_rate("router") * self.share)
        layer_s = hw.execution.layer_latency.value + d.stack.layer_latency.value
        self.fixed_s = layers * layer_s + d.stack.step_overhead.value
        self.expert_s = d.stack.expert_latency.value
        self.chips = float(tp * self.dp)
        # the dense matmul rows: attention projections (per token), dense FFN (per token), LM head (per sequence)
        self.gemm_counts = (float(layers), float(self.dense_layers), 1.0)
        self.gemm_rates = (self.rates["attention"], self.rates["dense_ffn"], self.rates["lm_head"])
        self.gemm_weight_bytes = (self.attn_weight_bytes, self.dense_weight_bytes, self.lm_head_bytes)
        self.gemm_flops = (self.attention_flops_per_token, self.dense_flops_per_token, self.lm_head_flops_per_sequence)

    def _rates(self, group: TensorGroup) -> MatmulRates:
        d = self.deployment
        rates = MatmulRates.of(d.hardware, d.read_rate(group), d.precision[group], d.activations)
        stack_share = d.stack.matmul_share.value if d.stack.matmul_share is not None else 1.0
        return rates.compute_scaled(stack_share).scaled(self.share)

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

    def allreduce_s(self, tokens: float) -> tuple[float, float]:
        """(seconds, torus hop seconds) of one tensor-parallel all-reduce of ``tokens`` activations."""
        msg = tokens * self.deployment.model.hidden_size * self.act_bytes
        if self.tp_slice is not None:
            seconds, hops = self.tp_slice.allreduce_s(np.array([msg]))
            return float(seconds[0]), hops
        tp = self.deployment.tensor_parallel
        if tp == 1:
            return 0.0, 0.0
        return 2 * math.ceil(math.log2(tp)) * self.alpha + 2 * (tp - 1) / tp * msg / self.link_bw, 0.0

    def alltoall_s(self, tokens_per_rank: float) -> tuple[float, float]:
        """(seconds, torus hop seconds) of one dispatch (or combine): each rank sends its tokens once
        to every distinct other rank holding one of their experts, and the busiest rank receives ``h``
        (hot experts) times the mean: ``alltoall_latency + h * tokens * other_ranks * hidden * bytes /
        bw`` through a switch, the torus's all-to-all of those bytes on a torus."""
        msg = self.hot_rank * tokens_per_rank * self.other_ranks * self.deployment.model.hidden_size * self.act_bytes
        if self.ep_slice is not None:
            seconds, hops = self.ep_slice.alltoall_s(np.array([msg]))
            return float(seconds[0]), hops
        return self.alltoall_alpha + msg / self.link_bw, 0.0

    def moe_row(self, tokens: float, tokens_per_rank: float) -> MoERow:
        """(weight seconds, compute seconds, FLOPs, weight bytes, expert set-up seconds) of one MoE
        layer on the busiest chip.

        The router's weights are read once. Routed experts run as a grouped GEMM
        (:func:`routed_experts_terms`): the busiest expert-parallel rank's distinct experts (weights
        read) and token-expert pairs (hot experts included), each hit expert's rows padded up to the
        kernel's M tile, each expert split over ``expert_tp`` chips; shared experts run as a dense
        matmul on every attention rank's own tokens, split like the dense layers (``tp``).

        Kept by its arguments (:attr:`moe_rows`): a row depends on them and the deployment alone,
        and is most of what a new batch shape costs; a plan's runs meet each token count with
        several sequence counts (the 10-minute question: 231,000 shapes, 57,000 token counts).
        """
        key = (tokens, tokens_per_rank)
        row = self.moe_rows.get(key)
        if row is None:
            row = self._moe_row(tokens, tokens_per_rank)
            if len(self.moe_rows) >= MOE_ROWS_KEPT:
                self.moe_rows.clear()
            self.moe_rows[key] = row
        return row

    def _moe_row(self, tokens: float, tokens_per_rank: float) -> MoERow:
        d = self.deployment
        moe = d.model.moe
        assert moe is not None
        e, k, ep = moe.num_routed_experts, moe.experts_per_token, d.expert_parallel
        routed = round(tokens)
        hit = busiest_rank_experts(e, k, ep, routed)  # distinct routed experts the chip runs
        pairs = busiest_rank_pairs_hot(k, ep, self.hot_rank, routed)
        rates = self.rates["experts"]
        tile = rates.expert_tile(routed * k / e)
        if tile > 1 and routed > 0:  # each hit expert's rows rounded up to the tile
            hit_all = float(distinct_experts(e, k, routed))
            pairs += hit * (e * padded_rows_per_expert(routed, e, k, tile) - routed * k) / hit_all
        experts, rows = hit / self.expert_tp, pairs / self.expert_tp
        weight_s, compute_s = routed_experts_terms(rates, experts, rows, self.expert_bytes, self.flops_per_expert_token)
        shared = moe.num_shared_experts / d.tensor_parallel
        other_flops = (shared * self.flops_per_expert_token + self.router_flops_per_token) * tokens_per_rank
        weight_s += shared * self.expert_bytes / rates.read + self.router_weight_s
        compute_s += other_flops / rates.flops
        flops = rows * self.flops_per_expert_token + other_flops
        weight_bytes = (experts + shared) * self.expert_bytes + self.router_bytes
        return weight_s, compute_s, flops, weight_bytes, (hit + moe.num_shared_experts) * self.expert_s

    def core_row(
        self, count: float, held: float, pairs: float, share: float, rank_tokens: float
    ) -> tuple[float, float, float, float]:
        """(seconds, memory share, FLOPs, bytes) of ``count`` attention-core operators (one per layer)
        of one rank: KV read ``(held * share + new tokens) * kv_s_per_token`` against ``pairs * share``
        query-key pairs, through the soft knee; FLOPs and bytes of all chips."""
        kv_tokens, memory_s, compute_s = self.core_terms(held, pairs, share, rank_tokens)
        seconds, memory_share = roofline_s(memory_s, compute_s, self.exponent)
        work = self.chips * count
        return (count * seconds, memory_share, work * compute_s * self.core_flop_rate,
                work * kv_tokens * self.kv_bytes_per_token_layer)  # fmt: skip

    def core_terms(self, held: float, pairs: float, share: float, rank_tokens: float) -> tuple[float, float, float]:
        """(KV tokens read, memory seconds, compute seconds) of one attention-core operator of one
        rank (:meth:`core_row`, :meth:`decode_seconds`)."""
        kv_tokens = held * share + rank_tokens
        return kv_tokens, kv_tokens * self.kv_s_per_token, pairs * share * self.s_per_pair

    def core_window(self, tokens: float, held_window: float, pairs_window: float) -> tuple[float, float, float] | None:
        """(seconds, FLOPs, bytes) of the windowed layers' attention core (:meth:`core_row`); None
        without windowed layers."""
        count_window = self.core_counts[1]
        if count_window == 0.0:
            return None
        share = 1.0 / self.dp
        seconds, _share, flops, moved = self.core_row(count_window, held_window, pairs_window, share, tokens * share)
        return seconds, flops, moved

    def core_beside(
        self, tokens: float, held_full: float, pairs_full: float, window: tuple[float, float, float] | None
    ) -> tuple[float, float, float]:
        """(seconds, FLOPs, bytes) of the attention core of all layers (:meth:`core_row`) plus
        ``window``, the windowed layers' (:meth:`core_window`)."""
        share = 1.0 / self.dp
        count_full = self.core_counts[0]
        seconds = flops = moved = 0.0
        if count_full != 0.0:
            seconds, _share, flops, moved = self.core_row(count_full, held_full, pairs_full, share, tokens * share)
        if window is not None:
            window_s, window_flops, window_moved = window
            seconds, flops, moved = seconds + window_s, flops + window_flops, moved + window_moved
        return seconds, flops, moved

    def decode_seconds(
        self, base_s: float, sequences: float, total: float, window_s: float | None, steps: tuple[int, int],
        seconds: list[float], elapsed_s: float,
    ) -> float:  # fmt: skip
        """Seconds of decode steps ``start <= j < stop`` (``steps``) of one micro-batch of
        ``sequences`` sequences that held ``total`` tokens before the first
        (:func:`decode_held_full`), each appended to ``seconds``; returns ``elapsed_s`` plus them,
        added left to right. ``base_s`` is the batch's :meth:`shape_terms` seconds, ``window_s`` its
        windowed layers' core (:meth:`core_window`, the same at every step; None without windowed
        layers). :meth:`core_beside`'s seconds in one loop: :meth:`core_row`'s terms and knee in
        their order, so each step's seconds are its iteration's to the last bit
        (``tests/analytic/test_step_fast.py``), without the calls, tuples, FLOPs and bytes of
        each step (a decode jump's steps are most of what the engine costs)."""
        share = 1.0 / self.dp
        count = self.core_counts[0]
        rank_tokens = sequences * share
        start, stop = steps
        for j in range(start, stop):
            held = decode_held_full(total, sequences, j)
            core_s = 0.0
            if count != 0.0:
                _kv_tokens, memory_s, compute_s = self.core_terms(held, held, share, rank_tokens)
                knee_s, _share = roofline_s(memory_s, compute_s, self.exponent)
                core_s = count * knee_s
            if window_s is not None:
                core_s = core_s + window_s
            step_s = base_s + core_s
            seconds.append(step_s)
            elapsed_s += step_s
        return elapsed_s

    def micro_batches(self, tokens: float) -> float:
        """Micro-batches a batch of ``tokens`` new tokens is split into: ``clip(tokens, 1, stages)``."""
        stages = float(self.pipeline_stages)
        return 1.0 if stages == 1.0 else min(max(tokens, 1.0), stages)

    def shape_terms(self, tokens: float, sequences: float) -> Terms:
        """Every term of a pass but the attention core: the weight-streaming operators (attention
        projections, dense FFN, MoE experts, LM head), communication, pipeline hops, fabric and
        fixed latency, for ``tokens`` new tokens of ``sequences`` sequences (FLOPs and bytes of one pass)."""
        rank_share = 1.0 / self.dp
        rank_tokens, rank_sequences = tokens * rank_share, sequences * rank_share
        terms = Terms()
        drivers = (rank_tokens, rank_tokens, rank_sequences)  # attention projections, dense FFN, LM head
        for row in range(3):
            rates, weight_bytes, flops = (
                self.gemm_rates[row],
                self.gemm_weight_bytes[row],
                drivers[row] * self.gemm_flops[row],
            )
            memory_s, compute_s = gemm_terms(rates, weight_bytes, flops)
            self._charge(terms, self.gemm_counts[row], memory_s, compute_s, memory_s, flops, weight_bytes)
        expert_s = 0.0
        if self.moe_layers:
            weight_s, compute_s, flops, weight_bytes, expert_s = self.moe_row(tokens, rank_tokens)
            self._charge(terms, float(self.moe_layers), weight_s, compute_s, weight_s, flops, weight_bytes)
        allreduce, allreduce_hops = self.allreduce_s(rank_tokens)
        if self.dp > 1:  # data-parallel attention: experts reached by a dispatch and a combine per MoE layer
            exchange, exchange_hops = self.alltoall_s(rank_tokens)
            kept = 1.0 - self.comm_overlap if rank_tokens >= TWO_BATCH_OVERLAP_MIN_TOKENS else 1.0
            moe_comm, moe_hops = 2 * kept * exchange, 2 * kept * exchange_hops
        else:  # tensor-parallel attention: every chip holds every token, the MoE output is all-reduced
            moe_comm, moe_hops = allreduce, allreduce_hops
        terms.communication = self.reductions * allreduce + self.moe_layers * moe_comm
        terms.torus_hops = self.reductions * allreduce_hops + self.moe_layers * moe_hops
        msg = tokens * self.deployment.model.hidden_size * self.act_bytes
        if self.tp_slice is None:
            hop = self.alpha + msg / self.link_bw
        else:
            hop = float(self.tp_slice.neighbour_s(np.array([msg]))[0])
        terms.pipeline_hops = (self.deployment.pipeline_parallel - 1) * hop
        dense_fabric, moe_fabric = self.fabric_per_layer_s
        terms.fabric = self.dense_layers * dense_fabric + self.moe_layers * moe_fabric
        terms.fixed = self.fixed_s + self.moe_layers * expert_s
        return terms

    def _charge(self, terms: Terms, count: float, memory_s: float, compute_s: float, weight_s: float, flops: float,
                weight_bytes: float) -> None:  # fmt: skip
        """Add ``count`` operators (:func:`roofline_s` of ``memory_s`` and ``compute_s``) to ``terms``:
        memory's share (``m^p : c^p``) split between weights and KV by their seconds, the rest to
        compute; and their FLOPs and weight bytes on all chips."""
        seconds, memory_share = roofline_s(memory_s, compute_s, self.exponent)
        weight_share = weight_s / memory_s if memory_s > 0.0 else 0.0
        terms.weights += count * seconds * memory_share * weight_share
        terms.kv += count * seconds * memory_share * (1.0 - weight_share)
        terms.compute += count * seconds * (1.0 - memory_share)
        terms.flops += self.chips * count * flops
        terms.moved += self.chips * count * weight_bytes

    def plus_core(self, base: Terms, tokens: float, held_full: float, pairs_full: float, held_window: float,
                  pairs_window: float) -> Terms:  # fmt: skip
        """``base`` (:meth:`shape_terms`) plus the attention core of all and of windowed layers, by component."""
        terms = base.copy()
        share = 1.0 / self.dp
        rank_tokens = tokens * share
        for count, held, pairs in ((self.core_counts[0], held_full, pairs_full),
                                   (self.core_counts[1], held_window, pairs_window)):  # fmt: skip
            if count == 0.0:
                continue
            seconds, memory_share, flops, moved = self.core_row(count, held, pairs, share, rank_tokens)
            terms.kv += seconds * memory_share
            terms.compute += seconds * (1.0 - memory_share)
            terms.flops += flops
            terms.moved += moved
        return terms

    # -- public API ----------------------------------------------------------------------------
    def pass_terms(self, shape: BatchShape) -> Terms:
        """One pass of a batch of this shape through every layer (the definition, in plain floats)."""
        base = self.shape_terms(shape.tokens, shape.sequences)
        return self.plus_core(base, shape.tokens, shape.held_full, shape.pairs_full, shape.held_window,
                              shape.pairs_window)  # fmt: skip

    def pass_times(self, batch: BatchAggregates) -> PassTimes:
        """Seconds of one pass through every layer, for each entry of ``batch`` (:meth:`pass_terms` of each)."""
        columns = [getattr(batch, name).tolist() for name in BatchShape._fields]
        passes = [self.pass_terms(BatchShape(*entry)) for entry in zip(*columns, strict=True)]
        seconds = np.array([terms.seconds() for terms in passes], dtype=np.float64).reshape(len(passes), 8)
        parts = {name: seconds[:, i] for i, name in enumerate(TERM_COMPONENTS)}
        parts = {name: parts[name] for name in COMPONENTS}
        return PassTimes(parts, np.array([t.flops for t in passes], dtype=np.float64),
                         np.array([t.moved for t in passes], dtype=np.float64))  # fmt: skip

    def pass_time(self, new_tokens: npt.ArrayLike, context_tokens: npt.ArrayLike) -> StepTime:
        """One pass of a batch through every layer: the latency one micro-batch sees.

        Parameters
        ----------
        new_tokens
            Tokens each sequence processes this pass (1 for decode), shape (B,).
        context_tokens
            Tokens already in each sequence's KV cache, shape (B,).
        """
        window = self.deployment.model.attention.window
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
        window = self.draft.deployment.model.attention.window
        decode = BatchAggregates.of(np.ones(context_tokens.size), context_tokens, window)
        return self.draft.iteration_times(decode).scaled(float(len(self.accepted)))

    def draft_s(self, context_tokens: FloatArray) -> float:
        """Seconds of one step's draft passes (0 without speculative decoding)."""
        return float(self.draft_times(context_tokens).total_s[0]) if self.draft is not None else 0.0

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens a decode step emits per sequence: 1, or a verify's with speculation."""
        return tokens_per_verify(self.accepted) if self.accepted else 1.0

    def cycle_time(self, batch_size: int, context_tokens: float, new_tokens: float = 1.0) -> tuple[float, StepTime]:
        """Seconds between successive tokens of each of ``batch_size`` identical sequences.

        Returns
        -------
        (iteration seconds, its StepTime)
        """
        window = self.deployment.model.attention.window
        batch = BatchAggregates.of(np.full(batch_size, new_tokens), np.full(batch_size, context_tokens), window)
        step = self.iteration_times(batch).step()
        return step.total_s, step


#: :meth:`Terms.seconds`'s order, by component name.
TERM_COMPONENTS = ("weights_memory", "kv_memory", "compute", "communication", "torus_hops", "fabric",
                   "pipeline_hops", "fixed_latency")  # fmt: skip
