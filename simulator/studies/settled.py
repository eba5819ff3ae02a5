"""Stopping a plan's run once a task-time target misses: settled by proof, or at a stated risk.

A plan simulates many fleets that miss; a run whose miss is already decided need not go on.
:class:`SettledMiss` decides it for ``max`` targets on a percentile ``pQ`` of ``task_time_s``
of a class of ``N`` closed-loop agents (``agents: N``) in a run with arrivals up to
``run.duration = D``, from the tasks so far: ``F`` finished that count (top level, started after
the warm-up, not failed), ``a`` of them above the bound ``T``; ``R`` still running, ``l`` of them
already past ``T``. Whatever the rest of the run does, at least ``a + l`` of its counted tasks end
above ``T`` (when nothing can drop a running task from the count: no ``router.budget_usd_per_hour``
to refuse a call, no ``run.horizon`` to cut it; else ``a``), and :func:`miss_tasks_needed` never
falls as the count grows. So ``a + l >= need(M)`` settles ``pQ > T`` once ``M`` bounds the count
the run will end with:

- **From the end of the arrivals** (``t >= D``) no task starts, so ``M = F + R``: a proof, the
  run misses exactly when the full run does.
- **Before it**, every agent may still start tasks, and their number is bounded only by how short
  a task can be. A task of ``S`` calls waits for its tools after each call but the last (a step
  waits for the slowest of its parallel tool calls, at least one draw of ``tool.latency_s``; a
  fan-out step waits for its sub-agents instead), so it lasts at least the sum of ``S - 1`` (``S -
  2`` with a fan-out) independent tool latencies. :func:`task_time_floor_s` finds the longest
  ``d`` such that ``N K(d) P(task < d) <= risk`` with ``K(d) = 1 + floor(D / d)``, bounding
  ``P(task < d)`` by the lower tail of ``S`` (its quantile) plus a Chernoff bound on the sum,
  ``P(sum_m X <= d) <= min_{lambda > 0} e^(lambda d) E[e^(-lambda X)]^m``, with ``E[e^(-lambda X)]``
  bounded from above on a grid of the latency's quantiles (``e^(-lambda F^-1(u))`` falls with
  ``u``: the left sum over the grid is over the integral). Then with probability at least
  ``1 - risk`` (:data:`STOP_RISK`, over the tool latencies the workload draws) each agent's first
  ``K`` tasks each take at least ``d``: no agent starts more than ``K`` tasks before ``D``, and
  from time ``t`` at most ``1 + floor((D - t) / d)``. So ``M = F + R + N (1 + floor((D - t) /
  d))`` settles the miss with that confidence, from ``warm-up + T`` (no task is above ``T``
  before). Used only where no call can be refused (no API limits on a backend, no failures, no
  budget, no horizon, and no task failed so far), so every task runs all its calls.

The percentile the full run reports is then at least ``L``, the ``need(M)``-th longest of the
times known above ``T`` (finished tasks' times, running tasks' ages): numpy's ``pQ`` of the ``n <=
M`` tasks is at least their ``(n - floor(Q (n - 1) / 100))``-th longest, and that rank is at most
``need(M)``. So a settled miss states ``pQ >= L > T`` (``at_least_s``), a floor on its ratio.

Nothing settles a *meets* (a running task may still end above ``T``), nor targets on other
metrics or stats. A time counts as above only when over ``T (1 + OVER_TOLERANCE)``, so the summary's own
division cannot round it back to the bound. Checks run every :data:`SETTLE_CHECKS_PER_BOUND`-th
of the tightest bound of simulated time; nothing is scheduled for them, so a run never stopped
is the same run as without them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.special import logsumexp

from simulator.config.distributions import Distribution
from simulator.config.loading import Catalog
from simulator.config.scenario import Scenario, SLOTarget, WorkloadClass
from simulator.config.workload import AgentsLoad, AgentTaskSpec
from simulator.engine.build import StopWhen
from simulator.engine.recorder import Recorder
from simulator.records.store import TASK_COLUMNS

#: Checks of :class:`SettledMiss` per task-time bound of simulated time (every 6 s under a 10-minute bound).
SETTLE_CHECKS_PER_BOUND = 100
#: The most a miss settled before the end of the arrivals may be wrong: the chance, over the tool
#: latencies a run draws, that some agent's task is shorter than :func:`task_time_floor_s` says.
STOP_RISK = 1e-6

#: A time is over a bound ``T`` only above ``T (1 + OVER_TOLERANCE)``: the summary's own rounding
#: of a time at the bound never settles a miss.
OVER_TOLERANCE = 1e-9

#: Points of the quantile grid that bounds ``E[e^(-lambda X)]``, and of the ``lambda`` grid.
_QUANTILES, _LAMBDAS = 4096, 241
#: The ``lambda`` grid spans these multiples of ``1 / E[X]`` (log-spaced): the Chernoff optimum for
#: a sum of waits lies where ``lambda E[X]`` is of order one, far inside it.
_LAMBDA_SPAN = (1e-3, 1e3)
#: Candidate floors: the mean tool time of a task times ``ratio^i`` for ``i = 1 .. points - 1``
#: (each 10 % under the last, down to about 1e-18 of the mean), the longest that passes taken.
_FLOOR_RATIO, _FLOOR_POINTS = 0.9, 400
_START, _END, _FAILED, _PARENT, _CLASS = (
    TASK_COLUMNS.index(c) for c in ("start_s", "end_s", "failed", "parent", "class")
)


def miss_tasks_needed(percent: int, tasks: int) -> int:
    """The fewest of ``tasks`` task times above a bound that put their ``p<percent>`` above it.

    The percentile interpolates (:func:`numpy.percentile`, linear) between order statistics
    ``x_lo`` and ``x_lo+1``, ``lo = floor(h)``, ``h = percent / 100 x (tasks - 1)``; it is above the
    bound when ``x_lo`` is, that is when ``tasks - lo`` times are. Taken at ``lo = ceil(h) - 1``
    (one lower when ``h`` is whole, so a rounding of ``h`` in floating point cannot matter; 0 when
    ``h`` is 0). It never falls as ``tasks`` grows, and grows by at most 1 a task."""
    lo = max(-(-percent * (tasks - 1) // 100) - 1, 0)
    return tasks - lo


@dataclass
class _TaskTimeTarget:
    """One ``pQ task_time_s <= T`` target of a class of closed-loop agents, and its tasks so far."""

    klass: int
    name: str
    target: str
    percent: int
    bound_s: float
    measured: int = 0  # tasks that count (top level, started after the warm-up, not failed), finished
    over_s: list[float] = field(default_factory=list)  # of those, the times of the ones above the bound


def _closed_loop_agents(klass: WorkloadClass) -> bool:
    """Whether the class is a closed loop of agents (``agents: N``)."""
    return isinstance(klass.load, AgentsLoad) and klass.load.agents is not None


def _settleable(target: SLOTarget) -> bool:
    """Whether :class:`SettledMiss` can settle a miss of the target: a positive ``max`` bound on a
    percentile of ``task_time_s``."""
    return target.metric == "task_time_s" and target.upper and target.stat.startswith("p") and target.bound > 0


def _log_laplace_bound(latency: Distribution, lambdas: np.ndarray) -> np.ndarray:
    """``log E[e^(-lambda X)]`` bounded from above at each ``lambda``: the mean of ``e^(-lambda
    F^-1(u))`` over the left ends ``u = i / n`` of ``n`` equal slices of ``[0, 1)``."""
    left = latency.quantile(np.arange(_QUANTILES) / _QUANTILES)
    bound: np.ndarray = logsumexp(-np.outer(lambdas, left), axis=1) - math.log(_QUANTILES)
    return bound


def _fewest_tool_waits(task: AgentTaskSpec, probability: float) -> int:
    """Tool waits a task has, except with chance ``probability``: ``S - 1`` (``S - 2`` with a
    fan-out) at ``S = max(1, floor(F_S^-1(probability)))``, since ``P(draw < F^-1(u)) <= u`` and
    rounding never falls."""
    steps = max(1, math.floor(float(task.steps.quantile(np.array([probability]))[0])))
    return max(0, steps - 1 - (task.fanout is not None))


def task_time_floor_s(task: AgentTaskSpec, agents: int, duration_s: float, risk: float = STOP_RISK) -> float:
    """The longest ``d`` (s) on a geometric grid below the mean tool time of a task such that
    ``agents x K x P(task < d) <= risk``, ``K = 1 + floor(duration_s / d)``: every agent's first
    ``K`` tasks last at least ``d``, except with chance ``risk``; 0 when none does (a task may be
    instant: no tool time)."""
    latency = task.tool.latency_s
    mean_wait = latency.mean * max(task.steps.mean - 1, 0)
    if not mean_wait > 0 or not math.isfinite(mean_wait):
        return 0.0
    lambdas = np.geomspace(*_LAMBDA_SPAN, _LAMBDAS) / latency.mean
    log_laplace = _log_laplace_bound(latency, lambdas)
    for floor_s in mean_wait * _FLOOR_RATIO ** np.arange(1, _FLOOR_POINTS):
        budget = risk / (agents * (1 + math.floor(duration_s / floor_s)))
        waits = _fewest_tool_waits(task, budget / 2)
        if waits and np.min(lambdas * floor_s + waits * log_laplace) <= math.log(budget / 2):
            return float(floor_s)
    return 0.0


@dataclass
class SettledMiss:
    """The stop rule of a plan's run (the module docstring): ``settled`` (after a stop) names the
    targets decided, with ``over`` of ``at most`` tasks, and the ``risk`` of a statistical stop
    (0: a proof)."""

    targets: list[_TaskTimeTarget]
    warmup_s: float
    from_s: float  # the end of run.duration
    running_count: bool  # whether every running task is sure to be counted (no budget, no horizon)
    floors_s: dict[int, tuple[int, float]]  # class -> (agents, task floor s) where a stop may come early
    read: int = 0  # floats of the recorder's flat task records read so far
    failed: bool = False  # a task failed (a call refused): no statistical stop from then on
    settled: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, scenario: Scenario, catalog: Catalog) -> SettledMiss | None:
        """The stop condition for a run of ``scenario``; None when no target qualifies."""
        duration_s = scenario.run.duration
        if duration_s is None:
            return None
        targets = [
            _TaskTimeTarget(k, klass.name, t.describe(), int(t.stat[1:]), t.bound)
            for k, klass in enumerate(scenario.workload_classes)
            if _closed_loop_agents(klass)
            for t in klass.slo.targets
            if _settleable(t)
        ]
        if not targets:
            return None
        counted = scenario.router.budget_usd_per_hour is None and scenario.run.horizon is None
        refusals = scenario.failures is not None or any(b.api is not None for b in scenario.fleet)
        floors: dict[int, tuple[int, float]] = {}
        for k in {t.klass for t in targets} if counted and not refusals else set():
            load = scenario.workload_classes[k].load
            assert isinstance(load, AgentsLoad) and load.agents is not None
            floor_s = task_time_floor_s(catalog.workload(load.workload).task, load.agents, duration_s)
            if floor_s > 0:
                floors[k] = (load.agents, floor_s)
        return cls(targets, scenario.run.warmup, duration_s, counted, floors)

    def when(self) -> StopWhen:
        """The engine's stop condition: this rule, asked from ``from_s`` on, or from the warm-up plus
        the tightest bound where a statistical stop may come earlier."""
        tightest_s = min(t.bound_s for t in self.targets)
        start_s = min(self.from_s, self.warmup_s + tightest_s) if self.floors_s else self.from_s
        return StopWhen(start_s, tightest_s / SETTLE_CHECKS_PER_BOUND, self)

    def __call__(self, recorder: Recorder, now_s: float) -> bool:
        self._count_finished(recorder.tasks)
        running = [(start_s, klass) for start_s, klass in recorder.running.values() if start_s >= self.warmup_s]
        for t in self.targets:
            self._settle(t, running, now_s)
        return bool(self.settled)

    def _count_finished(self, tasks: Sequence[float]) -> None:
        """Count the tasks finished since the last call (flat records from :attr:`read` on) that
        count: top level, started after the warm-up, not failed; and those above their bound."""
        for row in range(self.read, len(tasks), len(TASK_COLUMNS)):
            self.failed = self.failed or bool(tasks[row + _FAILED])
            if tasks[row + _PARENT] != -1 or tasks[row + _FAILED] or tasks[row + _START] < self.warmup_s:
                continue
            for t in self.targets:
                if t.klass == tasks[row + _CLASS]:
                    t.measured += 1
                    took_s = tasks[row + _END] - tasks[row + _START]
                    if took_s > t.bound_s * (1 + OVER_TOLERANCE):
                        t.over_s.append(took_s)
        self.read = len(tasks)

    def _still_to_start(self, klass: int, now_s: float) -> int | None:
        """The most tasks of ``klass`` that may still start (module docstring): 0 from the end of the
        arrivals, ``N (1 + floor((D - t) / d))`` before it at risk :data:`STOP_RISK`; None when
        nothing bounds them."""
        if now_s >= self.from_s:
            return 0
        if klass not in self.floors_s or self.failed:
            return None
        agents, floor_s = self.floors_s[klass]
        return agents * (1 + math.floor((self.from_s - now_s) / floor_s))

    def _settle(self, t: _TaskTimeTarget, running: list[tuple[float, int]], now_s: float) -> None:
        """Record target ``t`` as settled when its tasks above the bound, finished (and running,
        when each is sure to count), reach :func:`miss_tasks_needed` of the most that can count,
        with ``at_least_s``, the ``need``-th longest of their times so far (module docstring)."""
        to_start = self._still_to_start(t.klass, now_s)
        if to_start is None:
            return
        ages = [now_s - start_s for start_s, klass in running if klass == t.klass]
        late = [age for age in ages if age > t.bound_s * (1 + OVER_TOLERANCE)] if self.running_count else []
        most = t.measured + len(ages) + to_start
        need = miss_tasks_needed(t.percent, most)
        if len(t.over_s) + len(late) >= need:
            at_least_s = sorted(t.over_s + late, reverse=True)[need - 1]
            self.settled.append({
                "class": t.name, "target": t.target, "over": len(t.over_s) + len(late), "of_at_most": most,
                "at_s": now_s, "risk": STOP_RISK if to_start else 0.0, "at_least_s": at_least_s,
            })  # fmt: skip
