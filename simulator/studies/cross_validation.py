"""Leave-one-source-out cross-validation: each row predicted by parameters fitted without its source.

The plain ``validate`` predicts every row with the profiles as they are, and some of their
numbers were fitted on rows of the same table. Cross-validation asks what the model says about
a row when the fits never saw the publication it came from.

**Fitted parameters and their fits.** A fitted parameter is a number of a hardware or stack
profile whose provenance says a fit produced it (``source: fit``, ``confidence: derived``:
:func:`~simulator.studies.calibration.derived_paths`). Its *fit*, the parameters fitted jointly with it
and the rows they were fitted on, is read from the provenance notes:

- the rows: every id of the table a member's note names (a range ``S01-S08`` names the ids
  between), less the rows the model cannot predict now;
- the parameters: those of the ``infersim calibrate --hardware A,B --fit P --shared S.x``
  command a note quotes (``A.P``, ``B.P``, ``S.x``; without ``--fit``, each hardware's fitted
  parameters, as ``calibrate`` does), and the fitted parameters whose notes name the same rows.

A fitted parameter whose note names no row and no command cannot be refitted; it keeps its
value and is listed as held (:attr:`CrossValidation.held`).

**Sources.** A row's source is the first reference of its ``source`` column (:func:`source_key`):
the document a URL names (host without ``www.`` and path, no query), a GitHub file by
repository and path whatever the commit (``blob/<ref>/`` dropped: one document in several
versions is one source), a bare ``host/path`` likewise, and a leading ``owner/repo`` (GitHub's
short form) by its repository; a source column with no reference is its own text.

**Folds.** For each source ``s`` every fit whose rows include a row of ``s`` is refitted on its
rows without those of ``s``, by the fit's own machinery (:class:`~simulator.studies.calibration.Parameter`
bounds, scaling and forward-difference Jacobian) to first order: the log errors of the fit's rows
are linearised at the profiles' values, ``r(z) = r0 + J (z - z0)`` (``J`` computed once for all
folds), and the bounded linear least-squares problem over the kept rows is solved with a ridge of
:data:`RIDGE` on the scaled move (so a direction the kept rows do not constrain stays put). This
is the Gauss-Newton step of the refit, exact for a linear model, and the same first order as the
fit's own leave-one-out (PRESS). The rows of ``s`` are then predicted in full at the refitted
values. A parameter that no kept row moves has no value without ``s``: the rows of ``s`` it moves
get no cross-validated prediction (the reason names it).

Cost: the Jacobian costs one prediction per (fit row, parameter moving it); each fold one
prediction per held-out row that a refitted parameter moves. Predictions are memoised by (row,
changed parameter values), engine runs by (scenario, changed parameter values) (rows that are
metrics of one measured run share one), and rows of a source that no fit used keep their plain
prediction. A parameter of the row's hardware that the step-time model of none of the row's
layout candidates reads (:func:`reaches`) is no change for that row: its prediction is the one
without it, exactly, and nothing runs. Such a number is read nowhere else: placement, which
picks the candidates, reads memory sizes, not these numbers; the layout choice, the closed form
and the engine time a step through the step-time model alone. The step-time model reads the
interconnect's latency and efficiency only in collectives (none on one chip of a switched
interconnect without pipeline stages or data-parallel attention: an H100's interconnect latency
on a one-chip row), its all-to-all latency only for data-parallel attention, and a weight-only
path's efficiency only for a matmul in that format (an H100's MXFP4 path on a BF16 model).
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

import numpy as np
from scipy.optimize import lsq_linear

from simulator.analytic.placement import Deployment
from simulator.config.base import Profile, Sourced
from simulator.config.loading import Catalog
from simulator.errors import InfersimError
from simulator.studies.calibration import ENGINE_STEP, STEP, Parameter, _number, _Problem, derived_paths
from simulator.studies.validation import (
    MeasurementRow,
    RowResult,
    Runs,
    collecting_rarely,
    predict_row,
    row_layouts,
)

#: Ridge on the scaled parameter move (relative change squared) against the squared log errors:
#: negligible where the kept rows determine a parameter, decisive where they do not.
RIDGE = 1e-6

_URL = re.compile(r"https?://[^\s;,()\"']+", re.IGNORECASE)
_BARE = re.compile(r"(?<![\w@./-])((?:[a-z0-9-]+\.)+[a-z]{2,}(?:/[^\s;,()\"']*)?)", re.IGNORECASE)
_SHORT_REPO = re.compile(r"^([A-Za-z0-9][\w.-]*)/([\w.-]+)(?=\s|$)")
_GITHUB_REFS = ("blob", "tree", "raw", "commit")


def source_key(source: str) -> str:
    """The source a row's ``source`` column names (module docstring), e.g.
    ``https://github.com/NVIDIA/TensorRT-LLM/blob/00f3/docs/a.md`` -> ``github.com/NVIDIA/TensorRT-LLM/docs/a.md``."""
    text = source.strip()
    short = _SHORT_REPO.match(text)
    if short and "." not in short.group(1):  # owner/repo, GitHub's short form
        return f"github.com/{short.group(1)}/{short.group(2)}"
    url = _first_url(text)
    if url is None:
        return " ".join(text.split())
    return _url_key(url)


def _first_url(text: str) -> str | None:
    """The first address in ``text``, a bare host (``example.org/a``) given ``https://``; None if none."""
    found = [(m.start(), m.group(0)) for m in _URL.finditer(text)]
    found += [(m.start(), "https://" + m.group(1)) for m in _BARE.finditer(text)]
    if not found:
        return None
    _, url = min(found)
    return url


def _url_key(url: str) -> str:
    """``host/path`` of ``url`` without ``www.``; a GitHub document without its version (blob/ref)."""
    parts = urlsplit(url)
    host = parts.netloc.lower().removeprefix("www.")
    path = [p for p in parts.path.split("/") if p]
    if host == "github.com" and len(path) >= 4 and path[2] in _GITHUB_REFS:
        path = path[:2] + path[4:]  # the document, whatever its version
    return "/".join([host, *path])


_ROW_RANGE = re.compile(r"\b([A-Z]+)(\d+)\s*-\s*\1?(\d+)\b")
_COMMAND = re.compile(r"infersim calibrate ([^;\"()]*)")


def _named_rows(note: str, table_ids: Sequence[str]) -> list[str]:
    """Ids of the table a note names, a range ``S01-S08`` naming those between."""
    known = set(table_ids)
    named = {w for w in re.findall(r"\b[A-Z]+\d+\b", note) if w in known}
    for prefix, first, last in _ROW_RANGE.findall(note):
        width = len(first)
        named |= {f"{prefix}{i:0{width}d}" for i in range(int(first), int(last) + 1)} & known
    return [i for i in table_ids if i in named]


def _command_parameters(command: str, catalog: Catalog) -> list[Parameter]:
    """The parameters a quoted ``infersim calibrate`` command fits."""
    words = shlex.split(command)
    options = {words[i]: words[i + 1] for i in range(len(words) - 1) if words[i].startswith("--")}
    hardware = [h for h in options.get("--hardware", "").split(",") if h]
    found = []
    for h in hardware:
        paths = options["--fit"].split(",") if "--fit" in options else derived_paths(catalog.hardware(h))
        found += [Parameter("hardware", h, p) for p in paths]
    for text in options.get("--shared", "").split(","):
        stack, _, path = text.partition(".")
        if path:
            found.append(Parameter("stack", stack, path))
    return found


def _note(profile: Profile, path: str) -> str:
    node: object = profile
    for part in path.split("."):
        if isinstance(node, dict):
            node = node[part]
        elif isinstance(node, list):
            node = next(item for item in node if item.name == part)
        else:
            node = getattr(node, part)
    assert isinstance(node, Sourced)
    return node.note


@dataclass(frozen=True)
class FitGroup:
    """Parameters fitted jointly and the table rows they were fitted on."""

    parameters: tuple[Parameter, ...]
    row_ids: tuple[str, ...]


def fit_groups(catalog: Catalog, table_ids: Sequence[str]) -> tuple[list[FitGroup], list[str]]:
    """The fits behind the catalogue's fitted parameters (module docstring), and the fitted
    parameters held at their value (no rows named)."""
    fitted = _fitted_parameters(catalog)
    rows = {name: _named_rows(note, table_ids) for name, (_, note) in fitted.items()}
    members = _joint_fits(fitted, rows, catalog)
    groups, held = [], []
    for names in members.values():
        ids = {i for n in names for i in rows[n]}
        if not ids:
            held += names
            continue
        groups.append(FitGroup(tuple(fitted[n][0] for n in names), tuple(i for i in table_ids if i in ids)))
    return groups, held


def _fitted_parameters(catalog: Catalog) -> dict[str, tuple[Parameter, str]]:
    """The catalogue's fitted parameters by name, each with its note (hardware first, then stacks)."""
    fitted: dict[str, tuple[Parameter, str]] = {}
    for h in catalog.hardware_ids():
        profile: Profile = catalog.hardware(h)
        fitted |= {f"{h}.{p}": (Parameter("hardware", h, p), _note(profile, p)) for p in derived_paths(profile)}
    for s in catalog.stack_ids():
        profile = catalog.stack(s)
        fitted |= {f"{s}.{p}": (Parameter("stack", s, p), _note(profile, p)) for p in derived_paths(profile)}
    return fitted


def _joint_fits(
    fitted: dict[str, tuple[Parameter, str]], rows: dict[str, list[str]], catalog: Catalog
) -> dict[str, list[str]]:
    """Fitted parameters joined into fits (union-find): those naming the same rows, and those a
    quoted ``infersim calibrate`` command fits together; by the fit's root parameter."""
    parent = {name: name for name in fitted}
    by_rows: dict[tuple[str, ...], str] = {}
    for name, (_, note) in fitted.items():
        linked = [by_rows.setdefault(tuple(rows[name]), name)] if rows[name] else []
        for other in linked + _command_links(note, catalog, fitted):
            parent[_root(parent, name)] = _root(parent, other)
    members: dict[str, list[str]] = {}
    for name in fitted:
        members.setdefault(_root(parent, name), []).append(name)
    return members


def _root(parent: dict[str, str], name: str) -> str:
    """The root of ``name``'s set in the union-find forest ``parent``."""
    while parent[name] != name:
        name = parent[name]
    return name


def _command_links(note: str, catalog: Catalog, fitted: dict[str, tuple[Parameter, str]]) -> list[str]:
    """The fitted parameters that the ``infersim calibrate`` commands quoted in ``note`` fit."""
    return [
        parameter.name
        for command in _COMMAND.findall(note)
        for parameter in _command_parameters(command, catalog)
        if parameter.name in fitted
    ]


@dataclass(frozen=True)
class CrossValidation:
    """Each row's prediction without its source in the fits, and what was refitted."""

    predicted: dict[str, float | None]  # by row id
    reasons: dict[str, str]  # by row id, where ``predicted`` is None
    sources: dict[str, str]  # row id -> source key
    groups: list[FitGroup]
    held: list[str]  # fitted parameters without rows: held at their value
    refits: dict[str, dict[str, float]] = field(default_factory=dict)  # source -> parameter -> refitted value


#: Fitted numbers that only some layouts' step times read (:mod:`simulator.analytic.step_time`), by
#: path: the interconnect's latency and efficiency only its collectives (a tensor-parallel all-reduce,
#: an all-to-all of data-parallel attention, a pipeline hop, any collective on a torus); its
#: all-to-all latency only the all-to-all.
_LINK_PATHS = ("interconnect.latency", "interconnect.efficiency")
_ALLTOALL_PATH = "interconnect.alltoall_latency"


def reaches(parameter: Parameter, layouts: Sequence[Deployment]) -> bool:
    """Whether ``parameter``'s number can change a prediction made on one of ``layouts`` (a row's
    layout candidates, :func:`~simulator.studies.validation.row_layouts`), drafts included; False
    only where the step-time model provably never reads it (module docstring): a hardware's
    interconnect latency and efficiency on layouts without collectives, its all-to-all latency
    without data-parallel attention, a weight-only path's efficiency where no tensor group is
    stored, nor activations run, in that format."""
    every = [d for top in layouts for d in _with_drafts(top)]
    if parameter.kind != "hardware" or any(d.hardware.id != parameter.profile_id for d in every):
        return True
    if parameter.path in _LINK_PATHS:
        return any(_collective(d) for d in every)
    if parameter.path == _ALLTOALL_PATH:
        return any(d.attention_dp > 1 for d in every)
    head, _, rest = parameter.path.partition("compute.weight_only.")
    if not head and rest.endswith(".efficiency"):
        return any(_runs_in(d, rest.removesuffix(".efficiency")) for d in every)
    return True


def _with_drafts(d: Deployment) -> list[Deployment]:
    """A deployment and its speculative draft's, recursively."""
    return [d, *(_with_drafts(d.draft) if d.draft is not None else [])]


def _collective(d: Deployment) -> bool:
    """Whether a step of ``d`` crosses the interconnect: all-reduce, all-to-all, pipeline hop, torus."""
    return (d.tensor_parallel > 1 or d.pipeline_parallel > 1 or d.attention_dp > 1
            or d.hardware.interconnect.torus is not None)  # fmt: skip


def _runs_in(d: Deployment, precision: str) -> bool:
    """Whether a matmul of ``d`` may take the weight-only path of ``precision`` (a stored group's or
    the headline weight format, the activations or the KV cache: every precision a path is looked up for)."""
    return precision in {*d.precision.values(), d.weights, d.activations, d.kv_cache}


class _Predictions:
    """Predictions by (row, changed parameter values), the unchanged ones from the plain run; the
    engine runs made at each set of changed values, so rows that are metrics of one measured run
    (one scenario) share one run. A changed value that cannot reach a row (:func:`reaches`) is not
    a change for it."""

    def __init__(self, catalog: Catalog, plain: Sequence[RowResult]) -> None:
        self.catalog = catalog
        self.memo: dict[tuple[str, tuple[tuple[str, float], ...]], float | None] = {
            (r.row.id, ()): r.predicted for r in plain
        }
        self.runs: dict[tuple[tuple[str, float], ...], Runs] = {}
        self.current: dict[Parameter, float] = {}
        self.layouts: dict[str, tuple[Deployment, ...]] = {}  # by row id: the row's layout candidates

    def _reaches(self, parameter: Parameter, row: MeasurementRow) -> bool:
        if row.id not in self.layouts:
            try:
                choice = row_layouts(row, self.catalog)
            except InfersimError:
                return True
            self.layouts[row.id] = tuple(c.deployment for c in choice.ranked)
        return reaches(parameter, self.layouts[row.id])

    def _value(self, parameter: Parameter) -> float:
        if parameter not in self.current:
            profile = (self.catalog.hardware(parameter.profile_id) if parameter.kind == "hardware"
                       else self.catalog.stack(parameter.profile_id))  # fmt: skip
            self.current[parameter] = _number(profile, parameter.path)
        return self.current[parameter]

    def __call__(self, row: MeasurementRow, values: dict[Parameter, float]) -> float | None:
        moved = {
            p: v
            for p, v in values.items()
            if p.touches(row, self.catalog) and v != self._value(p) and self._reaches(p, row)
        }
        key = (row.id, tuple(sorted((p.name, v) for p, v in moved.items())))
        if key not in self.memo:
            runs = self.runs.setdefault(key[1], {})
            self.memo[key] = predict_row(row, _with_values(self.catalog, moved), runs).predicted
        return self.memo[key]


def _with_values(catalog: Catalog, values: dict[Parameter, float]) -> Catalog:
    """The catalog with each parameter set to its value (profiles otherwise as they are)."""
    if not values:
        return catalog
    problem = _Problem(list(values), [], catalog)
    hardware, stacks = problem.profiles(np.array(list(values.values())))
    return catalog.with_profiles(hardware=list(hardware.values()), stacks=list(stacks.values()))


@dataclass
class _Linearised:
    """A fit's rows, their log errors at the profiles' values and the scaled Jacobian."""

    group: FitGroup
    problem: _Problem
    rows: list[MeasurementRow]
    residuals: np.ndarray
    jacobian: np.ndarray

    @classmethod
    def build(cls, group: FitGroup, rows: Sequence[MeasurementRow], predict: _Predictions) -> _Linearised:
        problem = _Problem(group.parameters, rows, predict.catalog)
        base = np.array([math.log(predict(r, {}) / r.value) for r in rows])  # type: ignore[operator]
        jac = np.zeros((len(rows), len(group.parameters)))
        z0 = problem.x0 / problem.scale
        for j, parameter in enumerate(group.parameters):
            for relative, simulated in ((STEP, False), (ENGINE_STEP, True)):  # as calibrate differences
                step = relative * max(1.0, abs(z0[j]))
                if z0[j] + step > problem.upper[j] / problem.scale[j]:
                    step = -step  # at the upper bound: a backward difference
                value = float((z0[j] + step) * problem.scale[j])
                for i in np.flatnonzero(problem.touches[:, j] & (problem.simulated == simulated)).tolist():
                    moved = predict(rows[i], {parameter: value})
                    jac[i, j] = (math.log(moved / rows[i].value) - base[i]) / step if moved else 0.0
        return cls(group, problem, list(rows), base, jac)

    def refit(self, keep: np.ndarray) -> tuple[dict[Parameter, float], list[str]]:
        """First-order refit on the kept rows: refitted values, and the parameters no kept row moves."""
        p = self.problem
        z0 = p.x0 / p.scale
        jac, r0 = self.jacobian[keep], self.residuals[keep]
        ridge = math.sqrt(RIDGE) * np.eye(len(z0))
        a = np.vstack([jac, ridge])
        b = np.concatenate([-r0, np.zeros(len(z0))])
        lower, upper = p.lower / p.scale - z0, p.upper / p.scale - z0
        move = lsq_linear(a, b, bounds=(lower, upper), method="bvls").x
        unfitted = [q.name for j, q in enumerate(self.group.parameters) if not np.any(jac[:, j])]
        values = {q: float((z0[j] + move[j]) * p.scale[j]) for j, q in enumerate(self.group.parameters)}
        return values, unfitted


def cross_validate(rows: Sequence[MeasurementRow], catalog: Catalog, plain: Sequence[RowResult]) -> CrossValidation:
    """Leave-one-source-out predictions of every row (module docstring); ``plain`` are the rows'
    plain predictions (:func:`~simulator.studies.validation.validate`). Its engine runs collect
    rarely (:func:`~simulator.studies.validation.collecting_rarely`)."""
    with collecting_rarely():
        return _cross_validate(rows, catalog, plain)


def _cross_validate(rows: Sequence[MeasurementRow], catalog: Catalog, plain: Sequence[RowResult]) -> CrossValidation:
    """:func:`cross_validate`'s work: the fits linearised, then each source's fold."""
    sources = {r.id: source_key(r.source) for r in rows}
    predict = _Predictions(catalog, plain)
    predicted, usable = _plain_predictions(plain)
    groups, held = fit_groups(catalog, [r.id for r in rows])
    fits = _linearised_fits(groups, rows, usable, predict)
    held_out = _usable_by_source(rows, sources, usable)
    reasons: dict[str, str] = {}
    refits: dict[str, dict[str, float]] = {}
    for source in sorted(set(sources.values())):
        values, unfitted = _refit_without(fits, sources, source)
        if not values:
            continue
        refits[source] = {p.name: v for p, v in values.items()}
        for row in held_out.get(source, []):
            predicted[row.id], reason = _held_out(row, values, unfitted, catalog, predict)
            if reason:
                reasons[row.id] = reason
    return CrossValidation(predicted, reasons, sources, groups, held, refits)


def _plain_predictions(plain: Sequence[RowResult]) -> tuple[dict[str, float | None], set[str]]:
    """The plain predictions by row id, and the ids of the rows that have one."""
    predicted = {r.row.id: r.predicted for r in plain}
    usable = {r.row.id for r in plain if r.predicted is not None}
    return predicted, usable


def _usable_by_source(
    rows: Sequence[MeasurementRow], sources: dict[str, str], usable: set[str]
) -> dict[str, list[MeasurementRow]]:
    """The rows with a plain prediction, by source key, each source's in table order."""
    found: dict[str, list[MeasurementRow]] = {}
    for row in rows:
        if row.id in usable:
            found.setdefault(sources[row.id], []).append(row)
    return found


def _held_out(
    row: MeasurementRow,
    values: dict[Parameter, float],
    unfitted: Sequence[str],
    catalog: Catalog,
    predict: _Predictions,
) -> tuple[float | None, str]:
    """``row``'s prediction at its source's refitted ``values``, and ``""``; or None and why, where
    the row depends on a parameter no other source fits."""
    blind = [n for n in unfitted if _parameter(n, values).touches(row, catalog)]
    if blind:
        return None, f"no other source fits {', '.join(blind)}"
    return predict(row, values), ""


def _linearised_fits(
    groups: Sequence[FitGroup], rows: Sequence[MeasurementRow], usable: set[str], predict: _Predictions
) -> list[_Linearised]:
    """Each fit linearised on its rows that have a plain prediction; fits with none are left out."""
    by_id = {r.id: r for r in rows}
    fits = []
    for group in groups:
        fit_rows = [by_id[i] for i in group.row_ids if i in usable]
        if fit_rows:
            fits.append(_Linearised.build(group, fit_rows, predict))
    return fits


def _refit_without(
    fits: Sequence[_Linearised], sources: dict[str, str], source: str
) -> tuple[dict[Parameter, float], list[str]]:
    """Every fit that used a row from ``source`` refitted without that source's rows: the refitted
    values, and the parameters no remaining row moves."""
    values: dict[Parameter, float] = {}
    unfitted: list[str] = []
    for fit in fits:
        keep = np.array([sources[r.id] != source for r in fit.rows])
        if keep.all():
            continue
        refit, missing = fit.refit(keep)
        values |= refit
        unfitted += missing
    return values, unfitted


def _parameter(name: str, values: dict[Parameter, float]) -> Parameter:
    return next(p for p in values if p.name == name)


def with_cv(results: Sequence[RowResult], cv: CrossValidation) -> list[RowResult]:
    """The results with their cross-validated predictions attached."""
    return [
        replace(r, predicted_cv=cv.predicted.get(r.row.id), cv_reason=cv.reasons.get(r.row.id, "")) for r in results
    ]
