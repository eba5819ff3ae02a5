"""Parameter counts, bytes and FLOPs of a transformer, derived from its config.

Assumptions (stated once, used everywhere):

- Gated FFN (SwiGLU): three matrices of ``hidden x intermediate`` (``ffn_matrices``: two for a
  plain FFN); a shared expert has the routed experts' width. Biases, norms and rotary tables
  are ignored (< 0.1 % of weights).
- GQA attention: q and o are ``hidden x heads*head_dim``, k and v ``hidden x kv_heads*head_dim``.
- MLA (DeepSeek): low-rank q and kv projections; the KV cache holds the ``kv_lora_rank``
  latent plus the decoupled rope key per token and layer; attention runs in the absorbed form
  (scores over ``kv_lora_rank + qk_rope_head_dim``, values over ``kv_lora_rank``).
- Hybrid stacks (``model.hybrid``): the per-layer shapes are averages over ``num_layers``, so that
  ``num_layers x`` a shape is the stack's sum: attention params
  ``(attention_layers x attention + mixer_layers x mixer_params) / num_layers``, KV elements per
  token and the score and value widths (the attention FLOPs per query-key pair)
  ``attention_layers / num_layers`` of an attention layer's, dense FFN params
  ``dense layers / (num_layers - MoE layers)`` of one FFN's. The mixers' per-sequence state is
  not KV (``hybrid.state_elements_per_sequence``); its per-token update FLOPs and the reading and
  writing of it each step are not counted (for Mamba-2, ``d_inner x d_state`` multiply-adds a token
  and layer, a few % of the mixer's projections).
- The LM head is read every step; the input embedding is a row lookup (stored, not streamed).
- MoE routing is uniform and independent across tokens, so among T routed tokens the
  expected number of distinct experts hit is ``E * (1 - (1 - k/E)**T)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from simulator.analytic.precision import BYTES_PER_ELEMENT
from simulator.config.base import Precision
from simulator.config.model import ModelSpec, TensorGroup

FLOPS_PER_MAC = 2


@dataclass(frozen=True)
class LayerShapes:
    """Parameter counts per layer kind and KV elements per token, for one model."""

    attention_params: float  # per layer: projections
    dense_ffn_params: float  # per dense layer
    expert_params: float  # one routed (or shared) expert
    router_params: float  # per MoE layer
    embedding_params: float  # input embedding table
    lm_head_params: float  # output projection (0 extra storage when tied)
    kv_elements_per_token: float  # per layer (hybrids: averaged), K and V (or MLA latent + rope key)
    attention_score_dim: float  # per head (hybrids: averaged over layers): q.k dot-product length
    attention_value_dim: float  # per head (hybrids: averaged over layers): width of the weighted value sum
    num_heads: int


def layer_shapes(model: ModelSpec) -> LayerShapes:
    attn = model.attention
    h = model.hidden_size
    if attn.mla is not None:
        mla = attn.mla
        qk_head = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        q = (
            h * mla.q_lora_rank + mla.q_lora_rank * attn.num_heads * qk_head
            if mla.q_lora_rank
            else h * attn.num_heads * qk_head
        )
        kv = h * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank * attn.num_heads * (
            mla.qk_nope_head_dim + mla.v_head_dim
        )
        o = attn.num_heads * mla.v_head_dim * h
        attention_params = float(q + kv + o)
        kv_elements = float(mla.kv_lora_rank + mla.qk_rope_head_dim)
        score_dim = float(mla.kv_lora_rank + mla.qk_rope_head_dim)
        value_dim = float(mla.kv_lora_rank)
    else:
        q_width = attn.num_heads * attn.head_dim
        kv_width = attn.num_kv_heads * attn.head_dim
        attention_params = float(2 * h * q_width + 2 * h * kv_width)
        kv_elements = float(2 * kv_width)
        score_dim = value_dim = float(attn.head_dim)
    moe = model.moe
    dense_ffn_params = float(model.ffn_matrices * h * (model.intermediate_size or 0))
    hybrid = model.hybrid
    if hybrid is not None:
        layers = model.num_layers
        attention_params = (
            hybrid.attention_layers * attention_params + hybrid.mixer_layers * hybrid.mixer_params
        ) / layers
        kv_elements *= hybrid.attention_layers / layers
        score_dim *= hybrid.attention_layers / layers
        value_dim *= hybrid.attention_layers / layers
        plain_layers = layers - (moe.num_moe_layers if moe else 0)
        dense_ffn_params *= model.num_dense_layers / plain_layers if plain_layers else 0.0
    embedding = float(model.vocab_size * h)
    return LayerShapes(
        attention_params=attention_params,
        dense_ffn_params=dense_ffn_params,
        expert_params=float(model.ffn_matrices * h * moe.expert_intermediate_size) if moe else 0.0,
        router_params=float(h * moe.num_routed_experts) if moe else 0.0,
        embedding_params=embedding,
        lm_head_params=embedding,
        kv_elements_per_token=kv_elements,
        attention_score_dim=score_dim,
        attention_value_dim=value_dim,
        num_heads=attn.num_heads,
    )


def _plain_layers(model: ModelSpec) -> int:
    """Layers without an MoE FFN: the layers a (hybrid-averaged) dense FFN shape is summed over."""
    return model.num_layers - (model.moe.num_moe_layers if model.moe else 0)


def moe_layer_params(model: ModelSpec, shapes: LayerShapes) -> float:
    """All weights of one MoE FFN layer: routed + shared experts + router."""
    if model.moe is None:
        return 0.0
    experts = model.moe.num_routed_experts + model.moe.num_shared_experts
    return experts * shapes.expert_params + shapes.router_params


def group_params(model: ModelSpec) -> dict[TensorGroup, float]:
    """Stored parameters per tensor group (a tied LM head stores nothing of its own)."""
    s = layer_shapes(model)
    moe = model.moe
    moe_layers = moe.num_moe_layers if moe else 0
    experts = (moe.num_routed_experts + moe.num_shared_experts) if moe else 0
    return {
        "attention": model.num_layers * s.attention_params,
        "dense_ffn": _plain_layers(model) * s.dense_ffn_params,
        "experts": moe_layers * experts * s.expert_params,
        "router": moe_layers * s.router_params,
        "embeddings": s.embedding_params,
        "lm_head": 0.0 if model.tie_word_embeddings else s.lm_head_params,
    }


def total_params(model: ModelSpec) -> float:
    """Stored parameters: every layer, the embedding table and an untied LM head."""
    return sum(group_params(model).values())


def active_group_params(model: ModelSpec) -> dict[TensorGroup, float]:
    """Parameters one token multiplies by, per group: k routed + shared experts, the LM head
    (read even when tied); the input embedding is a row lookup, not streamed."""
    s = layer_shapes(model)
    moe = model.moe
    moe_layers = moe.num_moe_layers if moe else 0
    return {
        "attention": model.num_layers * s.attention_params,
        "dense_ffn": _plain_layers(model) * s.dense_ffn_params,
        "experts": moe_layers * (moe.experts_per_token + moe.num_shared_experts) * s.expert_params if moe else 0.0,
        "router": moe_layers * s.router_params,
        "embeddings": 0.0,
        "lm_head": s.lm_head_params,
    }


def active_params(model: ModelSpec) -> float:
    """Parameters one token multiplies by: attention, dense FFNs, k + shared experts, LM head."""
    return sum(active_group_params(model).values())


def expected_distinct_experts(
    num_experts: int, experts_per_token: int, routed_tokens: npt.ArrayLike
) -> npt.NDArray[np.float64]:
    """Expected number of distinct experts hit by T tokens under uniform top-k routing.

    Notes
    -----
    Each expert is missed by one token with probability ``1 - k/E`` (a uniformly random
    k-subset), independently across tokens, so ``E[distinct] = E * (1 - (1 - k/E)**T)``.

    Examples
    --------
    >>> float(expected_distinct_experts(8, 2, 1))
    2.0
    >>> round(float(expected_distinct_experts(128, 4, 10_000)), 6)
    128.0
    """
    t = np.asarray(routed_tokens, dtype=np.float64)
    miss = 1.0 - experts_per_token / num_experts
    return num_experts * (1.0 - np.power(miss, t))


def kv_tokens_held(model: ModelSpec, context_tokens: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Token-layers of KV a sequence of this context holds, summed over layers.

    Full-attention layers hold the whole context; sliding-window layers at most the window.
    """
    ctx = np.asarray(context_tokens, dtype=np.float64)
    attn = model.attention
    full_layers = model.num_layers - attn.sliding_window_layers
    windowed = np.minimum(ctx, attn.sliding_window) if attn.sliding_window else ctx
    return full_layers * ctx + attn.sliding_window_layers * windowed


def kv_bytes_per_token(model: ModelSpec, precision: Precision = "bf16") -> float:
    """Bytes of KV cache one token of context adds, all layers, in ``precision`` (the serving stacks'
    default KV cache is 16-bit): ``num_layers x kv_elements_per_token x bytes per element`` (hybrids:
    the attention layers only; sliding windows do not change the per-token figure)."""
    return model.num_layers * layer_shapes(model).kv_elements_per_token * BYTES_PER_ELEMENT[precision]
