"""The busiest rank's binomial expectations (simulator/analytic/moe.py): scipy's numbers, and their laws."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from simulator.analytic.moe import binomial_cdf_range, expected_max_binomial


def test_the_binomial_cdf_over_a_range_is_scipys() -> None:
    """From the single counts' probabilities, the CDF is within 1e-13 of ``scipy.stats.binom.cdf``
    on the ranges the busiest-rank expectation sums (mean +- 8 sigma, clipped to the support),
    over trials from 1 to 60,000 and the probabilities an expert layout gives; it never falls, and
    it is 1 at ``x = trials`` as a CDF must be."""
    rng = np.random.default_rng(3)
    for _ in range(400):
        trials = int(rng.integers(1, 60_000))
        probability = float(rng.choice([1 / 16, 1 / 8, 0.5, 4 / 128, rng.uniform(1e-4, 1 - 1e-4)]))
        sigma = math.sqrt(trials * probability * (1 - probability))
        low = max(0, int(trials * probability - 8 * sigma))
        high = min(trials, math.ceil(trials * probability + 8 * sigma))
        got = binomial_cdf_range(low, high, trials, probability)
        assert np.max(np.abs(got - stats.binom.cdf(np.arange(low, high + 1), trials, probability))) < 1e-13
        assert np.all(np.diff(got) >= -1e-15)
    for trials, probability in [(1, 0.01), (8, 0.3), (8, 0.99), (3, 0.5)]:
        every = binomial_cdf_range(0, trials, trials, probability)
        assert every[-1] == 1.0
        assert np.max(np.abs(every - stats.binom.cdf(np.arange(trials + 1), trials, probability))) < 1e-15


@pytest.mark.parametrize(("trials", "probability", "ranks"), [(8, 0.4, 16), (32_768, 1 / 16, 16), (500, 0.5, 4)])
def test_the_expected_maximum_lies_between_one_count_and_all_trials(trials: int, probability: float,
                                                                  ranks: int) -> None:  # fmt: skip
    """``E[max]`` of ``R`` counts is at least one count's mean ``n p`` (max >= any one), at most
    ``n``, equals ``n p`` for one rank, and grows with the ranks (a max over more counts)."""
    mean = trials * probability
    expected = expected_max_binomial(trials, probability, ranks)
    assert mean < expected <= trials
    assert expected_max_binomial(trials, probability, 1) == mean
    assert expected_max_binomial(trials, probability, 2 * ranks) > expected


def test_the_expected_maximum_matches_a_sample_of_maxima() -> None:
    """Against 20,000 simulated maxima of 16 counts of Binomial(4,096, 1/16): within four standard
    errors of their mean."""
    rng = np.random.default_rng(5)
    maxima = rng.binomial(4096, 1 / 16, size=(20_000, 16)).max(axis=1)
    error = maxima.std(ddof=1) / math.sqrt(maxima.size)
    assert abs(expected_max_binomial(4096, 1 / 16, 16) - maxima.mean()) < 4 * error
