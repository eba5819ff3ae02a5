"""The closed form's decode iteration carries the prompts that ride in it whole, as the engine batches them."""

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


@pytest.mark.parametrize("prompts_per_step", [1, 2, 3])
def test_a_whole_number_of_riding_prompts_costs_the_iteration_that_carries_them(prompts_per_step: int) -> None:
    """``C - 1`` users each prefilling once per ``O - 1`` decode steps put ``r = (C - 1) / (O - 1)``
    prompts in every iteration; a whole ``r`` is the iteration with ``r`` prompts, not ``r`` times one."""
    output = 101
    users = prompts_per_step * (output - 1) + 1
    context = INPUT + output / 2.0
    step = loaded_decode_step(COST, users, INPUT, output).total_s
    assert step == pytest.approx(_iteration_s(users, prompts_per_step, context), rel=1e-9)


def test_a_fractional_number_of_riding_prompts_mixes_the_two_iterations_around_it() -> None:
    output, users = 101, 151  # r = 1.5: half the iterations carry one prompt, half two
    context = INPUT + output / 2.0
    alone = _iteration_s(users, 0, context)
    mixed = 0.5 * _iteration_s(users, 1, context) + 0.5 * _iteration_s(users, 2, context)
    assert loaded_decode_step(COST, users, INPUT, output).total_s == pytest.approx(mixed, rel=1e-9)
    assert mixed - alone > 1.5 * (_iteration_s(users, 1, context) - alone)  # convex: more than 1.5 single prompts


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
    extra, chance = co_arrivals(users - 1, arrivals, most=beside)
    iterations = [_iteration_s(users - 1 - int(k), 1 + int(k), context) - prefill for k in extra]
    weighted = float(chance @ np.array(iterations))
    assert shared == pytest.approx(weighted, rel=1e-9)


@pytest.mark.parametrize(("others", "mean"), [(3, 0.5), (357, 2.78), (4000, 30.0)])
def test_prompts_arriving_with_a_request_average_the_arrivals_during_its_wait(others: int, mean: float) -> None:
    """``E[K] = lambda W_step``: the Binomial's mean is the arrivals the wait sees (no budget cap), and
    a budget of ``most`` prompts caps every count at ``most`` without losing probability."""
    extra, chance = co_arrivals(others, mean, most=others)
    assert float(extra @ chance) == pytest.approx(mean, rel=1e-6)
    capped, capped_chance = co_arrivals(others, mean, most=1)
    assert capped.tolist() == [1.0]
    assert capped_chance.sum() == pytest.approx(chance.sum(), rel=1e-9)  # P(K >= 1)
