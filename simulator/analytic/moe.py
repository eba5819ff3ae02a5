"""Routing statistics of a mixture-of-experts layer spread over expert-parallel ranks.

Assumptions (stated once, used by the step-time model):

- Routing is uniform and independent across tokens: each token picks ``k`` distinct experts of
  ``E`` uniformly (top-k over a router that balances load on average, as the auxiliary losses
  and bias terms of trained MoE routers aim to).
- Experts are spread evenly: ``m = E / ep`` routed experts on each of ``ep`` ranks.
- Ranks are independent in the busiest-rank expectations below (their loads are weakly
  negatively correlated, so the independent maximum is a slight over-estimate).

Quantities (``T`` tokens routed this layer):

- Distinct experts hit: ``E (1 - (1 - k/E)^T)``.
- Distinct destination ranks of one token: ``ep (1 - C(E - m, k) / C(E, k))``; of those, the
  ranks other than the token's own: ``(ep - 1)(1 - C(E - m, k) / C(E, k))`` (a dispatch sends
  each token once per distinct *other* rank, not ``k`` times).
- Experts hit on the busiest rank: ``X_r ~ Binomial(m, 1 - (1 - k/E)^T)`` per rank, and
  ``E[max_r X_r] = sum_x (1 - F(x)^ep)``. At one token this is what makes a sparsely
  activated model slow on many sockets: 8 experts of 256 over 16 ranks leave one rank with 2.
- Token-expert pairs on the busiest rank: ``Y_r ~ Binomial(T k, 1/ep)``, ``E[max_r Y_r]`` the same way.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
import numpy.typing as npt
from scipy import stats

FloatArray = npt.NDArray[np.float64]

#: Standard deviations around the mean summed over in the busiest-rank expectation of a large binomial.
_TAIL_SIGMAS = 8.0


def distinct_experts(num_experts: int, experts_per_token: int, tokens: npt.ArrayLike) -> FloatArray:
    """Expected distinct experts ``T`` tokens hit: ``E (1 - (1 - k/E)^T)``.

    Examples
    --------
    >>> float(distinct_experts(8, 2, 1))
    2.0
    """
    t = np.asarray(tokens, dtype=np.float64)
    return num_experts * (1.0 - np.power(1.0 - experts_per_token / num_experts, t))


def miss_probability(num_experts: int, experts_per_token: int, ranks: int) -> float:
    """Probability that one rank holds none of a token's ``k`` experts: ``C(E - m, k) / C(E, k)``."""
    per_rank = num_experts // ranks
    if num_experts - per_rank < experts_per_token:
        return 0.0
    return math.comb(num_experts - per_rank, experts_per_token) / math.comb(num_experts, experts_per_token)


def distinct_ranks(num_experts: int, experts_per_token: int, ranks: int) -> float:
    """Expected distinct ranks a token's ``k`` experts live on: ``ep (1 - C(E - m, k) / C(E, k))``.

    Examples
    --------
    >>> round(distinct_ranks(128, 8, 8), 2)  # Qwen3-235B on EP8: 5.34 ranks, not 8 copies
    5.34
    >>> distinct_ranks(128, 1, 8)  # top-1: one rank
    1.0
    """
    return ranks * (1.0 - miss_probability(num_experts, experts_per_token, ranks))


def other_ranks(num_experts: int, experts_per_token: int, ranks: int) -> float:
    """Expected distinct ranks other than the token's own that a dispatch sends it to."""
    return (ranks - 1) * (1.0 - miss_probability(num_experts, experts_per_token, ranks))


def expected_max_binomial(trials: float, probability: float, ranks: int) -> float:
    """``E[max]`` of ``ranks`` independent ``Binomial(trials, probability)`` counts.

    ``E[max] = sum_{x >= 0} (1 - F(x)^ranks)``, summed exactly over the support when it is
    small and over ``mean +- 8 sigma`` otherwise (the tails beyond add below 1e-12).
    """
    n = round(trials)
    if ranks <= 1 or n == 0 or probability <= 0.0:
        return n * probability
    if probability >= 1.0:
        return float(n)
    mean, sigma = n * probability, math.sqrt(n * probability * (1.0 - probability))
    low = max(0, int(mean - _TAIL_SIGMAS * sigma))
    high = min(n, math.ceil(mean + _TAIL_SIGMAS * sigma))
    x = np.arange(low, high + 1)
    tail = 1.0 - np.power(stats.binom.cdf(x, n, probability), ranks)
    return float(low + tail.sum())


@lru_cache(maxsize=65536)
def busiest_rank_experts(num_experts: int, experts_per_token: int, ranks: int, tokens: int) -> float:
    """Expected routed experts hit on the rank that is hit most (its weights are read from memory)."""
    per_rank = num_experts // ranks
    hit = 1.0 - (1.0 - experts_per_token / num_experts) ** tokens
    return expected_max_binomial(per_rank, hit, ranks)


@lru_cache(maxsize=65536)
def busiest_rank_pairs(experts_per_token: int, ranks: int, tokens: int) -> float:
    """Expected token-expert pairs on the busiest rank (its expert FLOPs)."""
    return expected_max_binomial(tokens * experts_per_token, 1.0 / ranks, ranks)


def busiest(function: object, tokens: FloatArray, *args: int) -> FloatArray:
    """Apply a cached busiest-rank expectation elementwise over token counts (rounded)."""
    counts = np.rint(np.asarray(tokens, dtype=np.float64)).astype(np.int64)
    unique, inverse = np.unique(counts, return_inverse=True)
    values = np.array([function(*args, int(t)) for t in unique], dtype=np.float64)  # type: ignore[operator]
    result: FloatArray = values[inverse].reshape(counts.shape)
    return result
