"""A measurement row may state its KV-cache precision (the ``kv_cache`` column); empty keeps the stack's default."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.analytic.layouts import Question, deploy
from simulator.config.deployment import DeploymentSpec
from simulator.config.loading import Catalog, ConfigError
from simulator.studies.validation import read_table, row_deployment

HEADER = (
    "id,hardware,chips,model,weights,spec_decoding,input_tokens,output_tokens,concurrency,metric,value,stack,kv_cache\n"
)
ROW = "X{n},nvidia-b200,1,gpt-oss-120b,mxfp4,none,1000,1000,8,aggregate_output_tok_s,100,trtllm,{kv}\n"


def _rows(tmp_path: Path, *kvs: str) -> Path:
    table = tmp_path / "t.csv"
    table.write_text(HEADER + "".join(ROW.format(n=n, kv=kv) for n, kv in enumerate(kvs)))
    return table


def test_a_row_stating_fp8_kv_holds_twice_the_sequences_of_the_stacks_bf16_default(tmp_path: Path) -> None:
    """TensorRT-LLM keeps gpt-oss's KV in BF16 unless told; a row measured with FP8 KV says so, and
    its deployment stores half the bytes per token, so the same memory holds twice the sequences."""
    catalog = Catalog()
    stated, default = read_table(_rows(tmp_path, "fp8", ""))
    assert (stated.kv_cache, default.kv_cache) == ("fp8", None)
    question = Question(1000, 1000, 8)
    deployed = [deploy(catalog, DeploymentSpec.model_validate(row_deployment(r, catalog)), question)
                for r in (stated, default)]  # fmt: skip
    assert [d.kv_cache for d in deployed] == ["fp8", "bf16"]
    assert deployed[0].kv_bytes_per_token == pytest.approx(deployed[1].kv_bytes_per_token / 2)
    assert deployed[0].max_sequences(2000) >= 2 * deployed[1].max_sequences(2000) - 1


def test_an_unknown_kv_precision_names_the_file_line_and_column(tmp_path: Path) -> None:
    table = _rows(tmp_path, "fp7")
    with pytest.raises(ConfigError, match=rf"{table}:2: kv_cache: expected one of"):
        read_table(table)
