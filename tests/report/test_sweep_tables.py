"""A sweep's tables are Parquet with pyarrow and CSV without; report and the reader take either."""

from __future__ import annotations

import sys

import pytest

from simulator.cli import main
from simulator.errors import ConfigError
from simulator.studies.sweep import read_table_file, table_path

BASE = (
    "name: b\ndeployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b}\n"
    "load: {kind: closed, users: 2}\nrequests: {input_tokens: {dist: constant, value: 200},"
    " output_tokens: {dist: constant, value: 50}}\nrun: {seed: 1, max_requests: 20}\n"
)
SWEEP = "name: s\nscenario: base.yaml\ngrid: {load.users: [1, 2]}\n"


@pytest.mark.parametrize("form", ["parquet", "csv"])
def test_sweep_report_reads_the_table_the_sweep_wrote(form, tmp_path, monkeypatch) -> None:
    if form == "parquet":
        pytest.importorskip("pyarrow")
    else:  # pyarrow absent: importing it fails as it would when not installed
        monkeypatch.setitem(sys.modules, "pyarrow", None)
        monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    (tmp_path / "base.yaml").write_text(BASE)
    (tmp_path / "s.yaml").write_text(SWEEP)
    out = tmp_path / "out"
    assert main(["sweep", str(tmp_path / "s.yaml"), "-o", str(out), "--jobs", "1", "--report"]) == 0
    path = table_path(out, "summary")
    assert path is not None and path.suffix == f".{form}"
    rows = read_table_file(path)
    assert [row["load.users"] for row in rows] == ["1", "2"]
    assert "Sweep summary" in (out / "report.html").read_text()


def test_a_parquet_table_without_pyarrow_is_a_clear_error(tmp_path, monkeypatch) -> None:
    (tmp_path / "summary.parquet").write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ConfigError, match="needs pyarrow"):
        read_table_file(tmp_path / "summary.parquet")
