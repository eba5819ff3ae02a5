"""Distribution specs: one draw is one sample, and samples have the moments the spec states."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from pydantic import TypeAdapter

from simulator.config.distributions import Distribution

SPECS: list[dict[str, Any]] = [
    {"dist": "constant", "value": 7.0},
    {"dist": "uniform", "low": 2.0, "high": 50.0},
    {"dist": "uniform", "low": 5.0, "high": 5.0},
    {"dist": "normal", "mean": 3.0, "std": 2.0},  # truncated at 0 about 7 % of the time
    {"dist": "normal", "mean": 0.0, "std": 1.0},  # truncated half the time
    {"dist": "normal", "mean": -0.0, "std": 0.0},  # every draw -0.0 before truncation: 0.0 after
    {"dist": "lognormal", "median": 150.0, "sigma": 0.5},
    {"dist": "lognormal", "median": 150.0, "sigma": 0.0},
    {"dist": "lognormal", "median": 4.0, "sigma": 1.0},  # a coding agent's tool latency (s)
    {"dist": "lognormal", "median": 1e-3, "sigma": 2.5},
    {"dist": "exponential", "mean": 4.0},
    {"dist": "geometric", "mean": 64.0},
    {"dist": "geometric", "mean": 1.0},
]


def spec_of(data: dict[str, Any]) -> Any:
    return TypeAdapter(Distribution).validate_python(data)


@pytest.mark.parametrize("data", SPECS, ids=str)
def test_a_draw_is_the_first_of_a_sample_of_one_and_leaves_the_stream_alike(data: dict[str, Any]) -> None:
    """``draw(rng)`` gives ``sample(rng, 1)[0]`` bit for bit (the sign of zero too) and moves the
    generator the same way, so a run draws the same numbers whichever the engine calls, draw after
    draw. (An empirical spec's draw is its sample of one.)"""
    spec = spec_of(data)
    scalar, array = np.random.default_rng(11), np.random.default_rng(11)
    for _ in range(500):
        one, first = spec.draw(scalar), float(spec.sample(array, 1)[0])
        assert isinstance(one, float)
        assert one == first and math.copysign(1.0, one) == math.copysign(1.0, first)
    assert scalar.bit_generator.state == array.bit_generator.state


#: The normal is truncated at 0 (its draws' mean is higher), while its spec states the moments of the
#: untruncated distribution, so it is left out of the mean's check.
UNTRUNCATED = [data for data in SPECS if data["dist"] != "normal"]


@pytest.mark.parametrize("data", UNTRUNCATED, ids=str)
def test_draws_have_the_stated_mean_within_five_standard_errors(data: dict[str, Any]) -> None:
    """The mean of n draws is within 5 sigma / sqrt(n) of ``spec.mean`` (the central limit theorem)."""
    spec = spec_of(data)
    rng = np.random.default_rng(5)
    n = 20_000
    draws = np.array([spec.draw(rng) for _ in range(n)])
    assert abs(draws.mean() - spec.mean) <= 5 * np.sqrt(spec.variance / n) + 1e-12


@pytest.mark.parametrize("data", SPECS, ids=str)
def test_the_quantile_inverts_the_cdf_of_what_sample_draws(data: dict[str, Any]) -> None:
    """``quantile(u) = inf {x : F(x) >= u}`` of the draws: at most a fraction ``u`` of a large sample
    lies below it and at least ``u`` at or below it (each within four binomial standard errors),
    and it never falls as ``u`` grows."""
    spec = spec_of(data)
    draws = spec.sample(np.random.default_rng(3), 200_000)
    u = np.array([0.0, 0.001, 0.05, 0.3, 0.5, 0.9, 0.999])
    q = spec.quantile(u)
    assert np.all(np.diff(q) >= 0)
    slack = 4 * np.sqrt(np.maximum(u * (1 - u), 1e-6) / draws.size)
    below = (draws[:, None] < q).mean(axis=0)
    at_or_below = (draws[:, None] <= q).mean(axis=0)
    assert np.all(below <= u + slack), (below, u)
    assert np.all(at_or_below >= u - slack), (at_or_below, u)
