"""Fit hardware and serving-stack profiles' achievable efficiencies and latencies to measured rows.

Only physically meaningful parameters are fitted, each within bounds (efficiencies in
(0, 1], latencies >= 0): a fitted profile still predicts every model on that hardware. A
parameter belongs to one profile: a hardware parameter (``compute.efficiency``) is fitted on
the rows measured on that hardware; a serving-stack parameter (``trtllm.layer_latency``, the
per-layer launch and sync time of one software stack) is *shared*: fitted jointly on every row
served by that stack, whatever its hardware, and written once into the stack's profile.

- **Objective.** The sum of squared log-ratios ``r_i = log(predicted_i / measured_i)``, so a
  2x over- and a 2x under-prediction weigh the same; bounded trust-region least squares.
- **Jacobian.** Forward differences, each parameter moving only the rows it touches (its
  hardware's, or its stack's), so a joint fit costs about one prediction per row and parameter;
  over :data:`STEP` for closed-form rows, over :data:`ENGINE_STEP` for rows an engine run
  predicts (their simulated times jitter at small steps).
- **Identifiability.** At the solution the scaled Jacobian ``J`` must have full column rank:
  a singular value below :data:`IDENTIFIABLE` of the largest means some combination of
  parameters does not change any row (two latencies that only ever add, a fit on one load
  point); the fit warns and names the parameters of that combination.
- **Leave-one-out** (PRESS): ``r_i / (1 - h_ii)`` with ``h_ii`` the leverage of row ``i``
  (the diagonal of ``J (J'J)^-1 J'``): the error row ``i`` would have if the others alone were
  fitted, exact for a linear model and first order here; a row with ``h_ii`` above
  :data:`MAX_LEVERAGE` all but alone determines a parameter, the first-order extrapolation
  does not hold that far, and the row gets no leave-one-out error.

- **Sensitivity** (before fitting): ``s_ij = d r_i / d ln p_j`` at the starting values, the
  change of row ``i``'s log error per relative change of parameter ``j`` (for a parameter that
  starts at 0, per step of its scale, 1/1000 of its upper bound). A parameter whose
  ``|s_ij|`` stays below :data:`SENSITIVE` on every row cannot explain the rows' error (doubling
  it moves no prediction by 0.1 %; for one starting at 0, neither does raising it to its upper
  bound): the fit is refused and says so, instead of returning the starting value as if fitted.
- **Rows that determine nothing** are refused too: the output throughput of a finite run whose
  requests arrive at a set rate (:data:`OFFERED_LOADS`) is the offered load while the server
  keeps up, and otherwise depends on how the run's ramp and drain are counted, which the row
  does not say (:func:`undetermined`).
- **Did it move.** A fitted value within :data:`MOVED` (relative to its scale) of its start is
  reported as not moved, with why: held at a bound, or no better value near the start.

Fitted values are written with ``confidence: derived``, source ``fit`` and the ids of the rows
they were fitted on (and, for a shared parameter, the hardware those rows span).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
from scipy.optimize import least_squares

from simulator.config.base import Profile, Sourced, Spec
from simulator.config.hardware import HardwareProfile
from simulator.config.loading import Catalog
from simulator.config.paths import Mark, get_path, with_values
from simulator.config.stack import StackProfile
from simulator.errors import InfersimError, InfersimWarning
from simulator.studies.validation import MeasurementRow, RowResult, predict_row

#: Hardware parameters a fit may move, with their bounds (SI units).
HARDWARE_FITTABLE: dict[str, tuple[float, float]] = {
    "compute.efficiency": (0.05, 1.0),
    "compute.weight_only.*.efficiency": (0.05, 1.0),
    "memory.*.efficiency": (0.05, 1.0),
    "interconnect.latency": (0.0, 1e-3),
    "interconnect.alltoall_latency": (0.0, 1e-3),
    "interconnect.efficiency": (0.05, 1.0),
    "execution.layer_latency": (0.0, 1e-3),
    "fabric.hop_latency": (0.0, 1e-5),
}
#: Serving-stack parameters (shared by every row the stack served), with their bounds.
STACK_FITTABLE: dict[str, tuple[float, float]] = {
    "layer_latency": (0.0, 1e-3),
    "expert_latency": (0.0, 1e-4),
    "step_overhead": (0.0, 0.05),
    "matmul_share": (0.05, 1.0),
}

#: Stopping tolerances of the fit: relative change of the parameters (1e-5) and of the sum of
#: squared log errors (1e-4: a 0.01 % change of a cost made of errors of several percent); both
#: far below the spread of published measurements. Each evaluation may be an engine run per row,
#: so the solver also stops after ``MAX_EVALUATIONS`` evaluations of every row.
XTOL, FTOL = 1e-5, 1e-4
MAX_EVALUATIONS = 40
#: Leverage above which a row's leave-one-out error is not estimated: the row alone pins a
#: direction of the fit (a queueing-sensitive TTFT, say), and ``e / (1 - h)`` extrapolates the
#: linearised fit far beyond where it holds. Such rows print "-" as held-out error.
MAX_LEVERAGE = 0.95
#: Relative forward-difference step of the Jacobian (of the scaled parameter, which is ~1).
STEP = 1e-4
#: The step for rows predicted by an engine run (all but single-stream rows): a simulated time
#: moves in small jumps as batch boundaries and event order shift, so a difference over 1e-4 of
#: a parameter measures a jump, not the trend. On an imported vLLM run (Llama 3.3 70B, A100 x8,
#: Poisson 4 req/s) the mean TTFT's d log / d ln(vllm.layer_latency) is 102 over a 1e-4 step,
#: -0.42 over 2 %, -0.34 over 5 %, 0.32 over 10 %, 0.29 over 20 % and 50 % (its ITL's: 2.0, then
#: 0.27-0.31 from 2 % on): over 10 % the difference follows the trend.
ENGINE_STEP = 0.1
#: Smallest singular value of the scaled Jacobian, relative to the largest, of an identified fit.
IDENTIFIABLE = 1e-6

#: Largest |d log error / d ln parameter| over the rows below which a parameter cannot explain
#: the error: doubling it (ln 2 ~ 0.7) would move no row's prediction by 0.1 %.
SENSITIVE = 1e-3
#: A fitted value closer than this to its start (relative to the parameter's scale) did not move.
MOVED = 1e-3
#: Loads whose requests arrive at a set rate (the ``load`` column of a measurement row).
OFFERED_LOADS = ("poisson", "gamma", "constant")

#: How a fit marks the parameters it sets.
FIT = Mark("fit", "infersim calibrate (scipy least squares on log error)", "derived")


class CalibrationError(InfersimError):
    """A fit that cannot be set up: unknown parameter, no rows for a profile, too few rows."""


@dataclass(frozen=True)
class Parameter:
    """One number of one profile: ``kind`` ``hardware`` or ``stack``, the profile's id, the path in it."""

    kind: Literal["hardware", "stack"]
    profile_id: str
    path: str

    @property
    def name(self) -> str:
        return f"{self.profile_id}.{self.path}"

    @property
    def bounds(self) -> tuple[float, float]:
        table = HARDWARE_FITTABLE if self.kind == "hardware" else STACK_FITTABLE
        parts = self.path.split(".")
        if parts[0] == "memory" and len(parts) == 3:  # a tier by name
            parts[1] = "*"
        if parts[:2] == ["compute", "weight_only"] and len(parts) == 4:  # a weight-only path by format
            parts[2] = "*"
        key = ".".join(parts)
        if key not in table:
            raise CalibrationError(f"cannot fit {self.kind} parameter {self.path!r}; fittable: {', '.join(table)}")
        return table[key]

    def touches(self, row: MeasurementRow, catalog: Catalog) -> bool:
        """Whether this parameter moves the prediction of ``row``."""
        if self.kind == "hardware":
            return row.hardware == self.profile_id
        return row_stack(row, catalog) == self.profile_id


def row_stack(row: MeasurementRow, catalog: Catalog) -> str:
    """The serving stack a row was measured on: its own, else its hardware's default."""
    return row.stack or catalog.hardware(row.hardware).execution.default_stack


def parse_parameters(
    hardware_ids: Sequence[str], hardware_paths: Iterable[str], stack_paths: Iterable[str]
) -> list[Parameter]:
    """Hardware paths once per hardware; stack paths ``<stack id>.<field>`` once each (shared)."""
    parameters = [Parameter("hardware", h, p) for h in hardware_ids for p in hardware_paths]
    for text in stack_paths:
        stack_id, _, path = text.partition(".")
        if not path:
            raise CalibrationError(f"shared parameter {text!r}: expected <stack id>.<field>, e.g. trtllm.layer_latency")
        parameters.append(Parameter("stack", stack_id, path))
    names = [p.name for p in parameters]
    if len(set(names)) != len(names):
        raise CalibrationError(f"a parameter is named twice in {names}")
    for parameter in parameters:
        parameter.bounds  # noqa: B018 - raises for a parameter that is not fittable
    return parameters


@dataclass(frozen=True)
class Fit:
    """Fitted profiles (hardware and stacks), the values, and the errors before, after and held out."""

    hardware: dict[str, HardwareProfile]
    stacks: dict[str, StackProfile]
    parameters: dict[str, float]
    before: list[RowResult]
    after: list[RowResult]
    loo_abs_rel_errors: dict[str, float]  # by row id; rows that alone fix a parameter are absent
    unidentified: list[list[str]]  # parameter combinations the rows cannot tell apart
    start: dict[str, float] = field(default_factory=dict)  # each parameter's value before the fit
    sensitivity: dict[str, dict[str, float]] = field(default_factory=dict)  # parameter -> row id -> d r / d ln p
    not_moved: dict[str, str] = field(default_factory=dict)  # parameter -> why it kept its starting value

    @property
    def profile(self) -> HardwareProfile:
        """The one fitted hardware profile (single-hardware fits)."""
        (only,) = self.hardware.values()
        return only


def _number(profile: Profile, path: str) -> float:
    number = get_path(profile, path)
    if not isinstance(number, Sourced):
        raise CalibrationError(f"{profile.id}: {path!r} is not a sourced number")
    value: float = number.value
    return value


class _Problem:
    """The rows, the parameters and the profiles they live in; predictions by parameter vector."""

    def __init__(self, parameters: Sequence[Parameter], rows: Sequence[MeasurementRow], catalog: Catalog) -> None:
        self.parameters, self.rows, self.catalog = list(parameters), list(rows), catalog
        self.hardware = {p.profile_id: catalog.hardware(p.profile_id) for p in parameters if p.kind == "hardware"}
        self.stacks = {p.profile_id: catalog.stack(p.profile_id) for p in parameters if p.kind == "stack"}
        self.touches = np.array([[p.touches(r, catalog) for p in parameters] for r in rows], dtype=bool)
        self.simulated = np.array([not r.single_stream for r in rows], dtype=bool)  # predicted by an engine run
        self.lower, self.upper = np.array([p.bounds for p in parameters], dtype=float).T
        start = [_number(self._profile(p), p.path) for p in parameters]
        self.x0 = np.clip(start, self.lower, self.upper)
        self.scale = np.maximum(np.abs(self.x0), self.upper * 1e-3)
        self._cache: dict[bytes, np.ndarray] = {}
        self._jacobians: dict[bytes, np.ndarray] = {}

    def _profile(self, parameter: Parameter) -> Profile:
        return (
            self.hardware[parameter.profile_id] if parameter.kind == "hardware" else self.stacks[parameter.profile_id]
        )

    def profiles(
        self, x: np.ndarray, mark: Mark | None = None, notes: dict[str, str] | None = None
    ) -> tuple[dict[str, HardwareProfile], dict[str, StackProfile]]:
        """The profiles with the parameters set to ``x`` (SI values), marked as fitted when ``mark``."""
        hardware, stacks = dict(self.hardware), dict(self.stacks)
        for parameter, value in zip(self.parameters, x, strict=True):
            given = replace(mark, note=(notes or {}).get(parameter.name, mark.note)) if mark else None
            if parameter.kind == "hardware":
                hardware[parameter.profile_id] = with_values(
                    hardware[parameter.profile_id], {parameter.path: float(value)}, given
                )
            else:
                stacks[parameter.profile_id] = with_values(
                    stacks[parameter.profile_id], {parameter.path: float(value)}, given
                )
        return hardware, stacks

    def predict(self, x: np.ndarray, rows: Sequence[int] | None = None) -> list[RowResult]:
        hardware, stacks = self.profiles(x)
        catalog = self.catalog.with_profiles(hardware=list(hardware.values()), stacks=list(stacks.values()))
        chosen = range(len(self.rows)) if rows is None else rows
        return [predict_row(self.rows[i], catalog) for i in chosen]

    def residuals(self, z: np.ndarray) -> np.ndarray:
        """Log errors of every row at scaled parameters ``z``."""
        key = z.tobytes()
        if key not in self._cache:
            self._cache = {key: _log_errors(self.predict(z * self.scale))}
        return self._cache[key]

    def jacobian(self, z: np.ndarray) -> np.ndarray:
        """Forward differences, each column over the rows its parameter touches (others are 0);
        the last one is kept (the solver asks again for the Jacobian at the start)."""
        key = z.tobytes()
        if key not in self._jacobians:
            self._jacobians = {key: self._differences(z)}
        return self._jacobians[key]

    def _differences(self, z: np.ndarray) -> np.ndarray:
        base = self.residuals(z)
        jac = np.zeros((len(self.rows), len(self.parameters)))
        for j in range(len(self.parameters)):
            for relative, simulated in ((STEP, False), (ENGINE_STEP, True)):
                touched = np.flatnonzero(self.touches[:, j] & (self.simulated == simulated)).tolist()
                if not touched:
                    continue
                step = relative * max(1.0, abs(z[j]))
                if z[j] + step > self.upper[j] / self.scale[j]:
                    step = -step  # at the upper bound: a backward difference
                moved = z.copy()
                moved[j] += step
                jac[touched, j] = (_log_errors(self.predict(moved * self.scale, touched)) - base[touched]) / step
        return jac

    def solve(self, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bounded least squares from ``start`` (SI values): (fitted SI values, Jacobian there)."""
        solution = least_squares(
            self.residuals,
            start / self.scale,
            jac=self.jacobian,
            bounds=(self.lower / self.scale, self.upper / self.scale),
            method="trf",
            xtol=XTOL,
            ftol=FTOL,
            max_nfev=MAX_EVALUATIONS,
        )
        return solution.x * self.scale, self.jacobian(solution.x)


def _log_errors(results: Sequence[RowResult]) -> np.ndarray:
    return np.array([math.log(r.predicted / r.row.value) if r.predicted else 0.0 for r in results])


def leverages(jacobian: np.ndarray) -> np.ndarray:
    """Diagonal of the hat matrix ``J (J'J)^+ J'`` (the pseudo-inverse where ``J`` is rank-deficient)."""
    u, s, _ = np.linalg.svd(jacobian, full_matrices=False)
    kept = s > IDENTIFIABLE * (s.max() if s.size else 0.0)
    h: np.ndarray = np.sum(u[:, kept] ** 2, axis=1)
    return h


def unidentified_combinations(jacobian: np.ndarray, names: Sequence[str]) -> list[list[str]]:
    """Parameter combinations (right singular vectors with singular values below :data:`IDENTIFIABLE`
    of the largest) that move no row: named by their parameters with loading above 0.1."""
    _, s, vt = np.linalg.svd(jacobian, full_matrices=True)
    values = np.zeros(vt.shape[0])
    values[: s.size] = s
    largest = values.max() if values.size else 0.0
    return [
        [n for n, w in zip(names, vt[i], strict=True) if abs(w) > 0.1]
        for i in range(vt.shape[0])
        if values[i] <= IDENTIFIABLE * largest
    ]


def load_point(row: MeasurementRow) -> tuple[object, ...]:
    """What makes two rows the same measurement (different metrics of one run share it)."""
    return (
        row.hardware,
        row.model,
        row.chips,
        row.input_tokens,
        row.output_tokens,
        row.concurrency,
        row.load,
        row.request_rate_per_s,
        row.requests,
    )


def fit(parameters: Sequence[Parameter], rows: Sequence[MeasurementRow], catalog: Catalog) -> Fit:
    """Fit ``parameters`` jointly to ``rows`` (module docstring).

    Raises
    ------
    CalibrationError
        If a parameter moves none of the rows (it touches none, or no row is sensitive to it), a
        row cannot determine any parameter (:func:`undetermined`), or there are fewer rows than
        parameters.
    """
    _check_determinable(parameters, rows)
    problem = _Problem(parameters, rows, catalog)
    _check_enough_rows(problem, parameters, rows)
    start_jacobian = problem.jacobian(problem.x0 / problem.scale)
    sensitivity = _log_sensitivity(start_jacobian, problem.x0 / problem.scale)
    names = [p.name for p in parameters]
    _check_sensitive(problem, names, rows, start_jacobian, sensitivity)
    _warn_weak_design(parameters, rows)
    x, jacobian = problem.solve(problem.x0)
    residuals = problem.residuals(x / problem.scale)
    unidentified = unidentified_combinations(jacobian, names)
    _warn_unidentified(unidentified)
    loo = _leave_one_out(rows, residuals, leverages(jacobian), len(parameters))
    notes = {p.name: _provenance(p, rows, problem.touches[:, j]) for j, p in enumerate(parameters)}
    hardware, stacks = problem.profiles(x, FIT, notes)
    before_hw, before_stacks = problem.hardware, problem.stacks
    before = problem.catalog.with_profiles(hardware=list(before_hw.values()), stacks=list(before_stacks.values()))
    after = problem.catalog.with_profiles(hardware=list(hardware.values()), stacks=list(stacks.values()))
    return Fit(
        hardware=hardware,
        stacks=stacks,
        parameters=dict(zip(names, map(float, x), strict=True)),
        before=[predict_row(r, before) for r in rows],
        after=[predict_row(r, after) for r in rows],
        loo_abs_rel_errors=loo,
        unidentified=unidentified,
        start=dict(zip(names, map(float, problem.x0), strict=True)),
        sensitivity={
            n: {r.id: float(v) for r, v in zip(rows, sensitivity[:, j], strict=True)} for j, n in enumerate(names)
        },
        not_moved=_not_moved(problem, x),
    )


def _check_determinable(parameters: Sequence[Parameter], rows: Sequence[MeasurementRow]) -> None:
    """Refuse a fit of no parameters, or one with a row that cannot determine any (:func:`undetermined`)."""
    if not parameters:
        raise CalibrationError("no parameters to fit")
    refused = [reason for reason in map(undetermined, rows) if reason]
    if refused:
        raise CalibrationError("refused: " + "; ".join(refused))


def _check_enough_rows(problem: _Problem, parameters: Sequence[Parameter], rows: Sequence[MeasurementRow]) -> None:
    """Refuse a fit where a parameter touches no row, or there are fewer rows than parameters."""
    idle = [p.name for j, p in enumerate(parameters) if not problem.touches[:, j].any()]
    if idle:
        raise CalibrationError(
            f"no rows for {', '.join(idle)} in the table (a hardware parameter needs rows on that "
            "hardware; a stack parameter rows served by that stack)"
        )
    if len(rows) < len(parameters):
        raise CalibrationError(
            f"{len(parameters)} parameters ({', '.join(p.name for p in parameters)}) cannot be identified from "
            f"{len(rows)} row{'s' if len(rows) > 1 else ''} ({', '.join(r.id for r in rows)}): any of many values "
            f"would fit exactly; fit at most {len(rows)} or add rows"
        )


def _check_sensitive(
    problem: _Problem,
    names: Sequence[str],
    rows: Sequence[MeasurementRow],
    start_jacobian: np.ndarray,
    sensitivity: np.ndarray,
) -> None:
    """Refuse a fit where a parameter moves no row by :data:`SENSITIVE` over its reach (doubling it,
    or from 0 up to its upper bound): the fit would return its starting value."""
    reach = np.where(problem.x0 > 0, 1.0, problem.upper / problem.scale)  # from 0: as far as its upper bound
    blind = [n for j, n in enumerate(names) if np.max(np.abs(start_jacobian[:, j])) * reach[j] < SENSITIVE]
    if blind:
        raise CalibrationError(
            f"refused: {', '.join(blind)} cannot explain the error of rows {', '.join(r.id for r in rows)}: no "
            "row's prediction depends on it (doubling it, or raising it from 0 to its bound, moves none by 0.1 %), so "
            "a fit would return its starting value; fit parameters these rows depend on (the table below), or add "
            "rows that depend on it\n" + sensitivity_table(names, rows, sensitivity)
        )


def _warn_weak_design(parameters: Sequence[Parameter], rows: Sequence[MeasurementRow]) -> None:
    """Warn (at :func:`fit`'s caller) when the fit is exact, or every row comes from one load point."""
    if len(rows) == len(parameters):
        warnings.warn(
            f"{len(parameters)} parameters fitted to {len(rows)} rows: the fit is exact and cannot be "
            "cross-validated (no leave-one-out); treat the result as unvalidated",
            InfersimWarning,
            stacklevel=3,
        )
    points = {load_point(r) for r in rows}
    if len(points) == 1 and len(parameters) > 1:
        warnings.warn(
            f"every row comes from one load point ({rows[0].load}, {len(rows)} metrics of it): the fit "
            "cannot tell costs that grow with load from fixed ones, and its leave-one-out errors say "
            "little; add rows at other loads or lengths",
            InfersimWarning,
            stacklevel=3,
        )


def _warn_unidentified(unidentified: Sequence[Sequence[str]]) -> None:
    """Warn (at :func:`fit`'s caller) once per parameter combination the rows cannot tell apart."""
    for combination in unidentified:
        warnings.warn(
            f"the rows cannot tell {', '.join(combination) or 'some parameters'} apart (they move no row "
            "independently): add rows at other loads or lengths, or fit fewer parameters",
            InfersimWarning,
            stacklevel=3,
        )


def _leave_one_out(
    rows: Sequence[MeasurementRow], residuals: np.ndarray, h: np.ndarray, n_parameters: int
) -> dict[str, float]:
    """Each row's leave-one-out absolute relative error ``|exp(r / (1 - h)) - 1|`` from its log
    residual ``r`` and leverage ``h``; rows at leverage :data:`MAX_LEVERAGE` or above, and every row
    of an exact fit, have none."""
    return {
        row.id: abs(math.expm1(r / (1.0 - hi)))
        for row, r, hi in zip(rows, residuals, h, strict=True)
        if hi < MAX_LEVERAGE and len(rows) > n_parameters
    }


def _log_sensitivity(jacobian: np.ndarray, z0: np.ndarray) -> np.ndarray:
    """``d r_i / d ln p_j`` from the scaled Jacobian at ``z0 = p0 / scale`` (``z dr/dz``); a parameter
    starting at 0 keeps its per-scale column (module docstring)."""
    factor = np.where(z0 > 0, z0, 1.0)
    result: np.ndarray = jacobian * factor
    return result


def sensitivity_table(names: Sequence[str], rows: Sequence[MeasurementRow], sensitivity: np.ndarray) -> str:
    """Rows by parameters: each cell the change of the row's log error per relative change of the
    parameter (``d r / d ln p``, module docstring); ``-`` where the parameter does not touch the row."""
    from simulator.tables import format_table

    cells = [[r.id, r.metric, *(_cell(v) for v in sensitivity[i])] for i, r in enumerate(rows)]
    labels = [f"p{j + 1}" for j in range(len(names))]
    legend = "\n".join(f"  {label} = {name}" for label, name in zip(labels, names, strict=True))
    header = "sensitivity d log(predicted) / d ln(parameter) at the starting values:\n"
    return header + format_table(["row", "metric", *labels], cells) + "\n" + legend


def _cell(value: float) -> str:
    """A sensitivity to three decimals; ``-`` for a parameter that does not touch the row."""
    return "-" if value == 0 else "0" if abs(value) < 5e-4 else f"{value:+.3f}"


def _not_moved(problem: _Problem, x: np.ndarray) -> dict[str, str]:
    """The parameters the fit left within :data:`MOVED` of their start, each with why."""
    found = {}
    for j, parameter in enumerate(problem.parameters):
        if abs(x[j] - problem.x0[j]) > MOVED * problem.scale[j]:
            continue
        if math.isclose(x[j], problem.upper[j], rel_tol=MOVED, abs_tol=MOVED * problem.scale[j]):
            found[parameter.name] = f"held at its upper bound {problem.upper[j]:.4g}: the rows would take it further"
        elif math.isclose(x[j], problem.lower[j], rel_tol=MOVED, abs_tol=MOVED * problem.scale[j]):
            found[parameter.name] = f"held at its lower bound {problem.lower[j]:.4g}: the rows would take it further"
        else:
            found[parameter.name] = "no value near its start fits the rows better: the result is the starting value"
    return found


def undetermined(row: MeasurementRow) -> str:
    """Why ``row`` cannot determine a parameter, or ``""`` (module docstring)."""
    if row.metric != "aggregate_output_tok_s" or row.load not in OFFERED_LOADS:
        return ""
    rate = row.request_rate_per_s
    offered = (
        f" ({rate:g} req/s x {row.output_tokens} output tokens = {rate * row.output_tokens:,.0f} tok/s)" if rate else ""
    )
    return (
        f"{row.id}: the output throughput of a finite run of {row.requests or 'some'} requests arriving at a set "
        f"rate ({row.load}) is the offered load{offered} while the server keeps up, and otherwise depends on how "
        f"the run's ramp and drain are counted, which the row does not say; fit its latency rows (ttft_s, "
        f"itl_s, tpot_s, e2e_s) instead"
    )


def _provenance(parameter: Parameter, rows: Sequence[MeasurementRow], touched: np.ndarray) -> str:
    ids = [r.id for r, t in zip(rows, touched, strict=True) if t]
    if parameter.kind == "hardware":
        return f"fitted to rows {', '.join(ids)}"
    spanned = sorted({r.hardware for r, t in zip(rows, touched, strict=True) if t})
    return f"shared: fitted jointly on the {parameter.profile_id} rows of {', '.join(spanned)} ({', '.join(ids)})"


def calibrate(profile: HardwareProfile, paths: Sequence[str], rows: Sequence[MeasurementRow], catalog: Catalog) -> Fit:
    """Fit ``paths`` of one hardware ``profile`` to its rows (the profile given replaces the catalog's)."""
    rows = [r for r in rows if r.hardware == profile.id]
    if not rows:
        raise CalibrationError(f"no rows for hardware {profile.id!r} in the table")
    parameters = parse_parameters([profile.id], paths, [])
    return fit(parameters, rows, catalog.with_profiles(hardware=[profile]))


def derived_paths(profile: Profile) -> list[str]:
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
    kind: Literal["hardware", "stack"] = "stack" if isinstance(profile, StackProfile) else "hardware"
    return [p for p in found if _fittable(Parameter(kind, profile.id, p))]


def _fittable(parameter: Parameter) -> bool:
    try:
        parameter.bounds  # noqa: B018
    except CalibrationError:
        return False
    return True


def fit_report(result: Fit) -> dict[str, Any]:
    """Before/after error per row, the fitted values and the leave-one-out error."""
    loo = list(result.loo_abs_rel_errors.values())
    after = [abs(r.rel_error) for r in result.after if r.rel_error is not None]
    before = [abs(r.rel_error) for r in result.before if r.rel_error is not None]
    return {
        "hardware": sorted(result.hardware),
        "stacks": sorted(result.stacks),
        "parameters": result.parameters,
        "rows": [
            {
                "id": b.row.id,
                "hardware": b.row.hardware,
                "measured": b.row.value,
                "before": b.predicted,
                "after": a.predicted,
                "rel_error_before": b.rel_error,
                "rel_error_after": a.rel_error,
                "loo_abs_rel_error": result.loo_abs_rel_errors.get(b.row.id),
            }
            for b, a in zip(result.before, result.after, strict=True)
        ],
        "median_abs_rel_error_before": float(np.median(before)) if before else None,
        "median_abs_rel_error_after": float(np.median(after)) if after else None,
        "loo_median_abs_rel_error": float(np.median(loo)) if loo else None,
        "loo_max_abs_rel_error": float(np.max(loo)) if loo else None,
        "unidentified": result.unidentified,
        "start": result.start,
        "sensitivity": result.sensitivity,
        "not_moved": result.not_moved,
    }
