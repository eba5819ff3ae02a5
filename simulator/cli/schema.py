"""``infersim schema KIND``: the JSON Schema of a scenario, a hardware, model or stack profile,
or a run's ``summary.json``, printed to stdout.

Each schema is generated from the pydantic model that reads (or writes) the document, so it
cannot drift from it. An input's schema describes it as files hold it, which is pydantic's
serialization side: a quantity is a string with its unit (``"3.35 TB/s"``; files refuse a bare
number), and a plain number may also be a numeric string, as YAML reads ``671.0e9`` and as
pydantic accepts it. The summary's is the validation side of its records (the reader of
``summary.json``: ``null`` wherever a number is undefined). What a schema cannot say
(cross-field checks: a model that fits its chips, a profile id that exists) is left to
``infersim validate``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

NUMERIC_TEXT = r"^\s*[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?\s*$"


class FileSchema(GenerateJsonSchema):
    """Pydantic's schema, with a float also accepted as a numeric string (pydantic's lax mode)."""

    def float_schema(self, schema: core_schema.FloatSchema) -> JsonSchemaValue:
        number = super().float_schema(schema)
        return {"anyOf": [number, {"type": "string", "pattern": NUMERIC_TEXT}]}


def model_of(kind: str) -> type[BaseModel]:
    """The pydantic model of a kind of input document (``summary``: the run summary's)."""
    if kind == "scenario":
        from simulator.config.scenario import Scenario

        return Scenario
    if kind == "hardware":
        from simulator.config.hardware import HardwareProfile

        return HardwareProfile
    if kind == "model":
        from simulator.config.model import ModelSpec

        return ModelSpec
    if kind == "stack":
        from simulator.config.stack import StackProfile

        return StackProfile
    from simulator.results.summary import RunSummary

    return RunSummary


def json_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a kind of document; the summary's carries its version as ``$id``."""
    schema: dict[str, Any] = {"$schema": "https://json-schema.org/draft/2020-12/schema"}
    if kind == "summary":  # what reads summary.json back: its records' validation side
        from simulator.results.summary import SUMMARY_SCHEMA, RunSummary

        return schema | {"$id": SUMMARY_SCHEMA} | RunSummary.model_json_schema()
    return schema | model_of(kind).model_json_schema(mode="serialization", schema_generator=FileSchema)


def schema_command(args: argparse.Namespace) -> int:
    print(json.dumps(json_schema(args.kind), indent=2))
    return 0
