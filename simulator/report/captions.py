"""Captions and takeaways of the report, in words computed from the results (no I/O).

A caption says what a figure or table shows, then what was simulated, always under the same
labels: ``model``, ``hardware``, ``lengths``, ``window``, ``load`` and ``cost basis``
(:data:`ASSUMPTION_LABELS`). A takeaway is one sentence read off the same numbers the figure
draws (the largest and smallest, first and last, who is fastest or cheapest). A takeaway that
names a capacity-limited figure carries its mark and what the deployment holds, and ranks
per-user speeds averaged over all users (:func:`best_under_load`, :mod:`simulator.capacity`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from simulator.capacity import LIMITED_MARK, Capacity
from simulator.config.distributions import Distribution
from simulator.config.scenario import ClosedLoop, OpenLoop, Scenario, WorkloadClass
from simulator.config.workload import AgentsLoad, TraceLoad
from simulator.results.summary import RunSummary
from simulator.results.views import plain, significant
from simulator.units import format_seconds

ASSUMPTION_LABELS = ("model", "hardware", "lengths", "window", "load", "cost basis")


@dataclass(frozen=True)
class Assumptions:
    """What a figure's numbers rest on, one phrase per :data:`ASSUMPTION_LABELS` label."""

    model: str
    hardware: str
    lengths: str
    window: str
    load: str
    cost_basis: str

    def text(self) -> str:
        values = (self.model, self.hardware, self.lengths, self.window, self.load, self.cost_basis)
        return "; ".join(f"{label}: {value}" for label, value in zip(ASSUMPTION_LABELS, values, strict=True))


def caption(what: str, assumptions: Assumptions) -> str:
    """``what`` followed by the assumptions behind it."""
    return f"{what} Simulated with {assumptions.text()}."


def captioned(what: str, assumptions: Assumptions | None) -> str:
    """``what`` with the assumptions behind it when they are known (a run's resolved scenario), else alone."""
    return caption(what, assumptions) if assumptions is not None else what


def _mean(distribution: Distribution) -> str:
    return significant(distribution.mean)


def _lengths(klass: WorkloadClass) -> str:
    if klass.requests is not None:
        r = klass.requests
        return f"{_mean(r.input_tokens)} prompt and {_mean(r.output_tokens)} output tokens per request (means)"
    load = klass.load
    if isinstance(load, AgentsLoad) and not isinstance(load.workload, str):
        t = load.workload.task
        return (
            f"{load.workload_id} tasks of {_mean(t.steps)} calls, {_mean(t.output_tokens)} output tokens "
            f"per call (means)"
        )
    if isinstance(load, TraceLoad):
        return f"as recorded in the {load.format} trace {load.path.name}"
    return f"the {getattr(load, 'workload_id', klass.name)} workload"


def _load(klass: WorkloadClass) -> str:
    load = klass.load
    if isinstance(load, ClosedLoop):
        return f"{load.users} closed-loop users"
    if isinstance(load, OpenLoop):
        return f"{load.arrivals.process} arrivals, {significant(load.arrivals.peak_rate_per_s)} req/s at peak"
    if isinstance(load, AgentsLoad):
        count = f"{load.agents} agents" if load.agents is not None else f"{significant(load.tasks_per_s or 0)} tasks/s"
        joins = f", joining over {significant(load.ramp_s)} s" if load.ramp_s else ""
        return f"{count} ({load.workload_id}{joins})"
    return f"replay of {load.path.name}"


def _per_class(scenario: Scenario) -> tuple[str, str]:
    classes = scenario.workload_classes
    if len(classes) == 1:
        return _lengths(classes[0]), _load(classes[0])
    return (
        " | ".join(f"{c.name}: {_lengths(c)}" for c in classes),
        " | ".join(f"{c.name}: {_load(c)}" for c in classes),
    )


def _chips(chips: int) -> str:
    return f" of {chips} chip{'s' if chips != 1 else ''}"


def run_assumptions(scenario: Scenario, summary: RunSummary | None = None) -> Assumptions:
    """The assumptions of one simulated run (its resolved scenario, and its summary for the window and basis)."""
    from simulator.studies.validation import hardware_label  # the validation module runs the engine: imported on use

    fleet = scenario.fleet
    models = sorted({b.deployment.model_id for b in fleet})
    hardware = ", ".join(
        f"{hardware_label(b.deployment.hardware_id)} x {b.replicas} replica{'s' if b.replicas != 1 else ''}"
        + (
            _chips(summary.backends[b.name].chips // max(b.replicas, 1))
            if summary is not None and b.name in summary.backends
            else ""
        )
        for b in fleet
    )
    lengths, load = _per_class(scenario)
    run = scenario.run
    if summary is not None:
        window = f"{significant(summary.window_s)} s measured after a {significant(run.warmup)} s warm-up"
        basis = ", ".join(sorted({b.cost.basis for b in summary.backends.values()}))
    else:
        span = (
            f"{significant(run.duration - run.warmup)} s"
            if run.duration is not None
            else f"arrivals until {run.max_requests} requests"
        )
        window = f"{span} measured after a {significant(run.warmup)} s warm-up"
        basis = scenario.cost.basis
    return Assumptions(", ".join(models), hardware, lengths, window, load, basis)


def closed_form_assumptions(
    model: str, hardware: Sequence[str], input_tokens: int, output_tokens: int, users: Sequence[int]
) -> Assumptions:
    """The assumptions of the closed-form estimate (no simulated window, no cost)."""
    from simulator.studies.validation import hardware_label

    return Assumptions(
        model,
        f"{', '.join(map(hardware_label, hardware))} (each its smallest placement that fits)",
        f"{input_tokens} prompt and {output_tokens} output tokens per request",
        "closed-form estimate (steady state, no simulated window)",
        " and ".join(f"{u} concurrent user{'s' if u != 1 else ''}" for u in users),
        "not costed",
    )


def trend(name: str, unit: str, xs: Sequence[float], ys: Sequence[float], x_name: str) -> str:
    """How ``name`` moves from the first to the last point of a sweep over ``x_name``, in one clause.

    >>> trend("TTFT p50", "s", [1, 16, 256], [0.00047, 0.07, 1.37], "concurrent users")
    'TTFT p50 rises from 470 us at 1 concurrent users to 1.37 s at 256'
    """
    pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if y == y]

    def amount(value: float) -> str:
        return format_seconds(value) if unit == "s" else f"{significant(value)} {unit}"

    if len(pairs) < 2:
        return f"{name} is undefined for most {x_name}"
    (x0, y0), (x1, y1) = pairs[0], pairs[-1]
    verb = "rises" if y1 > y0 * 1.05 else "falls" if y1 < y0 / 1.05 else "holds near"
    if verb == "holds near":
        return f"{name} holds near {amount(y0)} from {plain(x0)} to {plain(x1)} {x_name}"
    start, end = f"{amount(y0)} at {plain(x0)} {x_name}", f"{amount(y1)} at {plain(x1)}"
    return f"{name} {verb} from {start} to {end}"


def best(values: dict[str, float], unit: str, what: str, highest: bool = True) -> str:
    """Who has the highest (or lowest) ``what``, against the other end, in one clause.

    >>> best({"a": 2000.0, "b": 100.0}, "tok/s", "per-user speed")
    'a has the highest per-user speed (2,000 tok/s), 20x that of b'
    >>> best({"a": 0.5, "b": 2.0}, "s", "task time", highest=False)
    'a has the lowest task time (0.5 s), against 2 s on b (4x)'
    """
    defined = {k: v for k, v in values.items() if v == v and v > 0}

    def amount(value: float) -> str:
        return f"${significant(value)}" if unit == "$" else f"{significant(value)} {unit}"

    if not defined:
        return f"no {what} is defined"
    top = (max if highest else min)(defined, key=defined.__getitem__)
    low = (min if highest else max)(defined, key=defined.__getitem__)
    if top == low:
        return f"{top} has {what} {amount(defined[top])}"
    ratio = significant(max(defined[top], defined[low]) / min(defined[top], defined[low]), 2)
    if highest:
        return f"{top} has the highest {what} ({amount(defined[top])}), {ratio}x that of {low}"
    return f"{top} has the lowest {what} ({amount(defined[top])}), against {amount(defined[low])} on {low} ({ratio}x)"


def best_under_load(
    values: Mapping[str, float],
    capacities: Mapping[str, Capacity],
    unit: str,
    what: str,
    highest: bool = True,
    per_user_speed: bool = False,
) -> str:
    """:func:`best` with every capacity-limited entry flagged: its mark, what it holds and, for a per-user
    speed, the ranking made on the speed averaged over all users (the running users' speed named beside).

    >>> best_under_load({"a": 445.0, "b": 18.0}, {"a": Capacity(64, 12)}, "tok/s", "per-user speed",
    ...                 per_user_speed=True)  # doctest: +ELLIPSIS
    'a has the highest per-user speed averaged over all users (83.4 tok/s), 4.6x that of b; ⚠ capacity-limited: a...'
    """
    limited = _limited_entries(values, capacities)
    if not limited:
        return best(dict(values), unit, what, highest)
    shown = dict(values)
    if per_user_speed:
        shown = _averaged_over_all_users(values, capacities)
        what = f"{what} averaged over all users"
    text = best(shown, unit, what, highest)
    ends = _ends(shown, highest)
    named = [_limited_note(k, values, capacities, unit, per_user_speed) for k in limited if k in ends]
    others = [k for k in limited if k not in ends]
    return text + f"; {LIMITED_MARK} capacity-limited: " + "; ".join(named) + _also(named, others)


def _limited_entries(values: Mapping[str, float], capacities: Mapping[str, Capacity]) -> list[str]:
    """The entries with a defined value whose capacity limited them."""
    return [k for k, v in values.items() if k in capacities and capacities[k].limited and v == v]


def _averaged_over_all_users(values: Mapping[str, float], capacities: Mapping[str, Capacity]) -> dict[str, float]:
    """Each per-user speed averaged over all users where a capacity is known (NaN where it averages to none)."""
    return {k: capacities[k].averaged(v) or math.nan if k in capacities else v for k, v in values.items()}


def _ends(shown: Mapping[str, float], highest: bool) -> set[str]:
    """The best and the worst of the defined, positive values (none without any)."""
    defined = [k for k, v in shown.items() if v == v and v > 0]
    if not defined:
        return set()
    return {
        (max if highest else min)(defined, key=shown.__getitem__),
        (min if highest else max)(defined, key=shown.__getitem__),
    }


def _limited_note(
    k: str, values: Mapping[str, float], capacities: Mapping[str, Capacity], unit: str, per_user_speed: bool
) -> str:
    """What a capacity-limited entry holds, with (for a per-user speed) its running users' speed."""
    note = capacities[k].note()[len(LIMITED_MARK) + 1 :]
    return f"{k} {note}" + (f" ({significant(values[k])} {unit} for each running user)" if per_user_speed else "")


def _also(named: list[str], others: list[str]) -> str:
    """The capacity-limited entries not named in full, listed after those that are."""
    return ("; also " if named else "") + ", ".join(others) if others else ""
