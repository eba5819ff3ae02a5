"""The closed form's iterations carry the prompts that ride in them whole, as the engine batches them,
in the numbers a closed loop's arrivals bring: each other user's prompt lands in a given iteration
independently, so the count is Binomial (:mod:`simulator.analytic.estimate`)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.analytic.estimate import co_arrivals, loaded_decode_step, prompts_sharing_s
from simulator.analytic.step_time import BatchAggregates, StepCostModel
from simulator.config.loading import Catalog
from tests.conftest import deploy

INPUT = 512
#: gpt-oss-120b on one H100 (TensorRT-LLM: whole prompts beside the decodes), whose MXFP4 expert kernel
#: picks a larger tile as the rows per expert grow: a step is far from linear in its tokens.
COST = StepCostModel(deploy(Catalog(), "nvidia-h100-sxm", "gpt-oss-120b", chips=1))


def _iteration_s(decodes: int, prompts: int, context: float) -> float:
    window = COST.deployment.model.attention.sliding_window
    new = np.concatenate([np.ones(decodes), np.full(prompts, float(INPUT))])
    cached = np.concatenate([np.full(decodes, context), np.zeros(prompts)])
    return float(COST.iteration_times(BatchAggregates.of(new, cached, window)).step().total_s)


@pytest.mark.parametrize("users", [2, 3, 4])
def test_prompts_riding_in_every_step_cost_the_iteration_that_carries_them_all(users: int) -> None:
    """With 2-token answers every other user prefills once per decode step (``r = C - 1``, every count
    but ``C - 1`` impossible): the step is the iteration with all ``C - 1`` prompts, not ``C - 1`` times one."""
    output = 2
    context = INPUT + output / 2.0
    step = loaded_decode_step(COST, users, INPUT, output).total_s
    assert step == pytest.approx(_iteration_s(users, users - 1, context), rel=1e-9)


def test_riding_prompts_in_binomial_numbers_weigh_each_whole_iteration() -> None:
    """``r = 1.5`` prompts per step among 150 other users: the step is the iterations with ``k`` prompts
    weighted by ``P(K = k)``; on a step convex in its prompts that is more than ``1.5`` single prompts,
    and more than the two whole counts around 1.5 (the least spread counts of that mean) would cost."""
    output, users = 101, 151
    context = INPUT + output / 2.0
    chance = co_arrivals(users - 1, 1.5)
    weighted = sum(p * _iteration_s(users, k, context) for k, p in enumerate(chance.tolist()))
    assert loaded_decode_step(COST, users, INPUT, output).total_s == pytest.approx(weighted, rel=1e-9)
    alone, one, two = (_iteration_s(users, k, context) for k in (0, 1, 2))
    assert weighted - alone > 1.5 * (one - alone)  # convex: more than 1.5 single prompts
    assert weighted > 0.5 * one + 0.5 * two


def test_prompts_arriving_together_run_in_one_whole_iteration() -> None:
    """When every other user's prompt arrives with a request (``p = 1``) and the budget holds them all,
    the request's prefill is the one iteration of all ``C`` prompts, no decodes beside them."""
    users, output = 4, 101
    context = INPUT + output / 2.0
    prefill = _iteration_s(users - 1, 1, context)
    shared = prompts_sharing_s(COST, users, INPUT, context, prefill, arrivals=float(users - 1))
    assert prefill + shared == pytest.approx(_iteration_s(0, users, context), rel=1e-9)


def test_prompts_arriving_together_cost_more_than_their_marginal_times() -> None:
    """At 358 users about 2.8 prompts arrive at each iteration's end; on a step convex in its prompts
    their shared iteration costs more than 2.8 times one prompt's marginal time (what a linear
    closed form would add), and each Binomial count's iteration, weighted, gives it."""
    users, output, arrivals = 358, 128, 2.78
    context = INPUT + output / 2.0
    prefill = _iteration_s(users - 1, 1, context)
    marginal = prefill - _iteration_s(users - 1, 0, context)
    shared = prompts_sharing_s(COST, users, INPUT, context, prefill, arrivals)
    assert shared > 1.2 * arrivals * marginal
    beside = (COST.deployment.max_batched_tokens - (users - 1) - INPUT) // INPUT  # prompts the budget holds
    chance = co_arrivals(users - 1, arrivals)
    chance = np.append(chance[:beside], chance[beside:].sum())  # every count past the budget fills it
    iterations = [_iteration_s(users - 1 - k, 1 + k, context) - prefill for k in range(chance.size)]
    assert shared == pytest.approx(float(chance @ np.array(iterations)), rel=1e-9)


@pytest.mark.parametrize(("others", "mean"), [(3, 0.5), (357, 2.78), (4000, 30.0), (5, 5.0)])
def test_prompts_arriving_with_a_request_average_the_arrivals_during_its_wait(others: int, mean: float) -> None:
    """``E[K] = lambda W_step`` and ``Var K = n p (1 - p)``: the Binomial of the ``others`` users, whole."""
    chance = co_arrivals(others, mean)
    k = np.arange(chance.size)
    share = mean / others
    assert chance.sum() == pytest.approx(1.0, rel=1e-12)
    assert float(k @ chance) == pytest.approx(mean, rel=1e-6)
    assert float((k - mean) ** 2 @ chance) == pytest.approx(others * share * (1.0 - share), rel=1e-5, abs=1e-9)
