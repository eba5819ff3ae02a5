"""Invariants that hold on every run, whatever the policy or hardware; determinism by seed."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from simulator.analytic.layouts import deploy
from simulator.analytic.step_time import BatchAggregates, StepCostModel
from simulator.config.deployment import DeploymentSpec
from simulator.plan.resolve import ScenarioError
from simulator.runner import RunResult
from tests.engine.conftest import CATALOG, SMALL, run

CHAT = {"input_tokens": {"dist": "lognormal", "median": 400, "sigma": 1.0},
        "output_tokens": {"dist": "lognormal", "median": 120, "sigma": 0.8}}  # fmt: skip
DRAFT = {"draft": "eagle", "tokens_proposed": 4, "acceptance_rate": 0.7}
OPEN = {"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": 30.0}}
#: Llama 70B in fp8 on one H100, the embedding and LM head quantised too, so that only a few GB of KV fit;
#: vLLM admits on demand and preempts when KV runs out.
TIGHT_70B = {"hardware": "nvidia-h100-sxm", "model": "llama-3.1-70b", "chips": 1, "weights": "fp8", "stack": "vllm",
             "weights_by_group": {"embeddings": "fp8", "lm_head": "fp8"}}  # fmt: skip
CASES: dict[str, dict[str, Any]] = {
    "decode-first": {"load": OPEN},
    "prefill-first": {"load": OPEN, "scheduler": {"policy": "continuous", "priority": "prefill-first"}},
    "small-token-budget": {"load": OPEN, "scheduler": {"policy": "continuous", "max_batched_tokens": 256}},
    "static": {"load": OPEN, "scheduler": {"policy": "static", "max_batch_size": 16}},
    "kv-pressure": {
        "load": {"kind": "closed", "users": 96},
        "deployment": TIGHT_70B,
    },
    "kv-pressure-swap": {
        "load": {"kind": "closed", "users": 96},
        "deployment": TIGHT_70B,
        "scheduler": {"policy": "continuous", "preemption": "swap"},
    },
    "speculative": {"load": OPEN, "deployment": {**SMALL, "speculative": DRAFT}},
    "wafer-pipelined": {"load": OPEN, "deployment": {"hardware": "cerebras-cs3", "model": "llama-3.1-8b"}},
    "lpu-pipelined-moe": {"load": OPEN, "deployment": {"hardware": "groq-lpu", "model": "gpt-oss-20b"}},
    "two-replicas": {"load": OPEN, "replicas": 2},
    "gamma-burst": {"load": {"kind": "open", "arrivals": {"process": "gamma", "rate_per_s": 30.0, "burstiness": 8.0}}},
    "rate-steps": {"load": {"kind": "open", "arrivals": {"process": "steps", "steps": [
        {"at": "0 s", "rate_per_s": 5.0}, {"at": "5 s", "rate_per_s": 60.0}, {"at": "10 s", "rate_per_s": 5.0}]}}},
}  # fmt: skip


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> tuple[str, RunResult]:
    parts = {"requests": CHAT, "run": {"seed": 7, "max_requests": 400}} | CASES[request.param]
    return request.param, run(**parts)


def test_requests_are_conserved(case: tuple[str, RunResult]) -> None:
    """Every submitted request completes or is reported dropped (runs drain)."""
    _, result = case
    r = result.records.requests
    assert r["id"].tolist() == list(range(400))
    assert result.summary.requests_in_flight == 0
    completed = r["dropped"] == 0
    assert np.all(np.isfinite(r["done_s"][completed]))


def test_timestamps_are_ordered(case: tuple[str, RunResult]) -> None:
    """arrival <= admission <= first token <= completion; no token before admission."""
    _, result = case
    r = result.records.requests
    ok = r["dropped"] == 0
    a, s, f, c = (r[k][ok] for k in ("arrival_s", "admitted_s", "first_token_s", "done_s"))
    assert np.all(a <= s) and np.all(s < f) and np.all(f <= c)


def test_tokens_emitted_equal_tokens_requested(case: tuple[str, RunResult]) -> None:
    _, result = case
    rec = result.records
    ok = rec.requests["dropped"] == 0
    emitted, _ = rec.tokens_in_window(0.0, rec.end_s)
    assert emitted == pytest.approx(rec.requests["output_tokens"][ok].sum(), rel=1e-12)


def test_no_first_token_comes_sooner_than_its_prompt_alone(case: tuple[str, RunResult]) -> None:
    """TTFT >= the iteration of the request's uncached prompt on an idle replica, unchunked.

    Waiting, chunking (k passes of 1/k of a prompt each cost at least one pass of it) and sharing
    an iteration with other work (pass time grows with every batch statistic; a pipelined
    machine splits a batch into ``min(tokens, stages)`` micro-batches, no smaller for more
    tokens) can only add to it: the time of a prompt must never fall as load rises.
    """
    name, result = case
    cost = StepCostModel(deploy(CATALOG, DeploymentSpec(**CASES[name].get("deployment", SMALL))))
    window = cost.deployment.model.attention.sliding_window
    r = result.records.requests
    ok = r["dropped"] == 0
    cached = r["cached_tokens"][ok]
    uncached = r["input_tokens"][ok] - cached
    ttft = r["first_token_s"][ok] - r["arrival_s"][ok]
    alone = np.array([cost.iteration_times(BatchAggregates.of([q], [c], window)).step().total_s
                      for q, c in zip(uncached, cached, strict=True)])  # fmt: skip
    assert np.all(ttft >= alone * (1 - 1e-9))


def test_second_token_comes_one_step_or_more_after_the_first(case: tuple[str, RunResult]) -> None:
    """TTST >= the decode step floor, one token of one sequence on an empty context (a batch, a
    context, a draft's passes or a re-run prompt after a preemption only add; on a pipelined
    machine a sequence alone is not a floor, its micro-batches split a batch), and the second
    token comes no later than the last: TTST <= E2E - TTFT. 1-token answers have none."""
    name, result = case
    cost = StepCostModel(deploy(CATALOG, DeploymentSpec(**CASES[name].get("deployment", SMALL))))
    window = cost.deployment.model.attention.sliding_window
    r = result.records.requests
    ok = r["dropped"] == 0
    n, f, f2, c = (r[k][ok] for k in ("output_tokens", "first_token_s", "second_token_s", "done_s"))
    assert np.all(np.isnan(f2[n == 1]))
    many = n > 1
    ttst = (f2 - f)[many]
    floor = cost.iteration_times(BatchAggregates.of([1.0], [0.0], window)).step().total_s
    assert np.all(ttst >= floor * (1 - 1e-9))
    assert np.all(ttst <= (c - f)[many] * (1 + 1e-12))
    assert result.summary.ttst_s is not None and result.summary.ttst_s.count == int(many.sum())


def test_acceptance_length_is_the_closed_form_within_sampling_error(case: tuple[str, RunResult]) -> None:
    """Tokens per verify pass: between 1 and k + 1, ``1 + sum`` of the per-position acceptances,
    and for a constant per-token acceptance a, ``(1 - a^(k+1)) / (1 - a)`` within four standard
    errors of the passes' mean. A run that does not speculate states no speculation."""
    name, result = case
    spec = result.summary.speculation
    if "speculative" not in CASES[name].get("deployment", {}):
        assert spec is None
        return
    assert spec is not None
    k, a = DRAFT["tokens_proposed"], DRAFT["acceptance_rate"]
    assert 1.0 <= spec.acceptance_length <= k + 1
    assert spec.acceptance_length == pytest.approx(1.0 + sum(spec.per_position_acceptance), rel=1e-12)
    (counts,) = result.records.verifications.values()
    emitted = np.arange(1.0, k + 2.0)
    mean = float(emitted @ counts / counts.sum())
    error = math.sqrt(float((emitted - mean) ** 2 @ counts) / counts.sum() / counts.sum())
    assert spec.acceptance_length == pytest.approx(mean, rel=1e-12)
    assert abs(spec.acceptance_length - (1 - a ** (k + 1)) / (1 - a)) <= 4 * error


def test_kv_and_batch_stay_within_their_budgets(case: tuple[str, RunResult]) -> None:
    _, result = case
    rec = result.records
    for index, (kv, batch) in enumerate(zip(rec.kv_blocks, rec.batch, strict=True)):
        backend = rec.backend_of(index)
        assert min(kv.values) >= 0 and kv.maximum() <= backend.kv_blocks_per_replica
        assert batch.maximum() <= backend.max_batch_size


def test_busy_time_never_exceeds_the_horizon(case: tuple[str, RunResult]) -> None:
    _, result = case
    for totals in result.records.totals:
        assert totals.busy_s <= result.records.end_s * (1 + 1e-12)


def test_kv_pressure_preempts_and_still_completes_everything() -> None:
    result = run(requests=CHAT, run={"seed": 7, "max_requests": 400}, **CASES["kv-pressure"])
    assert result.summary.preemptions > 0
    assert result.summary.requests_completed + result.summary.requests_dropped == 400


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_prefilled_tokens_are_the_prompts_plus_what_recompute_redoes(mode: str) -> None:
    """Swap prefills every prompt exactly once; recompute also re-prefills evicted context."""
    parts = CASES["kv-pressure"] | {"scheduler": {"policy": "continuous", "preemption": mode}}
    rec = run(requests=CHAT, run={"seed": 7, "max_requests": 400}, **parts).records
    _, prefilled = rec.tokens_in_window(0.0, rec.end_s)
    prompts = rec.requests["input_tokens"][rec.requests["dropped"] == 0].sum()
    assert rec.requests["preemptions"].sum() > 0
    if mode == "swap":
        assert prefilled == prompts
    else:
        assert prefilled > prompts


def test_swap_needs_a_slower_tier() -> None:
    with pytest.raises(ScenarioError, match="needs a memory tier slower than sram"):
        run(deployment={"hardware": "cerebras-cs3", "model": "llama-3.1-8b"},
            scheduler={"policy": "continuous", "preemption": "swap"})  # fmt: skip


def test_same_seed_same_records_other_seed_other_records() -> None:
    parts = {"requests": CHAT, "load": OPEN}
    first = run(run={"seed": 3, "max_requests": 300}, **parts).records.requests
    again = run(run={"seed": 3, "max_requests": 300}, **parts).records.requests
    other = run(run={"seed": 4, "max_requests": 300}, **parts).records.requests
    assert all(np.array_equal(first[k], again[k], equal_nan=True) for k in first)
    assert not np.array_equal(first["arrival_s"], other["arrival_s"])


def test_adding_a_user_leaves_the_other_users_streams_alone() -> None:
    """Common random numbers: user 0's request lengths do not depend on how many users there are."""

    def lengths_of_user_zero(users: int) -> list[float]:
        r = run(requests=CHAT, load={"kind": "closed", "users": users}, run={"seed": 5, "max_requests": 60}).records
        mine = r.requests["user"] == 0
        return r.requests["input_tokens"][mine][:3].tolist()

    assert lengths_of_user_zero(3) == lengths_of_user_zero(4)
