"""A deployment: one model on one hardware profile, with a layout and precisions.

The hardware and the model are named by profile id (looked up in the catalog) or given whole
(inline), as a resolved scenario gives them. Fields left empty (chips, layout) are filled by
the automatic placement in :mod:`simulator.analytic.placement`; the config itself stays pure data.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from simulator.config.base import Precision, Spec
from simulator.config.hardware import HardwareRef
from simulator.config.model import ModelRef, TensorGroup
from simulator.config.speculation import SpeculativeSpec
from simulator.config.stack import StackRef
from simulator.units import Watts

PositiveInt = Annotated[int, Field(ge=1)]
#: Tokens of KV the automatic placement reserves beside the weights unless told otherwise
#: (one long-ish request).
DEFAULT_MIN_KV_TOKENS = 4096


class DeploymentSpec(Spec):
    hardware: HardwareRef = Field(description="hardware profile id, or the whole profile (inline)")
    model: ModelRef = Field(description="model profile id, or the whole profile (inline)")
    stack: StackRef | None = Field(
        None, description="serving stack profile id, or the whole profile (inline); empty: the hardware's default"
    )
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
    power_cap: Annotated[Watts, Field(gt=0.0)] | None = Field(
        None,
        description="per-chip power limit (nvidia-smi -pl), e.g. '500 W': steps stretch by the hardware's "
        "power.cap_curve; empty: uncapped",
    )

    @property
    def hardware_id(self) -> str:
        return self.hardware if isinstance(self.hardware, str) else self.hardware.id

    @property
    def model_id(self) -> str:
        return self.model if isinstance(self.model, str) else self.model.id
