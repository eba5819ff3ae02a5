"""A deployment: one model on one hardware profile, with a layout and precisions.

The hardware and the model are named by profile id (looked up in the catalog) or given whole
(inline), as a resolved scenario gives them. Fields left empty (chips, layout) are filled by
the automatic placement in :mod:`simulator.analytic.placement`; the config itself stays pure data.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Discriminator, Field, Tag

from simulator.config.base import Precision, Spec, reference_tag
from simulator.config.hardware import HardwareProfile
from simulator.config.model import ModelSpec

PositiveInt = Annotated[int, Field(ge=1)]
#: A hardware profile by id, or the profile itself.
HardwareRef = Annotated[
    Annotated[str, Tag("id")] | Annotated[HardwareProfile, Tag("profile")], Discriminator(reference_tag)
]
#: A model profile by id, or the profile itself.
ModelRef = Annotated[Annotated[str, Tag("id")] | Annotated[ModelSpec, Tag("profile")], Discriminator(reference_tag)]

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
    hardware: HardwareRef = Field(description="hardware profile id, or the whole profile (inline)")
    model: ModelRef = Field(description="model profile id, or the whole profile (inline)")
    chips: PositiveInt | None = Field(None, description="total chips; empty: smallest that fits")
    tensor_parallel: PositiveInt | None = None
    pipeline_parallel: PositiveInt | None = None
    expert_parallel: PositiveInt | None = Field(
        None, description="chips the experts of one MoE layer are spread over (<= tensor_parallel)"
    )
    weights: Precision | None = Field(None, description="empty: the model's native precision")
    kv_cache: Precision | None = Field(
        None, description="empty: fp8 when weights are 8-bit or narrower, else the activations'"
    )
    activations: Precision = "bf16"
    min_kv_tokens: Annotated[int, Field(ge=1)] = Field(
        DEFAULT_MIN_KV_TOKENS, description="tokens of KV the automatic placement must leave room for beside the weights"
    )
    speculative: SpeculativeSpec | None = None

    @property
    def hardware_id(self) -> str:
        return self.hardware if isinstance(self.hardware, str) else self.hardware.id

    @property
    def model_id(self) -> str:
        return self.model if isinstance(self.model, str) else self.model.id
