"""Fit a hardware profile's achievable efficiencies and latency terms to measured rows.

Only physically meaningful parameters are fitted, each within bounds (efficiencies in
(0, 1], latencies >= 0): the fitted profile still predicts every model on that hardware.
The objective is the sum of squared log-ratios ``log(predicted / measured)`` over the rows,
so a 2x over- and a 2x under-prediction weigh the same. Fitted values are written with
``confidence: derived`` and the ids of the rows they were fitted on.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from simulator.config.base import Sourced, Spec
from simulator.config.hardware import HardwareProfile
from simulator.config.loading import Catalog
from simulator.config.paths import Mark, get_path, with_values
from simulator.errors import InfersimError, InfersimWarning
from simulator.validation import MeasurementRow, RowResult, predict_row

#: Parameters a fit may move, with their bounds (SI units).
FITTABLE: dict[str, tuple[float, float]] = {
    "compute.efficiency": (0.05, 1.0),
    "memory.*.efficiency": (0.05, 1.0),
    "interconnect.latency": (0.0, 1e-3),
    "interconnect.efficiency": (0.05, 1.0),
    "execution.layer_latency": (0.0, 1e-3),
    "execution.step_overhead": (0.0, 0.05),
    "fabric.hop_latency": (0.0, 1e-5),
}


#: Stopping tolerances of the fit: relative change of the parameters and of the cost; 1e-6 is
#: far below the spread of published measurements, and each evaluation may be an engine run.
XTOL = FTOL = 1e-6


class CalibrationError(InfersimError):
    """A fit that cannot be set up: unknown parameter, no rows for this hardware."""


def _bounds_for(path: str) -> tuple[float, float]:
    parts = path.split(".")
    key = f"memory.*.{parts[2]}" if parts[0] == "memory" and len(parts) == 3 else path
    if key not in FITTABLE:
        raise CalibrationError(f"cannot fit {path!r}; fittable: {', '.join(FITTABLE)} (memory.<tier>.efficiency)")
    return FITTABLE[key]


#: How a fit marks the parameters it sets.
FIT = Mark("fit", "infersim calibrate (scipy least squares on log error)", "derived")


def fitted_value(profile: HardwareProfile, path: str) -> float:
    """The number at a parameter path (:mod:`simulator.config.paths`)."""
    number = get_path(profile, path)
    if not isinstance(number, Sourced):
        raise CalibrationError(f"{profile.id}: {path!r} is not a sourced number")
    value: float = number.value
    return value


@dataclass(frozen=True)
class Fit:
    profile: HardwareProfile
    parameters: dict[str, float]
    before: list[RowResult]
    after: list[RowResult]
    loo_abs_rel_errors: list[float]


def _log_errors(results: Sequence[RowResult]) -> np.ndarray:
    return np.array([np.log(r.predicted / r.row.value) for r in results if r.predicted])


def _apply(profile: HardwareProfile, paths: Sequence[str], x: np.ndarray, mark: Mark | None = None) -> HardwareProfile:
    return with_values(profile, {path: float(value) for path, value in zip(paths, x, strict=True)}, mark)


def _fit_once(
    profile: HardwareProfile,
    paths: Sequence[str],
    rows: Sequence[MeasurementRow],
    catalog: Catalog,
    start: np.ndarray | None = None,
) -> np.ndarray:
    """Bounded least squares on the log errors, from ``start`` (default: the profile's values)."""
    lower, upper = np.array([_bounds_for(p) for p in paths]).T
    initial = [fitted_value(profile, p) for p in paths] if start is None else start
    x0 = np.clip(initial, lower, upper)
    scale = np.maximum(np.abs(x0), upper * 1e-3)

    def residuals(z: np.ndarray) -> np.ndarray:
        patched = catalog.with_profiles(hardware=[_apply(profile, paths, z * scale)])
        return _log_errors([predict_row(r, patched) for r in rows])

    solution = least_squares(
        residuals, x0 / scale, bounds=(lower / scale, upper / scale), method="trf", xtol=XTOL, ftol=FTOL
    )
    fitted: np.ndarray = solution.x * scale
    return fitted


def calibrate(profile: HardwareProfile, paths: Sequence[str], rows: Sequence[MeasurementRow], catalog: Catalog) -> Fit:
    """Fit ``paths`` of ``profile`` to ``rows`` and cross-validate by leaving one row out."""
    rows = [r for r in rows if r.hardware == profile.id]
    if not rows:
        raise CalibrationError(f"no rows for hardware {profile.id!r} in the table")
    if len(set(paths)) != len(paths):
        raise CalibrationError(f"a parameter is named twice in {list(paths)}")
    for path in paths:
        _bounds_for(path)
    if len(rows) < len(paths):
        raise CalibrationError(
            f"{len(paths)} parameters cannot be identified from {len(rows)} row{'s' if len(rows) > 1 else ''} "
            f"({', '.join(r.id for r in rows)}): any of many values would fit exactly; fit at most {len(rows)} "
            f"(e.g. --fit {paths[0]}) or add rows"
        )
    if len(rows) == len(paths):
        warnings.warn(
            f"{len(paths)} parameters fitted to {len(rows)} rows: the fit is exact and cannot be cross-validated "
            "(no leave-one-out); treat the result as unvalidated",
            InfersimWarning,
            stacklevel=2,
        )
    x = _fit_once(profile, paths, rows, catalog)
    fitted = _apply(profile, paths, x, replace(FIT, note=f"fitted to rows {', '.join(r.id for r in rows)}"))
    loo: list[float] = []
    if len(rows) > len(paths):
        for i, held_out in enumerate(rows):
            x_i = _fit_once(profile, paths, rows[:i] + rows[i + 1 :], catalog, start=x)  # warm start
            result = predict_row(held_out, catalog.with_profiles(hardware=[_apply(profile, paths, x_i)]))
            if result.rel_error is not None:
                loo.append(abs(result.rel_error))
    return Fit(
        profile=fitted,
        parameters=dict(zip(paths, map(float, x), strict=True)),
        before=[predict_row(r, catalog.with_profiles(hardware=[profile])) for r in rows],
        after=[predict_row(r, catalog.with_profiles(hardware=[fitted])) for r in rows],
        loo_abs_rel_errors=loo,
    )


def derived_paths(profile: HardwareProfile) -> list[str]:
    """Dotted paths of the numbers a previous fit produced (``confidence: derived``, source ``fit``)."""
    found: list[str] = []

    def walk(node: object, prefix: str) -> None:
        if isinstance(node, Sourced):
            if node.confidence == "derived" and node.source == "fit":
                found.append(prefix)
        elif isinstance(node, Spec):
            for name in type(node).model_fields:
                walk(getattr(node, name), f"{prefix}.{name}" if prefix else name)
        elif isinstance(node, list):
            for item in node:
                walk(item, f"{prefix}.{item.name}")
        elif isinstance(node, dict):
            for key, item in node.items():
                walk(item, f"{prefix}.{key}")

    walk(profile, "")
    return [p for p in found if _fittable(p)]


def _fittable(path: str) -> bool:
    try:
        _bounds_for(path)
    except CalibrationError:
        return False
    return True


def fit_report(fit: Fit) -> dict[str, Any]:
    """Before/after error per row, the fitted values and the leave-one-out error."""
    loo = fit.loo_abs_rel_errors
    after = [abs(r.rel_error) for r in fit.after if r.rel_error is not None]
    before = [abs(r.rel_error) for r in fit.before if r.rel_error is not None]
    return {
        "hardware": fit.profile.id,
        "parameters": fit.parameters,
        "rows": [
            {"id": b.row.id, "measured": b.row.value, "before": b.predicted, "after": a.predicted,
             "rel_error_before": b.rel_error, "rel_error_after": a.rel_error}
            for b, a in zip(fit.before, fit.after, strict=True)
        ],
        "median_abs_rel_error_before": float(np.median(before)) if before else None,
        "median_abs_rel_error_after": float(np.median(after)) if after else None,
        "loo_median_abs_rel_error": float(np.median(loo)) if loo else None,
        "loo_max_abs_rel_error": float(np.max(loo)) if loo else None,
    }  # fmt: skip
