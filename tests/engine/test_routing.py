"""Routing across replicas: queueing theory for random splits, and load-aware policies help."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from simulator.config.fleet import AffinityBalance
from simulator.engine import fleet
from simulator.engine.fleet import Backend, Router
from simulator.engine.replica import Replica
from tests.engine.conftest import run, service_time_s
from tests.engine.test_queueing_laws import COST

LENGTHS = {"input_tokens": {"dist": "constant", "value": 64}, "output_tokens": {"dist": "constant", "value": 32}}
BATCH_ONE = {"policy": "continuous", "max_batch_size": 1}
CALLS_500_200 = {"input_tokens": {"dist": "constant", "value": 500},
                 "output_tokens": {"dist": "constant", "value": 200}}  # fmt: skip


def _fleet(policy: str, rate: float, seed: int, requests: int, replicas: int = 4, lengths: dict = LENGTHS) -> dict:
    return run(
        replicas=replicas,
        scheduler=BATCH_ONE,
        router={"policy": policy},
        load={"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": rate}},
        requests=lengths,
        run={"seed": seed, "max_requests": requests},
    ).records.requests


def _mean_wait(r: dict, warmup_s: float) -> float:
    keep = r["arrival_s"] >= warmup_s
    return float((r["admitted_s"] - r["arrival_s"])[keep].mean())


def test_random_routing_of_poisson_makes_k_independent_md1_queues() -> None:
    """Thinning a Poisson stream at random gives each replica Poisson(lambda / k): W = rho S / (2 (1 - rho))."""
    service = service_time_s(COST, 64, 32)
    k, rho = 4, 0.5
    rate = k * rho / service
    means = np.array([_mean_wait(_fleet("random", rate, 500 + s, 4000), 100 * service) for s in range(16)])
    theory = rho * service / (2 * (1 - rho))
    assert abs(means.mean() - theory) <= 3 * means.std(ddof=1) / np.sqrt(means.size)


@pytest.mark.parametrize(
    "policy", ["join-shortest-queue", "least-outstanding-tokens", "power-of-two", "least-predicted-latency"]
)
def test_load_aware_routing_beats_random_on_the_same_arrivals(policy: str) -> None:
    """Common random numbers: identical arrivals and lengths; only the router differs. (On replicas
    alike, routing by predicted latency is routing to the fewest requests.)"""
    service = service_time_s(COST, 64, 32)
    rate = 4 * 0.7 / service
    lengths = {"input_tokens": {"dist": "uniform", "low": 16, "high": 256},
               "output_tokens": {"dist": "geometric", "mean": 32}}  # fmt: skip
    random = _fleet("random", rate, 9, 3000, lengths=lengths)
    smart = _fleet(policy, rate, 9, 3000, lengths=lengths)
    assert np.array_equal(random["arrival_s"], smart["arrival_s"])
    assert np.array_equal(random["output_tokens"], smart["output_tokens"])
    assert _mean_wait(smart, 0.0) < 0.7 * _mean_wait(random, 0.0)


def test_round_robin_spreads_requests_evenly() -> None:
    r = _fleet("round-robin", 5.0, 1, 400)
    counts = np.bincount(r["replica"].astype(int))
    assert counts.tolist() == [100, 100, 100, 100]


def test_kv_aware_routing_balances_kv_demand() -> None:
    lengths = {"input_tokens": {"dist": "lognormal", "median": 2000, "sigma": 1.0},
               "output_tokens": {"dist": "constant", "value": 16}}  # fmt: skip
    r = run(replicas=3, router={"policy": "kv-aware"}, requests=lengths,
            load={"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": 20.0}},
            run={"seed": 3, "max_requests": 600}).records.requests  # fmt: skip
    per_replica = np.bincount(r["replica"].astype(int), weights=r["input_tokens"])
    assert per_replica.min() > 0.7 * per_replica.max()


#: The load each index-backed policy minimises.
LOADS: dict[str, Callable[[Replica], float]] = {
    "join-shortest-queue": lambda r: float(r.outstanding),
    "least-outstanding-tokens": lambda r: r.outstanding_tokens,
    "kv-aware": lambda r: -r.kv_headroom,
}


@pytest.mark.parametrize(
    ("policy", "backend_choice"),
    [("join-shortest-queue", "pooled"), ("least-outstanding-tokens", "pooled"), ("kv-aware", "pooled"),
     ("least-outstanding-tokens", "slo-aware")],
)  # fmt: skip
def test_the_load_index_chooses_what_a_scan_of_every_replica_would(
    policy: str, backend_choice: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At every replica choice the heap's least-loaded replica is the scan's: the least load, ties
    to the first candidate (backends in order, replicas by index), while loads change between decisions.

    The check wraps the policy where the router looks it up (its registry), which stays open to a
    patch when the engine is compiled. (The slo-aware choice's own lookups, one per backend for its
    prediction, use the same index and are not wrapped.)"""
    indexed = fleet.REPLICA_CHOICES[policy]
    load = LOADS[policy]
    checked = []

    def least_loaded(router: Router, backends: list[Backend], prompt: int, output: int) -> Replica:
        chosen = indexed(router, backends, prompt, output)
        scanned = min((r for b in backends for r in b.replicas), key=load)
        assert chosen is scanned
        checked.append(len([r for b in backends for r in b.replicas]))
        return chosen

    monkeypatch.setitem(fleet.REPLICA_CHOICES, policy, least_loaded)
    backend = {"deployment": {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-8b", "chips": 1}, "replicas": 3}
    run(
        backends=[{"name": "a", **backend}, {"name": "b", **backend}],
        scheduler={"policy": "continuous", "max_batch_size": 4},
        router={"policy": policy, "backend_choice": backend_choice},
        load={"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": 60.0}},
        requests={
            "input_tokens": {"dist": "uniform", "low": 16, "high": 2048},
            "output_tokens": {"dist": "geometric", "mean": 64},
        },
        run={"seed": 3, "max_requests": 600},
    )
    assert len(checked) >= 600 and max(checked) >= 3


def _h100_beside_a100(policy: str, rate_per_s: float) -> Any:
    """One H100 and one A100 (8B each, batches of at most 4) under Poisson calls of 500 + 200 tokens."""
    backends = [{"name": name, "deployment": {"hardware": hardware, "model": "llama-3.1-8b", "chips": 1},
                 "scheduler": {"policy": "continuous", "max_batch_size": 4}}
                for name, hardware in (("a100", "nvidia-a100-sxm"), ("h100", "nvidia-h100-sxm"))]  # fmt: skip
    return run(
        backends=backends, router={"policy": policy},
        load={"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": rate_per_s}},
        requests=CALLS_500_200, run={"seed": 4, "max_requests": 800},
    )  # fmt: skip


def _held_on_h100_at_a100_arrivals(requests: dict[str, np.ndarray]) -> np.ndarray:
    """For each call routed to the A100, the calls the H100 held when it arrived."""
    arrival, done, on_h100 = requests["arrival_s"], requests["done_s"], requests["replica"] == 1
    return np.array([np.sum(on_h100 & (arrival < t) & (done > t)) for t in arrival[requests["replica"] == 0]])


def test_predicted_latency_routing_sends_calls_to_the_faster_gpu_until_its_batch_is_full() -> None:
    """A decode step of 8B moves its weights, so an H100 (3.35 TB/s) runs every step faster than an
    A100 (2.0 TB/s) at any batch it holds: routed by predicted latency, a call goes to the A100 only
    when the H100's batch of 4 is full (the prediction then adds a wait for a slot). A load-balancing
    policy sends calls to the idle A100 while the H100 has free slots, and the mean latency is worse."""
    by_latency = _h100_beside_a100("least-predicted-latency", 2.0).records.requests
    by_tokens = _h100_beside_a100("least-outstanding-tokens", 2.0).records.requests
    held = _held_on_h100_at_a100_arrivals(by_latency)
    assert held.size and held.min() >= 4, held
    assert _held_on_h100_at_a100_arrivals(by_tokens).min() < 4
    latency = [float(np.mean(r["done_s"] - r["arrival_s"])) for r in (by_latency, by_tokens)]
    assert latency[0] < latency[1], latency


def test_predicted_latency_routing_spills_to_the_slower_gpu_when_the_faster_one_is_full() -> None:
    """At 4 calls/s (more than the H100 alone serves at a batch of 4, less than both), the wait for
    an H100 slot often makes the A100's prediction the smaller, so the A100 takes a share of the
    calls, but less than half (the H100 is faster)."""
    loaded = _h100_beside_a100("least-predicted-latency", 4.0)
    on_a100 = float(np.mean(loaded.records.requests["replica"] == 0))
    assert 0.1 < on_a100 < 0.5, on_a100


def test_affinity_gives_way_to_load_only_past_both_balance_thresholds() -> None:
    """SGLang's and vLLM's cache-aware routers' rule at their defaults (64 requests, 1.5x): the
    busiest replica must be more than 64 requests over the idlest and more than 1.5 times it."""
    balance = AffinityBalance()
    assert balance.unbalanced(65, 0) and not balance.unbalanced(64, 0)
    assert not balance.unbalanced(200, 134) and balance.unbalanced(202, 134)  # 1.49x, then 1.51x
    assert not AffinityBalance(over_requests=0, ratio=1.0).unbalanced(3, 3)


def _agents_on_two_gpus(balance: dict[str, float] | None) -> Any:
    """Twelve agents of twelve-call tasks on an A100 and an H100 (8B each), sessions pinned."""
    gpu = {"model": "llama-3.1-8b", "chips": 1}
    task = {
        "steps": {"dist": "constant", "value": 12},
        "system_prompt_tokens": {"dist": "constant", "value": 2000},
        "first_input_tokens": {"dist": "constant", "value": 300},
        "step_input_tokens": {"dist": "lognormal", "median": 400, "sigma": 0.8},
        "output_tokens": {"dist": "lognormal", "median": 120, "sigma": 0.8},
        "tool": {"kind": "code-execution", "latency_s": {"dist": "lognormal", "median": 0.5, "sigma": 1.0}},
    }
    workload = {"id": "w", "name": "w", "description": "test", "sources": {"t": "test"}, "task": task}
    return run(
        backends=[{"name": "a100", "deployment": {"hardware": "nvidia-a100-sxm", **gpu}},
                  {"name": "h100", "deployment": {"hardware": "nvidia-h100-sxm", **gpu}}],
        router={"policy": "least-outstanding-tokens"} | ({"balance": balance} if balance else {}),
        load={"kind": "agents", "workload": workload, "agents": 12},
        requests=None,
        run={"seed": 5, "duration": "120 s"},
    )  # fmt: skip


def _replicas_per_task(result: Any) -> np.ndarray:
    rows = result.records.requests
    return np.array([len(set(rows["replica"][rows["task"] == task].tolist())) for task in np.unique(rows["task"])])


def test_sessions_stay_on_their_replica_unless_load_past_the_balance_moves_them() -> None:
    """Pinned sessions run every call of a task on one replica; thresholds never reached leave the
    very same run; with none (0 requests, 1x: any imbalance) sessions follow the policy, so tasks
    span both replicas, each call still served once."""
    pinned, unreached = _agents_on_two_gpus(None), _agents_on_two_gpus({"over_requests": 10**6, "ratio": 1.0})
    assert np.all(_replicas_per_task(pinned) == 1)
    assert json.dumps(unreached.summary.to_dict()) == json.dumps(pinned.summary.to_dict())
    moved = _agents_on_two_gpus({"over_requests": 0, "ratio": 1.0})
    assert np.any(_replicas_per_task(moved) == 2)
    rows = moved.records.requests
    assert len(set(rows["id"].tolist())) == len(rows["id"])  # every call served once
