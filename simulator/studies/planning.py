"""Capacity planning: the cheapest fleet that meets every SLO target, found by simulation.

A *candidate* is a replica count per backend of the scenario's fleet. Its cost is the fleet's
``$/h`` (rented or owned replicas, ``n_b * chips_b * $/chip-h``) plus the measured API spend
of per-token backends (``cost_basis: api``, a service reached through its API), which keep their
given replica counts in every candidate (they are not searched) and are also tried alone. A
candidate *meets* the SLOs when every class's targets (``slo.targets``) hold in each of
``plan.replications`` runs with seeds ``run.seed + r``: the conservative reading of a few
replications. ``worst`` is the largest normalised miss over targets and replications,
``achieved / bound`` for an upper bound and ``bound / achieved`` for a lower one (> 1 misses).

Search, assuming more replicas never make an SLO worse unless they are slower than one the fleet
holds (*monotone feasibility*: adding a replica of a backend that is slower than none of the
fleet's backends, :func:`~simulator.studies.dominance.runs_slower`, to a fleet that meets keeps it
meeting; ``tests/engine/test_plan_search.py`` checks it on every candidate of its cases). A slower
replica may make a fleet miss: the replica policies balance load, not speed, and a task sticks to
its replica (measured: 4 x h100 + 8 x b300 + 1 x b200 meets the 10-minute question, and misses with
one MI300X more), so a miss with more replicas of a slower backend settles nothing below it. A
replica policy that weighs speed (``least-predicted-latency``,
:data:`~simulator.config.fleet.SPEED_AWARE_POLICIES`) over every backend's replicas (``pooled``)
sends a call to a slower replica only where it predicts it served sooner there, so none is taken
as slower (:meth:`Planner._slowness_compared`) and every miss settles the fleets below it
(measured: that fleet with one MI300X more then meets, p95 590 s against 591 s without it):

1. **Single-architecture fleets**: the API backends alone (when there are any), then each
   searched backend alone (every class on it, the scenario's routing rules dropped), in order
   of its cheapest possible fleet (the fewest replicas passing the capacity bound x its price):
   bisect the fewest replicas that meet among those that pass the bound and whose fixed cost is
   not over the best fleet so far (API spend is never negative, so such a fleet cannot be
   cheaper), the largest first: a backend that cannot meet is settled by one run, its largest
   fleet's miss (a run the settled-miss rule below often stops early).
   The best, ties to the API backends alone, then to the backend listed first.
2. **Mixed fleets** (two or more searched backends in use, the scenario's router and rules):
   first the *ceiling* (:meth:`Planner._ceiling`), the largest fleet under the best cost so far
   (every backend at its most, whole backends dropped dearest first until under it): if it
   misses, it settles the mixed fleets below it (those it holds only replicas more of that are
   slower than none they hold); it is not probed where it holds a backend slower than another
   it holds, whose miss would settle only the fleets with exactly its replicas of that backend.
   Then for each count vector of all searched backends but one
   (:meth:`Planner._mixed_axes`: the one a walk of every vector would bisect most often) whose
   fleet holds no backend slower than another it holds, cheapest first while cheaper than the
   best so far, bisect that backend's fewest replicas among those that keep the fleet cheaper,
   pass the capacity bound, leave no class without a backend its rules allow, and are not
   settled by an evaluated miss (:meth:`~simulator.studies.dominance.ServiceOrder.settles`),
   less those a cheaper swap beats (below). The rest, fleets where a slower replica may make
   the fleet worse, cannot be bisected: their cost bound is the first group's answer, and they
   are searched *maximal first* (:meth:`Planner._slow_mixes`): of the open fleets (cheaper than
   the best so far, passing those tests, not evaluated, not settled), take the cheapest, climb
   to the dearest open fleet whose miss would settle it until none would, and simulate that
   one. A miss settles every open fleet below it, a fleet that meets lowers the bound, until
   none is open. Every open fleet lies below a maximal one, so where they all miss that is one
   run per maximal fleet (the 10-minute question: 40 fleets with MI300Xs beside fast GPUs, where
   a walk from the cheapest up ran 69, to the same answer).

**Backends that serve no slower** (:mod:`simulator.studies.dominance`): where the router treats
every replica alike and none is taken down, a backend whose replica batches the same way, holds at
least as much and runs no pass of a fixed grid slower than another's *serves no slower*. The
search assumes that swapping a replica for one that serves no slower never makes a fleet miss
(monotone feasibility, extended), so a miss settles every fleet *served no better* (each replica
matched to its own replica of the miss, of a backend serving no slower: Hall's condition over the
order's up-sets; replicas of a backend slower than one it holds alike), and a fleet with a replica
whose no-slower backend is cheaper and under its replica limit is *beaten* (swapping one gives a
cheaper fleet that meets whenever it does): never simulated, and a backend alone is not tried at
counts where as many of a cheaper one that serves no slower fit its limit.
``scenarios/plan-coding-agents.yaml``: a B300 serves no slower than a B200 (the same passes, more
KV) and costs less, so a fleet with a B200 needs every B300 allowed.

**Split fleets**: a backend with ``decode_on`` prefills and hands each prompt's KV to the named
backend, which decodes (:mod:`simulator.engine.disaggregated`), in every candidate where both
have replicas (either alone serves whole requests). So the mixed search's candidates include the
split fleets of every pair the scenario declares, labelled ``split p -> d`` in every table; the
capacity bound never prunes one (a prefill pool and a decode pool each doing what it is fast at
may serve more calls/s than the sum of their whole-call rates).

**Capacity bound** (:func:`agent_call_demand`): closed-loop agents with a task-time target
need at least ``Q N S / (T + theta)`` calls/s; a fleet meets only if its replicas' calls/s
reach that, each replica credited with :data:`CAPACITY_MARGIN` x the closed form's saturated
calls/s on the agents' lightest call (only the fewest new tokens a call prefills with prefix
caching, as the whole context: the most calls/s any of the task's calls gets). The closed form
is the engine's step-time model at its best batch; the margin covers the engine finding a better
schedule than the closed form's steady state. Classes without such a target add no demand.

**Runs stopped once a miss is settled** (:class:`~simulator.studies.settled.SettledMiss`): a run
whose ``pQ task_time_s`` target of closed-loop agents already misses, whatever its unfinished tasks
do, stops there: from the end of ``run.duration`` (no task can start any more: at least ``need(F +
R)`` of the ``F`` finished tasks, and of the ``R`` still running those already past the bound,
over it) a proof, and before it at a stated risk (:data:`~simulator.studies.settled.STOP_RISK`,
1e-6, over the workload's tool latencies: the tasks still to start are bounded by the tool waits
the agents have yet to draw, :mod:`~simulator.studies.task_starts`, but with that chance). A
candidate it stopped lists only the targets settled (the others were not measured to the end),
with the numbers so far and the risk. Nothing else stops
early: a *meets* is never settled before the end (a running task may still end late), nor a
target on other metrics.

**Runs that record only their tasks**: where every target bounds task times and no backend
bills per token, a run's tasks are all its verdict reads, so it records nothing else (no request
rows, levels, token counts, inter-token gaps or work totals: :func:`~simulator.runner.simulate_tasks`,
the same simulation, about a fifth less CPU) and its document holds each class's task summary.

**A stated confidence** (``plan.confidence``, with two replications or more): a target is met
when the mean of its ratio over the seeds is under 1 at that one-sided confidence, ``mean + t s /
sqrt(r)`` (:func:`seeds_bound`: Student's ``t`` over the ``r`` seeds' spread ``s``), not when every
seed's is. The spread is measured, not modelled: one run's sampling error
(:mod:`simulator.results.sampling`) takes its tasks as independent and is a floor (on the 10-minute
question six seeds' p95s spread up to 1.4 times as much). Its runs are not stopped once a miss is settled:
one seed over the bound no longer decides, so each seed's ratio is needed to its end. The search
assumes that verdict is monotone too, checked as below.

**The answer on more seeds** (``plan.check_seeds``, 2 by default): where the answer meets by less
than two of its run's sampling errors (:func:`_within_noise_text`) and the search ran to its end,
the answer alone is run on that many more seeds (``run.seed + plan.replications`` on), each as the
search runs a candidate (stopped once a miss is settled), and the explanation and ``plan.json``
(``answer_on_more_seeds``) give its worst ratio on each and on how many it misses. The answer
stands: the check costs a few runs, not a search, and says whether "may miss" is "does". (On the
10-minute question it does: 4 x h100 + 8 x b300 + 1 x b200 misses on seeds 2 and 3.)

The assumption is checked on what the search simulated (:func:`non_monotone`): a fleet that misses
though it is one that meets with replicas added (or swapped up) that are slower than none it holds
is named in a warning in the explanation and in ``plan.json`` (``monotone_violations``), since a
fleet settled below a miss might then meet.

Every pruned candidate is one the exhaustive search (every count vector simulated to its end)
would have found missing or costlier, so the answer is the exhaustive search's whenever the
assumptions hold (``tests/engine/test_plan_search.py`` compares them on seven cases, one with a
split pair, one where a backend serves no slower than another, one where a slower replica makes a
fleet that meets miss and the same fleets routed by predicted latency, where none does, and on
``scenarios/plan-split-fleet.yaml``, where a split fleet wins). With API backends the bisection's
*fewest* replicas is taken as a prefix's cheapest, which holds while one more replica does not
cut the API spend by more than its own price.

**Stopping before the end** (``plan.max_candidates``, or ``infersim plan --time-limit``): the
search stops before a step that would simulate past the limit and answers with the cheapest fleet
evaluated so far that meets, an upper bound on the full answer's cost, and the *floor*
(:meth:`Planner.unsettled_floor`), the least fixed cost of a fleet it has not settled by the rules
above (evaluated, settled by an evaluated miss, failing the capacity bound, leaving a
class without a backend its rules allow, or beaten by a cheaper swap), a lower bound: the full
answer costs between the two. A longer search
only raises the floor and lowers the answer (the candidates come in the same order whatever the
limit), and where the floor reaches the answer's cost the stopped search has the full answer.
The time limit is wall-clock, so the explanation names the candidates simulated:
``plan.max_candidates`` set to that repeats the search exactly. A run reads none of ``plan``, so
runs shared with an earlier plan on the same folder come from its cache.

The answer is the cheapest fleet that meets; the *frontier* is every evaluated candidate not
beaten on both cost and ``worst`` (the report draws it: :mod:`simulator.report.plan_figure`); each
rejected candidate lists the targets it misses. Every ``$/h`` is on one cost basis
(:func:`on_one_basis`), named in every table header and the explanation: ``rental`` or
``ownership``, ``+ API per-token spend`` where API backends serve, ``api`` when only they do.

Execution (:mod:`simulator.studies.execution`): each step asks for all its replications at once, so a
local pool or a Dask cluster simulates them in parallel; a bisection also names the candidates
it may need next (*spare* runs, started only on idle slots and used only if the search later asks
for them). The sequence of candidates the search asks for, and so the answer, the frontier and
the list of evaluations, is the same on every executor: a candidate's runs are deterministic for
their seeds, each run's summary reaches the planner as the same JSON document whichever process
made it (or the cache, keyed by the resolved scenario, so a fleet two candidates share is
simulated once), and nothing the search decides depends on which runs finished first.

Size: the search evaluates at most ``sum_b (1 + ceil(log2 m_b))`` single-architecture candidates
plus ``1 + (prod_{b != last} (m_b + 1) - 1) x (1 + ceil(log2(m_last + 1)))`` mixed ones (``m_b``: a
searched backend's most replicas), each ``plan.replications`` runs. More than
:attr:`~simulator.plan.limits.Limits.max_runs` such runs are refused up front unless
``--allow-large-runs``. Progress lines count the candidates simulated, pruned (settled by a
bound) and left (a bound on what the search may still simulate), which add up to that bound; the
ETA is the mean time per simulated candidate times the bound of the phase under way: the
single-architecture searches, then the mixed prefixes still cheaper than the best fleet so far.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import math
import statistics
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.special import stdtrit

from simulator.config.distributions import Constant
from simulator.config.fleet import SPEED_AWARE_POLICIES, BackendSpec
from simulator.config.loading import Catalog
from simulator.config.paths import write_in
from simulator.config.scenario import PlanSpec, RequestLengths, Scenario, SLOTarget, WorkloadClass
from simulator.config.workload import AgentsLoad
from simulator.engine.build import OutOfTimeError, StopWhen
from simulator.errors import InfersimError
from simulator.plan.limits import Limits, check_runs
from simulator.plan.resolve import BackendPlan, ScenarioError, backend_plan, layout_question
from simulator.results.sampling import NOISE_ERRORS, standard_error
from simulator.results.summary import ClassSummary, DistributionStats, LatencyStats, RunSummary, TaskSummary
from simulator.runner import simulate, simulate_tasks
from simulator.studies.dominance import ServiceOrder, swapped
from simulator.studies.execution import Executor, Profiles, Runs, catalog_of, inputs_digest, run_key
from simulator.studies.power_budget import power_limits, replica_kw, within_budget
from simulator.studies.settled import STOP_RISK, SettledMiss
from simulator.studies.tolerance import tolerating_failures
from simulator.tables import format_ratio, format_table

Counts = tuple[int, ...]


#: The search's bound counts the prefixes searched maximal first one by one up to this many
#: (``Planner._slow_prefixes``); beyond, it counts every prefix.
COUNTED_PREFIXES = 1 << 20

#: How a stopped search settled the fleets under its floor, as its explanation words it.
SETTLED_BY = (
    "below a simulated miss with no replica more of a backend slower than one it holds, under the capacity "
    "bound, leaving a class without a backend, "
    "or beaten by a cheaper fleet that serves no slower"
)


def fleet_text(counts: Counts, names: tuple[str, ...]) -> str:
    """``2 x wafer + 1 x gpu`` (backends at 0 left out)."""
    return " + ".join(f"{n} x {name}" for n, name in zip(counts, names, strict=True) if n) or "(empty)"


#: Each replica is credited with this many times the closed form's saturated calls/s in the
#: capacity bound, so a fleet the engine serves faster than the closed form is never pruned.
CAPACITY_MARGIN = 2.0


def _shape(plan: BackendPlan) -> str:
    d = plan.deployment
    return f"{d.chips} x {d.hardware.id} chip{'s' if d.chips != 1 else ''} serving {d.model.id}"


def _backend_plans(scenario: Scenario, catalog: Catalog) -> list[BackendPlan]:
    question = layout_question(scenario, catalog)
    return [backend_plan(i, b, scenario, catalog, question) for i, b in enumerate(scenario.fleet)]


def on_one_basis(scenario: Scenario, catalog: Catalog) -> tuple[Scenario, list[BackendPlan], str]:
    """The scenario priced on one cost basis, its backends' plans and that basis (``api`` when
    every backend is paid per token). Ranking an owned replica's amortised cost against another's
    rent would compare unlike numbers, so when ``cost.basis: auto`` resolves to both (a wafer with
    no rental price beside rented GPUs) every backend is priced on ownership, else rental, the
    first every backend has; a scenario that names different bases per backend is refused."""
    plans = _backend_plans(scenario, catalog)

    def bases(found: list[BackendPlan]) -> dict[str, str]:
        return {p.name: p.pricing.basis for p in found if p.pricing.token_price is None}

    if (
        len(set(bases(plans).values())) > 1
        and scenario.cost.basis == "auto"
        and not any(b.cost_basis not in (None, "auto") for b in scenario.fleet)
    ):
        for basis in ("ownership", "rental"):
            moved = scenario.model_copy(update={"cost": scenario.cost.model_copy(update={"basis": basis})})
            try:
                plans, scenario = _backend_plans(moved, catalog), moved
                break
            except InfersimError:
                continue
    found = bases(plans)
    if len(set(found.values())) > 1:
        each = ", ".join(f"{name}: {basis}" for name, basis in found.items())
        raise ScenarioError(
            f"{scenario.name}: plan ranks fleets on one cost basis, but the backends are priced on several "
            f"({each}); set one cost.basis (ownership or rental) that every backend has"
        )
    return scenario, plans, next(iter(found.values()), "api")


def _quantile(stat: str) -> float:
    """The fraction of tasks a ``max`` target on ``stat`` must hold for (mean: all, on average)."""
    return 1.0 if stat == "mean" else int(stat[1:]) / 100


def agent_call_demand(classes: list[WorkloadClass], catalog: Catalog, duration_s: float | None = None) -> float:
    """The least model calls/s a fleet must serve to meet the task-time targets of closed-loop agents.

    A class of ``N`` agents, each running tasks of ``S`` calls (mean) back to back with a mean
    pause ``theta`` between tasks, under a target ``pQ task_time_s <= T`` (``mean``: Q = 1): a
    fleet that meets it finishes a fraction ``Q`` of the tasks within ``T``, and an agent whose
    task ends within ``T`` starts its next one within ``T + theta``. So while no agent is starved
    for the others (the schedulers serve calls in order of arrival within a priority, and the
    agents of one class alike), the agents finish at least ``Q N / (T + theta)`` tasks per second
    and the fleet serves ``Q N S / (T + theta)`` calls/s. Agents ramping in (``ramp_s``: agent
    ``i`` joins at ``i ramp_s / N``) are there a share ``1 - ramp_s (N - 1) / (2 N D)`` of a run of
    ``duration_s = D`` on average, which scales their demand (none is bounded without ``D``).
    Summed over classes; a class with no such target (open loads, other metrics) adds 0, which
    keeps the sum a lower bound."""
    demand = 0.0
    for klass in classes:
        load = klass.load
        if not isinstance(load, AgentsLoad) or load.agents is None:
            continue
        steps = catalog.workload(load.workload).task.steps.mean
        tightest = max(
            (_quantile(t.stat) / (t.bound + load.think_time_s.mean) for t in klass.slo.targets
             if t.metric == "task_time_s" and t.upper and t.bound > 0),
            default=0.0,
        )  # fmt: skip
        demand += tightest * load.agents * steps * _share_joined(load, duration_s)
    return demand


def _share_joined(load: AgentsLoad, duration_s: float | None) -> float:
    """The mean share of a run of ``duration_s`` closed-loop agents are in it: ``1 - mean join / D``
    (:meth:`~simulator.config.workload.AgentsLoad.joins_s`); 1 without a ramp, 0 with one and no duration."""
    if not load.ramp_s:
        return 1.0
    if duration_s is None:
        return 0.0
    assert load.agents is not None
    mean_join_s = load.ramp_s * (load.agents - 1) / (2 * load.agents)
    return max(0.0, 1.0 - mean_join_s / duration_s)


def _calls_per_s(plan: BackendPlan, classes: list[WorkloadClass], catalog: Catalog) -> float:
    """The closed form's saturated calls/s of one replica on the agents' lightest call: a prompt of
    only the fewest new tokens a call brings (first or later input; with prefix caching a call
    prefills no more, and the least context admits the most sequences and the cheapest attention),
    the mean output: more calls/s than any call of the task gets. Infinite (no bound) where the
    closed form has no answer."""
    fastest = 0.0
    for klass in classes:
        if isinstance(klass.load, AgentsLoad) and klass.load.agents is not None:
            task = catalog.workload(klass.load.workload).task
            prompt = min(task.first_input_tokens.mean, task.step_input_tokens.mean)
            lengths = RequestLengths(
                input_tokens=Constant(value=max(1, round(prompt))),
                output_tokens=Constant(value=max(1, round(task.output_tokens.mean))),
            )
            try:
                fastest = max(fastest, plan.capacity_requests_per_s(lengths))
            except InfersimError:
                return math.inf
    return fastest if fastest > 0 and math.isfinite(fastest) else math.inf


@dataclass(frozen=True)
class Miss:
    """One target a candidate fails, in its worst replication."""

    klass: str
    target: str
    achieved: float
    bound: float
    ratio: float  # > 1: missed by that factor (inf: nothing measured)
    upper: bool
    settled: dict[str, Any] | None = None  # the run stopped once this missed (SettledMiss.settled)
    error: float = math.nan  # the ratio's sampling error in one run (simulator.results.sampling)
    seeds_bound: float = math.nan  # plan.confidence: the bound on the seeds' mean ratio (:func:`seeds_bound`)

    @property
    def missed(self) -> bool:
        """Over the bound in this run; with ``plan.confidence``, the seeds' mean ratio possibly over it."""
        return self.ratio > 1.0 if math.isnan(self.seeds_bound) else self.seeds_bound > 1.0

    def describe(self) -> str:
        if self.settled is not None:
            s = self.settled
            got = f"got {self.achieved:.4g} so far" if math.isfinite(self.achieved) else "no task had ended"
            sure = f"except with chance {s['risk']:.0e}" if s["risk"] else "whatever the rest of the run"
            return (
                f"{self.klass}: {self.target}: {s['over']:,} of at most {s['of_at_most']:,} tasks over, a miss "
                f"{sure}, at least {s['at_least_s']:.4g} (stopped at {s['at_s']:,.0f} s of simulated time; {got})"
            )
        if not math.isfinite(self.achieved):
            return f"{self.klass}: {self.target}: nothing measured (no completed requests or tasks in the window)"
        if self.bound == 0:
            return f"{self.klass}: {self.target}: got {self.achieved:.4g}"
        if not math.isnan(self.seeds_bound):
            return (
                f"{self.klass}: {self.target}: got {self.achieved:.4g} in its worst seed; the seeds' mean ratio may "
                f"be as high as {format_ratio(self.seeds_bound)} at the stated confidence"
            )
        if self.upper:
            return f"{self.klass}: {self.target}: got {self.achieved:.4g}, {self.achieved / self.bound - 1:.0%} over"
        return f"{self.klass}: {self.target}: got {self.achieved:.4g}, {1 - self.achieved / self.bound:.0%} short"


@dataclass(frozen=True)
class Evaluation:
    counts: Counts
    names: tuple[str, ...]
    fixed_usd_per_hour: float
    usd_per_hour: float  # fixed + the mean measured API spend
    worst: float
    misses: tuple[Miss, ...]
    kind: str  # "single" or "mixed"
    split: tuple[str, ...] = ()  # "p -> d": prefill backend p hands its prompts' KV to decode pool d
    worst_error: float = math.nan  # the sampling error of ``worst`` in its run (NaN: none, or a run stopped)

    @property
    def meets(self) -> bool:
        return not self.misses

    @property
    def label(self) -> str:
        """The kind as shown: ``mixed, split h100 -> wafer`` when a prefill pool and its decode pool both serve."""
        return f"{self.kind}, split {'; '.join(self.split)}" if self.split else self.kind

    @property
    def fleet(self) -> str:
        return fleet_text(self.counts, self.names)

    def to_dict(self) -> dict[str, Any]:
        return {
            "fleet": dict(zip(self.names, self.counts, strict=True)),
            "kind": self.kind,
            "split": list(self.split),
            "usd_per_hour": self.usd_per_hour,
            "fixed_usd_per_hour": self.fixed_usd_per_hour,
            "meets": self.meets,
            "worst_ratio": self.worst,
            "worst_ratio_error": _finite_or_none(self.worst_error),
            "misses": [m.__dict__ | {"text": m.describe(), "error": _finite_or_none(m.error)} for m in self.misses],
        }


@dataclass(frozen=True)
class SeedCheck:
    """The answer on one more seed (``plan.check_seeds``): its worst target ratio (> 1 misses; at
    least that where its run stopped once a miss was settled)."""

    seed: int
    worst: float
    settled: bool

    @property
    def meets(self) -> bool:
        return self.worst <= 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "worst_ratio": _finite_or_none(self.worst), "meets": self.meets,
                "settled": self.settled}  # fmt: skip


@dataclass
class PlanResult:
    answer: Evaluation | None
    best_single: Evaluation | None
    evaluations: list[Evaluation] = field(default_factory=list)
    explanation: str = ""
    replica_shapes: dict[str, str] = field(default_factory=dict)  # backend -> what one replica is (chips, model)
    cost_basis: str = ""  # the one basis every $/h is on: rental, ownership (api: only metered backends)
    search: dict[str, int] = field(default_factory=dict)  # candidates: total (bound), simulated, pruned
    violations: list[tuple[Evaluation, Evaluation]] = field(default_factory=list)  # (meets, a larger fleet missing)
    stopped: str = ""  # what stopped the search before its end (plan.max_candidates, the time limit); "" ran to it
    floor_usd_per_hour: float | None = None  # stopped: least fixed cost of a fleet not settled, at most the answer's
    no_slower: dict[str, list[str]] = field(default_factory=dict)  # backend -> those it serves no slower than
    slower: dict[str, list[str]] = field(default_factory=dict)  # backend -> those it is slower than on every pass
    checked: list[SeedCheck] = field(default_factory=list)  # the answer on more seeds (plan.check_seeds)

    @property
    def frontier(self) -> list[Evaluation]:
        """Evaluated candidates no other beats on both cost and worst miss."""
        ranked = sorted(self.evaluations, key=lambda e: (e.usd_per_hour, e.worst))
        front, best = [], math.inf
        for e in ranked:
            if e.worst < best:
                front.append(e)
                best = e.worst
        return front

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer": self.answer.to_dict() if self.answer else None,
            "best_single_architecture": self.best_single.to_dict() if self.best_single else None,
            "explanation": self.explanation,
            "frontier": [e.to_dict() for e in self.frontier],
            "rejected": [e.to_dict() for e in self.evaluations if not e.meets],
            "candidates": len(self.evaluations),
            "replicas": self.replica_shapes,
            "cost_basis": self.cost_basis,
            "search": self.search,
            "monotone_violations": [
                {"meets": m.to_dict()["fleet"], "misses": x.to_dict()["fleet"], "kind": x.kind}
                for m, x in self.violations
            ],
            "stopped": self.stopped or None,
            "floor_usd_per_hour": _finite_or_none(self.floor_usd_per_hour),
            "serves_no_slower": self.no_slower,
            "slower_than": self.slower,
            "answer_on_more_seeds": [c.to_dict() for c in self.checked],
        }


#: What a target of one class reads: the class's latencies (None from a run that recorded only its
#: tasks) and its tasks.
ClassPart = tuple[LatencyStats | None, TaskSummary | None]


def _statistic(stats: DistributionStats | None, stat: str) -> float:
    """``stat`` of ``stats`` (NaN when there are none)."""
    return math.nan if stats is None else float(getattr(stats, stat))


def _target_stats(
    summary: LatencyStats | None, tasks: TaskSummary | None, target: SLOTarget
) -> DistributionStats | None:
    """The distribution a target reads a statistic of (None when the run has none)."""
    if target.metric == "task_time_s":
        return tasks.task_time_s if tasks else None
    found: DistributionStats | None = getattr(summary, target.metric, None)
    return found


def _only_task_targets(classes: list[WorkloadClass]) -> bool:
    """Whether every target of every class bounds task times (a run's tasks are all its verdict reads)."""
    return all(target.metric == "task_time_s" for klass in classes for target in klass.slo.targets)


def summary_parts(summary: RunSummary, classes: list[WorkloadClass]) -> dict[str, ClassPart]:
    """What each class's targets read of a run's summary: its own part with several classes, the
    whole run's with one."""
    parts: dict[str, ClassPart] = {}
    for klass in classes:
        part: RunSummary | ClassSummary = summary.classes[klass.name] if summary.classes else summary
        parts[klass.name] = (part, part.tasks)
    return parts


def document_parts(document: dict[str, Any], classes: list[WorkloadClass]) -> dict[str, ClassPart]:
    """What each class's targets read of a run's document (:func:`summary_run`): its summary's
    parts, or from a run that recorded only its tasks, each class's tasks."""
    if "summary" in document:
        return summary_parts(RunSummary.model_validate(document["summary"]), classes)
    return {
        name: (None, TaskSummary.model_validate(tasks) if tasks is not None else None)
        for name, tasks in document["tasks"].items()
    }


def target_ratios(summary: RunSummary, classes: list[WorkloadClass]) -> list[Miss]:
    """Every target of every class, with its normalised ratio (> 1: missed; inf: nothing measured)."""
    return _ratios(summary_parts(summary, classes), classes)


def _ratios(parts: dict[str, ClassPart], classes: list[WorkloadClass]) -> list[Miss]:
    """:func:`target_ratios` of each class's ``parts``."""
    found = []
    for klass in classes:
        latencies, tasks = parts[klass.name]
        for target in klass.slo.targets:
            stats = _target_stats(latencies, tasks, target)
            value = _statistic(stats, target.stat)
            error = math.nan if stats is None else standard_error(stats, target.stat)
            if not math.isfinite(value):
                ratio, error = math.inf, math.nan  # nothing measured
            elif target.upper:
                ratio = value / target.bound if target.bound > 0 else (math.inf if value > 0 else 0.0)
                error = error / target.bound if target.bound > 0 else math.nan
            else:
                ratio = target.bound / value if value > 0 else (0.0 if target.bound <= 0 else math.inf)
                error = ratio * error / value if value > 0 else math.nan  # d(b / v) = b / v^2 dv
            found.append(Miss(klass.name, target.describe(), value, target.bound, ratio, target.upper, error=error))
    return found


def summary_run(
    scenario_json: str, profiles: Profiles, limits: Limits | None, stop_early: bool = True,
    deadline: float | None = None, tasks_only: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """Simulate one resolved scenario (on any executor): its summary document (``summary``), and
    the targets a :class:`SettledMiss` stopped it on (``settled``: empty when it ran to its end;
    ``stop_early`` False: never stopped). ``tasks_only``: the run records only its tasks
    (:func:`~simulator.runner.simulate_tasks`) and the document holds each class's task summary
    (``tasks``) in place of the summary. Past the wall-clock ``deadline`` (``time.time()``) the run
    is abandoned: :class:`~simulator.engine.build.OutOfTimeError`, nothing returned, nothing cached."""
    scenario = Scenario.model_validate_json(scenario_json)
    catalog = catalog_of(profiles)
    rule = SettledMiss.of(scenario, catalog) if stop_early else None
    stop = rule.when() if rule else None
    if deadline is not None:
        stop = dataclasses.replace(stop, deadline=deadline) if stop else StopWhen.at_deadline(deadline)
    if tasks_only:
        tasks, stopped = simulate_tasks(scenario, catalog, limits, stop)
        found: dict[str, Any] = {"tasks": {name: t.to_dict() if t else None for name, t in tasks.items()}}
    else:
        result = simulate(scenario, catalog, limits=limits, stop=stop)
        found, stopped = {"summary": result.summary.to_dict()}, result.stopped
    return {**found, "settled": rule.settled if rule and stopped else []}


@dataclass(frozen=True)
class Ask:
    """What a search needs next: one candidate, and the ones it may need after it (spare)."""

    counts: Counts
    kind: str
    spare: tuple[Counts, ...] = ()


Search = Generator[Ask, "Evaluation", "Evaluation | None"]


def _measured_misses(
    parts: dict[str, ClassPart], classes: list[WorkloadClass], settled_targets: list[dict[str, Any]]
) -> list[Miss]:
    """The run's target ratios (:func:`target_ratios`, of each class's ``parts``); of a run stopped
    once targets missed (``settled_targets`` not empty), only those targets, each with how it was
    settled and a ratio of at least the settled floor's (``at_least_s`` over the bound): the others
    were not measured to the end."""
    settled = {(s["class"], s["target"]): s for s in settled_targets}
    ratios = _ratios(parts, classes)
    if not settled:
        return ratios
    return [
        dataclasses.replace(  # a floor on a run cut short: no sampling error to speak of
            miss,
            settled=(s := settled[(miss.klass, miss.target)]),
            ratio=max(miss.ratio, s["at_least_s"] / miss.bound),
            error=math.nan,
        )
        for miss in ratios
        if (miss.klass, miss.target) in settled
    ]


def seeds_bound(ratios: Sequence[float], t_quantile: float) -> float:
    """The one-sided bound on the mean of a target's ratio over the seeds: ``mean + t s / sqrt(r)``
    (``s`` the seeds' standard deviation, ``t`` Student's quantile with ``r - 1`` degrees of freedom);
    infinite where a seed measured nothing."""
    if not all(math.isfinite(r) for r in ratios):
        return math.inf
    return statistics.fmean(ratios) + t_quantile * statistics.stdev(ratios) / math.sqrt(len(ratios))


def _keep_worst(misses: dict[tuple[str, str], Miss], miss: Miss) -> None:
    """Record ``miss`` under its class and target when it misses (:attr:`Miss.missed`) by more than
    the replication recorded there so far."""
    known = misses.get((miss.klass, miss.target))
    if miss.missed and (known is None or miss.ratio > known.ratio):
        misses[(miss.klass, miss.target)] = miss


def _require_targets(scenario: Scenario) -> None:
    """A plan needs a target to miss: raise ScenarioError when no class has ``slo.targets``."""
    if not any(c.slo.targets for c in scenario.workload_classes):
        raise ScenarioError(
            f"{scenario.name}: no class has slo.targets, so every fleet meets them; add targets such as "
            "{metric: ttft_s, stat: p99, max: 1 s}"
        )


def _cost_basis(basis: str, metered: Sequence[bool]) -> str:
    """The plan's cost basis, naming the API per-token spend when a rented backend is metered."""
    return basis if basis == "api" or not any(metered) else f"{basis} + API per-token spend"


def _splits(fleet: Sequence[BackendSpec], names: Sequence[str]) -> tuple[tuple[int, int], ...]:
    """``(prefill, decode)`` backend indices of each backend that hands its decode to another."""
    return tuple((i, names.index(b.decode_on)) for i, b in enumerate(fleet) if b.decode_on)


def _replica_limits(scenario: Scenario, metered: Sequence[bool]) -> tuple[tuple[int, int], ...]:
    """Each backend's ``(least, most)`` replicas: a metered API backend keeps its count, the others
    range from 0 to ``plan.max_replicas`` (else ``plan.default_max_replicas``)."""
    plan = scenario.plan
    return tuple(
        (b.replicas, b.replicas) if is_metered else (0, plan.max_replicas.get(b.name, plan.default_max_replicas))
        for b, is_metered in zip(scenario.fleet, metered, strict=True)
    )


class Planner:
    """Evaluates candidates by simulation (memoised) and runs the search of the module docstring.

    ``runs`` simulates on an executor, through a cache (default: in this process, no cache);
    ``progress`` gets a line per step (the candidates, how many at most are left, an ETA);
    ``checkpoint`` gets every evaluation so far after each step (to keep them if interrupted);
    ``time_limit_s`` (wall-clock seconds from the start) and ``plan.max_candidates`` stop the
    search before a step that would simulate past them (:meth:`search` then answers with the
    cheapest fleet found and the floor of the rest, :meth:`unsettled_floor`); a run under way when
    the time limit passes is abandoned (its runs get the :attr:`deadline`), so the search ends at
    the limit, and the candidate counts as not simulated.
    """

    def __init__(
        self,
        scenario: Scenario,
        catalog: Catalog,
        progress: Callable[[str], None] | None = None,
        run_limits: Limits | None = Limits(),  # noqa: B008 - a frozen dataclass of constants
        runs: Runs | None = None,
        checkpoint: Callable[[list[Evaluation]], None] | None = None,
        time_limit_s: float | None = None,
    ) -> None:
        scenario, plans, basis = on_one_basis(scenario, catalog)
        self.scenario, self.catalog, self.run_limits = scenario, catalog, run_limits
        self.progress = progress or (lambda _: None)
        self.checkpoint = checkpoint or (lambda _: None)
        self.started = time.monotonic()
        self.time_limit_s, self.max_candidates = time_limit_s, scenario.plan.max_candidates
        confidence, seeds = scenario.plan.confidence, scenario.plan.replications
        #: Student's quantile at ``plan.confidence`` over the seeds (None: every seed must meet).
        self.t_quantile = float(stdtrit(seeds - 1, confidence)) if confidence is not None else None
        #: The wall-clock time (``time.time()``) past which a run is abandoned: the time limit's end.
        self.deadline = time.time() + time_limit_s if time_limit_s is not None else None
        #: Whether runs stop once a miss is settled: not where a seeds' mean decides (``plan.confidence``),
        #: which needs each seed's ratio to its end.
        self.stops_early = self.t_quantile is None
        self.fleet = scenario.fleet
        self.names = tuple(b.name for b in self.fleet)
        self.classes = scenario.workload_classes
        _require_targets(scenario)
        self.usd_per_replica_hour: tuple[float, ...] = tuple(p.usd_per_replica_hour for p in plans)
        self.metered: tuple[bool, ...] = tuple(p.pricing.token_price is not None for p in plans)
        #: Whether a run records only its tasks (:func:`summary_run`): every target bounds task
        #: times and no backend bills per token, so nothing else of a run decides its verdict.
        self.tasks_only = _only_task_targets(self.classes) and not any(self.metered)
        run_args = (catalog, run_limits, self.stops_early, self.deadline, self.tasks_only)
        self.runs = runs or Runs(Executor(), summary_run, run_args, None)
        stopping = f"stopped once a miss is settled (risk {STOP_RISK:g})" if self.stops_early else "run to the end"
        self.inputs = inputs_digest(scenario, ["tasks" if self.tasks_only else "summary", stopping])
        self.stopped = ""  # what stopped the search (_over_budget); "" while it runs
        self.cost_basis = _cost_basis(basis, self.metered)
        self.splits = _splits(self.fleet, self.names)
        self.replica_shapes = {name: _shape(p) for name, p in zip(self.names, plans, strict=True)}
        self.demand_calls_per_s = agent_call_demand(self.classes, catalog, scenario.run.duration)
        self.replica_calls_per_s = self._replica_calls_per_s(plans)
        self.limits = _replica_limits(scenario, self.metered)
        self.replica_kw = tuple(replica_kw(p, scenario.cost.pue) for p in plans)  # plan.budget_kw
        self.limits = power_limits(self.limits, self.replica_kw, scenario.plan.budget_kw)
        self.order = ServiceOrder.of(plans, self._stands_in(plans), self._slowness_compared(plans))
        self.cheaper_swaps = [(a, b) for a, b in self.order.pairs
                              if self.usd_per_replica_hour[a] < self.usd_per_replica_hour[b]]  # fmt: skip
        self._memo: dict[tuple[Counts, str], Evaluation] = {}
        self._slow_prefix_counts: dict[int, int] = {}
        self._keys: dict[tuple[Counts, str], list[tuple[str, str]]] = {}
        self.most_runs = self._most_candidates() * scenario.plan.replications  # counted, none built
        check_runs(self.most_runs, run_limits, f"{scenario.name}: plan",
                   f"at most {self._most_candidates():,} candidates x {scenario.plan.replications} replications",
                   "lower plan.max_replicas, plan.default_max_replicas or plan.replications")  # fmt: skip
        self._singles_left = self._single_candidates()  # bounds on the candidates each phase has left
        self._mixed_left = self._most_candidates() - self._singles_left
        self._pruned = 0

    def _stands_in(self, plans: Sequence[BackendPlan]) -> list[bool]:
        """Which backends the :class:`~simulator.studies.dominance.ServiceOrder` may compare: those
        :meth:`_compared`, where the router treats every replica alike and none is taken down."""
        alike = self._plain_router() and self.scenario.failures is None and self.scenario.slo.tolerate_failures == 0
        return [alike and compared for compared in self._compared(plans)]

    def _compared(self, plans: Sequence[BackendPlan]) -> list[bool]:
        """Which backends are compared for speed (:func:`~simulator.studies.dominance.runs_slower`):
        searched ones outside split pairs (an API backend's count is never searched)."""
        split = {i for pair in self.splits for i in pair}
        return [not self.metered[p.index] and p.index not in split for p in plans]

    def _slowness_compared(self, plans: Sequence[BackendPlan]) -> list[bool]:
        """The :meth:`_compared` backends, where the replica policy balances load, not speed: a
        speed-aware one (:data:`~simulator.config.fleet.SPEED_AWARE_POLICIES`) choosing among every
        usable backend's replicas (``pooled``) sends a call to a slower replica only when it
        predicts it served sooner there, so none is taken as one that may make a fleet worse. (The
        ``slo-aware`` backend choice sends a class's calls to the cheapest backend predicted to meet
        its TTFT and TPOT bounds, which a cheaper, slower backend may be.)"""
        router = self.scenario.router
        blind = router.policy not in SPEED_AWARE_POLICIES or router.backend_choice != "pooled"
        return [blind and compared for compared in self._compared(plans)]

    def _beaten(self, counts: Counts) -> bool:
        """Whether swapping one replica for one of a backend that serves no slower and costs less,
        within its replica limit, gives a cheaper fleet (dominance module docstring): one never the
        cheapest that meets."""
        return any(self._swap_cuts(counts, a, b) for a, b in self.cheaper_swaps)

    def _unbeaten(self, counts: Counts) -> Counts:
        """The fleet with cheaper swaps made (:meth:`_beaten`) until none is left: cheaper, and served no
        worse, so its miss settles ``counts`` too and its meet is a cheaper answer."""
        while True:
            swap = next(((a, b) for a, b in self.cheaper_swaps if self._swap_cuts(counts, a, b)), None)
            if swap is None:
                return counts
            counts = swapped(counts, *swap)

    def _swap_cuts(self, counts: Counts, a: int, b: int) -> bool:
        """Whether swapping a replica of ``b`` for one of ``a`` fits ``a``'s limit and cuts the fixed cost."""
        if not counts[b] or counts[a] >= self.limits[a][1]:
            return False
        return self.fixed_cost(swapped(counts, a, b)) < self.fixed_cost(counts)

    def _single_swap_low(self, index: int) -> int:
        """The fewest replicas of backend ``index`` alone not beaten by as many of a backend that serves
        no slower and costs less (within that one's replica limit): 1 when there is none."""
        return 1 + max((self.limits[a][1] for a, b in self.cheaper_swaps if b == index), default=0)

    def _replica_calls_per_s(self, plans: Sequence[BackendPlan]) -> tuple[float, ...]:
        """Each backend's calls/s per replica for the capacity bound, :data:`CAPACITY_MARGIN` x the
        closed form's; infinite (no bound) when the classes make no agent calls."""
        return tuple(
            CAPACITY_MARGIN * _calls_per_s(p, self.classes, self.catalog) if self.demand_calls_per_s else math.inf
            for p in plans
        )

    def split_of(self, counts: Counts) -> tuple[str, ...]:
        """The prefill -> decode pairs of the fleet that serve split (both pools with replicas)."""
        return tuple(f"{self.names[p]} -> {self.names[d]}" for p, d in self.splits if counts[p] and counts[d])

    def could_meet(self, counts: Counts) -> bool:
        """Whether the fleet passes the capacity bound (:func:`agent_call_demand`): its replicas'
        calls/s, each :data:`CAPACITY_MARGIN` x the closed form's, reach the agents' least demand.
        A split fleet always passes: a prefill pool and a decode pool each doing the part it is
        fast at may serve more calls/s than the sum of their whole-call rates, so that sum bounds
        nothing there."""
        if self.split_of(counts):
            return True
        capacity = sum(n * c for n, c in zip(counts, self.replica_calls_per_s, strict=True) if n)
        return capacity >= self.demand_calls_per_s

    def fixed_cost(self, counts: Counts) -> float:
        if not within_budget(counts, self.replica_kw, self.scenario.plan.budget_kw):
            return math.inf  # over the site's power: never cheaper than a fleet that fits
        return sum(n * usd for n, usd in zip(counts, self.usd_per_replica_hour, strict=True))

    def _run_keys(self, counts: Counts, kind: str) -> list[tuple[str, str]]:
        """``(key, resolved scenario JSON)`` of each replication of a candidate (memoised)."""
        if (counts, kind) not in self._keys:
            self._keys[(counts, kind)] = self._resolved_runs(counts, kind)
        return self._keys[(counts, kind)]

    def _resolved_runs(self, counts: Counts, kind: str, seeds: Sequence[int] | None = None) -> list[tuple[str, str]]:
        """``(key, resolved scenario JSON)`` of the candidate's run on each of ``seeds`` (the
        replications' by default: ``run.seed + r``)."""
        if seeds is None:
            seeds = range(self.scenario.run.seed, self.scenario.run.seed + self.scenario.plan.replications)
        fleet = fleet_at(self.scenario, counts, kind)
        found = []
        for seed in seeds:
            run = self.scenario.run.model_copy(update={"seed": seed})
            variant = fleet.model_copy(  # a run reads none of plan: at its defaults, so a plan with
                # other limits (plan.max_candidates, max_replicas) finds the runs it shares in the cache
                update={"run": run, "plan": PlanSpec()}
            )
            variant = tolerating_failures(variant, self.usd_per_replica_hour, self.metered)  # N+k: the k largest down
            text = write_in(variant, self.catalog).model_dump_json(by_alias=True)
            found.append((run_key(text, self.inputs), text))
        return found

    def _ask(self, ask: Ask) -> None:
        if (ask.counts, ask.kind) not in self._memo:
            for key, text in self._run_keys(ask.counts, ask.kind):
                self.runs.ask(key, text)

    def _ask_spare(self, ask: Ask) -> None:
        for counts in ask.spare:
            if (counts, ask.kind) not in self._memo:
                for key, text in self._run_keys(counts, ask.kind):
                    self.runs.ask(key, text, spare=True)

    def evaluate(self, counts: Counts, kind: str) -> Evaluation:
        """The candidate's evaluation over its replications (simulated once, then memoised)."""
        key = (counts, kind)
        if key in self._memo:
            return self._memo[key]
        self._ask(Ask(counts, kind))  # asked already when the search named it; a run is asked for once
        keys = [k for k, _ in self._run_keys(counts, kind)]
        misses: dict[tuple[str, str], Miss] = {}
        seeds: dict[tuple[str, str], list[Miss]] = {}
        worst, worst_error, api_spend = 0.0, math.nan, 0.0
        for document in self.runs.wait(keys).values():
            for miss in self._run_misses(document):
                if miss.ratio > worst or (miss.ratio == worst and math.isnan(worst_error)):
                    worst, worst_error = miss.ratio, miss.error
                seeds.setdefault((miss.klass, miss.target), []).append(miss)
            api_spend += self._api_spend(document) / self.scenario.plan.replications
        for found in seeds.values():  # with plan.confidence, a target's seeds decide it together
            t = self.t_quantile
            bound = math.nan if t is None else seeds_bound([m.ratio for m in found], t)
            for miss in found:
                _keep_worst(misses, dataclasses.replace(miss, seeds_bound=bound))
        fixed = self.fixed_cost(counts)
        evaluation = Evaluation(counts, self.names, fixed, fixed + api_spend, worst, tuple(misses.values()), kind,
                                self.split_of(counts), worst_error)  # fmt: skip
        self._memo[key] = evaluation
        return evaluation

    def _run_misses(self, document: dict[str, Any]) -> list[Miss]:
        """One run's target ratios (:func:`_measured_misses`), from its document (:func:`summary_run`:
        its summary or its classes' tasks, and what its stop rule settled)."""
        return _measured_misses(document_parts(document, self.classes), self.classes, document["settled"])

    def _api_spend(self, document: dict[str, Any]) -> float:
        """The run's per-token spend on the metered (API) backends, in $/h (none without them: then
        a run may record only its tasks)."""
        if not any(self.metered):
            return 0.0
        backends = RunSummary.model_validate(document["summary"]).backends.values()
        return sum(b.cost.usd_per_hour for b, metered in zip(backends, self.metered, strict=True) if metered)

    def _drive(self, searches: list[Search]) -> list[Evaluation | None]:
        """Run ``searches`` side by side: each step asks every live search's candidate (then the
        spare ones), waits for them, and answers each search in turn (a fixed order)."""
        found: list[Evaluation | None] = [None] * len(searches)
        asks: dict[int, Ask] = {}

        def advance(index: int, evaluation: Evaluation | None) -> None:
            try:
                asks[index] = next(searches[index]) if evaluation is None else searches[index].send(evaluation)
            except StopIteration as stop:
                found[index] = stop.value
                asks.pop(index, None)

        for index in range(len(searches)):
            advance(index, None)
        while asks and not self._over_budget(list(asks.values())):
            self._announce(list(asks.values()))
            for ask in asks.values():
                self._ask(ask)
            for ask in asks.values():
                self._ask_spare(ask)
            try:
                evaluations = {index: self.evaluate(ask.counts, ask.kind) for index, ask in asks.items()}
            except OutOfTimeError:  # a run passed the time limit: abandoned, the candidate not simulated
                self.stopped = self._time_limit_text()
                break
            self.checkpoint(list(self._memo.values()))
            for index, evaluation in evaluations.items():
                advance(index, evaluation)
        return found

    def _over_budget(self, asks: list[Ask]) -> bool:
        """Whether the search is stopped: before a step that would simulate a candidate once
        ``plan.max_candidates`` are simulated or the time limit has passed (``stopped`` says which).
        A step whose candidates are all evaluated costs nothing and always runs."""
        if not self.stopped and any((a.counts, a.kind) not in self._memo for a in asks):
            if self.max_candidates is not None and len(self._memo) >= self.max_candidates:
                self.stopped = f"plan.max_candidates = {self.max_candidates:,}"
            elif self.time_limit_s is not None and time.monotonic() - self.started >= self.time_limit_s:
                self.stopped = self._time_limit_text()
        return bool(self.stopped)

    def _time_limit_text(self) -> str:
        return f"the time limit of {self.time_limit_s:g} s"

    def _limit_text(self) -> str:
        """The progress line's note of the limits: candidates and seconds left before the search stops."""
        notes = []
        if self.max_candidates is not None:
            notes.append(f"stops after {self.max_candidates:,} candidates")
        if self.time_limit_s is not None:
            left = self.time_limit_s - (time.monotonic() - self.started)
            notes.append(f"stops at {self.time_limit_s:g} s ({max(left, 0.0):.0f} s left)")
        return f"; {', '.join(notes)}" if notes else ""

    def _announce(self, asks: list[Ask]) -> None:
        new = [a for a in asks if (a.counts, a.kind) not in self._memo]
        if not new:
            return
        total, simulated, pruned, left = self.tally()
        mixed = new[0].kind == "mixed"
        # the ETA of the phase under way: the mixed search is bounded only once the singles' best is known
        phase_left = max(self._mixed_left if mixed else self._singles_left, len(new))
        if self.max_candidates is not None:  # the search stops there
            phase_left = min(phase_left, max(self.max_candidates - simulated, len(new)))
        elapsed = time.monotonic() - self.started
        eta = ""
        if simulated:
            per_candidate = elapsed / simulated
            eta_s = per_candidate * phase_left
            if self.time_limit_s is not None:  # it stops at the limit, abandoning the candidate under way
                eta_s = min(eta_s, max(self.time_limit_s - elapsed, 0.0))
            eta = f", ETA{'' if mixed else ' of the single-architecture searches'} at most {eta_s:.0f} s"
        fleets = "; ".join(f"{a.kind} {fleet_text(a.counts, self.names)}" for a in new)
        runs = len(new) * self.scenario.plan.replications
        self.progress(
            f"candidate {simulated + 1}{f'-{simulated + len(new)}' if len(new) > 1 else ''} of at most "
            f"{simulated + max(left, len(new)):,}: {fleets} ({runs} run{'s' if runs > 1 else ''}); "
            f"{simulated:,} simulated, {pruned:,} pruned, at most {left:,} left of {total:,}{eta}{self._limit_text()}"
        )

    def tally(self) -> tuple[int, int, int, int]:
        """``(total, simulated, pruned, left)`` candidates, with ``simulated + pruned + left = total``:
        ``total`` is the search's bound fixed at the start (:meth:`_most_candidates`), ``left`` a
        bound on what it may still simulate, and ``pruned`` the rest, settled without a simulation
        (by cost, the capacity bound or a known miss)."""
        total = self._most_candidates()
        simulated = min(len(self._memo), total)
        bound = min(max(self._singles_left + self._mixed_left, 0), total - simulated)
        self._pruned = min(max(self._pruned, total - simulated - bound), total - simulated)  # never falls
        return total, simulated, self._pruned, total - simulated - self._pruned

    def _most_candidates(self) -> int:
        """An upper bound on the candidates the search evaluates (a bisection of ``[low, m]`` asks
        at most ``1 + ceil(log2(m - low + 1))``)."""
        searched = self._searched()
        steps = self._single_candidates()
        if len(searched) > 1:
            steps += self._mixed_bound(self._mixed_axes()[1])
        return steps

    def _mixed_axes(self) -> tuple[list[int], int]:
        """The searched backends the mixed search enumerates, and the one it bisects: the one a walk
        of every prefix would bisect most often (:meth:`_walk_bound`: the fewest candidates at
        most), then the one with the most replicas allowed, the cheapest replica, listed last (the
        finest cost steps bisected). Which one it is changes no answer: every vector with two or
        more backends in use is a candidate either way."""
        searched = self._searched()
        last = min(searched, key=lambda i: (self._walk_bound(i), -self.limits[i][1], self.usd_per_replica_hour[i], -i))
        return [i for i in searched if i != last], last

    def _walk_bound(self, last: int) -> int:
        """The most candidates a walk of every prefix would ask for with ``last`` bisected: per
        prefix its widening chain and either a bisection of ``last`` or, where the prefix holds a
        backend ``last`` is slower than, a scan of every count; plus the ceiling. The fewest puts
        the fewest fleets beside a faster backend on the bisected axis."""
        others = [i for i in self._searched() if i != last]
        faster = self.order.slower[last]
        prefixes = math.prod(self.limits[i][1] + 1 for i in others)
        without_faster = math.prod(self.limits[i][1] + 1 for i in others if i not in faster)
        most = self.limits[last][1]
        return (1 + (prefixes - without_faster) * (most + 1) + (without_faster - 1) * self._bisection_steps(most)
                + (prefixes - 1) * self._widening_steps())  # fmt: skip

    def _mixed_bound(self, last: int) -> int:
        """The most candidates the mixed search asks for with ``last`` bisected: the ceiling; per
        prefix (a count vector of the other searched backends, all at 0 skipped) walked, a
        bisection of ``last`` and its widening chain; per prefix searched maximal first (its fleet
        holds a backend slower than another it holds), every count of ``last``."""
        prefixes = math.prod(self.limits[i][1] + 1 for i in self._searched() if i != last)
        slow = self._slow_prefixes(last)
        return (
            1
            + slow * (self.limits[last][1] + 1)
            + (prefixes - slow - 1) * (self._bisection_steps(self.limits[last][1]) + self._widening_steps())
        )

    def _slow_prefixes(self, last: int) -> int:
        """How many prefixes (:meth:`_prefix_groups`) are searched maximal first with ``last``
        bisected: counted over every prefix (numpy) up to :data:`COUNTED_PREFIXES` of them, else
        all but the empty one (a bound)."""
        if last not in self._slow_prefix_counts:
            others = [i for i in self._searched() if i != last]
            shape = [self.limits[i][1] + 1 for i in others]
            if not any(self.order.slower) or not others:
                count = 0
            elif math.prod(shape) > COUNTED_PREFIXES:
                count = math.prod(shape) - 1
            else:
                prefixes = np.indices(shape).reshape(len(others), -1).T
                count = int(self.order.mixes(self._prefix_fleets(others, last, prefixes)).sum())
            self._slow_prefix_counts[last] = count
        return self._slow_prefix_counts[last]

    def _prefix_fleets(self, others: list[int], last: int, prefixes: np.ndarray) -> np.ndarray:
        """The fleet of each prefix (a row of counts of ``others``) with one replica of ``last``."""
        fleets = np.tile(np.asarray(self._vector({}), dtype=np.int64), (len(prefixes), 1))
        fleets[:, others] = prefixes
        fleets[:, last] = 1
        return fleets

    def _single_candidates(self) -> int:
        """An upper bound on the candidates the single-architecture searches evaluate (and the API
        backends alone, when there are any)."""
        return self._single_bisections(self._searched()) + any(self.metered)

    def _searched(self) -> list[int]:
        """The backends the plan searches a count for: every one not metered per token."""
        return [i for i, metered in enumerate(self.metered) if not metered]

    def _single_bisections(self, indices: list[int]) -> int:
        """The most candidates the single-architecture bisections of backends ``indices`` ask for."""
        return sum(1 + math.ceil(math.log2(max(self.limits[i][1], 1))) for i in indices)

    def _widening_steps(self) -> int:
        """The most probes one :meth:`_widen_miss` asks for: ``ceil(log2(K + 1))``, ``K`` at most the
        largest replica limit."""
        return math.ceil(math.log2(max(self.limits[i][1] for i in self._searched()) + 1))

    @staticmethod
    def _bisection_steps(most: int) -> int:
        """The most candidates a bisection of ``[0, most]`` asks for."""
        return 1 + math.ceil(math.log2(most + 1))

    def _vector(self, counts: dict[int, int]) -> Counts:
        """Replica counts: metered backends at their given counts, searched ones as given (else 0)."""
        return tuple(
            b.replicas if metered else counts.get(i, 0)
            for i, (b, metered) in enumerate(zip(self.fleet, self.metered, strict=True))
        )

    def _with_last(self, counts: dict[int, int], last: int, n: int) -> Counts:
        return self._vector(counts | {last: n})

    def _fewest(self, make: Callable[[int], Counts], low: int, high: int, kind: str) -> Search:
        """Bisect the fewest ``n`` in ``[low, high]`` whose ``make(n)`` meets (monotone in ``n``):
        ``high`` first (a miss there settles the range in one run), then from the middle; each
        step names the two candidates the next step may need as spare. At most ``1 + ceil(log2(
        high - low + 1))`` candidates."""
        if high < low:
            return None
        top = yield Ask(make(high), kind, (make((low + high) // 2),) if low < high else ())
        if not top.meets:
            return None
        while low < high:
            mid = (low + high) // 2
            after = {(low + mid) // 2, (mid + 1 + high) // 2} - {mid, high}
            if (yield Ask(make(mid), kind, tuple(make(n) for n in sorted(after)))).meets:
                high = mid
            else:
                low = mid + 1
        found = yield Ask(make(high), kind)
        return found if found.meets else None

    def _fewest_passing(self, index: int, others: dict[int, int], low: int) -> int:
        """The fewest replicas ``n >= low`` of backend ``index`` with which the fleet (``others``
        beside it) passes the capacity bound; its limit + 1 when none does."""
        most = self.limits[index][1]
        return next((n for n in range(low, most + 1) if self.could_meet(self._vector(others | {index: n}))), most + 1)

    def _singles(self) -> Search:
        """Each searched backend alone, cheapest possible first (its capacity bound's replicas x
        its price): bisect its fewest replicas that meet among those that pass the bound and cost
        no more than the best found so far. The best, ties to the backend listed first."""
        searched = self._searched()
        least = {i: self._fewest_passing(i, {}, 1) for i in searched}
        order = sorted(searched, key=lambda i: (self.fixed_cost(self._vector({i: least[i]})), i))
        found: dict[int, Evaluation] = {}
        alone = yield from self._api_alone()
        if alone is not None:
            found[-1] = alone
        for position, index in enumerate(order):
            self._singles_left = self._single_bisections(order[position:])
            best = min(found.values(), key=lambda e: e.usd_per_hour, default=None)
            low = max(least[index], self._single_swap_low(index))
            high = self._single_high(index, low, best)
            make = functools.partial(self._with_last, {}, index)
            result = yield from self._fewest(make, low, high, "single")
            if result is not None:
                found[index] = result
        self._singles_left = 0
        return min((found[i] for i in sorted(found)), key=lambda e: e.usd_per_hour, default=None)

    def _api_alone(self) -> Search:
        """The API backends alone (every searched backend at 0) when there are any and that fleet
        meets; else None without a run."""
        if not any(self.metered):
            return None
        alone = yield Ask(self._vector({}), "single")
        return alone if alone.meets else None

    def _single_high(self, index: int, low: int, best: Evaluation | None) -> int:
        """The most replicas of backend ``index`` alone worth a run: its limit, lowered (not below
        ``low - 1``) while the fleet's fixed cost is over the best so far (API spend is never
        negative: a fleet whose fixed cost is over the best cannot win)."""
        high = self.limits[index][1]
        while high >= low and best is not None and self.fixed_cost(self._vector({index: high})) > best.usd_per_hour:
            high -= 1
        return high

    def _known_miss(self, counts: dict[int, int], last: int) -> int:
        """The most replicas of ``last`` beside ``counts`` (and every fewer) with which an evaluated
        miss settles the fleet (-1: none): the miss holds it with replicas added or swapped up, none
        slower than a backend the fleet holds (:meth:`~simulator.studies.dominance.ServiceOrder.settles`).
        By monotone feasibility it misses too. Single-architecture runs count when the scenario's
        router is theirs."""
        return self.order.most_of(self._misses_settling("mixed"), self._vector(counts), last)

    def _misses_settling(self, kind: str) -> list[Counts]:
        """The evaluated fleets that miss and settle fleets of ``kind`` below them: runs of that
        kind, and of the other too when mixed fleets are routed as single ones are (no rules, pooled)."""
        kinds = {kind} | ({"single", "mixed"} if self._plain_router() else set())
        return [c for (c, k), e in self._memo.items() if k in kinds and not e.meets]

    def _plain_router(self) -> bool:
        """Whether mixed fleets are routed as single ones are: no rules, pooled."""
        return not self.scenario.router.rules and self.scenario.router.backend_choice == "pooled"

    def _least_last(self, counts: dict[int, int], last: int) -> int | None:
        """The fewest replicas of ``last`` that leave no class without a backend it may use
        (``router.rules``), beside ``counts``: 0, 1, or None when no count of ``last`` can."""
        vector = self._vector(counts)
        least = 0
        for allowed in self.scenario.router.rules.values():
            if not any(vector[self.names.index(name)] for name in allowed if name in self.names):
                if self.names[last] not in allowed:
                    return None
                least = 1
        return least

    def _mixed(self, best: Evaluation | None, cap: float) -> Search:
        """The ceiling; then for each count vector of all searched backends but the last whose fleet
        holds no backend slower than another (cheapest first), bisect the last backend's fewest
        replicas under the best cost so far, from the fewest that pass the capacity bound and are
        above every known miss; then the other fleets, maximal first (:meth:`_slow_mixes`)."""
        if len(self._searched()) < 2:
            return best
        ceiling = self._ceiling(min(best.usd_per_hour if best else math.inf, cap))
        if ceiling is not None:
            probe = yield Ask(ceiling, "mixed")
            best = _cheaper(probe if probe.meets else None, best)
        others, last = self._mixed_axes()
        most = self.limits[last][1]
        per_prefix = self._bisection_steps(most) + self._widening_steps()
        (prefixes, costs), slow_prefixes = self._prefix_groups(others, last)
        slow_fleets, slow_costs = self._fleets_of(others, last, slow_prefixes)  # cheapest first
        for position, prefix in enumerate(prefixes):
            counts = dict(zip(others, prefix, strict=True))
            used = sum(1 for n in prefix if n)
            bound = min(best.usd_per_hour if best else math.inf, cap)
            cheaper = bisect.bisect_left(costs, bound) - position  # the prefixes left that can still win
            # the slower-backend fleets that may still be simulated: those cheaper than the bound
            self._mixed_left = max(cheaper, 0) * per_prefix + int(np.searchsorted(slow_costs, bound))
            if cheaper <= 0:
                break
            if used == 0:
                continue  # the last backend alone: a single-architecture fleet
            span = self._last_range(counts, last, used, bound)
            if span is None:
                continue  # a class's every allowed backend (router.rules) at 0, whatever the last's count
            make = functools.partial(self._with_last, counts, last)
            found = yield from self._fewest(make, *span, "mixed")
            best = _cheaper(found, best)
            top = self._memo.get((make(span[1]), "mixed")) if span[0] <= span[1] else None  # asked here
            if found is None and top is not None and not top.meets:
                best = _cheaper((yield from self._widen_miss(top.counts, bound)), best)
        best = yield from self._slow_mixes(slow_fleets, slow_costs, best, cap)
        self._mixed_left = 0
        return best

    def _fleets_of(self, others: list[int], last: int, prefixes: list[Counts]) -> tuple[np.ndarray, np.ndarray]:
        """Every fleet of ``prefixes`` (counts of ``others``) with each count of ``last`` that is a
        mixed candidate (two or more searched backends in use, every class served) and can win
        (passes the capacity bound, not beaten by a cheaper swap), one a row, cheapest first; and
        their fixed costs."""
        fleets = [
            fleet for prefix in prefixes for n in range(self.limits[last][1] + 1)
            if sum(1 for m in prefix if m) + (n > 0) >= 2
            and self._serves_every_class(fleet := self._with_last(dict(zip(others, prefix, strict=True)), last, n))
            and self.could_meet(fleet) and not self._beaten(fleet)
        ]  # fmt: skip
        priced = sorted((self.fixed_cost(f), f) for f in fleets)
        costs = np.array([cost for cost, _ in priced], dtype=np.float64)
        return np.asarray([f for _, f in priced], dtype=np.int64).reshape(len(priced), len(self.names)), costs

    def _slow_mixes(self, fleets: np.ndarray, cost: np.ndarray, best: Evaluation | None, cap: float) -> Search:
        """The fleets holding a replica slower than another they may hold, whose prefix walk cannot
        bisect (module docstring, step 2), *maximal first*: of those still open (cheaper than the
        best so far, not evaluated, not settled by an evaluated miss), take the cheapest and climb
        to the dearest open fleet whose miss would settle it, until none would (a maximal one);
        simulate that. A miss settles the open fleets below it, a fleet that meets lowers the
        bound; until none is open. If every maximal fleet misses, that is one run per maximal
        fleet, where a walk from the cheapest up also runs the fleets below them."""
        slow = self.order.slow_mask(fleets)
        settled = np.zeros(len(fleets), dtype=bool)
        for miss in self._misses_settling("mixed"):
            settled |= self.order.settles_each(miss, fleets, slow)
        while True:
            bound = min(best.usd_per_hour if best else math.inf, cap)
            open_ = ~settled & (cost < bound)
            self._mixed_left = int(open_.sum())
            if not open_.any():
                return best
            at = self._maximal(fleets, open_)
            evaluation = yield Ask(tuple(fleets[at].tolist()), "mixed", self._next_maximal(fleets, open_, slow, at))
            settled[at] = True
            if evaluation.meets:
                best = _cheaper(evaluation, best)
            else:
                settled |= self.order.settles_each(evaluation.counts, fleets, slow)

    def _next_maximal(self, fleets: np.ndarray, open_: np.ndarray, slow: np.ndarray, at: int) -> tuple[Counts, ...]:
        """The spare candidates for idle slots (one fewer than the executor runs at once): the
        maximal fleets :meth:`_slow_mixes` asks next should fleet ``at`` and each of these miss."""
        spare: list[Counts] = []
        while len(spare) < self.runs.executor.slots - 1:
            open_ = open_ & ~self.order.settles_each(tuple(fleets[at].tolist()), fleets, slow)
            if not open_.any():
                break
            at = self._maximal(fleets, open_)
            spare.append(tuple(fleets[at].tolist()))
        return tuple(spare)

    def _maximal(self, fleets: np.ndarray, open_: np.ndarray) -> int:
        """The row of a maximal open fleet above the cheapest open one (rows cheapest first): from
        it, climb to the dearest open fleet whose miss would settle it, until none would."""
        at = int(np.argmax(open_))
        while True:
            above = open_ & self.order.settled_by_each(tuple(fleets[at].tolist()), fleets)
            above[at] = False
            if not above.any():
                return at
            at = int(np.flatnonzero(above)[-1])

    def _prefix_groups(self, others: list[int], last: int) -> tuple[tuple[list[Counts], list[float]], list[Counts]]:
        """The prefixes (:meth:`_sorted_prefixes`) whose fleet (with one replica of ``last``) holds no
        backend slower than another it holds, cheapest first with their costs, and the rest. The
        first are walked and bisected; the rest, where a slower replica may make a fleet worse, are
        searched maximal first (:meth:`_slow_mixes`) under the cost bound the first group found."""
        prefixes, costs = self._sorted_prefixes(others)
        rows = np.asarray(prefixes, dtype=np.int64).reshape(len(prefixes), len(others))
        mixes = self.order.mixes(self._prefix_fleets(others, last, rows)).tolist()
        walked = [i for i, mixed in enumerate(mixes) if not mixed]
        slow = [prefix for prefix, mixed in zip(prefixes, mixes, strict=True) if mixed]
        return ([prefixes[i] for i in walked], [costs[i] for i in walked]), slow

    def _widen_miss(self, miss: Counts, bound: float) -> Search:
        """After a prefix's largest candidate misses, the largest miss on the chain from it towards
        ``c``, bisected: ``q(k) = miss + ceil(k (c - miss) / K)`` coordinate by coordinate (``K`` the
        largest gap), so ``q`` only rises from ``q(0) = miss``, cut where its fixed cost reaches
        ``bound``. ``c`` holds every searched backend at its most replicas where one replica more
        keeps the miss under ``bound`` and makes none of the miss's backends slower than one it
        holds, and the miss's replicas of the others, among them every backend slower than one the
        miss holds (a miss with more of those would settle nothing below it).
        The largest miss found settles the fleets below it (those it holds with replicas added
        that are slower than none they hold), and the prefix walk skips them as known misses, as
        every miss on the way (a fleet failing the capacity bound counts as a miss without a run).
        Each probe is ``q(k)`` with its cheaper swaps made (:meth:`_unbeaten`: cheaper, and settling
        at least what ``q(k)`` would); it costs less than ``bound`` and serves every class (it lies
        above ``miss``, and swaps exist only without routing rules); at most ``ceil(log2(K + 1))``
        of them. Returns the cheapest probe that met (a fleet found meeting, cheaper than ``bound``)."""
        kept = set(self.order.slow_in(miss))
        held_slow = {x for x in kept if miss[x]}
        grown = {
            i for i in self._searched()
            if i not in kept and self.fixed_cost(_plus_one(miss, i)) < bound
            and {x for x in self.order.slow_in(_plus_one(miss, i)) if miss[x]} == held_slow
        }  # fmt: skip
        top = tuple(self.limits[i][1] if i in grown else m for i, m in enumerate(miss))
        gap = max(c - m for m, c in zip(miss, top, strict=True))

        def q(k: int) -> Counts:
            return tuple(m - (-k * (c - m) // gap) for m, c in zip(miss, top, strict=True))

        low, high = 0, next((k - 1 for k in range(1, gap + 1) if self.fixed_cost(q(k)) >= bound), gap)
        found: Evaluation | None = None
        while low < high:  # q(low) misses; q(k) for k > high meets or costs the bound
            k = (low + high + 1) // 2
            point = self._unbeaten(q(k))
            probe = (yield Ask(point, "mixed")) if self.could_meet(point) else None
            if probe is not None and probe.meets:
                found, high = _cheaper(probe, found), k - 1
            else:
                low = k
        return found

    def _ceiling(self, bound: float) -> Counts | None:
        """The probe of the mixed search: every searched backend at its most replicas, dropping
        whole backends, dearest replica first (skipping one whose drop would leave a class without
        a backend its ``router.rules`` allow), until the fleet's fixed cost is under ``bound``;
        None unless two or more backends are left in use and the fleet passes the capacity bound
        (else no fleet below it does). If it misses, so does every fleet below it that it settles
        (monotone feasibility), and the prefix walk then skips them as known misses. None too where
        it holds a backend slower than another it holds: its miss would settle only the fleets
        with exactly its replicas of that backend (:meth:`ServiceOrder.settles`), so the run would
        decide almost nothing."""
        counts = {i: self.limits[i][1] for i in self._searched()}
        for index in sorted(counts, key=lambda i: (-self.usd_per_replica_hour[i], -i)):
            if self.fixed_cost(self._vector(counts)) < bound:
                break
            if self._serves_every_class(self._vector(counts | {index: 0})):
                counts[index] = 0
        fleet = self._vector(counts)
        if len([n for n in counts.values() if n]) < 2 or self.fixed_cost(fleet) >= bound or not self.could_meet(fleet):
            return None
        return None if self.order.mixes(np.asarray([fleet]))[0] else fleet

    def _serves_every_class(self, counts: Counts) -> bool:
        """Whether every class has a backend with replicas among those its ``router.rules`` allow."""
        return all(
            any(counts[self.names.index(name)] for name in allowed if name in self.names)
            for allowed in self.scenario.router.rules.values()
        )

    def _prefix_cost(self, others: list[int], prefix: Counts) -> float:
        """The fixed cost of the fleet with ``prefix`` replicas of backends ``others`` (the rest at 0)."""
        return self.fixed_cost(self._vector(dict(zip(others, prefix, strict=True))))

    def _sorted_prefixes(self, others: list[int]) -> tuple[list[Counts], list[float]]:
        """Every count vector of backends ``others`` within their limits, cheapest first, and their costs."""
        cost = functools.partial(self._prefix_cost, others)
        prefixes = sorted(itertools.product(*(range(self.limits[i][1] + 1) for i in others)), key=cost)
        return prefixes, [cost(p) for p in prefixes]

    def _last_range(self, counts: dict[int, int], last: int, used: int, bound: float) -> tuple[int, int] | None:
        """The replicas ``[low, high]`` of ``last`` to bisect beside ``counts`` (``used`` of them in
        use): from the fewest that serve every class, pass the capacity bound (at least one when
        only one other backend is in use) and are above every known miss, up to the most whose
        fleet's fixed cost is under ``bound``, less those at either end beaten by a cheaper swap
        (:meth:`_beaten`); None when no count of ``last`` serves every class."""
        least = self._least_last(counts, last)
        if least is None:
            return None
        low = self._fewest_passing(last, counts, max(least, 1 if used == 1 else 0))
        low = max(low, self._known_miss(counts, last) + 1)
        high = self.limits[last][1]
        while high >= low and self.fixed_cost(self._vector(counts | {last: high})) >= bound:
            high -= 1
        while low <= high and self._beaten(self._vector(counts | {last: low})):
            low += 1
        while high >= low and self._beaten(self._vector(counts | {last: high})):
            high -= 1
        return low, high

    def search(self) -> PlanResult:
        replications = self.scenario.plan.replications
        self.progress(f"at most {self._most_candidates():,} candidates x {replications} replication"
                      f"{'s' if replications > 1 else ''} = {self.most_runs:,} runs (a bisection usually needs far "
                      "fewer)")  # fmt: skip
        self._mixed_left = self._most_candidates() - self._single_candidates()
        best_single = self._drive([self._singles()])[0]
        cap = self.scenario.plan.max_usd_per_hour or math.inf
        best = self._drive([self._mixed(best_single, cap)])[0]
        if self.stopped:  # the searches left unfinished: the cheapest found so far
            best_single = _cheapest_meeting([e for e in self._memo.values() if e.kind == "single"])
            best = _cheapest_meeting(list(self._memo.values()))
        result = PlanResult(best if best is None or best.usd_per_hour <= cap else None, best_single,
                            list(self._memo.values()))  # fmt: skip
        result.cost_basis = self.cost_basis
        if self.stopped:
            result.stopped = self.stopped
            bound = min(best.usd_per_hour if best else math.inf, cap)
            result.floor_usd_per_hour = min(self.unsettled_floor(bound), bound)  # the bound: nothing cheaper unsettled
            explained = self._explain_stopped(result, cap)
        else:
            explained = self._explain(result, cap, best)
        result.violations = non_monotone(result.evaluations, self._plain_router(), self.order)
        if result.violations:
            explained += _violations_text(result.violations)
        plan = self.scenario.plan
        if self.t_quantile is not None:
            explained += (
                f"; a fleet meets a target when the mean of its ratio over its {plan.replications} seeds is under 1 "
                f"with {plan.confidence:g} confidence (plan.confidence, one-sided: mean + {self.t_quantile:.3g} "
                f"standard errors over the seeds)"
            )
        elif result.answer is not None and (caution := _within_noise_text(result.answer, plan.replications)):
            result.checked = self._check_answer(result.answer)
            explained += caution + _checked_text(result.checked)
        result.explanation = f"on the {self.cost_basis} cost basis, " + explained
        result.replica_shapes = dict(self.replica_shapes)
        for a, b in self.order.pairs:
            result.no_slower.setdefault(self.names[a], []).append(self.names[b])
        for x, over in enumerate(self.order.slower):
            if over:
                result.slower[self.names[x]] = [self.names[y] for y in sorted(over)]
        total, simulated, pruned, _ = self.tally()
        result.search = {"candidates_at_most": total, "simulated": simulated, "pruned": pruned}
        return result

    def _check_answer(self, answer: Evaluation) -> list[SeedCheck]:
        """The answer's worst ratio on ``plan.check_seeds`` more seeds, after the replications' (each
        run as the search's are); none where the search was told to stop (its limit stands)."""
        plan, first = self.scenario.plan, self.scenario.run.seed + self.scenario.plan.replications
        if self.max_candidates is not None or self.time_limit_s is not None or not plan.check_seeds:
            return []
        runs = self._resolved_runs(answer.counts, answer.kind, range(first, first + plan.check_seeds))
        for key, text in runs:
            self.runs.ask(key, text)
        documents = self.runs.wait([key for key, _ in runs])
        checks = []
        for seed, (key, _) in enumerate(runs, start=first):
            document = documents[key]
            misses = self._run_misses(document)
            checks.append(SeedCheck(seed, max((m.ratio for m in misses), default=math.nan), bool(document["settled"])))
        return checks

    def unsettled_floor(self, bound: float) -> float:
        """The least fixed cost under ``bound`` of a fleet the search has not settled, ``math.inf``
        when it has settled all. Settled: evaluated, settled by an evaluated miss
        (monotone feasibility, the kinds :meth:`_known_miss` reads), failing the capacity bound,
        leaving a class without a backend its rules allow or beaten by a cheaper swap
        (:meth:`_last_range`), or costing ``bound`` or more. API spend is never negative and a
        beaten fleet's swaps end at a cheaper one not beaten, so no fleet that meets every target
        costs less than the floor: with ``bound`` the cheapest fleet found that meets, the
        cheapest that does lies between them."""
        floor = min((self.fixed_cost(v) for v in self._unsettled_singles(bound)), default=math.inf)
        if len(self._searched()) < 2:
            return floor
        others, last = self._mixed_axes()
        for prefix, cost in zip(*self._sorted_prefixes(others), strict=True):
            if cost >= min(floor, bound):
                break  # the prefixes are cheapest first, and a fleet costs at least its prefix
            counts = dict(zip(others, prefix, strict=True))
            used = sum(1 for n in prefix if n)
            span = self._last_range(counts, last, used, min(floor, bound)) if used else None
            if span is not None and span[0] <= span[1]:
                floor = self.fixed_cost(self._with_last(counts, last, span[0]))
        return floor

    def _unsettled_singles(self, bound: float) -> Iterator[Counts]:
        """Of each searched backend alone (and the API backends alone), the fewest replicas not
        settled that cost under ``bound``: served better than every evaluated miss (the
        single-architecture runs, and the mixed ones when the scenario's router is theirs), passing
        the capacity bound and not beaten by as many of a cheaper backend that serves no slower."""
        misses = self._misses_settling("single")
        alone = self._vector({})
        if any(self.metered) and (alone, "single") not in self._memo and not misses and self.fixed_cost(alone) < bound:
            yield alone
        for index in self._searched():
            settled = self.order.most_of(misses, self._vector({}), index)
            low = max(self._fewest_passing(index, {}, 1), 1 + settled, self._single_swap_low(index))
            if low <= self.limits[index][1] and self.fixed_cost(self._vector({index: low})) < bound:
                yield self._vector({index: low})

    def _explain_stopped(self, result: PlanResult, cap: float) -> str:
        """The answer of a search stopped before its end: the cheapest fleet found that meets and
        the floor of the fleets not settled, or none found."""
        simulated = len(self._memo)
        head = f"the search stopped at {self.stopped}, after {simulated:,} candidates simulated"
        if simulated and self.time_limit_s is not None and self.stopped.startswith("the time limit"):
            head += f" (--set plan.max_candidates={simulated} repeats it: the candidates come in the same order)"
        floor = result.floor_usd_per_hour if result.floor_usd_per_hour is not None else math.inf
        within = f" within ${cap:,.2f}/h" if math.isfinite(cap) else ""
        answer = result.answer
        if answer is None:
            if math.isinf(floor):
                return f"{head}: no fleet{within} meets every target (every fleet is settled a miss)"
            return (
                f"{head}, before any fleet{within} met every target; no fleet under ${floor:,.2f}/h meets (each is "
                f"{SETTLED_BY})"
            )
        found = f"{answer.fleet} at ${answer.usd_per_hour:,.2f}/h"
        if floor >= answer.usd_per_hour:
            return f"{head}: {found}, and every cheaper fleet is settled a miss, so it is the full search's answer"
        dearer = f"at most {answer.usd_per_hour / floor - 1:.0%} dearer than" if floor > 0 else "dearer than or as"
        return (
            f"{head}: the cheapest fleet found meeting every target is {found}; no fleet under "
            f"${floor:,.2f}/h meets (each is {SETTLED_BY}), so the cheapest that meets costs ${floor:,.2f}/h to "
            f"${answer.usd_per_hour:,.2f}/h and this one is {dearer} the cheapest; a higher limit narrows the gap"
        )

    def _explain(self, result: PlanResult, cap: float, cheapest: Evaluation | None) -> str:
        """The answer in a sentence: over the budget cap, none found, or how it compares with the
        best single-architecture fleet."""
        if result.answer is None and cheapest is not None:
            return (
                f"the cheapest fleet meeting every target, {cheapest.fleet} at ${cheapest.usd_per_hour:,.2f}/h, "
                f"is over the budget cap plan.max_usd_per_hour = ${cap:,.2f}/h"
            )
        if result.answer is None:
            return self._explain_none(result.evaluations, cap)
        return _explain_answer(result.answer, result.best_single)

    def _at_limit(self, evaluation: Evaluation) -> bool:
        """Whether a candidate's largest count is its backend's replica limit."""
        most = max(evaluation.counts)
        return most == self.limits[evaluation.counts.index(most)][1]

    def _explain_none(self, evaluations: list[Evaluation], cap: float) -> str:
        """Why no fleet meets every target: the closest candidate's misses, and each backend's
        misses alone at its replica limit."""
        closest = min(evaluations, key=lambda e: e.worst, default=None)
        why = _misses_text(closest) if closest else "no candidate was evaluated"
        limit = f" within ${cap:,.2f}/h" if math.isfinite(cap) else ""
        largest = [e for e in evaluations if e.kind == "single" and not e.meets and self._at_limit(e)]
        each = "".join(f"\n  {e.fleet} alone: " + _misses_text(e) for e in largest)
        return (
            f"no fleet up to the replica limits{limit} meets every target; the closest, "
            f"{closest.fleet if closest else '-'}, misses: {why}{each}"
        )


def _misses_text(evaluation: Evaluation) -> str:
    """A candidate's misses, described and joined with semicolons."""
    return "; ".join(m.describe() for m in evaluation.misses)


def non_monotone(evaluations: list[Evaluation], plain_router: bool, order: ServiceOrder
                 ) -> list[tuple[Evaluation, Evaluation]]:  # fmt: skip
    """Pairs ``(a, b)`` of evaluated fleets where ``a`` meets every target and ``b``, another fleet
    that ``a`` grows into (``order.settles(b, a)``: ``a``'s replicas, some swapped for a backend
    they serve no slower than, and more, none of a backend slower than one ``a`` holds), misses:
    evidence against the monotone feasibility the search assumes (with it, such a fleet meets).
    Fleets of both kinds are compared when ``plain_router`` (the search then reads runs of either
    kind for the other), else only fleets of one kind. Cheapest ``a`` first."""
    meets = sorted((e for e in evaluations if e.meets), key=lambda e: (e.usd_per_hour, e.counts))
    misses = [e for e in evaluations if not e.meets]
    return [
        (a, b) for a in meets for b in misses
        if (plain_router or a.kind == b.kind) and b.counts != a.counts and order.settles(b.counts, a.counts)
    ]  # fmt: skip


def _violations_text(violations: list[tuple[Evaluation, Evaluation]]) -> str:
    """The warning a plan adds when a larger fleet missed where a smaller one met."""
    a, b = violations[0]
    more = f" (and {len(violations) - 1} more such pairs)" if len(violations) > 1 else ""
    return (
        f". Warning: {b.fleet} misses though {a.fleet}, served no better, meets{more}: more replicas (or faster "
        "ones), none slower on every pass than one it held, made a fleet worse here, which the search assumes "
        "never happens, so a fleet it settled without a run below a miss may meet; check the answer's neighbours "
        "with infersim run"
    )


def _plus_one(counts: Counts, index: int) -> Counts:
    """Fleet ``counts`` with one replica more of backend ``index``."""
    return tuple(n + (i == index) for i, n in enumerate(counts))


def _cheapest_meeting(evaluations: list[Evaluation]) -> Evaluation | None:
    """The cheapest of ``evaluations`` that meets every target (the first evaluated of equal cost)."""
    return min((e for e in evaluations if e.meets), key=lambda e: e.usd_per_hour, default=None)


def _within_noise_text(answer: Evaluation, replications: int) -> str:
    """A warning where the answer meets by less than
    :data:`~simulator.results.sampling.NOISE_ERRORS` sampling errors of its worst target (one run's,
    :mod:`simulator.results.sampling`): another seed may well miss; empty otherwise."""
    if not (math.isfinite(answer.worst_error) and answer.worst_error > 0):
        return ""
    margin = 1.0 - answer.worst
    if margin >= NOISE_ERRORS * answer.worst_error:
        return ""
    seeds = "its run" if replications == 1 else f"the worst of its {replications} runs"
    more = replications + 2
    return (
        f"; caution: it meets by {margin:.1%} of the bound in {seeds}, within {NOISE_ERRORS:g} sampling errors "
        f"(+/-{answer.worst_error:.1%}, the run's requests or tasks taken as independent, so at least that), so "
        f"another seed may miss: --set plan.replications={more} asks every fleet to meet on {more} seeds (with "
        "plan.confidence, 0.9 say, their mean at that confidence)"
    )


def _checked_text(checks: list[SeedCheck]) -> str:
    """What the answer did on the seeds checked (:meth:`Planner._check_answer`); empty without any."""
    if not checks:
        return ""
    each = ", ".join(f"seed {c.seed} {'at least ' if c.settled else ''}{c.worst:.3f}" for c in checks)
    missed = sum(not c.meets for c in checks)
    verdict = f"it misses on {missed} of them" if missed else "it meets on each"
    return f"; run on {len(checks)} more seed{'s' if len(checks) > 1 else ''}, {verdict} (worst ratio: {each})"


def _finite_or_none(value: float | None) -> float | None:
    """``value`` for JSON: None when it is not a finite number."""
    return value if value is not None and math.isfinite(value) else None


def _cheaper(found: Evaluation | None, best: Evaluation | None) -> Evaluation | None:
    """``found`` when it costs less than ``best`` (or there is no best yet), else ``best``."""
    if found is not None and (best is None or found.usd_per_hour < best.usd_per_hour):
        return found
    return best


def _explain_answer(answer: Evaluation, single: Evaluation | None) -> str:
    """The answer, with its saving over the best single-architecture fleet (or why there is none)."""
    if single is None:
        return f"{answer.fleet} at ${answer.usd_per_hour:,.2f}/h; no single-architecture fleet meets every target"
    if answer is single:
        return (
            f"{answer.fleet} at ${answer.usd_per_hour:,.2f}/h: no mixed fleet cheaper than the best "
            f"single-architecture fleet meets every target"
        )
    saving = 1.0 - answer.usd_per_hour / single.usd_per_hour
    return (
        f"{answer.fleet} at ${answer.usd_per_hour:,.2f}/h, {saving:.0%} cheaper than the best "
        f"single-architecture fleet ({single.fleet}, ${single.usd_per_hour:,.2f}/h)"
    )


def plan_fleet(
    scenario: Scenario,
    catalog: Catalog,
    progress: Callable[[str], None] | None = None,
    limits: Limits | None = Limits(),  # noqa: B008 - a frozen dataclass of constants
    runs: Runs | None = None,
    checkpoint: Callable[[list[Evaluation]], None] | None = None,
    time_limit_s: float | None = None,
) -> PlanResult:
    """The cheapest fleet meeting ``scenario``'s SLO targets (module docstring); :class:`Planner`
    says what ``runs``, ``progress``, ``checkpoint`` and ``time_limit_s`` are."""
    return Planner(scenario, catalog, progress, limits, runs, checkpoint, time_limit_s).search()


def fleet_at(scenario: Scenario, counts: Counts, kind: str) -> Scenario:
    """The scenario with ``counts`` replicas of each backend (backends at 0 kept, serving nothing);
    a single-architecture candidate (``kind`` ``"single"``) pools its replicas, the routing rules dropped."""
    backends = [b.model_copy(update={"replicas": n}) for b, n in zip(scenario.fleet, counts, strict=True)]
    update: dict[str, object] = {"backends": backends, "deployment": None}
    if kind == "single":
        update["router"] = scenario.router.model_copy(update={"rules": {}, "backend_choice": "pooled"})
    return scenario.model_copy(update=update)


def answer_scenario(scenario: Scenario, answer: Evaluation) -> Scenario:
    """The scenario with the planned replica counts (:func:`fleet_at`)."""
    return fleet_at(scenario, answer.counts, answer.kind)


def plan_text(result: PlanResult) -> str:
    """The answer in words, what one replica is, the cost-vs-SLO frontier, every fleet simulated and
    every rejected candidate with its misses."""
    usd = f"$/h ({result.cost_basis})" if result.cost_basis else "$/h"
    headers = ["fleet", "kind", usd, "worst", "+/- one run", "meets"]

    def rows(evaluations: list[Evaluation]) -> list[list[object]]:
        return [[e.fleet, e.label, f"{e.usd_per_hour:,.2f}", format_ratio(e.worst),
                 f"{e.worst_error:.2g}" if math.isfinite(e.worst_error) else "-", "yes" if e.meets else "no"]
                for e in evaluations]  # fmt: skip

    lines = [f"plan: {result.explanation}"]
    if result.replica_shapes:
        lines.append(
            "one replica of each backend is " + "; ".join(f"{n}: {s}" for n, s in result.replica_shapes.items())
        )
    if result.no_slower:
        lines.append(
            "; ".join(f"{a} serves no slower than {' and '.join(bs)}" for a, bs in result.no_slower.items())
            + ": a miss also settles the fleets with such replicas swapped in, and a fleet is not simulated where a "
            "cheaper one serves no slower in its place"
        )
    if result.slower:
        lines.append(
            "; ".join(f"{x} is slower than {' and '.join(ys)}" for x, ys in result.slower.items())
            + " on every pass: more of it may make a fleet holding one of those miss (the router balances load, "
            "not speed), so a miss with more of it settles no such fleet below it"
        )
    lines += [
        "",
        "cost-vs-SLO frontier (worst = largest achieved/bound, <= 1 meets; +/- one run: its sampling error in "
        "its run, as if the requests or tasks were independent, a floor on how it moves from seed to seed):",
        format_table(headers, rows(result.frontier)),
        "",
        f"every fleet simulated ({len(result.evaluations)}, cheapest first"
        + (f"; {result.search['pruned']:,} more settled by bounds without a simulation" if result.search else "")
        + "):",
        format_table(headers, rows(sorted(result.evaluations, key=lambda e: (e.usd_per_hour, e.worst)))),
    ]
    rejected = sorted((e for e in result.evaluations if not e.meets), key=lambda e: e.usd_per_hour)
    if rejected:
        lines += ["", "rejected:"]
        lines.append(format_table(
            ["fleet", "kind", usd, "misses"],
            [[e.fleet, e.label, f"{e.usd_per_hour:,.2f}", "; ".join(m.describe() for m in e.misses)] for e in rejected],
        ))  # fmt: skip
    return "\n".join(lines)
