"""A deployment: one model on one hardware profile, with a layout and precisions.

Fields left empty (chips, layout) are filled by the automatic placement in
:mod:`simulator.analytic.placement`; the config itself stays pure data.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from simulator.config.base import Precision, Spec
from simulator.config.model import TensorGroup

PositiveInt = Annotated[int, Field(ge=1)]

#: Tokens of KV the automatic placement reserves beside the weights unless told otherwise
#: (one long-ish request).
DEFAULT_MIN_KV_TOKENS = 4096


DraftKind = Literal["model", "eagle", "mtp"]
SpeculationWorkload = Literal["chat", "code", "reasoning"]
Probability = Annotated[float, Field(ge=0.0, lt=1.0)]


class SpeculativeSpec(Spec):
    """Draft-then-verify decoding (see :mod:`simulator.analytic.speculation`).

    Each step the draft proposes ``tokens_proposed`` (gamma) tokens; the target verifies them in
    one pass and keeps the accepted ones plus one of its own.
    """

    draft: DraftKind = Field(
        description="model: a separate small model; eagle: an EAGLE-3 head (one layer); mtp: the "
        "target's multi-token-prediction layer"
    )
    draft_model: str | None = Field(None, description="model profile id of the draft (draft: model)")
    tokens_proposed: PositiveInt = Field(description="draft tokens per step (gamma)")
    acceptance_rate: Probability | list[Probability] | None = Field(
        None,
        description="per-token acceptance (or one per draft position); empty: the published default for "
        "the draft kind and workload",
    )
    workload: SpeculationWorkload = Field("chat", description="which published acceptance applies")

    @model_validator(mode="after")
    def _consistent(self) -> SpeculativeSpec:
        if (self.draft == "model") != (self.draft_model is not None):
            raise ValueError("give draft_model exactly when draft is 'model'")
        if isinstance(self.acceptance_rate, list) and not self.acceptance_rate:
            raise ValueError("acceptance_rate: give at least one value")
        return self


class DeploymentSpec(Spec):
    hardware: str = Field(description="hardware profile id")
    model: str = Field(description="model profile id")
    stack: str | None = Field(None, description="serving stack profile id; empty: the hardware's default stack")
    chips: PositiveInt | None = Field(None, description="total chips; empty: smallest that fits")
    tensor_parallel: PositiveInt | None = None
    pipeline_parallel: PositiveInt | None = None
    expert_parallel: PositiveInt | None = Field(
        None, description="chips the experts of one MoE layer are spread over (empty: all chips of a stage)"
    )
    attention_parallel: Literal["tensor", "data"] | None = Field(
        None,
        description="tensor: attention split over the chips of a stage (all-reduces); data: every chip runs "
        "attention on its own sequences and experts are reached by all-to-all (DeepSeek / SGLang / "
        "TensorRT-LLM 'DEP'); empty: tensor",
    )
    weights: Precision | None = Field(
        None,
        description="empty (or the model's native precision): the published checkpoint as it is; another "
        "precision: the matrix-multiply groups (attention, dense FFN, experts) quantised to it, the embedding, "
        "LM head and router kept as the checkpoint stores them",
    )
    weights_by_group: dict[TensorGroup, Precision] = Field(
        default_factory=dict, description="per-group overrides, applied last (e.g. {lm_head: fp8})"
    )
    kv_cache: Precision | None = Field(
        None, description="empty: fp8 when weights are 8-bit or narrower, else the activations'"
    )
    activations: Precision = "bf16"
    min_kv_tokens: Annotated[int, Field(ge=1)] = Field(
        DEFAULT_MIN_KV_TOKENS, description="tokens of KV the automatic placement must leave room for beside the weights"
    )
    speculative: SpeculativeSpec | None = None
    context_tokens: PositiveInt | None = Field(
        None,
        description="context window the stack serves (RoPE scaling, e.g. vLLM --max-model-len); empty: the model's own",
    )
