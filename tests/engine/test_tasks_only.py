"""A run that records only its tasks (``build(..., details=False)``, :func:`simulate_tasks`) is the
same simulation: nothing the recorder keeps feeds back into it. So its task records, its end and its
stop are the full run's to the last bit, whatever the engine does on the way (agents with tools, KV
tiers, several classes with priorities, speculative decoding, API limits that refuse and retry,
failures and N+1, agents through an outage, a power cap, split prefill and decode), while it keeps
no request row, level, token count, inter-token gap or work total. A plan's runs record only their
tasks exactly where every target bounds task times and no backend bills per token."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simulator.api import load_scenario
from simulator.config.scenario import Scenario
from simulator.engine.build import build
from simulator.plan.limits import Limits
from simulator.plan.resolve import resolve
from simulator.results.summary import TaskSummary
from simulator.runner import simulate, simulate_tasks
from simulator.studies.planning import Planner, document_parts, summary_run
from tests.engine.conftest import CATALOG, scenario
from tests.engine.test_plan_search import CS3_8B, _agents_task_time

ROOT = Path(__file__).resolve().parents[2]

#: One of two H100s down from 60 s to 150 s, its requests retried on the other.
OUTAGE = {"backend": "nvidia-h100-sxm", "replica": 1, "at": "60 s", "down_for": "90 s"}
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "agents, KV tiers": ("agents-kv-offload.yaml", {"run.duration": "240 s"}),
    "classes, speculative": ("mixed-classes.yaml", {"run.duration": "200 s", "run.warmup": "0 s", "run.drain": True,
                                                    "deployment.speculative.draft": "eagle",
                                                    "deployment.speculative.tokens_proposed": 3}),
    "API limits": ("api-rate-limits.yaml", {"run.duration": "240 s"}),
    "failures, N+1": ("n-plus-one.yaml", {"run.duration": "90 s"}),
    "agents, an outage": ("agents-kv-offload.yaml", {"run.duration": "240 s", "replicas": 2, "scheduler.kv_tiers": None,
                                                     "failures": {"random": False, "outages": [OUTAGE]}}),
    "power cap": ("power-capped.yaml", {"run.duration": "90 s"}),
    "split fleet": ("plan-split-fleet.yaml", {"run.duration": "60 s"}),
}  # fmt: skip


def _scenario(name: str) -> Scenario:
    file, overrides = CASES[name]
    return load_scenario(ROOT / "scenarios" / file, overrides, CATALOG)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_run_recording_only_its_tasks_is_the_same_run(name: str) -> None:
    scenario = _scenario(name)
    full, lean = build(resolve(scenario, CATALOG)), build(resolve(scenario, CATALOG), details=False)
    full_end, lean_end = full.run(), lean.run()
    assert lean_end == full_end
    kept, only = full.records(full_end), lean.records(lean_end)
    assert kept.tasks.keys() == only.tasks.keys()
    for column, values in kept.tasks.items():
        np.testing.assert_array_equal(only.tasks[column], values, err_msg=column)
    assert full.factory.count == lean.factory.count and full.factory.count > 0  # the same calls were made
    assert kept.request_count > 0 and only.request_count == 0  # ... and none recorded
    assert not only.itl_counts.any() and kept.itl_counts.any()
    assert all(t.iterations == 0 and t.busy_s == 0.0 for t in only.totals)
    assert all(t.busy_s > 0.0 for t in kept.totals)
    assert only.in_system.maximum() == 0.0 and all(level.maximum() == 0.0 for level in only.batch)
    assert all(counter.in_window(0.0, lean_end) == (0.0, 0.0) for counter in only.tokens)


def _doc(tasks: dict[str, TaskSummary | None]) -> str:
    """Task summaries as text (NaN compares equal to NaN there)."""
    return json.dumps({name: t.to_dict() if t else None for name, t in tasks.items()}, sort_keys=True)


@pytest.mark.parametrize("name", ["agents, KV tiers", "classes, speculative"])
def test_simulate_tasks_gives_the_task_summaries_simulate_does(name: str) -> None:
    """Each class's tasks as the full summary holds them (``tasks`` with one class,
    ``classes.<name>.tasks`` with several), number for number."""
    scenario = _scenario(name)
    result = simulate(scenario, CATALOG)
    tasks, stopped = simulate_tasks(scenario, CATALOG)
    assert not stopped and any(t is not None and t.tasks_completed > 0 for t in tasks.values())
    classes, first = result.summary.classes, scenario.workload_classes[0].name
    assert _doc(tasks) == _doc({n: c.tasks for n, c in classes.items()} if classes else {first: result.summary.tasks})


@pytest.mark.parametrize("bound_s", ["9 s", "14 s"])
def test_a_plan_run_recording_only_its_tasks_stops_and_judges_as_the_full_one(bound_s: str) -> None:
    """The stop rule reads only the tasks: recorded alone or with the rest, a plan's run stops at
    the same check with the same count over the bound, with the same tasks and target ratios."""
    s = _agents_task_time(bound_s)
    planner = Planner(s, CATALOG)
    assert planner.tasks_only
    stopped = 0
    for counts in [(1, 0), (2, 0), (0, 1), (1, 1), (2, 2)]:
        text = planner._run_keys(counts, "mixed")[0][1]
        full = summary_run(text, CATALOG, Limits(), True, None, False)
        lean = summary_run(text, CATALOG, Limits(), True, None, True)
        assert "summary" in full and "tasks" in lean and "summary" not in lean
        assert lean["settled"] == full["settled"]
        stopped += bool(lean["settled"])
        parts = [document_parts(d, s.workload_classes) for d in (full, lean)]
        assert _doc({n: t for n, (_, t) in parts[0].items()}) == _doc({n: t for n, (_, t) in parts[1].items()})
        assert [m.ratio for m in planner._run_misses(lean)] == [m.ratio for m in planner._run_misses(full)]
    assert stopped > 0, "no fleet's miss was settled: the case no longer tests the stop"


def test_a_plan_records_only_tasks_where_nothing_else_decides() -> None:
    """Task-time targets only and no per-token bill: tasks only. A latency target, or a backend
    billed per token (its API spend is read from the run's backends), needs the whole summary."""
    tasks = _agents_task_time()
    assert Planner(tasks, CATALOG).tasks_only
    ttft = tasks.slo.targets[0].model_copy(update={"metric": "ttft_s", "stat": "p99"})
    latency = tasks.model_copy(update={"slo": tasks.slo.model_copy(update={"targets": [*tasks.slo.targets, ttft]})})
    assert not Planner(latency, CATALOG).tasks_only
    fleet = tasks.model_dump(exclude_none=True, by_alias=True)["backends"]
    cloud = {"name": "cloud", "deployment": CS3_8B, "cost_basis": "api"}
    planner = Planner(
        scenario(
            **(tasks.model_dump(exclude_none=True, by_alias=True) | {"backends": [*fleet, cloud], "requests": None})
        ),
        CATALOG,
    )
    assert any(planner.metered) and not planner.tasks_only
