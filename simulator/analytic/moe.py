"""Routing statistics of a mixture-of-experts layer spread over expert-parallel ranks.

Assumptions (stated once, used by the step-time model):

- Routing is independent across tokens: each token picks ``k`` distinct experts of ``E``. Which
  experts, and which ranks a token is sent to, is taken as uniform (trained routers balance load
  on average); how *many* tokens each expert gets is not: serving traffic has hot experts.
- **Hot experts.** The tokens a layer's experts receive have a coefficient of variation ``v``
  (std / mean over experts; the model's ``moe.expert_load_cv``, else
  :data:`DEFAULT_EXPERT_LOAD_CV`). A rank holding ``m`` experts drawn from ``E`` receives a
  share of the layer's token-expert pairs with coefficient of variation
  ``v_r = v sqrt((E - m) / (m (E - 1)))`` (a sum of ``m`` draws without replacement), taken as
  lognormal (a sum of skewed loads is skewed; Fenton-Wilkinson), and the busiest of ``ep`` ranks
  carries ``h = E[max of ep] / mean`` times the mean share (:func:`hot_rank_factor`). With one
  rank (or every expert split over all chips) ``h = 1``.
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
- Token-expert pairs on the busiest rank: ``Y_r ~ Binomial(T k, 1/ep)``, ``E[max_r Y_r]`` the same
  way, from routing noise; hot experts add ``(h - 1) T k / ep``. The two excesses over the mean
  add in quadrature (independent sources of spread): the noise dominates a small batch, the hot
  experts a large one.
- Expert weights read on the busiest rank are counted with uniform routing (at large batches
  every expert is hit either way; at small ones hot experts make fewer distinct experts, so
  this errs slow).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

#: Standard deviations around the mean summed over in the busiest-rank expectation of a large binomial.
_TAIL_SIGMAS = 8.0

#: Coefficient of variation of the tokens a MoE layer's experts receive in serving traffic, for a
#: model without its own measurement: DeepSeek-R1 on a machine-translation dataset, 32 GB200s
#: with 8 experts each and no load balancer, averaged over layers and iterations: 128 tokens per
#: expert on average with standard deviation 164.1 (NVIDIA TensorRT-LLM tech blog 4, "Scaling
#: Expert Parallelism in TensorRT-LLM", Table 1, docs/source/blogs/tech_blog/ @ 1d263f15). The
#: same table gives the check of :func:`hot_rank_factor`: hottest rank 2.56 x the mean.
DEFAULT_EXPERT_LOAD_CV = 164.1 / 128.0


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
    tail = 1.0 - np.power(binomial_cdf_range(low, high, n, probability), ranks)
    return float(low + tail.sum())


def binomial_cdf_range(low: int, high: int, trials: int, probability: float) -> FloatArray:
    """``F(x) = P(X <= x)`` of ``X ~ Binomial(trials, probability)`` at ``x = low, ..., high``
    (``0 <= low <= high <= trials``, ``0 < probability < 1``), from the probabilities of single
    counts: ``f(m)`` at the mode ``m``, and outward by ``f(x + 1) = f(x) (n - x) / (x + 1) * p / (1 - p)``;
    below the mode ``F(x) = P(X < low) + sum_{low..x} f``, above it ``F(x) = 1 - P(X > high) -
    sum_{x+1..high} f``, so each tail keeps its own small numbers. Three of scipy's binomial
    functions (boost's) where evaluating the incomplete beta at every point took ~0.3 us a point,
    most of a new batch shape's cost on an expert-parallel SN40L (~700 points a token count);
    within 1e-13 of ``scipy.stats.binom.cdf`` everywhere (``tests/unit/test_moe.py``)."""
    cdf, sf, pmf = _binomial_functions()
    mode = min(max(int((trials + 1) * probability), low), high)
    x = np.arange(low, high, dtype=np.float64)
    ratios = (trials - x) / (x + 1.0) * (probability / (1.0 - probability))  # f(x + 1) / f(x)
    at = mode - low
    masses = np.empty(high + 1 - low)
    masses[at] = pmf(float(mode), trials, probability)
    masses[at + 1 :] = masses[at] * np.cumprod(ratios[at:])
    masses[:at] = masses[at] / np.cumprod(ratios[:at][::-1])[::-1]
    below = float(cdf(float(low - 1), trials, probability)) if low > 0 else 0.0
    above = float(sf(float(high), trials, probability)) if high < trials else 0.0
    result = np.empty_like(masses)
    result[: at + 1] = below + np.cumsum(masses[: at + 1])
    from_each = np.cumsum(masses[at + 1 :][::-1])[::-1]  # P(x <= X <= high) from each x above the mode
    result[at + 1 :] = 1.0 - (above + np.append(from_each[1:], 0.0))
    return result


def _binomial_functions() -> tuple[Callable[..., float], Callable[..., float], Callable[..., float]]:
    """scipy's binomial ``(cdf, sf, pmf)`` at ``(x, trials, probability)``: the ufuncs
    ``scipy.stats.binom`` evaluates (boost's), without its argument checks (~40 us a call), or the
    distribution's own where a release moves them."""
    try:  # imported here: a run without expert parallelism never needs scipy
        from scipy.special._ufuncs import _binom_cdf, _binom_pmf, _binom_sf
    except ImportError:  # pragma: no cover - a scipy that moved them
        from scipy import stats

        return stats.binom.cdf, stats.binom.sf, stats.binom.pmf
    return _binom_cdf, _binom_sf, _binom_pmf


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


@lru_cache(maxsize=4096)
def hot_rank_factor(num_experts: int, ranks: int, expert_load_cv: float) -> float:
    """Busiest rank's share of a layer's token-expert pairs over the mean share, at a large batch.

    ``h = E[max of ep lognormal shares] / mean`` with the rank coefficient of variation
    ``v_r = v sqrt((E - m) / (m (E - 1)))`` (module docstring); ``E[max] = int_0^inf 1 - F(x)^ep dx``.

    Examples
    --------
    >>> hot_rank_factor(256, 1, 1.28)  # one rank holds every expert
    1.0
    >>> round(hot_rank_factor(256, 32, 0.0), 6)  # no hot experts
    1.0
    """
    per_rank = num_experts // ranks
    if ranks <= 1 or expert_load_cv <= 0.0 or per_rank >= num_experts:
        return 1.0
    from scipy import integrate, stats  # imported here: a run without expert parallelism never needs them

    rank_cv = expert_load_cv * math.sqrt((num_experts - per_rank) / (per_rank * (num_experts - 1)))
    sigma = math.sqrt(math.log1p(rank_cv**2))
    share = stats.lognorm(s=sigma, scale=math.exp(-(sigma**2) / 2.0))  # mean 1

    def above(x: float) -> float:
        return 1.0 - float(share.cdf(x)) ** ranks

    upper = float(share.ppf(1.0 - 1e-12))
    expected_max, _ = integrate.quad(above, 0.0, upper, limit=200)
    return max(1.0, float(expected_max))


@lru_cache(maxsize=65536)
def busiest_rank_pairs_hot(experts_per_token: int, ranks: int, hot_factor: float, tokens: int) -> float:
    """Token-expert pairs on the busiest rank with routing noise and hot experts (module docstring)."""
    mean = tokens * experts_per_token / ranks
    noise = busiest_rank_pairs(experts_per_token, ranks, tokens) - mean
    return mean + math.hypot(noise, (hot_factor - 1.0) * mean)


def busiest(function: object, tokens: FloatArray, *args: float) -> FloatArray:
    """Apply a cached busiest-rank expectation elementwise over token counts (rounded)."""
    counts = np.rint(np.asarray(tokens, dtype=np.float64)).astype(np.int64)
    unique, inverse = np.unique(counts, return_inverse=True)
    values = np.array([function(*args, int(t)) for t in unique], dtype=np.float64)  # type: ignore[operator]
    result: FloatArray = values[inverse].reshape(counts.shape)
    return result
