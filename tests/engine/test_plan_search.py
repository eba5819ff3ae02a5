"""The pruned plan search returns the exhaustive search's answer, with fewer simulations.

The exhaustive search simulates every candidate (each backend alone at 1..max replicas, every
mixed count vector) and takes the cheapest that meets; the planner prunes by cost, by the
capacity bound and by known misses, and bisects, on runs stopped as soon as a task-time target
provably misses (:class:`~simulator.planning.SettledMiss`); the exhaustive search runs every
candidate to its end. The cases are small (8B model, 60-90 s runs) so each takes seconds.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import numpy as np
import pytest

from simulator.config.scenario import Scenario
from simulator.execution import Executor, Runs
from simulator.limits import Limits
from simulator.planning import Evaluation, Planner, SettledMiss, agent_call_demand, miss_tasks_needed, summary_run
from simulator.resolve import ScenarioError
from simulator.runner import simulate
from tests.engine.conftest import CATALOG, scenario

H100_8B = {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-8b", "chips": 1}
A100_8B = {"hardware": "nvidia-a100-sxm", "model": "llama-3.1-8b", "chips": 1}
CS3_8B = {"hardware": "cerebras-cs3", "model": "llama-3.1-8b"}
CAPPED = {"policy": "continuous", "max_batch_size": 4}
CONSTANT = {"input_tokens": {"dist": "constant", "value": 500}, "output_tokens": {"dist": "constant", "value": 200}}
RUN = {"seed": 11, "duration": "90 s", "warmup": "15 s", "drain": False}
SMALL_AGENT = {
    "schema_version": 1, "id": "small-agent", "name": "Small agent", "description": "five short calls",
    "sources": {"assumed": "a test workload"},
    "task": {"steps": {"dist": "constant", "value": 5},
             "system_prompt_tokens": {"dist": "constant", "value": 400},
             "first_input_tokens": {"dist": "constant", "value": 200},
             "step_input_tokens": {"dist": "constant", "value": 100},
             "output_tokens": {"dist": "constant", "value": 150},
             "tool": {"kind": "code-execution", "latency_s": {"dist": "constant", "value": 1.0}}},
}  # fmt: skip


def _two_gpus_open() -> Scenario:
    """Open load on H100s or A100s (capped batches): a queueing question, no capacity bound."""
    return scenario(
        backends=[{"name": "h100", "deployment": H100_8B, "scheduler": CAPPED},
                  {"name": "a100", "deployment": A100_8B, "scheduler": CAPPED}],
        router={"policy": "join-shortest-queue"}, requests=CONSTANT,
        load={"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": 6.0}},
        slo={"targets": [{"metric": "ttft_s", "stat": "p99", "max": "2 s"}]},
        plan={"max_replicas": {"h100": 3, "a100": 3}, "replications": 1}, run=RUN,
    )  # fmt: skip


def _agents_task_time(bound: str = "14 s") -> Scenario:
    """Closed-loop agents with a p95 task-time target: the capacity bound applies."""
    return scenario(
        backends=[{"name": "h100", "deployment": H100_8B, "scheduler": CAPPED},
                  {"name": "a100", "deployment": A100_8B, "scheduler": CAPPED}],
        router={"policy": "least-outstanding-tokens"},
        load={"kind": "agents", "workload": SMALL_AGENT, "agents": 24}, requests=None,
        slo={"targets": [{"metric": "task_time_s", "stat": "p95", "max": bound}]},
        plan={"max_replicas": {"h100": 4, "a100": 4}, "replications": 1},
        run={"seed": 5, "duration": "60 s", "warmup": "0 s", "drain": True},
    )  # fmt: skip


def _routed_classes() -> Scenario:
    """Three backends, two classes with routing rules (the wafer for speed), one cost basis."""
    classes = [
        {"name": "interactive", "load": {"kind": "closed", "users": 2}, "requests": CONSTANT,
         "slo": {"targets": [{"metric": "per_user_output_tok_s", "stat": "p50", "min": 1000}]}},
        {"name": "bulk", "load": {"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": 4.0}},
         "requests": CONSTANT, "slo": {"targets": [{"metric": "ttft_s", "stat": "p99", "max": "2 s"}]}},
    ]  # fmt: skip
    return scenario(
        backends=[{"name": "wafer", "deployment": CS3_8B},
                  {"name": "h100", "deployment": H100_8B, "scheduler": CAPPED},
                  {"name": "a100", "deployment": A100_8B, "scheduler": CAPPED}],
        router={"rules": {"interactive": ["wafer"], "bulk": ["h100", "a100"]}}, classes=classes, load=None,
        requests=None, plan={"max_replicas": {"wafer": 1, "h100": 2, "a100": 2}, "replications": 1}, run=RUN,
        cost={"basis": "ownership"},
    )  # fmt: skip


def exhaustive(planner: Planner) -> tuple[Evaluation | None, list[Evaluation]]:
    """Every candidate simulated; the cheapest that meets (a mixed fleet only when strictly cheaper)."""
    searched = [i for i, metered in enumerate(planner.metered) if not metered]
    singles = [planner.evaluate(planner._vector({i: n}), "single")
               for i in searched for n in range(1, planner.limits[i][1] + 1)]  # fmt: skip
    best = min((e for e in singles if e.meets), key=lambda e: e.usd_per_hour, default=None)
    mixed = []
    for counts in itertools.product(*(range(planner.limits[i][1] + 1) for i in searched)):
        served = all(
            any(counts[planner.names.index(n)] for n in allowed) for allowed in planner.scenario.router.rules.values()
        )
        if sum(1 for n in counts if n) >= 2 and served:
            mixed.append(planner.evaluate(planner._vector(dict(zip(searched, counts, strict=True))), "mixed"))
    for e in sorted((e for e in mixed if e.meets), key=lambda e: e.usd_per_hour):
        if best is None or e.usd_per_hour < best.usd_per_hour:
            best = e
    return best, singles + mixed


@pytest.mark.parametrize("make", [_two_gpus_open, _agents_task_time, _routed_classes])
def test_the_pruned_search_returns_the_exhaustive_answer_with_fewer_simulations(make: Any) -> None:
    s = make()
    everything = Planner(s, CATALOG, runs=Runs(Executor(), summary_run, (CATALOG, Limits(), False), None))
    answer, evaluated = exhaustive(everything)  # every run to its end
    tallies: list[tuple[int, int, int, int]] = []
    pruned = Planner(s, CATALOG)  # its own runs, stopped once a miss is settled
    pruned.progress = lambda _: tallies.append(pruned.tally())
    result = pruned.search()
    assert answer is not None, "each case has a feasible fleet"
    assert result.answer is not None and (result.answer.counts, result.answer.kind) == (answer.counts, answer.kind)
    assert result.answer.usd_per_hour == answer.usd_per_hour
    assert len(result.evaluations) < len(evaluated)
    # progress: 0 <= simulated <= total and simulated + pruned + left = total, at every step
    assert tallies
    for total, simulated, cut, left in [*tallies, pruned.tally()]:
        assert 0 <= simulated <= total and cut >= 0 and left >= 0 and simulated + cut + left == total
    # the search's assumption, checked on every candidate: one more replica of a backend never turns
    # a fleet that meets into one that misses (same kind of run)
    met = {(e.counts, e.kind): e.meets for e in evaluated}
    for (counts, kind), meets in met.items():
        for i in range(len(counts)):
            more = ((*counts[:i], counts[i] + 1, *counts[i + 1 :]), kind)
            if meets and more in met:
                assert met[more], f"{counts} meets but {more[0]} misses"
    # the capacity bound is a true bound: no candidate it rejects meets
    assert all(not e.meets for e in evaluated if not pruned.could_meet(e.counts))


def test_the_capacity_bound_prunes_agents_fleets_and_counts_their_demand() -> None:
    """24 agents, 5 calls a task, p95 within 14 s: at least 0.95 x 24 x 5 / 14 calls/s."""
    s = _agents_task_time()
    assert agent_call_demand(s.workload_classes, CATALOG) == pytest.approx(0.95 * 24 * 5 / 14)
    planner = Planner(s, CATALOG)
    assert not planner.could_meet((0, 0))
    assert planner.could_meet((4, 4))


def test_plan_ranks_every_fleet_on_one_cost_basis() -> None:
    """A CS-3 has no rental price: beside rented GPUs, auto pricing moves every backend to ownership;
    bases named per backend that differ are refused."""
    auto = _routed_classes().model_copy(update={"cost": _routed_classes().cost.model_copy(update={"basis": "auto"})})
    planner = Planner(auto, CATALOG)
    assert planner.cost_basis == "ownership" and planner.scenario.cost.basis == "ownership"
    bases = ["ownership", "rental", "rental"]
    fleet = [b.model_copy(update={"cost_basis": basis}) for b, basis in zip(auto.fleet, bases, strict=True)]
    with pytest.raises(ScenarioError, match="one cost basis"):
        Planner(auto.model_copy(update={"backends": fleet}), CATALOG)


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
    """Candidate fleets of the agents case under three bounds, run to the end and with the stop rule:
    the same verdict; stopped only when the full run misses (a miss by a little may not be settled
    before the end), and then before the full run's end; else the very same run."""
    s = _agents_task_time(bound_s)
    target = s.slo.targets[0]
    planner = Planner(s, CATALOG)
    stopped = 0
    for counts in [(1, 0), (2, 0), (3, 0), (4, 0), (0, 1), (0, 2), (0, 4), (1, 1), (2, 2)]:
        run = Scenario.model_validate_json(planner._run_keys(counts, "mixed")[0][1])
        full = simulate(run, CATALOG)
        rule = SettledMiss.of(run)
        assert rule is not None
        early = simulate(run, CATALOG, stop=rule.when())
        assert full.summary.tasks is not None and early.summary.tasks is not None
        misses = full.summary.tasks.task_time_s.p95 > target.bound
        assert (early.summary.tasks.task_time_s.p95 > target.bound) == misses, f"{counts}: {rule.settled}"
        if early.stopped:
            stopped += 1
            assert misses and early.records.end_s < full.records.end_s
        else:  # never stopped: the very same run
            assert json.dumps(early.summary.to_dict()) == json.dumps(full.summary.to_dict())
    assert stopped, "some fleet misses"
