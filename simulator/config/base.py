"""Shared building blocks for every config model: frozen specs and sourced numbers."""

from __future__ import annotations

from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

T = TypeVar("T")

Confidence = Literal["datasheet", "measured", "vendor-claim", "derived", "assumed"]

#: Numeric precisions a weight, KV cache or activation can be stored in.
Precision = Literal["fp32", "bf16", "fp16", "fp8", "int8", "fp4", "mxfp4"]


class Spec(BaseModel):
    """A frozen config model that rejects unknown keys, NaN and infinities."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Sourced(Spec, Generic[T]):
    """A number with where it comes from and how far to trust it.

    ``source`` names an entry of the enclosing profile's ``sources`` map.
    """

    value: T
    source: str = Field(description="key into the profile's `sources` map")
    confidence: Confidence
    note: str = ""


class Profile(Spec):
    """A bundled profile, found by ``id`` (its file name without ``.yaml``)."""

    schema_version: Literal[1] = 1
    id: str
    name: str
    sources: dict[str, str] = Field(description="source key -> citation (URL, paper, fit)")


def reference_tag(value: object) -> str:
    """Which form a profile reference takes: ``id`` (a string) or ``profile`` (the profile inline)."""
    return "profile" if isinstance(value, dict | Profile) else "id"
