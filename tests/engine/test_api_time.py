"""A hosted API's time (``StackProfile.api``: network round trip + the provider's front end) adds
exactly itself to TTFT and E2E, in the engine and in the closed form, and nothing to the gaps
between tokens (Artificial Analysis's output speed, measured after the first chunk)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from simulator.analytic.estimate import estimate
from simulator.analytic.layouts import Question, deploy
from simulator.config.deployment import DeploymentSpec
from tests.engine.conftest import CATALOG, run

HOSTED = ("groqcloud", "cerebras-inference", "sambanova-cloud")
HARDWARE = {"groqcloud": "groq-lpu", "cerebras-inference": "cerebras-cs3", "sambanova-cloud": "sambanova-sn40l"}


def _direct(stack_id: str) -> dict[str, Any]:
    """The hosted stack reached directly: the same profile, inline, without its API section."""
    return CATALOG.stack(stack_id).model_copy(update={"api": None}).model_dump(mode="json")


@pytest.mark.parametrize("stack_id", HOSTED)
def test_every_hosted_stack_states_a_sourced_api_time(stack_id: str) -> None:
    api = CATALOG.stack(stack_id).api
    assert api is not None and api.total_s > 0
    for part in (api.round_trip, api.front_end):
        assert part.source in CATALOG.stack(stack_id).sources


@pytest.mark.parametrize("stack_id", HOSTED)
def test_closed_form_api_time_adds_to_ttft_and_e2e_and_nothing_to_itl(stack_id: str) -> None:
    spec = {"hardware": HARDWARE[stack_id], "model": "llama-3.1-8b"}
    hosted = deploy(CATALOG, DeploymentSpec.model_validate(spec | {"stack": stack_id}), Question(1000, 200, 1))
    direct = deploy(CATALOG, DeploymentSpec.model_validate(spec | {"stack": _direct(stack_id)}), Question(1000, 200, 1))
    api_s = hosted.stack.api.total_s  # type: ignore[union-attr]
    assert direct.api_s == 0.0 and hosted.api_s == api_s
    a, b = estimate(hosted, 1000, 200, 1), estimate(direct, 1000, 200, 1)
    assert a.ttft_s - b.ttft_s == pytest.approx(api_s, abs=1e-12)
    assert a.e2e_s - b.e2e_s == pytest.approx(api_s, abs=1e-12)
    assert a.itl_s == b.itl_s and a.per_user_output_tok_s == b.per_user_output_tok_s
    # With other users, time in the API is think time for the replica: prompts reach it more
    # sparsely, so its waits (beyond the prefill) can only shrink; the gaps between tokens are its own.
    a, b = estimate(hosted, 1000, 200, 2), estimate(direct, 1000, 200, 2)
    assert api_s - (b.ttft_s - b.prefill_s) - 1e-12 <= a.ttft_s - b.ttft_s <= api_s + 1e-12
    assert a.itl_s == b.itl_s and a.per_user_output_tok_s == b.per_user_output_tok_s


def test_engine_api_time_shifts_each_request_by_exactly_itself() -> None:
    """Open-loop arrivals reach the replica ``round_trip / 2 + front_end`` later, so its schedule shifts
    as a whole: TTFT and E2E gain the API time, the decode gaps and output speed nothing."""
    deployment = {"hardware": "groq-lpu", "model": "llama-3.1-8b"}
    api = CATALOG.stack("groqcloud").api
    assert api is not None
    kwargs: dict[str, Any] = {
        "load": {"kind": "open", "arrivals": {"process": "poisson", "rate_per_s": 20.0}},
        "requests": {"input_tokens": {"dist": "lognormal", "median": 500, "sigma": 0.6},
                     "output_tokens": {"dist": "geometric", "mean": 60}},
        "run": {"seed": 3, "max_requests": 300},
    }  # fmt: skip
    hosted = run(deployment=deployment | {"stack": "groqcloud"}, **kwargs)
    direct = run(deployment=deployment | {"stack": _direct("groqcloud")}, **kwargs)
    h, d = hosted.records.requests, direct.records.requests
    assert np.array_equal(h["arrival_s"], d["arrival_s"])
    np.testing.assert_allclose((h["first_token_s"] - h["arrival_s"]) - (d["first_token_s"] - d["arrival_s"]),
                               api.total_s, rtol=0, atol=1e-9)  # fmt: skip
    np.testing.assert_allclose(h["done_s"] - d["done_s"], api.total_s, rtol=0, atol=1e-9)
    np.testing.assert_allclose(h["admitted_s"] - d["admitted_s"], api.round_trip.value / 2 + api.front_end.value,
                               rtol=0, atol=1e-9)  # fmt: skip
    np.testing.assert_allclose(h["done_s"] - h["first_token_s"], d["done_s"] - d["first_token_s"], rtol=0, atol=1e-9)
    assert hosted.summary.metric("per_user_output_tok_s.mean") == pytest.approx(
        direct.summary.metric("per_user_output_tok_s.mean"), rel=1e-9
    )
