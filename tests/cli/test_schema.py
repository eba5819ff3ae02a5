"""``infersim schema KIND`` prints a JSON Schema that every bundled file of that kind satisfies,
that refuses what pydantic refuses for its type, and, for the summary, that a real run's
``summary.json`` satisfies (its ``schema`` name the schema's ``$id``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from simulator.cli import main
from simulator.results.summary import SUMMARY_SCHEMA

jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {
    "scenario": "scenarios",
    "hardware": "hardware_profiles",
    "model": "model_profiles",
    "stack": "stack_profiles",
}

SCENARIO = """\
name: schema-test
deployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b, chips: 1}
load: {kind: closed, users: 2}
requests: {input_tokens: {dist: constant, value: 200}, output_tokens: {dist: constant, value: 20}}
run: {seed: 1, max_requests: 12}
"""


def _schema(kind: str, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(["schema", kind]) == 0
    schema: dict[str, object] = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


@pytest.mark.parametrize("kind", sorted(FOLDERS))
def test_every_bundled_file_satisfies_the_schema_of_its_kind(kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    validator = jsonschema.Draft202012Validator(_schema(kind, capsys))
    documents = [yaml.safe_load(p.read_text()) for p in sorted((ROOT / FOLDERS[kind]).glob("*.yaml"))]
    documents = [d for d in documents if "grid" not in d]  # sweep files are not scenarios
    assert documents
    for document in documents:
        assert not list(validator.iter_errors(document)), document.get("id", document.get("name"))


def test_a_quantity_without_its_unit_is_refused_by_the_schema_as_by_the_loader(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from simulator.config.stack import StackProfile

    validator = jsonschema.Draft202012Validator(_schema("stack", capsys))
    document = yaml.safe_load(sorted((ROOT / "stack_profiles").glob("*.yaml"))[0].read_text())
    document["layer_latency"]["value"] = 0.001  # a bare number: files must state the unit
    assert list(validator.iter_errors(document))
    with pytest.raises(ValueError, match="no unit"):
        StackProfile.model_validate(document)


def test_a_real_summary_satisfies_the_summary_schema_it_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "s.yaml").write_text(SCENARIO)
    assert main(["run", str(tmp_path / "s.yaml"), "-o", str(tmp_path / "run")]) == 0
    capsys.readouterr()
    schema = _schema("summary", capsys)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["schema"] == schema["$id"] == SUMMARY_SCHEMA
    validator = jsonschema.Draft202012Validator(schema)
    assert not list(validator.iter_errors(summary))
    summary["ttft_s"]["p99_9"] = "slow"
    assert list(validator.iter_errors(summary))


def test_an_unknown_kind_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "fleet"]) == 2
    assert "invalid choice" in capsys.readouterr().err
