"""A plan's run stops once its task-time target misses: by proof from the end of the arrivals,
at a stated risk before it (:mod:`simulator.studies.settled`). A stopped run reaches the full
run's verdict (the bound on the tasks still to start is tested in ``tests/unit/test_task_starts.py``).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import time

import numpy as np
import pytest

from simulator.config.scenario import Scenario
from simulator.engine.build import OutOfTimeError, StopWhen
from simulator.engine.recorder import Recorder
from simulator.runner import RunResult, simulate
from simulator.studies.planning import Planner
from simulator.studies.settled import STOP_RISK, SettledMiss, miss_tasks_needed
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
    """Tasks of four 20 s tool waits under a 30 s bound, arrivals for 60 s: no task ends before the
    arrivals do, and past 30 s each agent's first task has two waits (40 s) still to begin, so no
    agent can start another before the arrivals end: once the first tasks run past the bound (the
    check after 30 s) the miss is settled, at the stated risk, of at most the 24 running. The
    proof alone (as where a call may be refused) settles it at the first check after the
    arrivals end, all 24 running tasks over, of at most 24. The full run misses."""
    slow = SMALL_AGENT | {
        "task": SMALL_AGENT["task"]
        | {"tool": {"kind": "code-execution", "latency_s": {"dist": "constant", "value": 20.0}}}
    }
    planner = Planner(_agents_task_time("30 s", slow), CATALOG)
    run = Scenario.model_validate_json(planner._run_keys((4, 4), "mixed")[0][1])
    assert run.run.duration is not None
    full = simulate(run, CATALOG)
    assert full.summary.tasks is not None and full.summary.tasks.task_time_s.p95 > 30.0
    for proof_only, risk, by_s in [(False, STOP_RISK, 30.0 + 2 * 30.0 / 100), (True, 0.0, 60.0 + 30.0 / 100)]:
        rule = SettledMiss.of(run, CATALOG)
        assert rule is not None and rule.starts
        if proof_only:
            rule.starts.clear()
        early = simulate(run, CATALOG, stop=rule.when())
        assert early.stopped and len(rule.settled) == 1 and rule.settled[0]["at_s"] < by_s
        assert rule.settled[0]["of_at_most"] == 24
        assert rule.settled[0]["over"] >= miss_tasks_needed(95, 24)
        assert rule.settled[0]["risk"] == risk and early.records.end_s < full.records.end_s


def test_a_check_with_no_task_over_the_bound_settles_nothing() -> None:
    """At the end of the arrivals with no task finished, running or still to start (a run whose
    agents all began before its warm-up, say), no task is over the bound: nothing is settled, as a
    percentile of no task is no miss (it used to index an empty list)."""
    run = Scenario.model_validate_json(Planner(_agents_task_time("14 s"), CATALOG)._run_keys((1, 0), "mixed")[0][1])
    rule = SettledMiss.of(run, CATALOG)
    assert rule is not None
    assert rule(Recorder(1), rule.from_s) is False and rule.settled == []
    assert rule(Recorder(1), rule.from_s - 1.0) is False and rule.settled == []


def test_a_stop_before_the_arrivals_end_carries_its_risk_and_none_where_calls_may_be_refused() -> None:
    """Under a 9 s bound the agents' fleets of one A100 miss from the start: the rule settles the
    miss before the end of the arrivals, at the stated risk, and the full run misses. With a
    router budget (a call may be refused, so a task may end early) only the proof at the end applies."""
    planner = Planner(_agents_task_time("9 s"), CATALOG)
    run = Scenario.model_validate_json(planner._run_keys((0, 1), "mixed")[0][1])
    assert run.run.duration is not None
    rule = SettledMiss.of(run, CATALOG)
    assert rule is not None and rule.starts
    early = simulate(run, CATALOG, stop=rule.when())
    assert early.stopped and rule.settled[0]["at_s"] < run.run.duration and rule.settled[0]["risk"] == STOP_RISK
    full = simulate(run, CATALOG)
    assert full.summary.tasks is not None and full.summary.tasks.task_time_s.p95 > 9.0
    budgeted = run.model_copy(update={"router": run.router.model_copy(update={"budget_usd_per_hour": 1e6})})
    rule = SettledMiss.of(budgeted, CATALOG)
    assert rule is not None and not rule.starts and rule.when().from_s == run.run.duration


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
