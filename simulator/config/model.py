"""Model profiles: architecture facts from each model's published config.json.

Dense and MoE (routed + shared experts, experts per token, dense layers interleaved), GQA and
MLA attention (DeepSeek's compressed KV), sliding-window layers (gpt-oss). Parameter counts are
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


class AttentionSpec(Spec):
    kind: Literal["gqa", "mla"] = "gqa"
    num_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim: PositiveInt
    sliding_window: PositiveInt | None = Field(None, description="tokens, for windowed layers")
    sliding_window_layers: Annotated[int, Field(ge=0)] = Field(
        0, description="how many layers use the sliding window (the rest attend to everything)"
    )
    mla: MLASpec | None = None

    @model_validator(mode="after")
    def _consistent(self) -> AttentionSpec:
        if (self.kind == "mla") != (self.mla is not None):
            raise ValueError("give `mla` exactly when kind is 'mla'")
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads")
        if self.sliding_window_layers and self.sliding_window is None:
            raise ValueError("sliding_window_layers > 0 needs sliding_window")
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
    published: PublishedSize
    notes: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        moe_layers = self.moe.num_moe_layers if self.moe else 0
        if moe_layers > self.num_layers:
            raise ValueError("moe.num_moe_layers cannot exceed num_layers")
        if moe_layers < self.num_layers and self.intermediate_size is None:
            raise ValueError("dense layers need intermediate_size")
        if self.attention.sliding_window_layers > self.num_layers:
            raise ValueError("attention.sliding_window_layers cannot exceed num_layers")
        sources = {self.published.params_total.source, self.published.params_active.source}
        if self.published.checkpoint_bytes is not None:
            sources.add(self.published.checkpoint_bytes.source)
        missing = sorted(sources - self.sources.keys())
        if missing:
            raise ValueError(f"source keys {missing} are used but not defined under `sources`")
        return self

    def checkpoint_precision(self, group: TensorGroup) -> Precision:
        """The precision the published checkpoint stores ``group`` in."""
        return self.precision_by_group.get(group, self.native_precision)

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - (self.moe.num_moe_layers if self.moe else 0)


#: A model profile by id, or the profile itself (inline, as a resolved scenario writes it).
ModelRef = Annotated[Annotated[str, Tag("id")] | Annotated[ModelSpec, Tag("profile")], Discriminator(reference_tag)]
