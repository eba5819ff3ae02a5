"""Fleets of different backends: conservation across them, network delay, rules, the SLO-aware
router's spillover, the API budget bucket, and the cost arithmetic per backend and fleet-wide."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from simulator.engine.build import build
from simulator.plan.resolve import resolve
from simulator.runner import RunResult
from tests.engine.conftest import CATALOG, run, scenario

H100_8B = {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-8b", "chips": 1}
A100_7B = {"hardware": "nvidia-a100-sxm", "model": "llama-2-7b", "chips": 1}
CS3_8B = {"hardware": "cerebras-cs3", "model": "llama-3.1-8b"}
GROQ_8B = {"hardware": "groq-lpu", "model": "llama-3.1-8b"}
CHAT = {"input_tokens": {"dist": "lognormal", "median": 500, "sigma": 0.6},
        "output_tokens": {"dist": "geometric", "mean": 120}}  # fmt: skip
CONSTANT = {"input_tokens": {"dist": "constant", "value": 400}, "output_tokens": {"dist": "constant", "value": 100}}


def _open(rate: float) -> dict[str, Any]:
    return {"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": rate}}


def _replicas_of(result: RunResult, name: str) -> list[int]:
    return next(b.replicas for b in result.records.backends if b.name == name)


def test_every_request_is_served_exactly_once_across_a_mixed_fleet() -> None:
    """Different hardware and models in one run: ids unique, each served by one replica, tokens conserved."""
    backends = [
        {"name": "h100", "deployment": H100_8B, "replicas": 2},
        {"name": "a100", "deployment": A100_7B, "replicas": 1},
        {"name": "wafer", "deployment": CS3_8B, "replicas": 1, "network_rtt": "30 ms"},
    ]
    result = run(backends=backends, router={"policy": "join-shortest-queue"}, load=_open(40.0), requests=CHAT,
                 run={"seed": 5, "max_requests": 1500})  # fmt: skip
    r, rec, summary = result.records.requests, result.records, result.summary
    assert sorted(r["id"].tolist()) == list(range(1500))
    assert (r["dropped"] == 0).all() and np.isfinite(r["done_s"]).all()
    assert set(r["replica"].astype(int)) == {0, 1, 2, 3}
    served = sum(b.requests_completed for b in summary.backends.values())
    assert served == summary.requests_completed == 1500
    for b in rec.backends:
        emitted, _ = rec.tokens_in_window(0.0, rec.end_s, b.replicas)
        mine = np.isin(r["replica"], b.replicas)
        assert emitted == pytest.approx(r["output_tokens"][mine].sum(), rel=1e-12)


@pytest.mark.parametrize("rtt_s", [0.01, 0.2])
def test_a_network_round_trip_adds_exactly_itself_to_ttft_and_latency(rtt_s: float) -> None:
    """Open-loop arrivals all reach the replica rtt/2 later, so its schedule shifts as a whole."""
    base = {"name": "gpu", "deployment": H100_8B, "replicas": 1}
    kwargs: dict[str, Any] = {"load": _open(20.0), "requests": CHAT, "run": {"seed": 2, "max_requests": 600}}
    near = run(backends=[base], **kwargs).records.requests
    far = run(backends=[base | {"network_rtt": f"{rtt_s} s"}], **kwargs).records.requests
    assert np.array_equal(near["arrival_s"], far["arrival_s"])
    ttft_near, ttft_far = (x["first_token_s"] - x["arrival_s"] for x in (near, far))
    np.testing.assert_allclose(ttft_far, ttft_near + rtt_s, rtol=0, atol=1e-9)
    np.testing.assert_allclose(far["done_s"] - near["done_s"], rtt_s, rtol=0, atol=1e-9)
    np.testing.assert_allclose(far["admitted_s"] - near["admitted_s"], rtt_s / 2, rtol=0, atol=1e-9)


def test_class_rules_keep_each_class_on_its_backends() -> None:
    classes = [
        {"name": "interactive", "load": _open(5.0), "requests": CHAT},
        {"name": "bulk", "load": _open(5.0), "requests": CHAT},
    ]
    backends = [{"name": "fast", "deployment": CS3_8B}, {"name": "cheap", "deployment": H100_8B, "replicas": 2}]
    rules = {"interactive": ["fast"], "bulk": ["cheap"]}
    result = run(backends=backends, classes=classes, load=None, requests=None, router={"rules": rules},
                 run={"seed": 1, "max_requests": 400})  # fmt: skip
    r = result.records.requests
    on_fast = np.isin(r["replica"], _replicas_of(result, "fast"))
    assert on_fast[r["class"] == 0].all() and not on_fast[r["class"] == 1].any()
    assert (r["class"] == 0).sum() > 100 and (r["class"] == 1).sum() > 100


CAPPED = {"policy": "continuous", "max_batch_size": 32}


def _slo_aware(rate: float, tpot: str, seed: int = 3) -> RunResult:
    """A rented H100 (batch cap 32) and the Cerebras API (dearer per token at these lengths)."""
    backends = [
        {"name": "cheap", "deployment": H100_8B, "scheduler": CAPPED},
        {"name": "fast", "deployment": CS3_8B, "cost_basis": "api"},
    ]
    return run(backends=backends, router={"backend_choice": "slo-aware", "policy": "join-shortest-queue"},
               load=_open(rate), requests=CONSTANT, slo={"ttft": "500 ms", "tpot": tpot},
               run={"seed": seed, "duration": "120 s", "warmup": "10 s"})  # fmt: skip


def test_slo_aware_routing_fills_the_cheapest_backend_first_and_spills_over_when_it_saturates() -> None:
    """The H100 (cheapest per token) takes all of a light load; past its batch cap the wafer takes the rest."""
    light, heavy = _slo_aware(1.0, "1 s"), _slo_aware(60.0, "1 s")
    light_fast = np.isin(light.records.requests["replica"], _replicas_of(light, "fast")).mean()
    heavy_fast = np.isin(heavy.records.requests["replica"], _replicas_of(heavy, "fast")).mean()
    assert light_fast == 0.0
    assert 0.05 < heavy_fast < 0.95
    alone = [{"name": "cheap", "deployment": H100_8B, "scheduler": CAPPED}]
    cheap_only = run(backends=alone, load=_open(60.0), requests=CONSTANT,
                     run={"seed": 3, "duration": "120 s", "warmup": "10 s"})  # fmt: skip
    assert heavy.summary.ttft_s.p99 < 0.1 * cheap_only.summary.ttft_s.p99


def test_slo_aware_routing_sends_what_only_fast_silicon_can_meet_to_it() -> None:
    """A TPOT bound below the H100's ITL and above the wafer's: everything goes to the wafer."""
    result = _slo_aware(2.0, "2 ms")
    assert np.isin(result.records.requests["replica"], _replicas_of(result, "fast")).all()


def test_the_api_budget_caps_spend_at_its_rate_plus_one_burst() -> None:
    """Token bucket: spend(T) <= B (T + W) / 3600 + U p, and >= B (T - W) / 3600 - U p when demand exceeds it.

    U closed-loop users keep at most U requests (price p each) in flight past the bucket check.
    """
    users, budget, window, horizon = 8, 2.0, 10.0, 300.0
    result = run(backends=[{"name": "groq", "deployment": GROQ_8B, "cost_basis": "api"}],
                 load={"kind": "closed", "users": users}, requests=CONSTANT,
                 router={"budget_usd_per_hour": budget, "budget_window": f"{window} s"},
                 run={"seed": 4, "duration": f"{horizon} s", "drain": False})  # fmt: skip
    price = CATALOG.hardware("groq-lpu").price.api["llama-3.1-8b"]
    p = (400 * price.input_usd_per_million_tokens.value + 100 * price.output_usd_per_million_tokens.value) / 1e6
    end = result.records.end_s
    spent = result.summary.backends["groq"].cost.usd
    assert budget * (end - window) / 3600 - users * p <= spent <= budget * (end + window) / 3600 + users * p
    assert result.summary.requests_rejected_over_budget > 0


def test_fleet_cost_is_the_sum_of_its_backends_and_the_api_bill_is_tokens_times_price() -> None:
    backends = [
        {"name": "rented", "deployment": H100_8B, "replicas": 2},
        {"name": "api", "deployment": CS3_8B, "cost_basis": "api"},
    ]
    result = run(backends=backends, router={"policy": "round-robin"}, load=_open(8.0), requests=CHAT,
                 run={"seed": 6, "duration": "60 s", "warmup": "5 s"})  # fmt: skip
    rec, summary = result.records, result.summary
    r = rec.requests
    measured = (r["dropped"] == 0) & np.isfinite(r["done_s"]) & (r["arrival_s"] >= 5.0)
    on_api = measured & np.isin(r["replica"], _replicas_of(result, "api"))
    price = CATALOG.hardware("cerebras-cs3").price.api["llama-3.1-8b"]
    bill = (r["input_tokens"][on_api].sum() * price.input_usd_per_million_tokens.value
            + r["output_tokens"][on_api].sum() * price.output_usd_per_million_tokens.value) / 1e6  # fmt: skip
    parts = summary.backends
    assert parts["api"].cost.usd == pytest.approx(bill, rel=1e-12)
    window = rec.end_s - 5.0
    rental = CATALOG.hardware("nvidia-h100-sxm").price.rental_usd_per_chip_hour.value  # type: ignore[union-attr]
    assert parts["rented"].cost.usd == pytest.approx(2 * rental * window / 3600, rel=1e-12)
    busy = [rec.totals[i].busy_s * window / rec.end_s for i in _replicas_of(result, "rented")]
    assert parts["rented"].cost.idle_usd == pytest.approx(rental / 3600 * sum(window - b for b in busy), rel=1e-9)
    for key in ("usd", "usd_per_hour", "idle_usd"):
        fleet = getattr(summary.cost, key)
        assert fleet == pytest.approx(sum(getattr(p.cost, key) for p in parts.values()), rel=1e-12)
    assert summary.cost.basis == "mixed"


def test_a_distant_backend_adds_one_round_trip_per_call_to_each_task() -> None:
    """One agent, no contention: the task's parts still sum to its time, and network = calls x RTT."""
    rtt = 0.1
    kwargs: dict[str, Any] = {"load": {"kind": "agents", "workload": "fast-tool-agent", "agents": 1},
                              "requests": None, "run": {"seed": 8, "duration": "600 s"}}  # fmt: skip
    backend = {"name": "gpu", "deployment": H100_8B | {"min_kv_tokens": 200_000}}
    near = run(backends=[backend], **kwargs).records.tasks
    far = run(backends=[backend | {"network_rtt": f"{rtt} s"}], **kwargs).records.tasks
    n = min(near["task"].size, far["task"].size)
    assert n >= 2
    parts = sum(far[f"{p}_s"] for p in ("model", "queue", "tool", "subagent", "network"))
    np.testing.assert_allclose(parts, far["end_s"] - far["start_s"], rtol=1e-9)
    np.testing.assert_allclose(far["network_s"], far["calls"] * rtt, rtol=1e-12)
    np.testing.assert_allclose((far["end_s"] - far["start_s"])[:n] - (near["end_s"] - near["start_s"])[:n],
                               far["calls"][:n] * rtt, rtol=1e-9)  # fmt: skip


# -- regressions found in review -----------------------------------------------------------------
def test_the_budget_holds_under_open_loop_load_because_prices_are_reserved_when_routed() -> None:
    """Constant lengths make the reserved price exact: spend(T) <= B (T + W) / 3600, however fast they arrive."""
    budget, window = 2.0, 10.0
    result = run(backends=[{"name": "api", "deployment": GROQ_8B, "cost_basis": "api", "replicas": 4}],
                 load=_open(50.0), requests=CONSTANT,
                 router={"budget_usd_per_hour": budget, "budget_window": f"{window} s"},
                 run={"seed": 4, "duration": "60 s", "drain": True})  # fmt: skip
    records = result.records.requests
    price = CATALOG.hardware("groq-lpu").price.api["llama-3.1-8b"]
    p = (400 * price.input_usd_per_million_tokens.value + 100 * price.output_usd_per_million_tokens.value) / 1e6
    accepted = int((records["dropped"] == 0).sum())
    last_arrival = float(records["arrival_s"].max())
    assert accepted * p <= budget * (last_arrival + window) / 3600 * (1 + 1e-9)
    assert result.summary.requests_rejected_over_budget > 1000


def test_rented_backends_still_serve_when_the_api_budget_is_spent() -> None:
    backends = [{"name": "rented", "deployment": H100_8B, "replicas": 2},
                {"name": "api", "deployment": GROQ_8B, "cost_basis": "api", "replicas": 2}]  # fmt: skip
    result = run(backends=backends, load=_open(8.0), requests=CONSTANT, router={"budget_usd_per_hour": 0.5,
                 "budget_window": "5 s", "policy": "round-robin"}, run={"seed": 2, "duration": "60 s"})  # fmt: skip
    assert result.summary.requests_rejected_over_budget == 0


def test_round_robin_cycles_each_classes_own_backends() -> None:
    classes = [{"name": "a", "load": {"kind": "open", "arrivals": {"process": "constant", "rate_per_s": 5}},
                "requests": CONSTANT},
               {"name": "b", "load": {"kind": "open", "arrivals": {"process": "constant", "rate_per_s": 5}},
                "requests": CONSTANT}]  # fmt: skip
    backends = [
        {"name": "x", "deployment": H100_8B, "replicas": 2},
        {"name": "y", "deployment": H100_8B, "replicas": 3},
    ]
    router = {"policy": "round-robin", "rules": {"a": ["x"], "b": ["y"]}}
    result = run(backends=backends, classes=classes, load=None, requests=None, router=router,
                 run={"seed": 1, "max_requests": 600})  # fmt: skip
    r = result.records.requests
    counts_a = np.bincount(r["replica"][r["class"] == 0].astype(int), minlength=5)
    counts_b = np.bincount(r["replica"][r["class"] == 1].astype(int), minlength=5)
    assert counts_a[:2].tolist() == [150, 150] and counts_b[2:].tolist() == [100, 100, 100]


def test_join_shortest_queue_sees_requests_still_on_the_network() -> None:
    backend = {"name": "gpu", "deployment": H100_8B, "replicas": 4, "network_rtt": "1 s"}
    result = run(backends=[backend], router={"policy": "join-shortest-queue"}, load=_open(40.0), requests=CHAT,
                 run={"seed": 5, "max_requests": 2000})  # fmt: skip
    counts = np.bincount(result.records.requests["replica"].astype(int))
    assert counts.max() < 1.15 * counts.min()


def test_a_pinned_session_that_outgrows_its_backend_moves_instead_of_blocking() -> None:
    """A session pinned to a small-KV backend whose context grows past it is re-routed, and every task ends."""
    backends = [
        {"name": "small", "deployment": GROQ_8B},
        {"name": "big", "deployment": H100_8B | {"min_kv_tokens": 200_000}},
    ]
    result = run(backends=backends, router={"policy": "round-robin"}, requests=None,
                 load={"kind": "agents", "workload": "fast-tool-agent", "agents": 2},
                 run={"seed": 3, "duration": "200 s", "drain": True})  # fmt: skip
    r = result.records.requests
    assert result.summary.requests_in_flight == 0 and (r["dropped"] == 0).all()
    assert (r["input_tokens"][np.isin(r["replica"], _replicas_of(result, "small"))] <= 4200).all()


def test_classes_sharing_a_fleet_are_judged_overloaded_by_their_combined_load() -> None:
    one = run(deployment=H100_8B, load=_open(1.0), requests=CONSTANT, run={"seed": 1, "duration": "5 s"})
    capacity = one.summary.capacity_requests_per_s
    classes = [{"name": n, "load": _open(0.7 * capacity), "requests": CONSTANT} for n in ("a", "b")]
    both = run(deployment=H100_8B, classes=classes, load=None, requests=None, run={"seed": 1, "duration": "5 s"})
    assert both.summary.capacity_requests_per_s == pytest.approx(capacity)
    assert both.summary.overloaded


def test_progress_reporting_never_extends_a_draining_run() -> None:
    kwargs: dict[str, Any] = {"load": _open(20.0), "requests": CHAT, "run": {"seed": 1, "max_requests": 200,
                              "duration": "10000 s", "drain": True}}  # fmt: skip
    plain = run(**kwargs)

    simulation = build(resolve(scenario(**kwargs), CATALOG))
    seen: list[float] = []
    assert simulation.run(seen.append) == pytest.approx(plain.records.end_s, rel=1e-12)
    assert seen[-1] == 1.0 and plain.records.end_s < 100


def test_classes_on_separate_backends_are_not_judged_by_their_sum() -> None:
    one = run(deployment=H100_8B, load=_open(1.0), requests=CONSTANT, run={"seed": 1, "duration": "5 s"})
    capacity = one.summary.capacity_requests_per_s
    classes = [{"name": n, "load": _open(0.6 * capacity), "requests": CONSTANT} for n in ("a", "b")]
    backends = [{"name": "x", "deployment": H100_8B}, {"name": "y", "deployment": H100_8B}]
    split = run(backends=backends, classes=classes, load=None, requests=None,
                router={"rules": {"a": ["x"], "b": ["y"]}}, run={"seed": 1, "duration": "5 s"})  # fmt: skip
    assert not split.summary.overloaded
    assert split.summary.capacity_requests_per_s == pytest.approx(2 * capacity)
