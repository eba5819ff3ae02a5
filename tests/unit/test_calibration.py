"""Calibration recovers the parameters that generated its measurements, and says what it cannot fit."""

from __future__ import annotations

import pytest

from simulator.calibration import CalibrationError, calibrate, derived_paths
from simulator.config.base import Sourced
from simulator.config.hardware import HardwareProfile
from simulator.config.loading import Catalog
from simulator.config.paths import get_path, with_values
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
        predicted = predict_row(row, CATALOG.with_profiles(hardware=[truth])).predicted
        assert predicted is not None
        rows.append(MeasurementRow(**{**row.__dict__, "value": predicted}))
    return rows


def test_calibration_recovers_the_parameters_that_generated_the_rows() -> None:
    base = CATALOG.hardware("cerebras-cs3")
    paths = ["fabric.hop_latency", "execution.layer_latency"]
    truth = with_values(base, {paths[0]: 2.0e-7, paths[1]: 3.0e-6})
    fit = calibrate(base, paths, _synthetic_rows(truth), CATALOG)
    assert fit.parameters[paths[0]] == pytest.approx(2.0e-7, rel=1e-3)
    assert fit.parameters[paths[1]] == pytest.approx(3.0e-6, rel=1e-3)
    assert max(abs(r.rel_error or 0.0) for r in fit.after) < 1e-4
    assert max(fit.loo_abs_rel_errors) < 1e-3  # each held-out row is predicted by the other four
    fitted = get_path(fit.profile, paths[0])
    assert (
        isinstance(fitted, Sourced)
        and fitted.confidence == "derived"
        and "S0" in fitted.note
        and derived_paths(fit.profile) == paths
    )


def test_an_unknown_parameter_or_hardware_without_rows_is_refused() -> None:
    base = CATALOG.hardware("cerebras-cs3")
    with pytest.raises(CalibrationError, match=r"cannot fit 'compute\.cores'"):
        calibrate(base, ["compute.cores"], _synthetic_rows(base), CATALOG)
    with pytest.raises(CalibrationError, match="no rows for hardware"):
        calibrate(CATALOG.hardware("groq-lpu"), ["execution.layer_latency"], _synthetic_rows(base), CATALOG)
