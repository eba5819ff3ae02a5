"""A plan's run stops once its task-time target misses: by proof from the end of the arrivals,
at a stated risk before it (:mod:`simulator.studies.settled`). A stopped run reaches the full
run's verdict; the shortest task the bound assumes is no longer than any task drawn.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import time

import numpy as np
import pytest
from pydantic import TypeAdapter

from simulator.config.distributions import Constant, Distribution, Exponential
from simulator.config.scenario import Scenario
from simulator.engine.build import OutOfTimeError, StopWhen
from simulator.runner import RunResult, simulate
from simulator.studies.planning import Planner
from simulator.studies.settled import (
    STOP_RISK,
    SettledMiss,
    _log_laplace_bound,
    miss_tasks_needed,
    task_time_floor_s,
)
from tests.engine.conftest import CATALOG
from tests.engine.test_plan_search import SMALL_AGENT, _agents_task_time


@pytest.mark.parametrize("percent", [50, 90, 95, 99])
def test_miss_tasks_needed_put_the_percentile_over_the_bound(percent: int) -> None:
    """``need(n)`` times over the bound among ``n`` put numpy's percentile over it; need never
    falls as ``n`` grows and grows by at most 1 a task (what SettledMiss's proof uses)."""
    needs = [miss_tasks_needed(percent, n) for n in range(1, 300)]
    assert all(b - a in (0, 1) for a, b in itertools.pairwise(needs))
    for n, need in enumerate(needs, start=1):
        assert 1 <= need <= n
        times = np.array([0.0] * (n - need) + [10.0 + 1e-9] * need)
        assert np.percentile(times, percent) > 10.0


@pytest.mark.parametrize("bound_s", ["14 s", "9 s", "30 s"])
def test_a_run_stopped_once_settled_misses_exactly_when_the_full_run_does_in_less_simulated_time(
    bound_s: str,
) -> None:
    """Candidate fleets of the agents case under three bounds, run to the end and with the stop rule
    (by proof after the arrivals, at a risk of 1e-6 before): stopped only when the full run misses
    (a miss by a little may not be settled before the end), and then before the full run's end,
    with a floor on the percentile over the bound and under the full run's; else the very same run."""
    s = _agents_task_time(bound_s)
    target = s.slo.targets[0]
    planner = Planner(s, CATALOG)
    stopped = 0
    for counts in [(1, 0), (2, 0), (3, 0), (4, 0), (0, 1), (0, 2), (0, 4), (1, 1), (2, 2)]:
        run = Scenario.model_validate_json(planner._run_keys(counts, "mixed")[0][1])
        full = simulate(run, CATALOG)
        rule = SettledMiss.of(run, CATALOG)
        assert rule is not None
        early = simulate(run, CATALOG, stop=rule.when())
        assert full.summary.tasks is not None and early.summary.tasks is not None
        misses = full.summary.tasks.task_time_s.p95 > target.bound
        if early.stopped:  # a miss settled (before any task ended, the summary has no p95 yet)
            stopped += 1
            assert rule.settled and misses and early.records.end_s < full.records.end_s, f"{counts}: {rule.settled}"
            assert target.bound < rule.settled[0]["at_least_s"] <= full.summary.tasks.task_time_s.p95  # its floor
        else:  # never stopped: the very same run
            assert json.dumps(early.summary.to_dict()) == json.dumps(full.summary.to_dict())
    assert stopped, "some fleet misses"


def test_a_fleet_whose_tasks_all_outlast_the_bound_stops_at_its_first_check() -> None:
    """Tasks of 80 s of tool time under a 30 s bound, arrivals for 60 s: no task ends before the
    arrivals do, and each agent can start at most one more task after 30 s (a task lasts at least
    the floor, over the 30 s left), so once enough first tasks run past the bound the miss is
    settled before the arrivals end, at the stated risk, of at most 48 tasks. The proof alone (as
    where a call may be refused) settles it at the first check after the arrivals end, all 24
    running tasks over, of at most 24. The full run misses."""
    slow = SMALL_AGENT | {
        "task": SMALL_AGENT["task"]
        | {"tool": {"kind": "code-execution", "latency_s": {"dist": "constant", "value": 20.0}}}
    }
    planner = Planner(_agents_task_time("30 s", slow), CATALOG)
    run = Scenario.model_validate_json(planner._run_keys((4, 4), "mixed")[0][1])
    assert run.run.duration is not None
    full = simulate(run, CATALOG)
    assert full.summary.tasks is not None and full.summary.tasks.task_time_s.p95 > 30.0
    for proof_only, at_most, risk, by_s in [(False, 48, STOP_RISK, 60.0), (True, 24, 0.0, 60.0 + 30.0 / 100)]:
        rule = SettledMiss.of(run, CATALOG)
        assert rule is not None and rule.floors_s
        if proof_only:
            rule.floors_s.clear()
        early = simulate(run, CATALOG, stop=rule.when())
        assert early.stopped and len(rule.settled) == 1 and rule.settled[0]["at_s"] < by_s
        assert rule.settled[0]["of_at_most"] == at_most
        assert rule.settled[0]["over"] >= miss_tasks_needed(95, at_most)
        assert rule.settled[0]["risk"] == risk and early.records.end_s < full.records.end_s


def _tool_sums(latency: dict[str, object], waits: int, tasks: int, seed: int = 7) -> np.ndarray:
    spec = TypeAdapter(Distribution).validate_python(latency)
    return spec.sample(np.random.default_rng(seed), tasks * waits).reshape(tasks, waits).sum(axis=1)


def test_the_laplace_bound_is_over_the_exact_transform() -> None:
    """``E[e^(-lambda X)]`` of an exponential is ``1 / (1 + lambda mu)``; the quantile-grid bound is
    above it at every ``lambda`` and close to it (within 1 %) where it matters (``lambda mu <= 10``)."""
    spec = Exponential(mean=4.0)
    lambdas = np.geomspace(1e-3, 1e2, 50) / spec.mean
    exact = -np.log1p(lambdas * spec.mean)
    bound = _log_laplace_bound(spec, lambdas)
    assert np.all(bound >= exact)
    assert np.all(np.exp(bound - exact)[lambdas * spec.mean <= 10] < 1.01)


@pytest.mark.parametrize(
    "latency",
    [{"dist": "lognormal", "median": 4.0, "sigma": 1.0}, {"dist": "exponential", "mean": 3.0},
     {"dist": "uniform", "low": 0.0, "high": 2.0}],
    ids=["lognormal", "exponential", "uniform"],
)  # fmt: skip
def test_no_task_drawn_is_shorter_than_the_floor_and_the_floor_is_not_trivial(latency: dict[str, object]) -> None:
    """The floor ``d`` holds ``P(task < d) <= risk / (N K)`` (about 4e-10 here): of 100,000 tasks of
    50 calls drawn, none has less tool time, and the floor is a useful bound (over a quarter of the
    mean tool time of a task: the sum of 49 waits concentrates)."""
    task = CATALOG.workload("coding-agent").task
    tool = task.tool.model_copy(update={"latency_s": TypeAdapter(Distribution).validate_python(latency)})
    task = task.model_copy(update={"tool": tool})
    floor_s = task_time_floor_s(task, agents=200, duration_s=1200.0)
    sums = _tool_sums(latency, 49, 100_000)
    assert floor_s < sums.min()
    assert floor_s > 0.25 * 49 * task.tool.latency_s.mean


def test_constant_tool_times_give_a_floor_just_under_their_sum_and_none_without_tools() -> None:
    """Five calls with 1 s tools between them take at least 4 s: the floor is the grid's largest
    point under it. Without tool time a task may be instant: no floor, no early stop."""
    run = _agents_task_time("14 s")
    load = run.workload_classes[0].load
    task = CATALOG.workload(load.workload).task  # type: ignore[union-attr]
    floor_s = task_time_floor_s(task, agents=24, duration_s=60.0)
    assert 0.9 * 4.0 <= floor_s < 4.0
    no_tools = task.tool.model_copy(update={"latency_s": Constant(value=0.0)})
    instant = task.model_copy(update={"tool": no_tools})
    assert task_time_floor_s(instant, agents=24, duration_s=60.0) == 0.0


def test_a_stop_before_the_arrivals_end_carries_its_risk_and_none_where_calls_may_be_refused() -> None:
    """Under a 9 s bound the agents' fleets of one A100 miss from the start: the rule settles the
    miss before the end of the arrivals, at the stated risk, and the full run misses. With a
    router budget (a call may be refused, so a task may end early) only the proof at the end applies."""
    planner = Planner(_agents_task_time("9 s"), CATALOG)
    run = Scenario.model_validate_json(planner._run_keys((0, 1), "mixed")[0][1])
    assert run.run.duration is not None
    rule = SettledMiss.of(run, CATALOG)
    assert rule is not None and rule.floors_s
    early = simulate(run, CATALOG, stop=rule.when())
    assert early.stopped and rule.settled[0]["at_s"] < run.run.duration and rule.settled[0]["risk"] == STOP_RISK
    full = simulate(run, CATALOG)
    assert full.summary.tasks is not None and full.summary.tasks.task_time_s.p95 > 9.0
    budgeted = run.model_copy(update={"router": run.router.model_copy(update={"budget_usd_per_hour": 1e6})})
    rule = SettledMiss.of(budgeted, CATALOG)
    assert rule is not None and not rule.floors_s and rule.when().from_s == run.run.duration


def test_a_deadline_abandons_a_run_and_one_not_reached_leaves_it_the_same_run() -> None:
    """A wall-clock deadline already past abandons the run (:class:`OutOfTimeError`, with or without a
    stop rule); one far ahead is looked at only, so the run, stopped by its rule or not, is the very
    same as without it."""
    planner = Planner(_agents_task_time("14 s"), CATALOG)
    for counts in [(1, 0), (2, 2)]:
        run = Scenario.model_validate_json(planner._run_keys(counts, "mixed")[0][1])
        rule = SettledMiss.of(run, CATALOG)
        assert rule is not None
        for stop in (StopWhen.at_deadline(time.time() - 1.0), dataclasses.replace(rule.when(), deadline=0.0)):
            with pytest.raises(OutOfTimeError):
                simulate(run, CATALOG, stop=stop)
        far = time.time() + 3600.0
        plain, ruled = simulate(run, CATALOG), simulate(run, CATALOG, stop=rule.when())
        assert _same(simulate(run, CATALOG, stop=StopWhen.at_deadline(far)), plain)
        again = SettledMiss.of(run, CATALOG)
        assert again is not None
        checked = simulate(run, CATALOG, stop=dataclasses.replace(again.when(), deadline=far))
        assert _same(checked, ruled) and checked.stopped == ruled.stopped and again.settled == rule.settled


def _same(a: RunResult, b: RunResult) -> bool:
    return json.dumps(a.summary.to_dict()) == json.dumps(b.summary.to_dict()) and a.records.end_s == b.records.end_s
