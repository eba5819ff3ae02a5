"""Agent tasks: chained calls compound exactly, prefix caching only helps, task-level closed-loop law."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest

from simulator.config.workload import WorkloadSpec
from tests.engine.conftest import run, service_time_s
from tests.engine.test_queueing_laws import COST

TOOL_S = 0.75
BLOCK = 16


def chain(steps: int, **task: Any) -> dict[str, Any]:
    spec = {
        "steps": {"dist": "constant", "value": steps},
        "system_prompt_tokens": {"dist": "constant", "value": 500},
        "first_input_tokens": {"dist": "constant", "value": 100},
        "step_input_tokens": {"dist": "constant", "value": 200},
        "output_tokens": {"dist": "constant", "value": 40},
        "tool": {"kind": "code-execution", "latency_s": {"dist": "constant", "value": TOOL_S}},
    } | task
    return spec


@pytest.fixture
def workload() -> dict[str, WorkloadSpec]:
    """Test workloads by id, given to the scenario inline (not from the catalog)."""
    return {}


def _register(registry: dict[str, WorkloadSpec], wid: str, task: dict[str, Any]) -> None:
    registry[wid] = WorkloadSpec.model_validate(
        {"id": wid, "name": wid, "description": "test", "sources": {"t": "test"}, "task": task}
    )


def _agents(spec: WorkloadSpec, agents: int, caching: bool, **run_parts: Any) -> Any:
    return run(
        load={"kind": "agents", "workload": spec, "agents": agents},
        requests=None,
        prefix_caching=caching,
        run={"seed": 4, "max_requests": 10_000} | run_parts,
    )


def test_a_chain_takes_the_sum_of_its_calls_plus_the_tool_time(workload: dict) -> None:
    """k sequential calls, no contention, no cache: T_task = sum_k S(context_k, n) + (k - 1) T_tool."""
    steps = 6
    _register(workload, "chain", chain(steps))
    result = _agents(workload["chain"], 1, caching=False, max_requests=steps)
    contexts = [600 + k * (40 + 200) for k in range(steps)]
    expected = sum(service_time_s(COST, c, 40) for c in contexts) + (steps - 1) * TOOL_S
    tasks = result.records.tasks
    assert tasks["end_s"][0] - tasks["start_s"][0] == pytest.approx(expected, rel=1e-9)
    assert result.records.requests["input_tokens"].tolist() == contexts
    assert tasks["tool_s"][0] == pytest.approx((steps - 1) * TOOL_S, rel=1e-12)


def test_prefix_caching_reuses_exactly_the_previous_calls_full_blocks(workload: dict) -> None:
    """Call k reuses min(floor((P_{k-1} + n - 1) / b), floor((P_k - 1) / b)) blocks of its own past."""
    steps = 6
    _register(workload, "chain", chain(steps))
    r = _agents(workload["chain"], 1, caching=True, max_requests=steps).records.requests
    prompts = r["input_tokens"].astype(int)
    expected = [0] + [
        min((p_prev + 40 - 1) // BLOCK, (p - 1) // BLOCK) * BLOCK for p_prev, p in itertools.pairwise(prompts)
    ]
    assert r["cached_tokens"].tolist() == expected


def test_prefix_caching_never_increases_a_calls_ttft(workload: dict) -> None:
    _register(workload, "noisy", chain(12, step_input_tokens={"dist": "lognormal", "median": 300, "sigma": 1.0},
                                       output_tokens={"dist": "lognormal", "median": 60, "sigma": 0.8}))  # fmt: skip
    cold = _agents(workload["noisy"], 1, caching=False, max_requests=12).records.requests
    warm = _agents(workload["noisy"], 1, caching=True, max_requests=12).records.requests
    assert cold["input_tokens"].tolist() == warm["input_tokens"].tolist()  # same draws either way
    assert np.all(warm["first_token_s"] - warm["arrival_s"] <= cold["first_token_s"] - cold["arrival_s"] + 1e-12)
    assert warm["cached_tokens"][1:].min() > 0


def test_task_level_interactive_response_time_law(workload: dict) -> None:
    """N agents thinking Z between tasks: mean task time R = N / X - Z (X in tasks per second)."""
    _register(workload, "short", chain(4, output_tokens={"dist": "uniform", "low": 10, "high": 80}))
    agents, think = 8, 3.0
    result = run(
        load={"kind": "agents", "workload": workload["short"], "agents": agents,
              "think_time_s": {"dist": "constant", "value": think}},
        requests=None,
        run={"seed": 9, "duration": "1500 s", "warmup": "100 s", "drain": False},
    )  # fmt: skip
    tasks = result.summary.tasks
    assert tasks is not None
    throughput = tasks.tasks_per_hour / 3600.0
    assert tasks.task_time_s.mean == pytest.approx(agents / throughput - think, rel=0.04)


def test_agents_ramping_in_join_evenly_then_obey_the_response_time_law(workload: dict) -> None:
    """``ramp_s = W``: agent i starts its first task at ``i W / N + Z`` (a constant think ``Z`` first);
    once all have joined (measured from ``W`` on) the response-time law ``R = N / X - Z`` holds."""
    _register(workload, "short", chain(4, output_tokens={"dist": "uniform", "low": 10, "high": 80}))
    agents, think, ramp = 8, 3.0, 40.0
    result = run(
        load={"kind": "agents", "workload": workload["short"], "agents": agents, "ramp_s": f"{ramp} s",
              "think_time_s": {"dist": "constant", "value": think}},
        requests=None,
        run={"seed": 9, "duration": "1500 s", "warmup": f"{ramp} s", "drain": False},
    )  # fmt: skip
    tasks = result.records.tasks
    first_start = {int(a): float(tasks["start_s"][tasks["agent"] == a].min()) for a in np.unique(tasks["agent"])}
    assert sorted(first_start) == list(range(agents))
    for agent, start_s in first_start.items():
        assert start_s == pytest.approx(agent * ramp / agents + think, abs=1e-9)
    summary = result.summary.tasks
    assert summary is not None
    throughput = summary.tasks_per_hour / 3600.0
    assert summary.task_time_s.mean == pytest.approx(agents / throughput - think, rel=0.04)


def test_truncation_starts_a_new_session(workload: dict) -> None:
    """At the context limit the prompt is capped and the prefix cache misses once."""
    _register(workload, "long", chain(10, context={"policy": "truncate", "max_tokens": 1200}))
    r = _agents(workload["long"], 1, caching=True, max_requests=10).records.requests
    assert r["input_tokens"].max() + 40 <= 1200
    misses = np.flatnonzero(r["cached_tokens"][1:] == 0)
    assert misses.size >= 1


def test_bundled_workloads_load(catalog: Any) -> None:
    for wid in catalog.workload_ids():
        spec = catalog.workload(wid)
        assert spec.sources and spec.description and math.isfinite(spec.task.output_tokens.mean)


def test_a_fan_out_waits_for_its_slowest_branch(workload: dict) -> None:
    """The lead's call after a fan-out starts when the last sub-agent ends; only the lead is a task."""
    sub = chain(1) | {"steps": {"dist": "uniform", "low": 1, "high": 6}}
    fanout = {"after_step": 1, "branches": {"dist": "constant", "value": 4}, "subagent": sub,
              "result_tokens": {"dist": "constant", "value": 100}}  # fmt: skip
    _register(workload, "lead", chain(3, fanout=fanout))
    result = _agents(workload["lead"], 1, caching=True, max_requests=10_000)
    t, r = result.records.tasks, result.records.requests
    lead = t["parent"] == -1
    first_lead = int(t["task"][lead][0])
    branches = t["parent"] == first_lead
    assert branches.sum() == 4 and len(set(t["calls"][branches])) > 1  # branches of different lengths
    lead_calls = np.sort(r["arrival_s"][r["task"] == first_lead])
    assert lead_calls[1] == pytest.approx(t["end_s"][branches].max(), rel=1e-12)
    assert t["subagent_s"][lead][0] == pytest.approx(t["end_s"][branches].max() - t["start_s"][branches].min())
    summary = result.summary.tasks
    assert summary is not None
    assert summary.tasks_completed == lead.sum() and summary.subagent_tasks == (~lead).sum()
    # the join appends every branch's findings: the lead's next prompt grew by its output + 4 x 100
    lead_prompts = r["input_tokens"][r["task"] == first_lead]
    assert lead_prompts[1] - lead_prompts[0] == 40 + 4 * 100


@pytest.mark.parametrize(
    "context",
    [{"policy": "compact", "max_tokens": 2000, "compact_to_tokens": 700}, {"policy": "truncate", "max_tokens": 1500},
     {"policy": "truncate"}],
)  # fmt: skip
def test_the_mean_call_is_the_mean_prompt_the_engine_sends(workload: dict, context: dict[str, Any]) -> None:
    """With every draw constant a task's calls follow its mean path, so the closed form's mean call
    (:meth:`AgentTaskSpec.mean_call`) is the engine's mean prompt exactly, compactions included."""
    steps = 11
    _register(workload, "path", chain(steps, context=context))
    spec = workload["path"]
    r = _agents(spec, 1, caching=True, max_requests=steps).records.requests
    prompt, output = spec.task.mean_call(1 << 30)  # the policy's own limit applies; the replica's is far above
    assert r["input_tokens"].size == steps and prompt == pytest.approx(r["input_tokens"].mean(), rel=1e-12)
    assert output == r["output_tokens"].mean() == 40
    assert prompt > 600  # the first call's prompt is the task's shortest: the context only grows between limits
