"""A simulated run exported in vLLM's fields imports back to its own statistics; a fit on the metrics
of one run warns that one load point cannot separate load-dependent from fixed costs."""

from __future__ import annotations

import json

import pytest

from simulator.cli import main
from simulator.config.loading import Catalog
from simulator.errors import InfersimWarning
from simulator.io.importers import read_file
from simulator.studies.calibration import fit, load_point, parse_parameters
from simulator.studies.validation import MeasurementRow

SCENARIO = """\
name: export-test
deployment: {hardware: nvidia-h100-sxm, model: llama-3.1-8b, chips: 1}
load: {kind: closed, users: 3}
requests: {input_tokens: {dist: constant, value: 300}, output_tokens: {dist: uniform, low: 20, high: 60}}
run: {seed: 4, max_requests: 30, warmup: 1 s}
"""


def test_exported_run_imports_back_to_its_own_statistics(tmp_path, capsys) -> None:
    (tmp_path / "s.yaml").write_text(SCENARIO)
    run = tmp_path / "run"
    assert main(["run", str(tmp_path / "s.yaml"), "-o", str(run)]) == 0
    assert main(["export", str(run), "--format", "vllm-bench"]) == 0
    capsys.readouterr()
    summary = json.loads((run / "summary.json").read_text())
    (imported,) = read_file(run / "summary.vllm-bench.json")
    assert imported.load is not None and imported.load.kind == "closed" and imported.load.concurrency == 3
    for metric in ("ttft_s", "tpot_s", "e2e_s", "itl_s"):
        assert imported.metrics[metric].values["mean"] == pytest.approx(summary[metric]["mean"], rel=1e-9)
    exported = json.loads((run / "summary.vllm-bench.json").read_text())
    assert exported["completed"] == summary["ttft_s"]["count"]
    assert exported["p99.9_e2el_ms"] >= exported["p99_e2el_ms"] >= exported["median_e2el_ms"]


def _row(metric: str, value: float, concurrency: int = 1) -> MeasurementRow:
    return MeasurementRow(f"r-{metric}-{concurrency}", "nvidia-h100-sxm", 1, "llama-3.1-8b", "bf16", "none", 500, 100,
                          concurrency, metric, value)  # fmt: skip


def test_a_fit_on_one_load_point_warns() -> None:
    rows = [_row("ttft_s", 0.03), _row("itl_s", 0.006), _row("e2e_s", 0.65)]
    assert len({load_point(r) for r in rows}) == 1
    parameters = parse_parameters(["nvidia-h100-sxm"], ["compute.efficiency", "memory.hbm.efficiency"], [])
    with pytest.warns(InfersimWarning, match="one load point"):
        fit(parameters, rows, Catalog())


def test_rows_at_other_concurrencies_are_other_load_points() -> None:
    assert load_point(_row("itl_s", 0.006)) != load_point(_row("itl_s", 0.006, concurrency=4))
