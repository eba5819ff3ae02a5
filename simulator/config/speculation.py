"""Speculative decoding as a deployment states it: the draft, where it runs, how many tokens it
proposes, and the acceptance to assume (the physics is :mod:`simulator.analytic.speculation`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from simulator.config.base import Spec
from simulator.config.model import ModelRef

PositiveInt = Annotated[int, Field(ge=1)]

DraftKind = Literal["model", "eagle", "mtp"]
SpeculationWorkload = Literal["chat", "code", "reasoning"]
DraftPlacement = Literal["beside", "own-chips"]
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
    draft_model: ModelRef | None = Field(
        None, description="model profile id of the draft, or the whole profile (draft: model)"
    )
    tokens_proposed: PositiveInt = Field(description="draft tokens per step (gamma)")
    acceptance_rate: Probability | list[Probability] | None = Field(
        None,
        description="per-token acceptance (or one per draft position); empty: the published default for "
        "the draft kind and workload",
    )
    workload: SpeculationWorkload = Field("chat", description="which published acceptance applies")
    placement: DraftPlacement = Field(
        "beside",
        description="beside: the draft shares the target's chips and memory (its weights and KV come out of the "
        "target's KV budget); own-chips: the draft runs on chips of its own, paid for beside the target's",
    )
    draft_chips: PositiveInt | None = Field(
        None, description="own-chips: how many; empty: the fewest that hold the draft and KV for the target's tokens"
    )

    @model_validator(mode="after")
    def _consistent(self) -> SpeculativeSpec:
        if (self.draft == "model") != (self.draft_model is not None):
            raise ValueError("give draft_model exactly when draft is 'model'")
        if isinstance(self.acceptance_rate, list) and not self.acceptance_rate:
            raise ValueError("acceptance_rate: give at least one value")
        if self.draft_chips is not None and self.placement != "own-chips":
            raise ValueError("draft_chips: give it only with placement: own-chips")
        return self
