"""The capacity planner: its answer meets the targets on fresh seeds, one replica fewer misses,
mixed fleets are weighed against single-architecture ones, and an unmeetable target is explained."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from simulator.config.scenario import Scenario
from simulator.plan.resolve import ScenarioError
from simulator.runner import simulate
from simulator.studies.planning import answer_scenario, plan_fleet, target_ratios
from tests.engine.conftest import CATALOG, scenario

H100_8B = {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-8b", "chips": 1}
CS3_8B = {"hardware": "cerebras-cs3", "model": "llama-3.1-8b"}
CAPPED = {"policy": "continuous", "max_batch_size": 4}
CONSTANT = {"input_tokens": {"dist": "constant", "value": 500}, "output_tokens": {"dist": "constant", "value": 200}}
TTFT_P99 = {"metric": "ttft_s", "stat": "p99", "max": "2 s"}
RUN = {"seed": 11, "duration": "90 s", "warmup": "15 s", "drain": False}


def _capacity_per_replica() -> float:
    one = scenario(deployment=H100_8B, scheduler=CAPPED, requests=CONSTANT,
                   load={"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": 1.0}}, run=RUN)  # fmt: skip
    return float(simulate(one, CATALOG).summary.capacity_requests_per_s)


def _gpu_pool(rate: float, targets: list[dict[str, Any]] | None = None) -> Scenario:
    return scenario(
        backends=[{"name": "gpu", "deployment": H100_8B, "scheduler": CAPPED}],
        router={"policy": "join-shortest-queue"}, requests=CONSTANT,
        load={"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": rate}},
        slo={"targets": [TTFT_P99] if targets is None else targets},
        plan={"max_replicas": {"gpu": 6}, "replications": 2}, run=RUN,
    )  # fmt: skip


def _meets(s: Scenario, seed: int) -> bool:
    run = s.run.model_copy(update={"seed": seed})
    summary = simulate(s.model_copy(update={"run": run}), CATALOG).summary
    return all(m.ratio <= 1.0 for m in target_ratios(summary, s.workload_classes))


def test_the_answer_meets_its_targets_on_fresh_seeds_and_one_replica_fewer_misses() -> None:
    """Offered load 2.5 replicas' capacity: 3 replicas run at rho ~ 0.83, 2 are overloaded (rho ~ 1.25)."""
    s = _gpu_pool(2.5 * _capacity_per_replica())
    result = plan_fleet(s, CATALOG)
    assert result.answer is not None and result.answer.counts == (3,)
    planned = answer_scenario(s, result.answer)
    assert all(_meets(planned, seed) for seed in (1000, 1001, 1002))
    fewer = answer_scenario(s, dataclasses.replace(result.answer, counts=(2,)))
    assert not any(_meets(fewer, seed) for seed in (1000, 1001))
    rejected = [e for e in result.evaluations if not e.meets]
    assert rejected and all(e.counts[0] < 3 and e.misses for e in rejected)
    assert all(e.usd_per_hour >= result.answer.usd_per_hour for e in result.evaluations if e.meets)


def test_a_mixed_fleet_is_chosen_only_when_it_is_cheaper_than_one_architecture() -> None:
    """Interactive users need > 1,000 tok/s (only the wafer); bulk fits on the wafer too, so one wafer wins."""
    classes = [
        {"name": "interactive", "load": {"kind": "closed", "users": 2}, "requests": CONSTANT,
         "slo": {"targets": [{"metric": "per_user_output_tok_s", "stat": "p50", "min": 1000}]}},
        {"name": "bulk", "load": {"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": 2.0}},
         "requests": CONSTANT, "slo": {"targets": [TTFT_P99]}},
    ]  # fmt: skip
    s = scenario(
        backends=[{"name": "wafer", "deployment": CS3_8B}, {"name": "gpu", "deployment": H100_8B}],
        router={"rules": {"interactive": ["wafer"], "bulk": ["gpu"]}}, classes=classes, load=None, requests=None,
        plan={"max_replicas": {"wafer": 1, "gpu": 2}, "replications": 1}, run=RUN, cost={"basis": "ownership"},
    )  # fmt: skip
    result = plan_fleet(s, CATALOG)
    assert result.best_single is not None and result.best_single.counts == (1, 0)
    gpu_alone = next(e for e in result.evaluations if e.counts == (0, 2))
    assert [m.klass for m in gpu_alone.misses] == ["interactive"]
    assert result.answer is result.best_single
    assert "no mixed fleet cheaper" in result.explanation


def test_a_target_no_backend_can_meet_says_which_backend_misses_and_by_how_much() -> None:
    s = _gpu_pool(1.0, targets=[{"metric": "per_user_output_tok_s", "stat": "p50", "min": 100_000}])
    result = plan_fleet(s, CATALOG)
    assert result.answer is None
    assert "6 x gpu alone" in result.explanation and "short" in result.explanation
    assert "p50 per_user_output_tok_s >= 1e+05 tok/s" in result.explanation


def test_planning_without_targets_is_refused() -> None:
    with pytest.raises(ScenarioError, match=r"no class has slo\.targets"):
        plan_fleet(_gpu_pool(1.0, targets=[]), CATALOG)


def test_a_zero_bound_is_described_without_dividing_by_it() -> None:
    from simulator.studies.planning import Miss

    miss = Miss("c", "p99 queueing_delay_s <= 0 s", 0.02, 0.0, float("inf"), True)
    assert miss.describe() == "c: p99 queueing_delay_s <= 0 s: got 0.02"
