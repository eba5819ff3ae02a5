"""Leave-one-source-out cross-validation: what a row's source fits is refitted without it, and nothing else moves."""

from __future__ import annotations

import csv
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.config.loading import Catalog
from simulator.config.paths import with_values
from simulator.studies.calibration import FIT
from simulator.studies.cross_validation import cross_validate, fit_groups, source_key
from simulator.studies.validation import MeasurementRow, predict_row, validate

CATALOG = Catalog()
PATHS = ("fabric.hop_latency", "execution.layer_latency")
CASES = [("llama-3.1-8b", "bf16", 1000), ("llama-3.1-70b", "bf16", 1000), ("llama-3.3-70b", "bf16", 200),
         ("qwen3-32b", "bf16", 500), ("llama-3.1-8b", "bf16", 300)]  # fmt: skip


def _fitted_on(row_ids: list[str]) -> Catalog:
    """The catalogue with the wafer's two latencies marked as fitted on ``row_ids`` (and nothing else
    of the table naming them: every other fitted parameter's rows are absent, so it is held)."""
    wafer = CATALOG.hardware("cerebras-cs3")
    note = f"fitted to rows {', '.join(row_ids)}"
    values = {path: float(getattr(getattr(wafer, path.split(".")[0]), path.split(".")[1]).value) for path in PATHS}
    return CATALOG.with_profiles(hardware=[with_values(wafer, values, dataclasses.replace(FIT, note=note))])


def _rows(sources: list[str], factors: list[float], catalog: Catalog) -> list[MeasurementRow]:
    """Single-stream rows on the wafer, measured at ``factor`` times what the catalogue predicts."""
    rows = []
    for i, (source, factor) in enumerate(zip(sources, factors, strict=True)):
        model, weights, output = CASES[i]
        row = MeasurementRow(f"T{i + 1}", "cerebras-cs3", None, model, weights, "none", 1000, output, 1,  # type: ignore[arg-type]
                             "per_user_output_tok_s", 1.0, source=source)  # fmt: skip
        (plain,) = validate([row], catalog)
        assert plain.predicted is not None
        rows.append(dataclasses.replace(row, value=plain.predicted * factor))
    return rows


def test_a_source_that_fits_nothing_keeps_its_plain_prediction_and_others_move() -> None:
    """T1, T2 (source a) run 30% faster than the model says, T3, T4 (source b) 20% slower; both fit
    the wafer's latencies. Held out, a's rows are predicted from b's fit (slower than plain, so
    further below their measurement) and b's from a's; T5, of a source that fits nothing, keeps
    its plain prediction."""
    ids = ["T1", "T2", "T3", "T4"]
    catalog = _fitted_on(ids)
    sources = ["https://a.example/doc", "https://a.example/doc", "https://b.example/doc", "https://b.example/doc",
               "https://c.example/doc"]  # fmt: skip
    rows = _rows(sources, [1.3, 1.3, 0.8, 0.8, 1.0], catalog)
    plain = validate(rows, catalog)
    cv = cross_validate(rows, catalog, plain)
    (group,) = [g for g in cv.groups if g.row_ids]
    assert {p.name for p in group.parameters} == {f"cerebras-cs3.{p}" for p in PATHS} and list(group.row_ids) == ids
    by_id = {r.row.id: r for r in plain}
    for row_id in ("T1", "T2"):  # fitted on b's rows alone: slower than the plain prediction
        predicted, cv_predicted = by_id[row_id].predicted, cv.predicted[row_id]
        assert predicted is not None and cv_predicted is not None and cv_predicted < predicted
    for row_id in ("T3", "T4"):
        predicted, cv_predicted = by_id[row_id].predicted, cv.predicted[row_id]
        assert predicted is not None and cv_predicted is not None and cv_predicted > predicted
    assert cv.predicted["T5"] == by_id["T5"].predicted
    assert "c.example/doc" not in cv.refits


def test_a_row_whose_source_alone_fits_a_parameter_has_no_cross_validated_prediction() -> None:
    catalog = _fitted_on(["T1", "T2"])
    rows = _rows(["https://a.example/doc", "https://a.example/doc", "https://b.example/doc"], [1.3, 1.3, 1.0],
                 catalog)  # fmt: skip
    plain = validate(rows, catalog)
    cv = cross_validate(rows, catalog, plain)
    assert plain[0].predicted is not None and cv.predicted["T1"] is None and cv.predicted["T2"] is None
    assert "no other source fits cerebras-cs3.fabric.hop_latency" in cv.reasons["T1"]
    assert cv.predicted["T3"] == plain[2].predicted


def test_the_bundled_fits_are_found_with_their_rows() -> None:
    """The catalogue's fitted numbers group into the fits their notes quote."""
    ids = [f"M{i:03d}" for i in range(1, 200)] + [f"S{i:02d}" for i in range(1, 9)]
    groups, held = fit_groups(CATALOG, ids)
    names = [{p.name for p in g.parameters} for g in groups]
    for group in groups:
        assert group.row_ids and set(group.row_ids) <= set(ids)
    fitted = {n for g in names for n in g} | set(held)
    assert all(len([g for g in names if n in g]) <= 1 for n in fitted)  # each parameter in one fit


@pytest.mark.parametrize(
    ("source", "key"),
    [
        ("https://github.com/NVIDIA/TRT/blob/00f3/docs/perf.md", "github.com/NVIDIA/TRT/docs/perf.md"),
        ("https://github.com/NVIDIA/TRT/blob/main/docs/perf.md (same at 03e2)", "github.com/NVIDIA/TRT/docs/perf.md"),
        ("https://www.example.com/blog/post/?page=3 ; https://other.org/x", "example.com/blog/post"),
        ("http://example.com/blog/post", "example.com/blog/post"),
        ("Some docs, overview tables (nvidia.github.io/TensorRT-LLM, v0.14 era)", "nvidia.github.io/TensorRT-LLM"),
        ("ntuhpc/mlperf_results_v5.0 (mirror) @cf35 closed/NVIDIA/a.txt", "github.com/ntuhpc/mlperf_results_v5.0"),
        ("github.com/Mutinifni/splitwise-sim data/perf_model.csv @3780", "github.com/Mutinifni/splitwise-sim"),
        ("a talk at a conference", "a talk at a conference"),
    ],
)  # fmt: skip
def test_source_key(source: str, key: str) -> None:
    assert source_key(source) == key


def test_one_document_in_several_versions_is_one_source_and_two_documents_two() -> None:
    a = source_key("https://github.com/o/r/blob/1111/docs/a.md")
    assert (
        a
        == source_key("https://github.com/o/r/blob/2222/docs/a.md")
        == source_key("https://github.com/o/r/tree/main/docs/a.md")
    )
    assert a != source_key("https://github.com/o/r/blob/1111/docs/b.md")
    assert source_key("https://x.com/a") != source_key("https://x.com/b")  # fmt: skip


def test_validate_cv_json_gives_every_predicted_row_its_cross_validated_prediction(tmp_path: Path) -> None:
    columns = ["id", "hardware", "chips", "model", "weights", "spec_decoding", "input_tokens", "output_tokens",
               "concurrency", "metric", "value", "source"]  # fmt: skip
    rows = [["R1", "cerebras-cs3", "", "llama-3.1-8b", "bf16", "none", "", "", "1", "per_user_output_tok_s", "1800",
             "https://a.example/x"],
            ["R2", "groq-lpu", "", "llama-3.1-8b", "fp8", "none", "", "", "1", "per_user_output_tok_s", "750",
             "https://b.example/y"],
            ["R3", "cerebras-cs3", "", "no-such-model", "bf16", "none", "", "", "1", "per_user_output_tok_s", "1",
             "https://a.example/x"]]  # fmt: skip
    table = tmp_path / "rows.csv"
    with table.open("w", newline="") as f:
        csv.writer(f).writerows([columns, *rows])
    done = subprocess.run([sys.executable, "-m", "simulator", "validate", str(table), "--cv", "--json"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    predicted = [r for r in out["rows"] if r["predicted"] is not None]
    assert len(predicted) == 2
    assert all("predicted_cv" in r and r["source"] for r in out["rows"])
    for r in predicted:  # no fit names these rows: cross-validation leaves them as they are
        assert r["predicted_cv"] == r["predicted"]
    assert "median_abs_rel_error_cv" in out["summary"]["overall"]


def test_hardware_without_a_measurement_row_is_marked_unvalidated_wherever_it_is_printed() -> None:
    from simulator.analytic.estimate import estimate
    from simulator.analytic.layouts import Question, deploy
    from simulator.cli.profiles import estimate_text
    from simulator.config.deployment import DeploymentSpec
    from simulator.studies.compare import table_cells
    from simulator.studies.validation import BUNDLED_TABLE, hardware_label, read_table, validated_hardware

    measured = {r.hardware for r in read_table(BUNDLED_TABLE)}
    assert validated_hardware() == measured
    for hardware in CATALOG.hardware_ids():
        assert hardware_label(hardware).endswith("(unvalidated)") == (hardware not in measured)
    unmeasured = next(h for h in CATALOG.hardware_ids() if h not in measured)
    d = deploy(CATALOG, DeploymentSpec(hardware=unmeasured, model="llama-3.1-8b"), Question(1000, 1000, 1))
    assert f"{unmeasured} (unvalidated)" in estimate_text(estimate(d, 1000, 1000, 1)).splitlines()[0]
    assert table_cells({"hardware": unmeasured})[0] == f"{unmeasured} (unvalidated)"
    assert table_cells({"hardware": "nvidia-h200"})[0] == "nvidia-h200"


def test_the_first_order_refit_predicts_the_held_out_rows_as_calibrate_s_full_refit_does() -> None:
    """Holding out source a: the linearised refit on b's rows and calibrate's nonlinear fit on the
    same rows predict a's rows alike (the refit is the Gauss-Newton step of the same fit)."""
    import warnings

    from simulator.errors import InfersimWarning
    from simulator.studies.calibration import fit, parse_parameters

    catalog = _fitted_on(["T1", "T2", "T3", "T4", "T5"])
    sources = ["https://a.example/doc"] * 2 + ["https://b.example/doc"] * 3
    rows = _rows(sources, [1.15, 1.15, 0.9, 0.9, 0.9], catalog)
    cv = cross_validate(rows, catalog, validate(rows, catalog))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InfersimWarning)
        full = fit(parse_parameters(["cerebras-cs3"], PATHS, []), rows[2:], catalog)
    refitted = catalog.with_profiles(hardware=list(full.hardware.values()))
    for row in rows[:2]:
        (expected,) = validate([row], refitted)
        assert expected.predicted is not None and cv.predicted[row.id] == pytest.approx(expected.predicted, rel=0.02)


def test_metrics_of_one_measured_run_share_one_engine_run_and_predict_as_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two rows that are metrics of one measured run (same load point, other ids and sources) are
    one scenario: ``validate`` runs the engine once for both, and each row's prediction is the
    one it gets predicted alone (a scenario's name changes no result)."""
    import simulator.studies.validation as validation

    ttft = MeasurementRow("E1", "nvidia-h100-sxm", 1, "llama-3.1-8b", "bf16", "none", 200, 20, 4, "ttft_s", 0.05,
                          source="https://a.example/doc")  # fmt: skip
    itl = dataclasses.replace(ttft, id="E2", metric="itl_s", value=0.01, source="https://b.example/doc")
    alone = [predict_row(ttft, CATALOG).predicted, predict_row(itl, CATALOG).predicted]
    runs = []
    simulate = validation.simulate
    monkeypatch.setattr(validation, "simulate", lambda *a, **k: runs.append(1) or simulate(*a, **k))
    together = [r.predicted for r in validate([ttft, itl], CATALOG)]
    assert together == alone and None not in together and len(runs) == 1


_H100 = "nvidia-h100-sxm"
_ONE_CHIP = MeasurementRow("R1", _H100, 1, "llama-3.1-8b", "bf16", "none", 200, 20, 4, "ttft_s", 0.05)
_TP2 = dataclasses.replace(_ONE_CHIP, id="R2", chips=2, layout={"tensor_parallel": 2})
_MXFP4 = dataclasses.replace(_ONE_CHIP, id="R3", model="gpt-oss-20b", weights="mxfp4")


@pytest.mark.parametrize(
    ("row", "path", "value", "reaching"),
    [
        (_ONE_CHIP, "interconnect.latency", 1e-4, False),  # no collective on one chip
        (_ONE_CHIP, "compute.weight_only.mxfp4.efficiency", 0.2, False),  # a BF16 model
        (_TP2, "interconnect.alltoall_latency", 1e-4, False),  # tensor-parallel attention: all-reduces only
        (_TP2, "interconnect.latency", 1e-4, True),
        (_MXFP4, "compute.weight_only.mxfp4.efficiency", 0.2, True),
    ],
)  # fmt: skip
def test_a_number_no_step_time_of_a_row_reads_leaves_its_prediction_exactly_and_runs_nothing(
    monkeypatch: pytest.MonkeyPatch, row: MeasurementRow, path: str, value: float, reaching: bool
) -> None:
    """Law: a prediction depends on a profile's number only through the step times that read it.
    Where :func:`reaches` says no step time of the row's layouts reads the number, the row predicted
    with it changed (an engine run) is exactly its plain prediction, and cross-validation's
    predictions give that without running the engine; where one reads it, the prediction moves and
    the engine runs once."""
    import simulator.studies.validation as validation
    from simulator.studies.calibration import Parameter
    from simulator.studies.cross_validation import _Predictions, reaches
    from simulator.studies.validation import row_layouts

    parameter = Parameter("hardware", _H100, path)
    layouts = [c.deployment for c in row_layouts(row, CATALOG).ranked]
    assert reaches(parameter, layouts) == reaching
    plain = predict_row(row, CATALOG)
    changed = CATALOG.with_profiles(hardware=[with_values(CATALOG.hardware(_H100), {path: value})])
    moved = predict_row(row, changed).predicted
    assert plain.predicted is not None and moved is not None and (moved != plain.predicted) == reaching
    runs = []
    simulate = validation.simulate
    monkeypatch.setattr(validation, "simulate", lambda *a, **k: runs.append(1) or simulate(*a, **k))
    assert _Predictions(CATALOG, [plain])(row, {parameter: value}) == moved
    assert len(runs) == int(reaching)


def test_rows_run_collecting_rarely_and_the_collector_is_left_as_it_was() -> None:
    """Inside :func:`collecting_rarely` the young generation is collected every
    :data:`ROWS_GC_THRESHOLD` allocations; after it, even after an error, the thresholds are those before."""
    import gc

    from simulator.studies.validation import ROWS_GC_THRESHOLD, collecting_rarely

    before = gc.get_threshold()
    inside = []

    def fail() -> None:
        with collecting_rarely():
            inside.append(gc.get_threshold())
            raise KeyError("a row's error")

    with pytest.raises(KeyError, match="a row's error"):
        fail()
    assert inside == [(ROWS_GC_THRESHOLD, *before[1:])] and gc.get_threshold() == before
