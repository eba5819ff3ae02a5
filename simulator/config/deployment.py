"""A deployment: one model on one hardware profile, with a layout and precisions.

Fields left empty (chips, layout) are filled by the automatic placement in
:mod:`simulator.analytic.placement`; the config itself stays pure data.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from simulator.config.base import Precision, Spec
from simulator.config.model import TensorGroup

PositiveInt = Annotated[int, Field(ge=1)]

#: Tokens of KV the automatic placement reserves beside the weights unless told otherwise
#: (one long-ish request).
DEFAULT_MIN_KV_TOKENS = 4096


class SpeculativeSpec(Spec):
    """Draft-then-verify decoding.

    Each step the draft proposes ``tokens_proposed`` (gamma) tokens, each accepted with
    probability ``acceptance_rate`` (alpha, independent); the target verifies all in one pass.
    """

    tokens_proposed: PositiveInt
    acceptance_rate: Annotated[float, Field(ge=0.0, lt=1.0)]
    draft_step_fraction: Annotated[float, Field(ge=0.0, le=1.0)] = Field(
        description="time of one draft decode step / time of one target decode step"
    )


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
