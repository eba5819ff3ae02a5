"""``plan.budget_kw``: no fleet the planner simulates or answers draws more than the site's power."""

from __future__ import annotations

import pytest

from simulator.plan.resolve import resolve
from simulator.studies.planning import plan_fleet
from simulator.studies.power_budget import replica_kw
from tests.engine.conftest import CATALOG
from tests.engine.test_planning import _capacity_per_replica, _gpu_pool

H100_KW = 0.7 * 1.3  # one H100 at 700 W, PUE 1.3 (the cost section's default)


def test_a_power_budget_bounds_every_candidate_and_can_leave_no_answer() -> None:
    """The load needs 3 replicas (test_planning); 2 kW holds only 2 uncapped H100 replicas."""
    base = _gpu_pool(2.5 * _capacity_per_replica())
    plan = resolve(base, CATALOG).backends[0]
    assert replica_kw(plan, base.cost.pue) == pytest.approx(H100_KW)
    limited = base.model_copy(update={"plan": base.plan.model_copy(update={"budget_kw": 2.0})})
    result = plan_fleet(limited, CATALOG)
    assert result.evaluations and all(e.counts[0] * H100_KW <= 2.0 for e in result.evaluations)
    assert result.answer is None
    roomy = base.model_copy(update={"plan": base.plan.model_copy(update={"budget_kw": 2.75})})
    answer = plan_fleet(roomy, CATALOG).answer
    assert answer is not None and answer.counts == (3,)
