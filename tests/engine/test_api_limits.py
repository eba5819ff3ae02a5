"""A hosted API's rate limits and the client's retries: no minute ever holds more than the limits
allow, every request ends exactly once (served, failed after its retries, or still running), the
router spills what the limits would refuse, and an ``api`` section without limits or
distributions changes nothing."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from simulator.config.api_limits import ApiBehaviour
from simulator.engine.api_gate import ApiGate
from simulator.records.store import DROPPED_THROTTLED
from tests.engine.conftest import SMALL, run

API = {"hardware": "cerebras-cs3", "model": "llama-3.1-8b", "stack": "cerebras-inference"}
LIMITS = {"requests_per_minute": 40, "tokens_per_minute": 9000}
LENGTHS = {"input_tokens": {"dist": "lognormal", "median": 300, "sigma": 0.5},
           "output_tokens": {"dist": "geometric", "mean": 60}}  # fmt: skip
OPEN = {"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": 1.5}}
RUN = {"seed": 4, "duration": "150 s", "warmup": "0 s", "drain": True}


def _api_only(api: dict[str, Any], **parts: Any) -> Any:
    backends = [{"name": "api", "deployment": API, "cost_basis": "api", "api": api}]
    return run(backends=backends, requests=LENGTHS, **({"load": OPEN, "run": RUN} | parts))


def _window_law(times: np.ndarray, tokens: np.ndarray, rpm: int, tpm: int) -> None:
    """Every window (t - 60 s, t] ending at an accepted request (where a window's load peaks) holds
    at most rpm requests and tpm tokens: checked pairwise, by brute force."""
    assert np.all(np.diff(times) >= 0)
    inside = (times[None, :] > times[:, None] - 60.0) & (times[None, :] <= times[:, None])
    assert inside.sum(axis=1).max() <= rpm
    assert (inside * tokens[None, :]).sum(axis=1).max() <= tpm


def test_no_minute_exceeds_the_limits_and_retries_conserve_requests() -> None:
    result = _api_only({"limits": LIMITS, "on_limit": "retry"})
    (api,) = result.records.api
    summary = result.summary.api["api"]  # type: ignore[index]
    _window_law(api.accepted_s, api.accepted_tokens, LIMITS["requests_per_minute"], LIMITS["tokens_per_minute"])
    assert summary.refused > 0 and summary.failed > 0  # the offered load is over the limits
    assert summary.peak_tokens_per_minute <= LIMITS["tokens_per_minute"]
    # Each 429 is retried or ends its request; each request is accepted once or fails once.
    assert summary.refused == summary.retries + summary.failed
    requests = result.records.requests
    made = requests["id"].size
    assert np.array_equal(np.sort(requests["id"]), np.arange(made))
    failed = requests["dropped"] == DROPPED_THROTTLED
    assert failed.sum() == summary.failed == result.summary.requests_failed
    assert summary.accepted + summary.failed == made and result.summary.requests_completed == summary.accepted
    served = requests["dropped"] == 0
    assert result.records.in_flight == 0 and np.isfinite(requests["done_s"][served]).all()  # drained
    assert np.isnan(requests["first_token_s"][failed]).all()  # a failed request saw no token


def test_requests_in_flight_never_exceed_the_concurrency_limit() -> None:
    """A request holds a slot from its acceptance to its last token reaching the client."""
    result = _api_only({"limits": {"concurrent_requests": 3}, "on_limit": "retry"},
                       load={"kind": "closed", "users": 8})  # fmt: skip
    (api,) = result.records.api
    assert api.refused_s.size > 0  # the limit binds
    requests = result.records.requests
    done = dict(zip(requests["id"].tolist(), requests["done_s"].tolist(), strict=True))
    # A slot freed at an instant is free for a request sent then: at equal times, -1 sorts first.
    events = sorted([(t, 1) for t in api.accepted_s] + [(done[i], -1) for i in api.accepted_ids.tolist()])
    assert max(np.cumsum([step for _, step in events])) <= 3


def test_the_run_is_deterministic_for_its_seed() -> None:
    api = {"limits": LIMITS, "on_limit": "retry", "round_trip": {"dist": "lognormal", "median": 0.087, "sigma": 0.2},
           "front_end": {"dist": "lognormal", "median": 0.095, "sigma": 0.52}}  # fmt: skip
    a, b = _api_only(api), _api_only(api)
    for column in ("arrival_s", "first_token_s", "done_s", "dropped"):
        assert np.array_equal(a.records.requests[column], b.records.requests[column], equal_nan=True)
    assert json.dumps(a.summary.to_dict()) == json.dumps(b.summary.to_dict())


def test_the_router_spills_what_the_limits_would_refuse_to_the_own_gpus() -> None:
    """With spill the client reads its remaining quota: the API never answers 429 while the GPUs
    can take a request, and the minute law holds all the same."""
    backends = [
        {"name": "gpu", "deployment": SMALL},
        {"name": "api", "deployment": API, "cost_basis": "api", "api": {"limits": LIMITS}},
    ]
    result = run(backends=backends, requests=LENGTHS, load=OPEN, run=RUN, router={"policy": "round-robin"})
    (api,) = result.records.api
    summary = result.summary.api["api"]  # type: ignore[index]
    assert summary.refused == 0 and summary.failed == 0 and summary.spilled > 0
    _window_law(api.accepted_s, api.accepted_tokens, LIMITS["requests_per_minute"], LIMITS["tokens_per_minute"])
    served = result.summary.backends
    assert served["gpu"].requests_completed > served["api"].requests_completed == summary.accepted


def test_an_api_section_without_limits_or_draws_changes_nothing() -> None:
    """The stack's constant API time, no limit: the same run, request for request, as without the section."""
    backends = [{"name": "api", "deployment": API, "cost_basis": "api"}]
    plain = run(backends=backends, requests=LENGTHS, load=OPEN, run=RUN)
    gated = _api_only({})
    for column in ("arrival_s", "admitted_s", "first_token_s", "done_s"):
        assert np.array_equal(plain.records.requests[column], gated.records.requests[column])
    assert plain.summary.api is None and gated.summary.api["api"].refused == 0  # type: ignore[index]


@pytest.mark.parametrize("retries_done", [0, 1, 2, 5, 10])
def test_backoff_is_exponential_with_jitter_and_capped(retries_done: int) -> None:
    gate = ApiGate("api", ApiBehaviour.model_validate({"limits": LIMITS}), 0.0, np.random.default_rng(1))
    base = min(0.5 * 2.0**retries_done, 8.0)
    waits = [gate.backoff_s(retries_done) for _ in range(200)]
    assert all(0.75 * base <= w <= base for w in waits)
    assert max(waits) - min(waits) > 0.1 * base  # jittered, not constant
