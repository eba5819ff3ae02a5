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
- **Before it**, every agent may still start tasks. A task waits for its tools after every call
  but the last, so how many an agent can start in the ``D - t`` left is bounded by sums of tool
  latencies it has yet to draw: those its task under way has still to begin (the engine counts
  them down, :class:`~simulator.engine.recorder.RunningTask`) and those of whole tasks after it.
  :class:`~simulator.studies.task_starts.TaskStarts` bounds the agents' total by Chernoff's bound
  over their independent streams, except with chance ``STOP_RISK / C`` at each of the ``C``
  checks before ``D``, so ``M = F + R +`` that bound settles the miss except with chance
  :data:`STOP_RISK` over the tool latencies the workload draws, from ``warm-up + T`` (no task is
  above ``T`` before). Used only where no call can be refused (no API limits on a backend, no
  failures, no budget, no horizon, and no task failed so far), so every task runs all its calls.

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

from simulator.config.loading import Catalog
from simulator.config.scenario import Scenario, SLOTarget, WorkloadClass
from simulator.config.workload import AgentsLoad
from simulator.engine.build import StopWhen
from simulator.engine.recorder import Recorder, RunningTask
from simulator.records.store import TASK_COLUMNS
from simulator.studies.task_starts import TaskStarts

#: Checks of :class:`SettledMiss` per task-time bound of simulated time (every 6 s under a 10-minute bound).
SETTLE_CHECKS_PER_BOUND = 100
#: The most a miss settled before the end of the arrivals may be wrong: the chance, over the tool
#: latencies a run draws, that the agents start more tasks than :class:`TaskStarts` says at some check.
STOP_RISK = 1e-6

#: A time is over a bound ``T`` only above ``T (1 + OVER_TOLERANCE)``: the summary's own rounding
#: of a time at the bound never settles a miss.
OVER_TOLERANCE = 1e-9

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


@dataclass
class SettledMiss:
    """The stop rule of a plan's run (the module docstring): ``settled`` (after a stop) names the
    targets decided, with ``over`` of ``at most`` tasks, and the ``risk`` of a statistical stop
    (0: a proof)."""

    targets: list[_TaskTimeTarget]
    warmup_s: float
    from_s: float  # the end of run.duration
    running_count: bool  # whether every running task is sure to be counted (no budget, no horizon)
    starts: dict[int, TaskStarts]  # class -> its bound on the tasks still to start, where a stop may come early
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
        start_s, every_s = _checks(scenario.run.warmup, duration_s, min(t.bound_s for t in targets))
        risk = STOP_RISK / (math.floor((duration_s - start_s) / every_s) + 1)  # at each check before the end
        starts: dict[int, TaskStarts] = {}
        for k in {t.klass for t in targets} if counted and not refusals else set():
            load = scenario.workload_classes[k].load
            assert isinstance(load, AgentsLoad) and load.agents is not None
            bound = TaskStarts.of(catalog.workload(load.workload).task, load.agents, risk)
            if bound is not None:
                starts[k] = bound
        return cls(targets, scenario.run.warmup, duration_s, counted, starts)

    def when(self) -> StopWhen:
        """The engine's stop condition: this rule, asked from ``from_s`` on, or from the warm-up plus
        the tightest bound where a statistical stop may come earlier."""
        start_s, every_s = _checks(self.warmup_s, self.from_s, min(t.bound_s for t in self.targets))
        return StopWhen(start_s if self.starts else self.from_s, every_s, self)

    def __call__(self, recorder: Recorder, now_s: float) -> bool:
        self._count_finished(recorder.tasks)
        running = list(recorder.running.values())
        to_start: dict[int, int | None] = {}  # by class, worked out once a check
        for t in self.targets:
            self._settle(t, running, now_s, to_start)
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

    def _still_to_start(self, klass: int, now_s: float, running: list[RunningTask]) -> int | None:
        """The most tasks of ``klass`` that may still start (module docstring): 0 from the end of the
        arrivals, :meth:`TaskStarts.most` before it; None when nothing bounds them."""
        if now_s >= self.from_s:
            return 0
        if klass not in self.starts or self.failed:
            return None
        waits = [task.waits_left for task in running if task.klass == klass]
        return self.starts[klass].most(self.from_s - now_s, waits)

    def _settle(self, t: _TaskTimeTarget, running: list[RunningTask], now_s: float,
                to_start: dict[int, int | None]) -> None:  # fmt: skip
        """Record target ``t`` as settled when its tasks above the bound, finished (and running,
        when each is sure to count), reach :func:`miss_tasks_needed` of the most that can count,
        with ``at_least_s``, the ``need``-th longest of their times so far (module docstring)."""
        ages = [now_s - task.start_s for task in running if task.klass == t.klass and task.start_s >= self.warmup_s]
        late = [age for age in ages if age > t.bound_s * (1 + OVER_TOLERANCE)] if self.running_count else []
        over = len(t.over_s) + len(late)
        if not over or over < miss_tasks_needed(t.percent, t.measured + len(ages)):
            return  # none over the bound, or too few even if no task started any more
        if t.klass not in to_start:
            to_start[t.klass] = self._still_to_start(t.klass, now_s, running)
        starting = to_start[t.klass]
        if starting is None:
            return
        most = t.measured + len(ages) + starting
        need = miss_tasks_needed(t.percent, most)
        if over >= need:
            at_least_s = sorted(t.over_s + late, reverse=True)[need - 1]
            self.settled.append({
                "class": t.name, "target": t.target, "over": over, "of_at_most": most,
                "at_s": now_s, "risk": STOP_RISK if now_s < self.from_s else 0.0, "at_least_s": at_least_s,
            })  # fmt: skip


def _checks(warmup_s: float, end_s: float, tightest_s: float) -> tuple[float, float]:
    """When a run's checks may first settle a miss before ``end_s`` (the warm-up plus the tightest
    bound: no task is over it before) and how often they come (:data:`SETTLE_CHECKS_PER_BOUND`)."""
    return min(end_s, warmup_s + tightest_s), tightest_s / SETTLE_CHECKS_PER_BOUND
