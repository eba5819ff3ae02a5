"""Failures and repairs: the observed availability of a replica is MTBF / (MTBF + MTTR), every
request is accounted for, a run is the same for its seed, a fleet that never fails runs as
without failures, and a straggler's steps take its slowdown times as long."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from simulator.analytic.availability import at_most_down, more_than_down, replica_reliability
from simulator.config.hardware import HardwareProfile
from simulator.plan.resolve import resolve
from simulator.runner import simulate
from tests.engine.conftest import CATALOG, scenario

H100 = CATALOG.hardware("nvidia-h100-sxm")
LENGTHS = {"input_tokens": {"dist": "constant", "value": 512}, "output_tokens": {"dist": "constant", "value": 256}}


def _hardware(mtbf_s: float, restart_s: float) -> HardwareProfile:
    """The H100 failing every ``mtbf_s`` per chip on average, back ``restart_s`` (plus its reload) later."""
    assert H100.reliability is not None
    reliability = H100.reliability.model_copy(update={
        "mtbf_hours": H100.reliability.mtbf_hours.model_copy(update={"value": mtbf_s / 3600.0}),
        "restart": H100.reliability.restart.model_copy(update={"value": restart_s}),
    })  # fmt: skip
    return H100.model_copy(update={"reliability": reliability})


def _fleet(hardware: Any, replicas: int, rate: float, run: dict[str, Any], rtt: str = "0 s", **failures: Any) -> Any:
    return scenario(
        backends=[{"name": "gpu", "replicas": replicas, "network_rtt": rtt,
                   "deployment": {"hardware": hardware, "model": "llama-3.1-8b", "chips": 1}}],
        router={"policy": "join-shortest-queue"}, requests=LENGTHS,
        load={"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": rate}},
        run=run, failures=failures or None,
    )  # fmt: skip


def test_observed_availability_is_mtbf_over_mtbf_plus_mttr() -> None:
    """An alternating renewal process: up ~ Exp(mean m), down d (fixed). The long-run up share is
    m / (m + d), and over a time T its variance is about m^2 d^2 / ((m + d)^3 T) per replica
    (exponential up times, no variance in d); the mean of R replicas is within 4 sigma."""
    s = _fleet(_hardware(100.0, 20.0), 4, 0.05, {"seed": 3, "duration": "20000 s", "drain": False}, random=True)
    reliability = replica_reliability(resolve(s, CATALOG).backends[0].deployment)
    assert reliability is not None
    m, d = reliability.mtbf_s, reliability.mttr_s
    assert m == pytest.approx(100.0) and d > 20.0  # the restart plus the weights' reload over the host link
    failures = simulate(s, CATALOG).summary.failures
    assert failures is not None
    expected = m / (m + d)
    sigma = math.sqrt(m**2 * d**2 / ((m + d) ** 3 * 20000.0) / 4)
    assert failures.expected_availability == pytest.approx(expected)
    assert abs(failures.availability - expected) < 4 * sigma
    assert failures.failures > 4 * 20000.0 / (m + d) * 0.8  # about one per cycle of each replica


@pytest.mark.parametrize(("on_failure", "rtt"), [("retry", "0 s"), ("fail", "0 s"), ("retry", "40 ms")])
def test_every_request_is_completed_failed_or_in_flight(on_failure: str, rtt: str) -> None:
    """Arrived = completed + failed + in flight, with requests lost mid-stream; a drained run leaves
    none in flight, and retried requests complete (also when each retry crosses the network again)."""
    run = {"seed": 5, "duration": "150 s", "max_requests": 400}
    s = _fleet(_hardware(20.0, 5.0), 3, 4.0, run, rtt, on_failure=on_failure)
    summary = simulate(s, CATALOG).summary
    failures = summary.failures
    assert failures is not None and failures.failures > 0
    assert summary.requests_completed + summary.requests_failed + summary.requests_in_flight == 400
    assert summary.requests_in_flight == 0
    if on_failure == "retry":
        assert failures.requests_retried > 0
    else:
        assert failures.requests_retried == 0 and failures.requests_failed > 0
    assert summary.requests_failed == failures.requests_failed  # nothing else fails here


def test_a_run_with_failures_is_the_same_for_its_seed() -> None:
    run = {"seed": 9, "duration": "100 s", "max_requests": 200}
    s = _fleet(_hardware(15.0, 3.0), 2, 4.0, run, stragglers={"probability": 0.5, "slowdown": 1.5})
    first, second = (json.dumps(simulate(s, CATALOG).summary.to_dict(), sort_keys=True) for _ in range(2))
    assert first == second


def test_a_fleet_that_never_fails_runs_as_without_failures() -> None:
    """Failures on, none drawn before the end (the H100's MTBF is years): every number but the
    failures section is the run without failures."""
    run = {"seed": 2, "duration": "60 s", "max_requests": 200}
    plain = simulate(_fleet("nvidia-h100-sxm", 2, 3.0, run), CATALOG).summary.to_dict()
    on = simulate(_fleet("nvidia-h100-sxm", 2, 3.0, run, random=True), CATALOG).summary.to_dict()
    assert on.pop("failures")["failures"] == 0
    assert json.dumps(on, sort_keys=True, default=str) == json.dumps(plain, sort_keys=True, default=str)


def test_a_stragglers_steps_take_its_slowdown_times_as_long() -> None:
    """One user on one replica: every step of the straggler takes 2x, so each request's TPOT doubles."""
    common = {"load": {"kind": "closed", "users": 1}, "run": {"seed": 1, "max_requests": 5, "duration": "1000 s"}}
    plain = simulate(scenario(**common), CATALOG).summary
    slow = simulate(scenario(**common, failures={"random": False, "stragglers": {"probability": 1.0, "slowdown": 2.0}}),
                    CATALOG).summary  # fmt: skip
    assert slow.tpot_s.mean == pytest.approx(2.0 * plain.tpot_s.mean, rel=1e-9)


def test_a_planned_outage_takes_its_replica_out_of_routing() -> None:
    """Replica 0 down over [20 s, 70 s] of a 100 s run: it is up half the window, and serves nothing while down."""
    run = {"seed": 4, "duration": "100 s", "drain": False}
    s = _fleet("nvidia-h100-sxm", 2, 2.0, run, random=False,
               outages=[{"backend": "gpu", "replica": 0, "at": "20 s", "down_for": "50 s"}])  # fmt: skip
    failures = simulate(s, CATALOG).summary.failures
    assert failures is not None and failures.failures == 1
    assert failures.replica_availability == pytest.approx([0.5, 1.0])


def test_at_most_k_down_is_the_binomial_sum() -> None:
    a = 0.9
    assert at_most_down([a] * 3, 0) == pytest.approx(a**3)
    assert at_most_down([a] * 3, 1) == pytest.approx(a**3 + 3 * a**2 * (1 - a))
    assert at_most_down([a] * 3, 3) == pytest.approx(1.0)


def test_more_than_k_down_is_the_tail_kept_to_its_last_digits() -> None:
    a = 0.9
    assert more_than_down([a] * 3, 1) == pytest.approx(1.0 - at_most_down([a] * 3, 1))
    assert more_than_down([1.0 - 1e-9] * 2, 1) == pytest.approx(1e-18)  # 1 - P would round to 0


def test_an_outage_of_a_replica_the_backend_lacks_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"failures.outages.0.replica: gpu has 2 replica\(s\)"):
        _fleet("nvidia-h100-sxm", 2, 1.0, {"seed": 1, "duration": "10 s"}, random=False,
               outages=[{"backend": "gpu", "replica": 2, "at": "1 s"}])  # fmt: skip
