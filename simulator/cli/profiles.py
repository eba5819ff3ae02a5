"""Commands on profiles and the closed-form model: profiles, estimate, validate, calibrate."""

from __future__ import annotations

import argparse
import warnings
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml
from pydantic import BaseModel, ValidationError

from simulator.analytic.estimate import Estimate, EstimateQuery, estimate, saturation_concurrency
from simulator.analytic.layouts import LayoutChoice, Question, choose_layout
from simulator.analytic.placement import Deployment
from simulator.analytic.precision import compute_path
from simulator.analytic.step_time import COMPONENTS
from simulator.capacity import of_estimate
from simulator.cli.common import catalog, json_text
from simulator.cli.output import ResultsFolder
from simulator.config.base import Precision
from simulator.config.deployment import DeploymentSpec
from simulator.config.loading import Catalog
from simulator.config.model import TensorGroup
from simulator.errors import ConfigError, InfersimWarning
from simulator.serialize import estimate_dict, layout_dict, placement_note
from simulator.sources import SourcedNumber, confidence_counts, deciding, every_number
from simulator.studies.validation import (
    BUNDLED_TABLE,
    MeasurementRow,
    RowResult,
    hardware_label,
    read_table,
    summarize,
    validate,
)
from simulator.tables import format_number, format_table
from simulator.units import format_seconds

if TYPE_CHECKING:
    from simulator.config.hardware import HardwareProfile
    from simulator.studies.calibration import Fit, Parameter
    from simulator.studies.cross_validation import CrossValidation

GB = 1e9

#: Flags of ``estimate`` by the schema field they set (errors name the flag, not the field).
ESTIMATE_FLAGS = {
    "chips": "--chips",
    "expert_parallel": "--expert-parallel",
    "tensor_parallel": "--tensor-parallel",
    "pipeline_parallel": "--pipeline-parallel",
    "weights": "--weights",
    "kv_cache": "--kv-cache",
    "input_tokens": "--input-tokens",
    "output_tokens": "--output-tokens",
    "concurrency": "--concurrency",
}


def _flag_errors(exc: ValidationError) -> ConfigError:
    """A schema error on flag values, each problem named by its flag."""
    lines = []
    for item in exc.errors():
        field = str(item["loc"][0]) if item["loc"] else ""
        lines.append(f"{ESTIMATE_FLAGS.get(field, field)}: {item['msg']} (got {item.get('input')!r})")
    return ConfigError("; ".join(lines))


def _layout(args: argparse.Namespace, cat: Catalog, question: Question) -> LayoutChoice:
    try:
        spec = DeploymentSpec(
            hardware=args.hardware,
            model=args.model,
            chips=args.chips,
            tensor_parallel=args.tensor_parallel,
            pipeline_parallel=args.pipeline_parallel,
            expert_parallel=args.expert_parallel,
            attention_parallel=args.attention_parallel,
            weights=args.weights,
            kv_cache=args.kv_cache,
            stack=args.stack,
        )
    except ValidationError as exc:
        raise _flag_errors(exc) from None
    return choose_layout(cat, spec, question)


def profiles(args: argparse.Namespace) -> int:
    from simulator.analytic.architecture import active_params, total_params

    cat = catalog(args)
    hardware = [cat.hardware(i) for i in cat.hardware_ids()]
    models = [cat.model(i) for i in cat.model_ids()]
    if args.json:
        print(
            json_text(
                {
                    "hardware": [h.model_dump(mode="json") for h in hardware],
                    "models": [m.model_dump(mode="json") for m in models],
                }
            ),
            end="",
        )
        return 0
    measured = _rows_by_hardware(read_table(BUNDLED_TABLE))
    rows = []
    for h in hardware:
        tiers = ", ".join(
            f"{t.name} {t.capacity.value / GB:.3g} GB @ {t.bandwidth.value / 1e12:.3g} TB/s" for t in h.memory
        )
        precision, peak = max(h.compute.peak.items(), key=lambda item: item[1].value)
        rows.append(
            [
                h.id,
                h.family,
                f"{peak.value / 1e12:,.0f} {precision}",
                tiers,
                h.interconnect.domain_chips.value,
                measured.get(h.id, 0) or "none: unvalidated",
            ]
        )
    headers = ["hardware", "family", "peak TFLOP/s (precision)", "memory per chip", "domain chips", "measured rows"]
    print(format_table(headers, rows))
    print()
    rows = [
        [
            m.id,
            f"{total_params(m) / 1e9:.1f}",
            f"{active_params(m) / 1e9:.1f}",
            m.num_layers,
            m.hidden_size,
            m.attention.kind,
            m.native_precision,
        ]
        for m in models
    ]
    print(format_table(["model", "params B", "active B", "layers", "hidden", "attention", "native"], rows))
    return 0


def _group_text(d: Deployment, group: TensorGroup, precision: Precision) -> str:
    """A tensor group's stored precision, and its matmul path when the chip dequantises it (weight-only)."""
    path = compute_path(d.hardware, precision, d.activations)
    if group == "embeddings" or path.native:  # an embedding is a lookup, not a matmul
        return f"{group} {precision}"
    return f"{group} {precision} (weight-only: {path.precision} matmuls)"


def estimate_text(e: Estimate, choice: LayoutChoice | None = None) -> str:
    """The estimate for people: the deployment, the speeds with their notes, the decode pass breakdown."""
    lines = [*_deployment_lines(e, choice), *_speed_lines(e), *_breakdown_lines(e)]
    lines.append(f"  bottleneck: {e.explanation()}")
    return "\n".join(lines)


def _deployment_lines(e: Estimate, choice: LayoutChoice | None) -> list[str]:
    """What runs where: weights by group, memory, the layout chosen and any further resident models."""
    d = e.deployment
    info = estimate_dict(e)
    groups = ", ".join(_group_text(d, g, p) for g, p in d.precision.items() if g != "router")
    lines = [
        f"{d.model.id} on {d.chips} x {hardware_label(d.hardware.id)} with {d.stack.id}  ({d.layout}; KV {d.kv_cache})",
        f"  weights by group: {groups}",
        f"  weights {d.weight_bytes / GB:.1f} GB and KV in {d.weights_tier.name}; KV budget "
        f"{d.kv_budget_bytes / GB:.1f} GB = {d.max_kv_tokens:,} tokens; "
        f"max concurrency {info['max_concurrency']} at {e.input_tokens}+{e.output_tokens} tokens",
    ]
    if choice is not None and len(choice.ranked) > 1:
        lines.append(f"  {choice.describe()} (for {choice.question.metric})")
    if d.resident_tiers:
        lines.append(
            f"  slower tiers ({', '.join(t.name for t in d.resident_tiers)}) hold "
            f"{d.resident_models_capacity_bytes / GB:,.0f} GB of further resident models"
        )
    return lines


def _speed_lines(e: Estimate) -> list[str]:
    """TTFT, ITL and throughput, then the notes on capacity, placement and a 1-token answer."""
    capacity = of_estimate(e)
    itl = format_seconds(e.itl_s)
    per_user = capacity.marked(format_number(e.per_user_output_tok_s, ",.0f"))
    lines = [
        f"  TTFT {capacity.marked(format_seconds(e.ttft_s))}   ITL {itl}   per-user {per_user} tok/s"
        f"   aggregate {e.aggregate_output_tok_s:,.0f} tok/s at concurrency {e.concurrency}"
    ]
    if capacity.limited:
        lines.append(
            f"  note: {capacity.note()}: {e.capacity_note()}; averaged over all {e.concurrency:,} users "
            f"{format_number(capacity.averaged(e.per_user_output_tok_s), ',.0f')} tok/s each"
        )
    if placement_note(e):
        lines.append(f"  note: {placement_note(e)}")
    if e.itl_s is None:
        lines.append("  note: a 1-token answer has no inter-token latency (per-user decode speed is undefined)")
    return lines


def _breakdown_lines(e: Estimate) -> list[str]:
    """Each nonzero component of the decode pass, in ms and as a share of the pass."""
    total = e.decode_step.total_s
    lines = ["  decode pass breakdown:"]
    for key in COMPONENTS:
        value = e.decode_step.components_s[key]
        if value > 0:
            lines.append(f"    {key:<15} {value * 1e3:9.3f} ms  {value / total:5.1%}")
    return lines


def estimate_command(args: argparse.Namespace) -> int:
    try:
        query = EstimateQuery(
            input_tokens=args.input_tokens, output_tokens=args.output_tokens, concurrency=args.concurrency
        )
    except ValidationError as exc:
        raise _flag_errors(exc) from None
    concurrency = None if query.concurrency == "max" else query.concurrency
    choice = _layout(args, catalog(args), Question(query.input_tokens, query.output_tokens, concurrency))
    deployment = choice.deployment
    users = concurrency or saturation_concurrency(deployment, query.input_tokens, query.output_tokens)
    result = estimate(deployment, query.input_tokens, query.output_tokens, users)
    explain = every_number(deployment.hardware, deployment.stack) if getattr(args, "explain", False) else None
    if args.json:
        numbers = {"sources": [n.to_dict() for n in deciding(deployment)]}
        if explain is not None:
            numbers["explain"] = [n.to_dict() for n in explain]
        print(json_text(estimate_dict(result) | {"layout": layout_dict(choice)} | numbers), end="")
    else:
        print(estimate_text(result, choice))
        print(sources_lines(deciding(deployment), explain))
    return 0


def sources_lines(numbers: list[SourcedNumber], explain: list[SourcedNumber] | None) -> str:
    """The deciding numbers, one a line (value, confidence: source), and with ``--explain`` every number."""
    lines = [f"  numbers it rests on ({confidence_counts(numbers)}; --explain lists every one):"]
    lines += [f"    {n.short()}" + (f"  [{n.note}]" if n.confidence == "assumed" and n.note else "") for n in numbers]
    if explain:
        lines.append("  every sourced number (path, value, confidence, source: citation; note):")
        lines += [
            f"    {n.path}  {n.value}  {n.confidence}  {n.source}: {n.citation}" + (f"; {n.note}" if n.note else "")
            for n in explain
        ]
    return "\n".join(lines)


def validate_command(args: argparse.Namespace) -> int:
    rows, cat = read_table(args.table or BUNDLED_TABLE), catalog(args)
    results = validate(rows, cat)
    cv = None
    if args.cv:
        from simulator.studies.cross_validation import cross_validate, with_cv

        cv = cross_validate(rows, cat, results)
        results = with_cv(results, cv)
    summary = summarize(results, cv=cv is not None)
    if args.json:
        print(json_text(_validation_document(results, summary, cv)), end="")
        return 0
    _print_rows(results, summary, cv)
    _print_errors(summary, cv)
    unvalidated = [h for h in cat.hardware_ids() if h not in _rows_by_hardware([r.row for r in results])]
    if unvalidated:
        print(f"\nunvalidated (no measurement rows in the table): {', '.join(unvalidated)}")
    return 0


def _validation_row(r: RowResult, cv: CrossValidation | None) -> dict[str, object]:
    """One row of ``validate --json``: the measurement, the prediction and its error (and cross-validated)."""
    row: dict[str, object] = {
        "id": r.row.id,
        "predicted": r.predicted,
        "measured": r.row.value,
        "rel_error": r.rel_error,
        "metric": r.row.metric,
        "hardware": r.row.hardware,
        "model": r.row.model,
        "bottleneck": r.bottleneck,
        "flag": r.flag,
        "reason": r.reason,
        "served": r.served,
        "other_way": r.other_way,
    }
    if cv is not None:
        row |= {
            "predicted_cv": r.predicted_cv,
            "rel_error_cv": r.rel_error_cv,
            "cv_reason": r.cv_reason,
            "source": cv.sources[r.row.id],
        }
    return row


def _validation_document(
    results: list[RowResult], summary: dict[str, object], cv: CrossValidation | None
) -> dict[str, object]:
    """What ``validate --json`` prints: every row, the summary and (with ``--cv``) what was refitted."""
    out: dict[str, object] = {"rows": [_validation_row(r, cv) for r in results], "summary": summary}
    if cv is not None:
        out["cross_validation"] = {
            "fits": [{"parameters": [p.name for p in g.parameters], "rows": list(g.row_ids)} for g in cv.groups],
            "held": cv.held,
            "refits": cv.refits,
        }
    return out


def _validation_cells(r: RowResult, cv: CrossValidation | None) -> list[object]:
    """One row of the validation table."""
    conc = "max" if r.row.concurrency is None else r.row.concurrency
    pred = "-" if r.predicted is None else f"{r.predicted:.4g}"
    err = r.reason if r.rel_error is None else f"{r.rel_error:+.0%}"
    row = r.row
    cells: list[object] = [
        row.id,
        row.hardware,
        row.model,
        row.weights,
        conc,
        row.metric,
        f"{row.value:.4g}",
        pred,
        err,
    ]
    if cv is not None:
        cells.append("-" if r.rel_error_cv is None else f"{r.rel_error_cv:+.0%}")
    return [*cells, r.bottleneck, "flagged" if r.flag else ""]


def _print_rows(results: list[RowResult], summary: dict[str, object], cv: CrossValidation | None) -> None:
    """The validation table, how each speculative or context row was served, and the rows flagged or left out."""
    headers = ["id", "hardware", "model", "w", "C", "metric", "measured", "predicted", "error"]
    headers += ["CV error"] if cv is not None else []
    print(format_table([*headers, "bottleneck", ""], [_validation_cells(r, cv) for r in results]))
    for r in results:
        if "speculative" in r.served or "context" in r.served or r.other_way:
            print(
                f"  {r.row.id} (spec_decoding {r.row.spec_decoding}): {r.served}"
                + (f"; for information, {r.other_way}" if r.other_way else "")
            )
    _print_left_out(summary, "flagged", "flagged", "flag")
    _print_left_out(summary, "unpredicted", "not predicted", "reason")
    if cv is not None:
        _print_left_out(summary, "not_cross_validated", "not cross-validated", "reason")
        _print_fits(cv)


def _print_left_out(summary: dict[str, object], key: str, label: str, why: str) -> None:
    """One line per row of ``summary[key]``: the label, the row id and why."""
    for item in summary[key]:  # type: ignore[attr-defined]
        print(f"  {label} {item['id']}: {item[why]}")


def _print_errors(summary: dict[str, object], cv: CrossValidation | None) -> None:
    """The error statistics by architecture, then by model kind and family."""
    print()
    stat_cells = _stat_cells if cv is None else _stat_cells_cv
    stat_headers = ["rows", "median |err|", "p90 |err|"]
    stat_headers += ["CV rows", "CV median |err|", "CV p90 |err|"] if cv is not None else []
    stats = [["all rows", *stat_cells(summary["overall"])]]  # type: ignore[arg-type]
    stats += [["unflagged rows", *stat_cells(summary["unflagged"])]]  # type: ignore[arg-type]
    stats += [[fam, *stat_cells(s)] for fam, s in summary["by_architecture"].items()]  # type: ignore[attr-defined]
    print(format_table(["architecture", *stat_headers], stats))
    print()
    models = [[kind, *stat_cells(s)] for kind, s in summary["by_model_kind"].items()]  # type: ignore[attr-defined]
    models += [[fam, *stat_cells(s)] for fam, s in summary["by_model_family"].items()]  # type: ignore[attr-defined]
    print(format_table(["models", *stat_headers], models))


def _print_fits(cv: CrossValidation) -> None:
    """What the cross-validation refitted, fold by fold."""
    print("\ncross-validation (leave one source out; each fit refitted without the rows of the source):")
    for group in cv.groups:
        print(f"  fit of {', '.join(p.name for p in group.parameters)} on {len(group.row_ids)} rows")
    if cv.held:
        print(f"  held at their values (their provenance names no row of this table): {', '.join(cv.held)}")


def _rows_by_hardware(rows: list[MeasurementRow]) -> dict[str, int]:
    """How many measurement rows name each hardware id."""
    return dict(Counter(r.hardware for r in rows))


def _stat_cells(stats: dict[str, float], suffix: str = "") -> list[object]:
    return [
        stats[f"rows{suffix}"],
        format_number(stats[f"median_abs_rel_error{suffix}"], ".1%"),
        format_number(stats[f"p90_abs_rel_error{suffix}"], ".1%"),
    ]


def _stat_cells_cv(stats: dict[str, float]) -> list[object]:
    """Plain statistics, then the cross-validated ones."""
    return [*_stat_cells(stats), *_stat_cells(stats, "_cv")]


def calibrate_command(args: argparse.Namespace) -> int:
    """Fit the named (or previously fitted) parameters to the measured rows; write the profiles and fit.json."""
    from simulator.studies.calibration import fit, fit_report

    cat = catalog(args)
    hardware_ids = _comma_names(args.hardware)
    profiles = [cat.hardware(h) for h in hardware_ids]
    out = _calibrate_folder(args, hardware_ids)
    table = [r for r in read_table(args.table or BUNDLED_TABLE) if r.hardware in hardware_ids]
    rows = _chosen_rows(args.rows, table, hardware_ids) if args.rows else _fittable_rows(table, cat)
    parameters = _calibration_parameters(args, cat, hardware_ids, profiles, rows)
    if not parameters:
        raise ConfigError(
            f"{', '.join(hardware_ids)} and their stacks have no previously fitted parameters; name "
            "them with --fit (e.g. compute.efficiency,memory.hbm.efficiency) or --shared (e.g. "
            "trtllm.layer_latency)"
        )
    result = fit(parameters, rows, cat)
    report = fit_report(result)
    files = {f"{p.id}.yaml": _yaml(p) for p in [*result.hardware.values(), *result.stacks.values()]}
    out.write(files | {"fit.json": json_text(report)})
    if args.json:
        print(json_text(report), end="")
        return 0
    _print_fit(result, report)
    _print_written(result, files, out)
    return 0


def _comma_names(text: str) -> list[str]:
    """The non-empty, stripped names of a comma-separated list."""
    return [name.strip() for name in text.split(",") if name.strip()]


def _calibrate_folder(args: argparse.Namespace, hardware_ids: list[str]) -> ResultsFolder:
    """--out, else runs/calibrate-<the hardware ids> (or -<n>-hardware for more than two)."""
    name = "-".join(hardware_ids) if len(hardware_ids) <= 2 else f"{len(hardware_ids)}-hardware"
    return ResultsFolder(args.out or Path("runs") / f"calibrate-{name}", "calibrate", args.overwrite)


def _print_written(result: Fit, files: dict[str, str], out: ResultsFolder) -> None:
    """Which profiles were written where, and the flags that use them."""
    hint = f"--hardware-dir {out.path}" + (f" --stack-dir {out.path}" if result.stacks else "")
    print(f"\nwrote {', '.join(files)} to {out.path} (use them with {hint})")


def _chosen_rows(text: str, table: list[MeasurementRow], hardware_ids: list[str]) -> list[MeasurementRow]:
    """The rows --rows names; naming none, or a row not in the hardware's table, is an error."""
    chosen = _comma_names(text)
    unknown = sorted(set(chosen) - {r.id for r in table})
    if unknown or not chosen:
        raise _unknown_rows(unknown, table, hardware_ids)
    return [r for r in table if r.id in set(chosen)]


def _unknown_rows(unknown: list[str], table: list[MeasurementRow], hardware_ids: list[str]) -> ConfigError:
    """The error for --rows naming no row, or rows not in the hardware's table (listing its rows)."""
    return ConfigError(
        f"--rows: {', '.join(unknown) or '(none given)'}: not a row of {', '.join(hardware_ids)} in the "
        f"table (its rows: {', '.join(r.id for r in table) or 'none'})"
    )


def _fittable_rows(table: list[MeasurementRow], cat: Catalog) -> list[MeasurementRow]:
    """The unflagged, predicted rows, less (with a warning) those a fit could not determine."""
    from simulator.studies.calibration import undetermined

    results = validate(table, cat)
    rows = [r.row for r in results if not r.flag and r.predicted is not None]
    left_out = [reason for reason in map(undetermined, rows) if reason]
    if left_out:
        warnings.warn(
            f"left out (name them with --rows to be refused): {'; '.join(left_out)}", InfersimWarning, stacklevel=1
        )
        rows = [r for r in rows if not undetermined(r)]
    return rows


def _calibration_parameters(
    args: argparse.Namespace,
    cat: Catalog,
    hardware_ids: list[str],
    profiles: list[HardwareProfile],
    rows: list[MeasurementRow],
) -> list[Parameter]:
    """The per-hardware parameters (--fit, else each profile's fitted ones), then the shared stack ones."""
    from simulator.studies.calibration import derived_paths, parse_parameters, row_stack

    if args.fit is not None:
        paths = _names(args.fit, "--fit", "compute.efficiency,memory.hbm.efficiency")
        per_hardware = {h: paths for h in hardware_ids}
    else:
        per_hardware = {p.id: derived_paths(p) for p in profiles}
    if args.shared is not None:
        shared = _names(args.shared, "--shared", "trtllm.layer_latency")
    else:
        stacks = sorted({row_stack(r, cat) for r in rows})
        shared = [f"{s}.{path}" for s in stacks for path in derived_paths(cat.stack(s))]
    parameters = [q for h, paths in per_hardware.items() for q in parse_parameters([h], paths, [])]
    return parameters + parse_parameters([], [], shared)


def _fit_cells(r: dict[str, Any]) -> list[object]:
    """One row of the fit table: measured, before and after with their errors, the held-out error."""
    return [
        r["id"],
        r["hardware"],
        f"{r['measured']:.4g}",
        f"{r['before']:.4g}",
        f"{r['rel_error_before']:+.0%}",
        f"{r['after']:.4g}",
        f"{r['rel_error_after']:+.0%}",
        "-" if r["loo_abs_rel_error"] is None else f"{r['loo_abs_rel_error']:.0%}",
    ]


def _parameter_line(result: Fit, parameter: str, value: float) -> str:
    """A fitted value, from where it started, or why it did not move."""
    moved = result.not_moved.get(parameter)
    start = result.start[parameter]
    return f"{parameter} = {value:.4g}" + (
        f"  did not move from {start:.4g}: {moved}" if moved else f"  (from {start:.4g})"
    )


def _print_fit(result: Fit, report: dict[str, Any]) -> None:
    """The fit table, the fitted values, the sensitivity table and the leave-one-out error."""
    from simulator.studies.calibration import sensitivity_table

    table_rows = [_fit_cells(r) for r in report["rows"]]
    print(format_table(["row", "hardware", "measured", "before", "error", "after", "error", "held out"], table_rows))
    for parameter, value in result.parameters.items():
        print(_parameter_line(result, parameter, value))
    names = list(result.parameters)
    rows_fitted = [b.row for b in result.before]
    matrix = np.array([[result.sensitivity[n][r.id] for n in names] for r in rows_fitted])
    print("\n" + sensitivity_table(names, rows_fitted, matrix) + "\n")
    loo = report["loo_median_abs_rel_error"]
    print(
        f"leave-one-out |error|: median {loo:.1%}, max {report['loo_max_abs_rel_error']:.1%}"
        if loo is not None
        else "leave-one-out: needs more rows than parameters"
    )


def _names(text: str, flag: str, example: str) -> list[str]:
    """The comma-separated names of a flag; naming none is an error (not a fall-back to the default)."""
    names = _comma_names(text)
    if not names:
        raise ConfigError(f"{flag}: names no parameter; expected comma-separated names, e.g. {flag} {example}")
    return names


def _yaml(profile: BaseModel) -> str:
    text: str = yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
    return text
