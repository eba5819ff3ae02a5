"""Calibration recovers the parameters that generated its measurements, and says what it cannot fit."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.config.base import Sourced
from simulator.config.hardware import HardwareProfile
from simulator.config.loading import Catalog
from simulator.config.paths import get_path, with_values
from simulator.errors import InfersimWarning
from simulator.studies.calibration import (
    CalibrationError,
    calibrate,
    derived_paths,
    fit,
    parse_parameters,
    undetermined,
)
from simulator.studies.validation import MeasurementRow, predict_row

CATALOG = Catalog()
CASES = [("llama-3.1-8b", "bf16", 1000), ("llama-3.1-70b", "bf16", 1000), ("gpt-oss-120b", "mxfp4", 1000),
         ("llama-3.3-70b", "bf16", 200), ("qwen3-32b", "bf16", 500)]  # fmt: skip


def _synthetic_rows(truth: HardwareProfile, truths: Catalog | None = None) -> list[MeasurementRow]:
    """Single-stream speeds the model itself predicts with the true parameters."""
    rows = []
    catalog = truths or CATALOG.with_profiles(hardware=[truth])
    for i, (model, weights, output) in enumerate(CASES):
        row = MeasurementRow(f"{truth.id}-{i}", truth.id, None, model, weights, "none", 1000, output, 1,  # type: ignore[arg-type]
                             "per_user_output_tok_s", 1.0)  # fmt: skip
        predicted = predict_row(row, catalog).predicted
        assert predicted is not None
        rows.append(MeasurementRow(**{**row.__dict__, "value": predicted}))
    return rows


def test_calibration_recovers_the_parameters_that_generated_the_rows() -> None:
    base = CATALOG.hardware("cerebras-cs3")
    paths = ["fabric.hop_latency", "execution.layer_latency"]
    truth = with_values(base, {paths[0]: 2.0e-7, paths[1]: 3.0e-6})
    fit = calibrate(base, paths, _synthetic_rows(truth), CATALOG)
    assert fit.parameters[f"cerebras-cs3.{paths[0]}"] == pytest.approx(2.0e-7, rel=1e-3)
    assert fit.parameters[f"cerebras-cs3.{paths[1]}"] == pytest.approx(3.0e-6, rel=1e-3)
    assert max(abs(r.rel_error or 0.0) for r in fit.after) < 1e-4
    assert max(fit.loo_abs_rel_errors.values()) < 1e-3  # each held-out row is predicted by the other four
    fitted = get_path(fit.profile, paths[0])
    assert (
        isinstance(fitted, Sourced)
        and fitted.confidence == "derived"
        and "cerebras-cs3-0" in fitted.note
        and derived_paths(fit.profile) == paths
    )


def test_a_joint_fit_recovers_each_hardware_parameter_and_the_shared_stack_latency() -> None:
    """Two GPUs' HBM efficiencies, each fitted on its own rows, and the TensorRT-LLM per-layer
    latency, shared: fitted once on the rows of both, written once into the stack's profile."""
    h100, h200, trtllm = CATALOG.hardware("nvidia-h100-sxm"), CATALOG.hardware("nvidia-h200"), CATALOG.stack("trtllm")
    truths = CATALOG.with_profiles(
        hardware=[
            with_values(h100, {"memory.hbm.efficiency": 0.78}),
            with_values(h200, {"memory.hbm.efficiency": 0.9}),
        ],
        stacks=[with_values(trtllm, {"layer_latency": 3.0e-5})],
    )
    rows = _synthetic_rows(h100, truths) + _synthetic_rows(h200, truths)
    parameters = parse_parameters(
        ["nvidia-h100-sxm", "nvidia-h200"], ["memory.hbm.efficiency"], ["trtllm.layer_latency"]
    )
    fitted = fit(parameters, rows, CATALOG)
    assert fitted.parameters["nvidia-h100-sxm.memory.hbm.efficiency"] == pytest.approx(0.78, rel=1e-3)
    assert fitted.parameters["nvidia-h200.memory.hbm.efficiency"] == pytest.approx(0.9, rel=1e-3)
    assert fitted.parameters["trtllm.layer_latency"] == pytest.approx(3.0e-5, rel=1e-3)
    shared = get_path(fitted.stacks["trtllm"], "layer_latency")
    assert isinstance(shared, Sourced) and shared.note.startswith("shared: fitted jointly")
    assert "nvidia-h100-sxm, nvidia-h200" in shared.note and not fitted.unidentified


def test_latencies_that_only_ever_add_are_reported_as_not_identified() -> None:
    """The wafer's per-layer slot and its stack's per-layer software time enter every row as one
    sum: any split fits, and the fit says so instead of returning one as if it were measured."""
    base = CATALOG.hardware("cerebras-cs3")
    parameters = parse_parameters(["cerebras-cs3"], ["execution.layer_latency"], ["cerebras-inference.layer_latency"])
    with pytest.warns(InfersimWarning, match="cannot tell .*layer_latency.* apart"):
        fitted = fit(parameters, _synthetic_rows(base), CATALOG)
    assert fitted.unidentified and set(fitted.unidentified[0]) == {p.name for p in parameters}


def test_an_unknown_parameter_or_hardware_without_rows_is_refused() -> None:
    base = CATALOG.hardware("cerebras-cs3")
    with pytest.raises(CalibrationError, match=r"cannot fit hardware parameter 'compute\.cores'"):
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
    assert "speculative: llama-3.1-8b drafts 9 tokens" in fast.served and "speculative" not in plain.served


def test_a_parameter_held_at_its_bound_is_reported_as_not_moved() -> None:
    """Rows faster than even a perfect memory system allows push the HBM efficiency past 1: the fit
    keeps the bound and says so, with the starting value, instead of reporting it as fitted."""
    base = with_values(CATALOG.hardware("nvidia-h100-sxm"), {"memory.hbm.efficiency": 1.0})
    rows = [
        dataclasses.replace(r, value=r.value * 3) for r in _synthetic_rows(base, CATALOG.with_profiles(hardware=[base]))
    ]
    parameters = parse_parameters(["nvidia-h100-sxm"], ["memory.hbm.efficiency"], [])
    fitted = fit(parameters, rows, CATALOG.with_profiles(hardware=[base]))
    name = "nvidia-h100-sxm.memory.hbm.efficiency"
    assert fitted.start[name] == 1.0 and fitted.parameters[name] == pytest.approx(1.0, rel=1e-6)
    assert "upper bound" in fitted.not_moved[name]
    assert all(v > 0 for v in fitted.sensitivity[name].values())  # more bandwidth, more tok/s: the rows depend on it


def test_a_parameter_no_row_depends_on_is_refused_with_the_sensitivity_table() -> None:
    """Single-stream decode reads the weights: the compute efficiency moves no prediction."""
    base = CATALOG.hardware("nvidia-h100-sxm")
    rows = [r for r in _synthetic_rows(base) if r.model in ("llama-3.1-8b", "llama-3.1-70b")]
    parameters = parse_parameters(["nvidia-h100-sxm"], ["compute.efficiency"], [])
    with pytest.raises(CalibrationError, match=r"compute\.efficiency cannot explain the error(.|\n)*p1 = "):
        fit(parameters, rows, CATALOG)


def test_the_throughput_of_a_finite_run_at_a_set_rate_is_refused() -> None:
    (row,) = [r for r in _synthetic_rows(CATALOG.hardware("nvidia-h100-sxm"))][:1]
    burst = dataclasses.replace(row, metric="aggregate_output_tok_s", load="poisson", request_rate_per_s=2.0,
                                requests=500, concurrency=None)  # fmt: skip
    assert undetermined(burst) and not undetermined(row)
    parameters = parse_parameters(["nvidia-h100-sxm"], ["memory.hbm.efficiency"], [])
    with pytest.raises(CalibrationError, match="offered load"):
        fit(parameters, [row, burst], CATALOG)
