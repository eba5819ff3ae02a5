"""The bound on the tasks closed-loop agents may still start (:mod:`simulator.studies.task_starts`):
exceeded no more often than its stated chance when the agents' tool latencies are drawn, exact
where they are constant, and none where tools take no time."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import TypeAdapter

from simulator.config.distributions import Constant, Distribution, Exponential
from simulator.config.workload import AgentTaskSpec
from simulator.studies.task_starts import TaskStarts, log_laplace_bound
from tests.engine.conftest import CATALOG


def _task(latency: dict[str, object], **changes: object) -> AgentTaskSpec:
    """The coding agent's task (50 calls) with ``latency`` for its tools and ``changes`` made."""
    task = CATALOG.workload("coding-agent").task
    tool = task.tool.model_copy(update={"latency_s": TypeAdapter(Distribution).validate_python(latency)})
    return task.model_copy(update={"tool": tool} | changes)


def _starts_drawn(task: AgentTaskSpec, waits_left: list[int], agents: int, window_s: float, runs: int,
                  seed: int = 5) -> np.ndarray:  # fmt: skip
    """The tasks ``agents`` start in ``window_s`` with nothing but their tool waits taking time, in
    each of ``runs`` draws: an agent with ``w`` waits left (0 for those past ``waits_left``) starts
    its k-th task after ``w`` latencies and the waits of ``k - 1`` tasks of ``S`` drawn calls."""
    rng = np.random.default_rng(seed)
    latency = task.tool.latency_s
    started = np.zeros(runs, dtype=int)
    for agent in range(agents):
        waits = waits_left[agent] if agent < len(waits_left) else 0
        clock = latency.sample(rng, runs * waits).reshape(runs, waits).sum(axis=1) if waits else np.zeros(runs)
        alive = clock < window_s
        while alive.any():
            started += alive
            steps = np.maximum(1, np.round(task.steps.sample(rng, runs))).astype(int)
            whole = np.array([task.tool_waits(s) for s in steps])
            running = np.r_[0.0, np.cumsum(latency.sample(rng, int(whole.sum())))]
            ends = np.cumsum(whole)
            clock = clock + running[ends] - running[ends - whole]  # each run's task: its own draws
            alive &= clock < window_s
    return started


@pytest.mark.parametrize(
    ("latency", "steps"),
    [({"dist": "lognormal", "median": 4.0, "sigma": 1.0}, {"dist": "constant", "value": 50}),
     ({"dist": "exponential", "mean": 3.0}, {"dist": "lognormal", "median": 12, "sigma": 0.5}),
     ({"dist": "uniform", "low": 0.0, "high": 2.0}, {"dist": "uniform", "low": 2, "high": 9})],
    ids=["lognormal-50-calls", "exponential-lognormal-calls", "uniform-uniform-calls"],
)  # fmt: skip
def test_the_agents_start_more_tasks_than_the_bound_no_more_often_than_its_chance(
    latency: dict[str, object], steps: dict[str, object]
) -> None:
    """30 agents half-way through tasks (and 10 between tasks), a window of about two mean tasks:
    over 4,000 draws of their tool latencies the count passes the bound at chance 5 % in at most
    5 % of them, and the bound is no looser than 1.6 x the count's 99.9th percentile."""
    task = _task(latency, steps=TypeAdapter(Distribution).validate_python(steps))
    mean_task_s = task.tool.latency_s.mean * task.tool_waits(max(1, round(task.steps.mean)))
    waits_left = [w % 40 for w in range(0, 300, 10)]
    bound = TaskStarts.of(task, agents=40, risk=0.05)
    assert bound is not None
    most = bound.most(2.0 * mean_task_s, waits_left)
    assert most is not None
    drawn = _starts_drawn(task, waits_left, agents=40, window_s=2.0 * mean_task_s, runs=4000)
    assert np.mean(drawn > most) <= 0.05
    assert most <= 1.6 * np.quantile(drawn, 0.999)


def test_an_agent_part_way_through_its_task_is_counted_with_what_it_has_left() -> None:
    """The coding agent (49 waits of 6.6 s on average a task) with 80 s left of the arrivals:
    agents with 45 waits ahead (297 s of tools on average) start nothing more, except at chance
    1e-8, and agents between tasks start one each (no two tasks fit), where a rule knowing only
    the shortest task would let every agent start one."""
    bound = TaskStarts.of(_task({"dist": "lognormal", "median": 4.0, "sigma": 1.0}), agents=200, risk=1e-8)
    assert bound is not None
    assert bound.most(80.0, [45] * 200) == 0
    assert bound.most(80.0, [45] * 100) == 100
    assert bound.most(0.0, []) == 0


def test_constant_tool_times_give_the_exact_count_and_none_without_tools() -> None:
    """Five calls with 1 s tools between them: an agent between tasks starts one at 0, 4 and 8 s
    within 9.5 s, so 24 agents start 72; one with 2 waits left starts at 2 and 6 s, 2. Without tool
    time a task may be instant: no bound."""
    task = _task({"dist": "constant", "value": 1.0}, steps=Constant(value=5.0))
    bound = TaskStarts.of(task, agents=24, risk=1e-6)
    assert bound is not None
    assert bound.most(9.5, []) == 72
    assert bound.most(9.5, [2]) == 23 * 3 + 2
    instant = _task({"dist": "constant", "value": 0.0})
    assert TaskStarts.of(instant, agents=24, risk=1e-6) is None


def test_the_laplace_bound_is_over_the_exact_transform() -> None:
    """``E[e^(-lambda X)]`` of an exponential is ``1 / (1 + lambda mu)``; the quantile-grid bound is
    above it at every ``lambda`` and close to it (within 1 %) where it matters (``lambda mu <= 10``)."""
    spec = Exponential(mean=4.0)
    lambdas = np.geomspace(1e-3, 1e2, 50) / spec.mean
    exact = -np.log1p(lambdas * spec.mean)
    bound = log_laplace_bound(spec, lambdas)
    assert np.all(bound >= exact)
    assert np.all(np.exp(bound - exact)[lambdas * spec.mean <= 10] < 1.01)


def test_a_bound_is_built_once_for_equal_inputs_and_anew_for_others() -> None:
    """The bound depends on the task, the agents and the risk alone: asked again with an equal task
    (built anew) it is the one kept, and for other agents, another risk or another latency a new one."""
    lognormal = {"dist": "lognormal", "median": 4.0, "sigma": 1.0}
    first = TaskStarts.of(_task(lognormal), 20, 1e-6)
    assert first is not None and TaskStarts.of(_task(lognormal), 20, 1e-6) is first
    others = [TaskStarts.of(_task(lognormal), 21, 1e-6), TaskStarts.of(_task(lognormal), 20, 1e-5),
              TaskStarts.of(_task({**lognormal, "median": 5.0}), 20, 1e-6)]  # fmt: skip
    assert all(other is not None and other is not first for other in others)
    assert TaskStarts.of(_task(lognormal), 20, 1e-5) is others[1]
    assert others[0].most(60.0, [3] * 21) != first.most(60.0, [3] * 20)  # type: ignore[union-attr]
