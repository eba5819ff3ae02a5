"""The closed form's decode iteration carries the prompts that ride in it whole, as the engine batches them."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.analytic.estimate import loaded_decode_step
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
