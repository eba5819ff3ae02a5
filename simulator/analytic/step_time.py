"""Time of one pass of a batch through a deployed model: prefill chunks and decode tokens alike.

A batch is, per sequence, the new tokens it processes this pass (``q``: 1 for a decode,
the chunk length for prefill, ``gamma + 1`` for a speculative verify) and the tokens already
in its KV cache (``c``). Assumptions:

- **Operators.** Per layer: attention projections, the attention core (scores and values
  over the KV), the FFN (dense, or MoE with the *expected* distinct experts the batch
  touches); once per pass the LM head. Each operator runs at its own roofline,
  ``max(bytes / (bandwidth * eff), flops / (peak * eff))``: its bytes are read from the tier
  the deployment keeps weights and KV in, its FLOPs run at the matmul precision.
- **Tensor parallelism** shards weights, FLOPs and KV over ``tp`` chips and costs two
  all-reduces per layer, each ``2 ceil(log2 tp) alpha + 2 (tp-1)/tp * msg / (bw * eff)`` with
  ``msg = tokens * hidden * activation bytes``: the latency of recursive doubling and the
  bandwidth of a ring (Thakur, Rabenseifner & Gropp 2005, the regimes small decode messages
  and large prefill messages sit in). An expert-parallel MoE layer replaces its all-reduce
  with a dispatch and a combine all-to-all, each ``ceil(log2 ep) alpha + (ep-1)/ep * msg_k /
  (bw * eff)`` (Bruck's latency), where ``msg_k`` carries k copies of every token.
- **Pipeline hops**: ``pp - 1`` chip-to-chip transfers per pass, ``alpha + msg / (bw * eff)``.
- **Fixed latency**: ``layer_latency`` per layer (kernel launches and syncs on a GPU, the
  per-layer slot of a deterministic schedule on an LPU) and ``step_overhead`` per pass.
- **Fabric traversal** (spatial chips with a ``fabric``): a token crosses the cores that
  hold the weights it uses; on a 2D mesh that is ``sqrt(cores spanned)`` hops per layer, at
  ``hop_latency`` each, with ``cores spanned = active layer bytes / SRAM per core``.
- **Layer-pipelined execution** (``layer_pipelined``): each layer owns a region of its
  chip, so an operator gets ``1 / layers per chip`` of the chip's compute and bandwidth, and
  up to ``num_layers`` micro-batches can be in flight (see :meth:`StepCostModel.cycle_time`).
- Terms add (no overlap of communication with compute): a conservative, explainable choice.
- Not modelled: activation traffic, norms and rotary embeddings, expert load imbalance,
  logits all-gather, and host-side network time.

On SRAM machines the bandwidth terms are tiny and latency dominates: a bandwidth-only
roofline would predict them about 100x too fast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from simulator.analytic.architecture import FLOPS_PER_MAC, expected_distinct_experts, layer_shapes
from simulator.analytic.placement import Deployment, kv_replication
from simulator.analytic.precision import BYTES_PER_ELEMENT, matmul_precision

COMPONENTS = (
    "weights_memory",
    "kv_memory",
    "compute",
    "communication",
    "fabric",
    "pipeline_hops",
    "fixed_latency",
)

FloatArray = npt.NDArray[np.float64]


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
        keys = self.components_s.keys() | other.components_s.keys()
        return StepTime({k: self.components_s.get(k, 0.0) + other.components_s.get(k, 0.0) for k in keys})


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
        """Aggregates of one batch given per-sequence new and cached tokens."""
        q = np.asarray(new_tokens, dtype=np.float64)
        c = np.asarray(context_tokens, dtype=np.float64)
        causal = c + (q + 1.0) / 2.0
        w = np.inf if window is None else float(window)
        return cls(
            tokens=np.array([q.sum()]),
            sequences=np.array([float(q.size)]),
            held_full=np.array([(c + q).sum()]),
            held_window=np.array([np.minimum(c + q, w).sum()]),
            pairs_full=np.array([(q * causal).sum()]),
            pairs_window=np.array([(q * np.minimum(causal, w)).sum()]),
        )

    @classmethod
    def decode_steps(cls, context_tokens: FloatArray, steps: int, window: int | None) -> BatchAggregates:
        """Aggregates of ``steps`` decode steps of a fixed batch, one entry per step.

        Step ``j`` (from 0) decodes one token for each sequence, whose cache then holds
        ``c + j + 1`` tokens: ``held_full = sum c + n (j + 1)`` and, with a window,
        ``held_window = sum min(c + j + 1, W)``; a decode's causal pairs equal what it holds.
        """
        n = float(context_tokens.size)
        j = np.arange(steps, dtype=np.float64)
        held = context_tokens.sum() + n * (j + 1.0)
        if window is None:
            held_window = held
        else:
            w = float(window)
            small = context_tokens[context_tokens + 1.0 < w]
            growing = np.minimum(small[None, :] + 1.0 + j[:, None], w).sum(axis=1)  # those below the window
            held_window = w * (context_tokens.size - small.size) + growing
        return cls(
            tokens=np.full(steps, n),
            sequences=np.full(steps, n),
            held_full=held,
            held_window=np.asarray(held_window, dtype=np.float64),
            pairs_full=held,
            pairs_window=np.asarray(held_window, dtype=np.float64),
        )

    def scaled(self, factor: FloatArray | float) -> BatchAggregates:
        """Every statistic times ``factor`` (one micro-batch of an evenly split batch)."""
        return BatchAggregates(*(getattr(self, f) * factor for f in self.__dataclass_fields__))


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


class CostModel(Protocol):
    """What the engine asks of a step-time model: the seconds (and the work) of iterations.

    :class:`StepCostModel` is the roofline model of this module; a test double (a constant
    step time) or another execution style implements the same method.
    """

    def iteration_times(self, batch: BatchAggregates) -> PassTimes:
        """Seconds between iterations for each entry of ``batch``, by component, with FLOPs and bytes."""
        ...


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
        self.bandwidth = tier.bandwidth.value * tier.efficiency.value * self.share  # B/s per chip
        eff = hw.compute.efficiency.value * self.share
        self.matmul_flops = hw.compute.peak[matmul_precision(hw, d.weights, d.activations)].value * eff
        self.attention_flops = hw.compute.peak[matmul_precision(hw, d.activations, d.activations)].value * eff
        bpw = BYTES_PER_ELEMENT[d.weights]
        self.act_bytes = BYTES_PER_ELEMENT[d.activations]
        self.kv_bytes_per_token_layer = (
            self.shapes.kv_elements_per_token * BYTES_PER_ELEMENT[d.kv_cache] * kv_replication(model, tp) / tp
        )
        s = self.shapes
        self.attn_weight_bytes = s.attention_params * bpw / tp
        self.dense_weight_bytes = s.dense_ffn_params * bpw / tp
        self.expert_weight_bytes = s.expert_params * bpw / tp
        self.lm_head_bytes = s.lm_head_params * bpw / tp
        moe = model.moe
        self.moe_layers = moe.num_moe_layers if moe else 0
        self.window_layers = model.attention.sliding_window_layers
        self.link_bw = hw.interconnect.bandwidth.value * hw.interconnect.efficiency.value
        self.alpha = hw.interconnect.latency.value
        self.fabric_per_layer_s = self._fabric_per_layer(bpw)
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
        self.op_flop_rate = np.array(
            [self.matmul_flops, self.attention_flops, self.attention_flops] + [self.matmul_flops] * 3
        )[:, None]
        self.flops_per_pair = FLOPS_PER_MAC * s.num_heads * (s.attention_score_dim + s.attention_value_dim) / tp
        self.flops_per_token = (
            FLOPS_PER_MAC
            / tp
            * np.array(
                [
                    s.attention_params,
                    s.dense_ffn_params,
                    (moe.experts_per_token + moe.num_shared_experts) * s.expert_params + s.router_params
                    if moe
                    else 0.0,
                    s.lm_head_params,
                ]
            )
        )
        self.fixed_s = layers * hw.execution.layer_latency.value + hw.execution.step_overhead.value
        # Batch-independent parts of the operator terms, in seconds per unit of their driver.
        self.op_weight_s = self.op_weight_bytes / self.bandwidth
        self.op_compute_s_per_unit = (
            np.array([self.flops_per_token[0], self.flops_per_pair, self.flops_per_pair, *self.flops_per_token[1:]])[
                :, None
            ]
            / self.op_flop_rate
        )
        self.kv_s_per_token = self.kv_bytes_per_token_layer / self.bandwidth

    # -- terms ---------------------------------------------------------------------------------
    def _fabric_per_layer(self, bpw: float) -> tuple[float, float]:
        """Traversal seconds per (dense, MoE) layer: hop_latency * sqrt(cores spanned)."""
        d, hw, s = self.deployment, self.deployment.hardware, self.shapes
        if hw.fabric is None:
            return 0.0, 0.0
        cores = hw.compute.cores.value
        sram_per_core = d.weights_tier.capacity.value / cores
        moe = d.model.moe
        active_expert_params = (moe.experts_per_token + moe.num_shared_experts) * s.expert_params if moe else 0.0

        def traversal(ffn_params: float) -> float:
            active = (s.attention_params + ffn_params) * bpw / d.tensor_parallel
            return hw.fabric.hop_latency.value * math.sqrt(min(cores, active / sram_per_core))  # type: ignore[union-attr]

        return traversal(s.dense_ffn_params), traversal(active_expert_params)

    def _allreduce_s(self, tokens: FloatArray, tp: int) -> FloatArray:
        if tp == 1:
            return np.zeros_like(tokens)
        msg = tokens * self.deployment.model.hidden_size * self.act_bytes
        return 2 * math.ceil(math.log2(tp)) * self.alpha + 2 * (tp - 1) / tp * msg / self.link_bw

    def _alltoall_s(self, tokens: FloatArray, ep: int) -> FloatArray:
        k = self.deployment.model.moe.experts_per_token  # type: ignore[union-attr]
        msg = tokens * k * self.deployment.model.hidden_size * self.act_bytes
        return math.ceil(math.log2(ep)) * self.alpha + (ep - 1) / ep * msg / self.link_bw

    # -- public API ----------------------------------------------------------------------------
    def pass_times(self, batch: BatchAggregates) -> PassTimes:
        """Seconds of one pass through every layer, for each entry of ``batch`` (vectorised).

        Each operator row is bound by ``max(bytes / bandwidth, FLOPs / FLOP rate)``; its time
        goes to the memory components (weights and KV by their bytes) or to compute.
        """
        d, model = self.deployment, self.deployment.model
        tp, ep, pp = d.tensor_parallel, d.expert_parallel, d.pipeline_parallel
        tokens = batch.tokens
        n = tokens.size
        weight_s = np.repeat(self.op_weight_s, n, axis=1)
        if self.moe_layers:
            moe = model.moe
            assert moe is not None
            touched = expected_distinct_experts(moe.num_routed_experts, moe.experts_per_token, tokens)
            weight_s[4] = (touched + moe.num_shared_experts) * self.expert_weight_bytes / self.bandwidth
        kv_s = np.zeros((6, n))
        kv_s[1] = (batch.held_full + tokens) * self.kv_s_per_token
        kv_s[2] = (batch.held_window + tokens) * self.kv_s_per_token
        drivers = np.empty((6, n))
        drivers[0] = drivers[3] = drivers[4] = tokens
        drivers[1], drivers[2], drivers[5] = batch.pairs_full, batch.pairs_window, batch.sequences
        compute_s = drivers * self.op_compute_s_per_unit
        count = self.op_count
        memory_bound = (weight_s + kv_s >= compute_s) * count
        compute_bound = count - memory_bound
        parts = {
            "weights_memory": (memory_bound * weight_s).sum(axis=0),
            "kv_memory": (memory_bound * kv_s).sum(axis=0),
            "compute": (compute_bound * compute_s).sum(axis=0),
        }
        allreduce = self._allreduce_s(tokens, tp)
        moe_comm = 2 * self._alltoall_s(tokens, ep) if ep > 1 else allreduce
        parts["communication"] = (model.num_layers + self.dense_layers) * allreduce + self.moe_layers * moe_comm
        msg = tokens * model.hidden_size * self.act_bytes
        parts["pipeline_hops"] = (pp - 1) * (self.alpha + msg / self.link_bw)
        dense_fabric, moe_fabric = self.fabric_per_layer_s
        parts["fabric"] = np.full(n, self.dense_layers * dense_fabric + self.moe_layers * moe_fabric)
        parts["fixed_latency"] = np.full(n, self.fixed_s)
        total_flops = tp * (count * compute_s * self.op_flop_rate).sum(axis=0)
        total_bytes = tp * self.bandwidth * (count * (weight_s + kv_s)).sum(axis=0)
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

        ``n = min(sequences, stages)`` micro-batches of ``1/n`` of the batch each; every
        sequence advances once per ``max(pass(batch/n), n * pass(batch/n) / stages)``.
        With one stage (a GPU) this is ``pass(batch)``.
        """
        stages = self.pipeline_stages
        if stages == 1:
            return self.pass_times(batch)
        micro_batches = np.clip(batch.sequences, 1.0, stages)
        micro = self.pass_times(batch.scaled(1.0 / micro_batches))
        stretch = np.maximum(1.0, micro_batches / stages)
        return PassTimes(
            {k: v * stretch for k, v in micro.components_s.items()},
            micro.flops * micro_batches,
            micro.bytes_moved * micro_batches,
        )

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
