"""A run's sampling error (:mod:`simulator.results.sampling`): the spread of a mean and of a
percentile over independent samples, as the large-sample laws give it from one sample's summary."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.results.requests import distribution_stats
from simulator.results.sampling import standard_error


@pytest.mark.parametrize(
    ("sigma", "stat", "within"),
    [(0.18, "mean", 0.1), (0.18, "p50", 0.1), (0.18, "p90", 0.1), (0.18, "p95", 0.1), (0.18, "p99", 0.1),
     (0.6, "p90", 0.1), (0.6, "p95", 0.1), (0.6, "p99", 0.1), (0.6, "p50", 0.25)],
)  # fmt: skip
def test_one_sample_s_error_is_the_spread_of_the_statistic_over_samples(sigma: float, stat: str, within: float) -> None:
    """600 task times (lognormal: sigma 0.18 as the coding agent's tasks, 0.6 a wider spread)
    drawn 400 times: the standard deviation of the statistic over the draws matches the mean of
    the errors each draw's summary gives, within 10 % (its own sampling error at 400 draws is
    about 4 %); the median of the wider one within 25 % (no kept percentile below it to read its
    slope through)."""
    rng = np.random.default_rng(11)
    samples = rng.lognormal(np.log(480.0), sigma, size=(400, 600))
    summaries = [distribution_stats(sample) for sample in samples]
    spread = float(np.std([getattr(s, stat) for s in summaries], ddof=1))
    errors = [standard_error(s, stat) for s in summaries]
    assert np.mean(errors) == pytest.approx(spread, rel=within)


def test_no_error_without_two_draws_and_none_between_equal_values() -> None:
    """One draw has no spread to estimate; equal draws have none at all."""
    assert math.isnan(standard_error(distribution_stats(np.array([3.0])), "p95"))
    assert standard_error(distribution_stats(np.full(50, 3.0)), "p95") == 0.0
    assert standard_error(distribution_stats(np.full(50, 3.0)), "mean") == 0.0
