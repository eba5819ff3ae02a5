"""N+1 sizing: a fleet planned to tolerate one failure still meets its targets when the run kills its
largest replica mid-way; the fleet planned without tolerance does not."""

from __future__ import annotations

import dataclasses

from simulator.config.scenario import Scenario
from simulator.studies.planning import answer_scenario, plan_fleet
from simulator.studies.tolerance import answer_availability, largest_replicas
from tests.engine.conftest import CATALOG
from tests.engine.test_planning import RUN, _capacity_per_replica, _gpu_pool, _meets


def _killed_mid_run(s: Scenario) -> Scenario:
    """The fleet's last (largest) replica fails half-way through the arrivals and never returns."""
    last = s.fleet[0].replicas - 1
    outage = {"backend": "gpu", "replica": last, "at": "45 s", "down_for": "1000 s"}
    return Scenario.model_validate(s.model_dump(by_alias=True) | {"failures": {"random": False, "outages": [outage]}})


def test_plan_tolerating_one_failure_meets_its_targets_when_the_largest_replica_dies() -> None:
    """Offered load 2.5 replicas' capacity: without tolerance the plan is 3 replicas (test_planning);
    with one failure tolerated, 4, and its 3 survivors run at rho ~ 0.83 after the kill. The
    3-replica fleet killed the same way runs 2 survivors at rho ~ 1.25 and misses."""
    assert RUN["duration"] == "90 s"
    plain = _gpu_pool(2.5 * _capacity_per_replica())
    tolerant = plain.model_copy(update={"slo": plain.slo.model_copy(update={"tolerate_failures": 1})})
    result = plan_fleet(tolerant, CATALOG)
    assert result.answer is not None and result.answer.counts == (4,)
    planned = answer_scenario(tolerant, result.answer)
    assert all(_meets(_killed_mid_run(planned), seed) for seed in (1000, 1001))
    untolerant = answer_scenario(plain, dataclasses.replace(result.answer, counts=(3,)))
    assert not _meets(_killed_mid_run(untolerant), 1000)
    found = answer_availability(planned, CATALOG)
    assert found is not None and 0.99 < found["p_at_most_k_down"] <= 1.0


def test_the_largest_replicas_are_the_most_expensive_never_metered_ones() -> None:
    assert largest_replicas([2, 3, 1], [5.0, 9.0, 20.0], [False, False, True], 2) == [(1, 2), (1, 1)]
    assert largest_replicas([2, 1], [5.0, 9.0], [False, False], 3) == [(1, 0), (0, 1), (0, 0)]
