"""Shared building blocks for every config model: frozen specs and sourced numbers."""

from __future__ import annotations

import functools
import types
import typing
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from simulator.config.names import Precision as Precision  # where the models look for it

T = TypeVar("T")

#: Largest integer any field holds (2**63 - 1): a count beyond 64 bits fits no array, clock or
#: float sum (``10**400`` passes an ``int`` field and overflows wherever it meets a float).
MAX_INTEGER = 2**63 - 1

Confidence = Literal["datasheet", "measured", "vendor-claim", "derived", "assumed"]


class Spec(BaseModel):
    """A frozen config model that rejects unknown keys, NaN and infinities."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _plain_numbers(cls, data: object) -> object:
        """Refuse ``true`` / ``false`` where a number goes (pydantic's lax mode reads ``true`` as 1)
        and an integer beyond :data:`MAX_INTEGER`, each at its field's path."""
        if not isinstance(data, dict):
            return data
        errors: list[tuple[str, object, str]] = []
        for key, value in data.items():
            if isinstance(value, bool):
                if _takes_number_not_bool(cls, key):
                    errors.append((str(key), value, "expected a number, got a boolean"))
            elif isinstance(value, int) and abs(value) > MAX_INTEGER:
                errors.append(
                    (str(key), value, f"expected an integer of at most 2**63 - 1, got {len(str(value))} digits")
                )
        if errors:
            raise ValidationError.from_exception_data(
                cls.__name__,
                [InitErrorDetails(type=PydanticCustomError("number", text), loc=(key,), input=value)
                 for key, value, text in errors],
            )  # fmt: skip
        return data


def _takes_number_not_bool(model: type[BaseModel], key: object) -> bool:
    """Whether the field ``key`` (its name or alias) of ``model`` takes an int or float and no bool."""
    field = next((f for n, f in model.model_fields.items() if key in (n, f.alias)), None)
    if field is None:
        return False
    annotation: Any = field.annotation
    admitted = _types_in(annotation)
    return bool(admitted & {int, float}) and not admitted & {bool, object}


@functools.cache
def _types_in(annotation: Any) -> frozenset[Any]:
    """The plain types an annotation admits (through Annotated, unions and Optional); a type
    variable or ``Any`` stands for ``object``."""
    if annotation is Any or isinstance(annotation, TypeVar):
        return frozenset({object})
    origin = typing.get_origin(annotation)
    if origin is None:
        return frozenset({annotation}) if isinstance(annotation, type) else frozenset()
    if origin is typing.Annotated:
        return _types_in(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return frozenset().union(*(_types_in(a) for a in typing.get_args(annotation)))
    return frozenset({origin}) if isinstance(origin, type) else frozenset()


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
