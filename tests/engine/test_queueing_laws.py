"""Queueing theory the engine must reproduce, set up through configuration only."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.analytic.layouts import deploy
from simulator.analytic.step_time import StepCostModel
from simulator.config.deployment import DeploymentSpec
from tests.engine.conftest import CATALOG, SMALL, run, service_time_s, service_times_by_output

COST = StepCostModel(deploy(CATALOG, DeploymentSpec(**SMALL)))
BATCH_ONE = {"policy": "continuous", "max_batch_size": 1}
#: Replications for the statistical laws: enough that the finite-run bias of a queue started
#: empty (~1 % here) stays well inside 3 standard errors at rho = 0.5.
REPLICATIONS = 20
REQUESTS_PER_REPLICATION = 2500


def test_exact_trace_of_two_users_on_a_batch_one_server() -> None:
    """A arrives at 0 and is served first; B waits for A and starts the instant A finishes."""
    result = run(scheduler=BATCH_ONE, load={"kind": "closed", "users": 2}, run={"seed": 0, "max_requests": 2})
    r = result.records.requests
    service = service_time_s(COST, 64, 16)
    first_token = COST.pass_time([64.0], [0.0]).total_s
    assert r["arrival_s"].tolist() == [0.0, 0.0]
    assert r["first_token_s"] == pytest.approx([first_token, service + first_token], rel=1e-12)
    assert r["done_s"] == pytest.approx([service, 2 * service], rel=1e-12)
    assert r["admitted_s"] == pytest.approx([0.0, service], rel=1e-12, abs=1e-15)


def test_waits_equal_the_lindley_recursion() -> None:
    """W_1 = 0, W_{n+1} = max(0, W_n + S_n - A_{n+1}) for FCFS batch 1, the same arrivals and services."""
    result = run(
        scheduler=BATCH_ONE,
        load={"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": 1.2}},
        requests={
            "input_tokens": {"dist": "uniform", "low": 16, "high": 512},
            "output_tokens": {"dist": "uniform", "low": 2, "high": 64},
        },
        run={"seed": 5, "max_requests": 400},
    )
    r = result.records.requests
    services = [
        service_time_s(COST, int(i), int(o)) for i, o in zip(r["input_tokens"], r["output_tokens"], strict=True)
    ]
    gaps = np.diff(r["arrival_s"])
    lindley = [0.0]
    for service, gap in zip(services[:-1], gaps, strict=True):
        lindley.append(max(0.0, lindley[-1] + service - gap))
    waits = r["admitted_s"] - r["arrival_s"]
    assert waits == pytest.approx(np.array(lindley), rel=1e-9, abs=1e-9)
    assert (np.array(lindley) > 0).sum() >= 50  # the queue was really exercised


def _mean_waits(replications: int, lengths: dict, rate: float, requests: int, warmup_s: float) -> np.ndarray:
    means = []
    for seed in range(replications):
        result = run(
            scheduler=BATCH_ONE,
            load={"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": rate}},
            requests=lengths,
            run={"seed": 1000 + seed, "max_requests": requests, "warmup": f"{warmup_s} s"},
        )
        r = result.records.requests
        keep = r["arrival_s"] >= warmup_s
        means.append(float((r["admitted_s"] - r["arrival_s"])[keep].mean()))
    return np.array(means)


def test_md1_mean_wait_matches_theory_within_three_standard_errors() -> None:
    """M/D/1: W_q = rho / (2 mu (1 - rho)) with S = prefill + (n - 1) decode steps."""
    service = service_time_s(COST, 64, 32)
    rho = 0.5
    rate = rho / service
    lengths = {"input_tokens": {"dist": "constant", "value": 64}, "output_tokens": {"dist": "constant", "value": 32}}
    means = _mean_waits(REPLICATIONS, lengths, rate, REQUESTS_PER_REPLICATION, warmup_s=100 * service)
    theory = rho * service / (2 * (1 - rho))
    standard_error = means.std(ddof=1) / np.sqrt(means.size)
    assert abs(means.mean() - theory) <= 3 * standard_error


def test_mg1_mean_wait_matches_pollaczek_khinchine() -> None:
    """M/G/1 with geometric output lengths: W_q = lambda E[S^2] / (2 (1 - rho))."""
    mean_output = 24.0
    n = np.arange(1, 600)
    pmf = (1 - 1 / mean_output) ** (n - 1) / mean_output
    s_of_n = service_times_by_output(COST, 64, n[-1])
    es, es2 = float((pmf * s_of_n).sum()), float((pmf * s_of_n**2).sum())
    rho = 0.5
    rate = rho / es
    lengths = {
        "input_tokens": {"dist": "constant", "value": 64},
        "output_tokens": {"dist": "geometric", "mean": mean_output},
    }
    means = _mean_waits(REPLICATIONS, lengths, rate, REQUESTS_PER_REPLICATION, warmup_s=100 * es)
    theory = rate * es2 / (2 * (1 - rho))
    standard_error = means.std(ddof=1) / np.sqrt(means.size)
    assert abs(means.mean() - theory) <= 3 * standard_error


@pytest.mark.parametrize("policy", [{"policy": "continuous"}, {"policy": "continuous", "priority": "prefill-first"},
                                    {"policy": "static", "max_batch_size": 8}])  # fmt: skip
def test_littles_law_holds_exactly_on_the_sample_path(policy: dict) -> None:
    """Integral of N(t) over [0, T] equals the sum of in-window sojourns, exactly."""
    result = run(
        scheduler=policy,
        load={"kind": "open", "arrivals": {"process": "gamma", "rate_per_s": 40.0, "burstiness": 4.0}},
        requests={
            "input_tokens": {"dist": "lognormal", "median": 300, "sigma": 0.8},
            "output_tokens": {"dist": "lognormal", "median": 60, "sigma": 0.8},
        },
        run={"seed": 3, "max_requests": 600},
    )
    rec = result.records
    r = rec.requests
    served = r["dropped"] == 0
    horizon = rec.end_s
    area = rec.in_system.integral(0.0, horizon)
    sojourn = np.clip(r["done_s"][served], None, horizon) - np.clip(r["arrival_s"][served], 0.0, None)
    assert area == pytest.approx(sojourn.sum(), rel=1e-9)
    # and the usual L = lambda W within edge effects
    mean_in_system = area / horizon
    assert mean_in_system == pytest.approx(served.sum() / horizon * sojourn.mean(), rel=1e-9)


def test_interactive_response_time_law() -> None:
    """Closed loop of N users with think time Z: R = N / X - Z."""
    users, think = 24, 2.0
    result = run(
        load={"kind": "closed", "users": users, "think_time_s": {"dist": "constant", "value": think}},
        requests={
            "input_tokens": {"dist": "uniform", "low": 64, "high": 1024},
            "output_tokens": {"dist": "uniform", "low": 16, "high": 256},
        },
        run={"seed": 11, "duration": "600 s", "warmup": "60 s", "drain": False},
    )
    s = result.summary
    throughput = s.requests_per_s
    assert s.e2e_s.mean == pytest.approx(users / throughput - think, rel=0.02)


def test_saturated_throughput_converges_to_the_batch_ceiling() -> None:
    """Overload with tiny prompts: aggregate tok/s -> B / t_step(B, mean context)."""
    batch, prompt, answer = 64, 8, 512
    result = run(
        scheduler={"policy": "continuous", "max_batch_size": batch},
        load={"kind": "closed", "users": 4 * batch},
        requests={
            "input_tokens": {"dist": "constant", "value": prompt},
            "output_tokens": {"dist": "constant", "value": answer},
        },
        run={"seed": 2, "duration": "120 s", "warmup": "20 s", "drain": False},
    )
    step, _ = COST.cycle_time(batch, prompt + answer / 2)
    ceiling = batch / step
    assert result.summary.output_tok_s == pytest.approx(ceiling, rel=0.02)
    assert result.summary.output_tok_s <= ceiling * 1.005
