"""Model profiles: architecture facts from each model's published config.json.

Dense and MoE (routed + shared experts, experts per token, dense layers interleaved), GQA and
MLA attention (DeepSeek's compressed KV), windowed layers (gpt-oss's sliding window, Llama 4's
chunked local attention: :class:`ChunkedWindow`), hybrid layer stacks
(:class:`HybridSpec`: attention on some layers, a state-space or linear-attention mixer on others,
an FFN on some or all). Parameter counts are
*derived* from these facts by :mod:`simulator.analytic.architecture`; the published totals
are kept beside them so a test can check the derivation.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from simulator.config.base import Precision, Profile, Sourced, Spec, reference_tag
from simulator.units import Bytes

PositiveInt = Annotated[int, Field(ge=1)]

#: Groups of tensors a checkpoint may store in different precisions: the attention projections,
#: the dense FFNs, the MoE experts (routed and shared), the MoE router, the input embedding and
#: the output projection (LM head).
TensorGroup = Literal["attention", "dense_ffn", "experts", "router", "embeddings", "lm_head"]
TENSOR_GROUPS: tuple[TensorGroup, ...] = ("attention", "dense_ffn", "experts", "router", "embeddings", "lm_head")
#: The matrix-multiply groups a quantised deployment converts (ModelOpt and the serving stacks
#: keep the embedding, the LM head and the router in 16-bit: ``exclude_modules: [lm_head]``).
LINEAR_GROUPS: tuple[TensorGroup, ...] = ("attention", "dense_ffn", "experts")


class MLASpec(Spec):
    """Multi-head latent attention (DeepSeek-V2/V3): KV cached as a compressed latent."""

    q_lora_rank: PositiveInt | None = None
    kv_lora_rank: PositiveInt
    qk_nope_head_dim: PositiveInt
    qk_rope_head_dim: PositiveInt
    v_head_dim: PositiveInt


class ChunkedWindow(int):
    """The window of chunked local attention, in tokens: a token at position ``p`` (from 0) attends
    to the keys of its own chunk, ``[W floor(p / W), p]``, so ``(p mod W) + 1`` of them (Llama 4's
    ``attention_chunk_size``; transformers' chunked attention mask), where a sliding window
    attends to the last ``min(p + 1, W)``. An ``int`` (the window's length) that says how the
    window is applied, so it travels wherever a sliding window's length does."""


class AttentionSpec(Spec):
    kind: Literal["gqa", "mla"] = "gqa"
    num_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim: PositiveInt
    sliding_window: PositiveInt | None = Field(None, description="tokens, for windowed layers (the chunk when chunked)")
    sliding_window_layers: Annotated[int, Field(ge=0)] = Field(
        0, description="how many layers use the window (the rest attend to everything)"
    )
    window_kind: Literal["sliding", "chunked"] = Field(
        "sliding", description="sliding: the last W tokens; chunked: the tokens of the current W-token chunk"
    )
    mla: MLASpec | None = None

    @property
    def window(self) -> int | None:
        """The windowed layers' window as the step-time model applies it: its length in tokens, a
        :class:`ChunkedWindow` for chunked local attention; None without one."""
        if self.sliding_window is None or self.window_kind == "sliding":
            return self.sliding_window
        return ChunkedWindow(self.sliding_window)

    @model_validator(mode="after")
    def _consistent(self) -> AttentionSpec:
        if (self.kind == "mla") != (self.mla is not None):
            raise ValueError("give `mla` exactly when kind is 'mla'")
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads")
        if self.sliding_window_layers and self.sliding_window is None:
            raise ValueError("sliding_window_layers > 0 needs sliding_window")
        if self.window_kind == "chunked" and self.sliding_window is None:
            raise ValueError("window_kind chunked needs sliding_window (the chunk, in tokens)")
        return self


#: Largest coefficient of variation of the tokens a layer's experts receive: all tokens on one of E
#: experts gives sqrt(E - 1), 32 for 1,025 experts; 100 covers any MoE published.
MAX_EXPERT_LOAD_CV = 100.0


class MoESpec(Spec):
    num_routed_experts: PositiveInt
    num_shared_experts: Annotated[int, Field(ge=0)] = 0
    experts_per_token: PositiveInt
    expert_intermediate_size: PositiveInt
    num_moe_layers: PositiveInt = Field(description="MoE layers; the other layers are dense")
    expert_load_cv: Sourced[Annotated[float, Field(ge=0, le=MAX_EXPERT_LOAD_CV)]] | None = Field(
        None,
        description="coefficient of variation (std / mean) of the tokens a layer's experts receive in "
        "serving traffic; empty: simulator.analytic.moe.DEFAULT_EXPERT_LOAD_CV",
    )

    @model_validator(mode="after")
    def _k_le_e(self) -> MoESpec:
        if self.experts_per_token > self.num_routed_experts:
            raise ValueError("experts_per_token cannot exceed num_routed_experts")
        return self


class HybridSpec(Spec):
    """A layer stack mixing attention with a recurrent token mixer (Mamba-2, linear attention).

    Of ``num_layers``, ``attention_layers`` carry attention and its KV cache, ``mixer_layers`` a
    recurrent mixer of ``mixer_params`` parameters each (a layer may hold both: Falcon-H1 runs them in
    parallel), ``ffn_layers`` an FFN (Nemotron-H gives attention, mixer and FFN a layer each). The mixers
    keep a fixed-size state per sequence, ``state_elements_per_sequence`` over all mixer layers,
    counted apart from the KV cache (it does not grow with the context).
    """

    attention_layers: Annotated[int, Field(ge=0)] = Field(description="layers with attention (and KV)")
    mixer_layers: Annotated[int, Field(ge=0)] = Field(description="layers with a recurrent mixer")
    mixer_params: Annotated[float, Field(ge=0)] = Field(description="parameters of one mixer layer")
    ffn_layers: Annotated[int, Field(ge=0)] | None = Field(None, description="layers with an FFN; empty: every layer")
    state_elements_per_sequence: Annotated[float, Field(ge=0)] = Field(
        description="recurrent state (SSM / linear-attention state and convolution window), all mixer layers"
    )


class PublishedSize(Spec):
    params_total: Sourced[Annotated[float, Field(gt=0)]] = Field(description="parameters")
    params_active: Sourced[Annotated[float, Field(gt=0)]] = Field(description="per token")
    checkpoint_bytes: Sourced[Annotated[Bytes, Field(gt=0)]] | None = Field(
        None, description="size of the published weights on disk (the checkpoint's precision groups)"
    )


class ModelSpec(Profile):
    hf_repo: str | None = None
    num_layers: PositiveInt
    hidden_size: PositiveInt
    intermediate_size: PositiveInt | None = Field(
        None, description="dense (gated) FFN width; needed when some layers are dense"
    )
    vocab_size: PositiveInt
    tie_word_embeddings: bool = False
    max_context_tokens: PositiveInt
    native_precision: Precision = Field(description="precision of the published checkpoint's weights")
    precision_by_group: dict[TensorGroup, Precision] = Field(
        default_factory=dict,
        description="groups the published checkpoint stores in another precision than native_precision "
        "(e.g. gpt-oss: native mxfp4 experts, attention / router / embeddings / lm_head bf16)",
    )
    quantized_checkpoints: dict[Precision, dict[TensorGroup, Precision]] = Field(
        default_factory=dict,
        description="published quantised variants, by headline precision, and the groups they store in "
        "another precision than the base checkpoint (e.g. DeepSeek-R1 NVFP4: experts fp4, attention bf16)",
    )
    attention: AttentionSpec
    moe: MoESpec | None = None
    ffn_matrices: Literal[2, 3] = Field(
        3, description="matrices per FFN (expert): 3 gated (SwiGLU, GeGLU), 2 plain (Nemotron-H's squared ReLU)"
    )
    hybrid: HybridSpec | None = None
    published: PublishedSize
    notes: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        moe_layers = self.moe.num_moe_layers if self.moe else 0
        if moe_layers > self.num_layers:
            raise ValueError("moe.num_moe_layers cannot exceed num_layers")
        if self.num_dense_layers and self.intermediate_size is None:
            raise ValueError("dense layers need intermediate_size")
        if self.attention.sliding_window_layers > self.num_layers:
            raise ValueError("attention.sliding_window_layers cannot exceed num_layers")
        if self.hybrid is not None:
            self._check_hybrid(self.hybrid, moe_layers)
        self._check_sources()
        return self

    def _check_hybrid(self, h: HybridSpec, moe_layers: int) -> None:
        """A hybrid model's layer counts fit ``num_layers`` and the MoE layers, and sliding-window
        attention runs only with attention on every layer."""
        if max(h.attention_layers, h.mixer_layers, h.ffn_layers or 0) > self.num_layers:
            raise ValueError("hybrid: attention_layers, mixer_layers and ffn_layers cannot exceed num_layers")
        if h.attention_layers < self.num_layers and self.attention.sliding_window_layers:
            raise ValueError("hybrid: sliding-window layers with attention on only some layers are not modelled")
        if h.ffn_layers is not None and h.ffn_layers < moe_layers:
            raise ValueError("hybrid.ffn_layers cannot be fewer than moe.num_moe_layers")

    def _check_sources(self) -> None:
        """Every source key the published sizes cite is defined under ``sources``."""
        sources = {self.published.params_total.source, self.published.params_active.source}
        if self.published.checkpoint_bytes is not None:
            sources.add(self.published.checkpoint_bytes.source)
        missing = sorted(sources - self.sources.keys())
        if missing:
            raise ValueError(f"source keys {missing} are used but not defined under `sources`")

    def checkpoint_precision(self, group: TensorGroup) -> Precision:
        """The precision the published checkpoint stores ``group`` in."""
        return self.precision_by_group.get(group, self.native_precision)

    @property
    def num_dense_layers(self) -> int:
        """Layers with a dense FFN: those with an FFN (every layer unless ``hybrid`` says) less the MoE ones."""
        ffn_layers = self.hybrid.ffn_layers if self.hybrid and self.hybrid.ffn_layers is not None else self.num_layers
        return ffn_layers - (self.moe.num_moe_layers if self.moe else 0)


#: A model profile by id, or the profile itself (inline, as a resolved scenario writes it).
ModelRef = Annotated[Annotated[str, Tag("id")] | Annotated[ModelSpec, Tag("profile")], Discriminator(reference_tag)]
