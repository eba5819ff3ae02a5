"""Calibration recovers the parameters that generated its measurements, and says what it cannot fit."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.calibration import CalibrationError, _PatchedCatalog, calibrate, derived_paths, get_sourced, with_value
from simulator.config.hardware import HardwareProfile
from simulator.config.loading import Catalog
from simulator.validation import MeasurementRow, predict_row

CATALOG = Catalog()
CASES = [("llama-3.1-8b", "bf16", 1000), ("llama-3.1-70b", "bf16", 1000), ("gpt-oss-120b", "mxfp4", 1000),
         ("llama-3.3-70b", "bf16", 200), ("qwen3-32b", "bf16", 500)]  # fmt: skip


def _synthetic_rows(truth: HardwareProfile) -> list[MeasurementRow]:
    """Single-stream speeds the model itself predicts with the true parameters."""
    rows = []
    for i, (model, weights, output) in enumerate(CASES):
        row = MeasurementRow(f"S{i}", truth.id, None, model, weights, "none", 1000, output, 1,  # type: ignore[arg-type]
                             "per_user_output_tok_s", 1.0)  # fmt: skip
        predicted = predict_row(row, _PatchedCatalog(CATALOG, truth)).predicted
        assert predicted is not None
        rows.append(MeasurementRow(**{**row.__dict__, "value": predicted}))
    return rows


def test_calibration_recovers_the_parameters_that_generated_the_rows() -> None:
    base = CATALOG.hardware("cerebras-cs3")
    paths = ["fabric.hop_latency", "execution.layer_latency"]
    truth = with_value(with_value(base, paths[0], 2.0e-7), paths[1], 3.0e-6)
    assert isinstance(truth, HardwareProfile)
    fit = calibrate(base, paths, _synthetic_rows(truth), CATALOG)
    assert fit.parameters[paths[0]] == pytest.approx(2.0e-7, rel=1e-3)
    assert fit.parameters[paths[1]] == pytest.approx(3.0e-6, rel=1e-3)
    assert max(abs(r.rel_error or 0.0) for r in fit.after) < 1e-4
    assert max(fit.loo_abs_rel_errors) < 1e-3  # each held-out row is predicted by the other four
    fitted = get_sourced(fit.profile, paths[0])
    assert fitted.confidence == "derived" and "S0" in fitted.note and derived_paths(fit.profile) == paths


def test_an_unknown_parameter_or_hardware_without_rows_is_refused() -> None:
    base = CATALOG.hardware("cerebras-cs3")
    with pytest.raises(CalibrationError, match=r"cannot fit 'compute\.cores'"):
        calibrate(base, ["compute.cores"], _synthetic_rows(base), CATALOG)
    with pytest.raises(CalibrationError, match="no rows for hardware"):
        calibrate(CATALOG.hardware("groq-lpu"), ["execution.layer_latency"], _synthetic_rows(base), CATALOG)


def test_a_row_marked_speculative_runs_faster_than_the_same_row_marked_none() -> None:
    """spec_decoding: yes runs the stack's documented speculation (SambaNova: an 8B draft, 5
    tokens); none runs without; the error statistics take the row as marked, nothing else."""
    base = MeasurementRow(id="X1", hardware="sambanova-sn40l", chips=16, model="llama-3.1-70b", weights="bf16",
                          spec_decoding="none", input_tokens=1000, output_tokens=1000, concurrency=1,
                          metric="per_user_output_tok_s", value=100.0)  # fmt: skip
    plain = predict_row(base, CATALOG)
    fast = predict_row(dataclasses.replace(base, spec_decoding="yes"), CATALOG)
    assert plain.predicted is not None and fast.predicted is not None
    assert fast.predicted > 1.2 * plain.predicted
    assert "speculative: llama-3.1-8b drafts 5 tokens" in fast.served and "speculative" not in plain.served
