"""How far one run's statistic may sit from the fleet's own: its sampling error.

A run measures a statistic (a mean, a percentile) over ``n`` requests or tasks; another seed
gives another sample and another value. Taken as ``n`` independent draws (the large-sample
laws), the standard error of

- the mean is ``std / sqrt(n)``;
- the ``q``-quantile is ``sqrt(q (1 - q) / n) dx/dq``, the slope of the quantile function at
  ``q``. The summary keeps the 50th, 90th, 95th, 99th and 99.9th percentiles; through the three
  nearest ``q`` a quadratic ``x(z)`` in the normal score ``z = Phi^-1(q)`` (exact for a normal
  distribution, close for a lognormal one) gives ``dx/dq = x'(z_q) / phi(z_q)``.

The requests or tasks of one run share its queues, so successive ones are correlated and the
statistic spreads more across seeds than this says: a floor on the error, not its size (on the
10-minute plan's answer, 4 x h100 + 8 x b300 + 1 x b200, six seeds' p95s spread with a
standard deviation of 7.7 s where the formula gives 6.4-7.7 s from each seed's ~600 tasks; for
2 x h100 + 8 x b300 + 3 x b200, 10.8 s against 6.3-8.7 s). A verdict with a stated confidence
reads the seeds' own spread instead (``plan.confidence``).
"""

from __future__ import annotations

import math

from simulator.results.summary import DistributionStats

#: Sampling errors of one run within which a statistic's margin to its bound is within noise:
#: another seed may well give the other verdict.
NOISE_ERRORS = 2.0
#: The normal score ``Phi^-1(q)`` of each percentile a summary keeps.
SCORES = {"p50": 0.0, "p90": 1.2815515655446004, "p95": 1.6448536269514722, "p99": 2.3263478740408408,
          "p99_9": 3.090232306167813}  # fmt: skip
#: For each percentile a target may bound, the three kept percentiles its slope is read through.
NEIGHBOURS = {
    "p50": ("p50", "p90", "p95"), "p90": ("p50", "p90", "p95"), "p95": ("p90", "p95", "p99"),
    "p99": ("p95", "p99", "p99_9"),
}  # fmt: skip


def _level(name: str) -> float:
    """The quantile a summary field names: ``p99_9`` -> 0.999."""
    return float(name[1:].replace("_", ".")) / 100


def _slope(points: list[tuple[float, float]], z: float) -> float:
    """``x'(z)`` of the quadratic through the ``(z, x)`` points (Lagrange's form, differentiated)."""
    total = 0.0
    for i, (zi, xi) in enumerate(points):
        others = [zj for j, (zj, _) in enumerate(points) if j != i]
        denominator = math.prod(zi - zj for zj in others)
        total += xi * sum(z - zj for zj in others) / denominator  # d/dz prod (z - zj) for two others
    return total


def standard_error(stats: DistributionStats, stat: str) -> float:
    """The standard error of ``stat`` (``mean`` or a percentile of :data:`NEIGHBOURS`) over
    ``stats.count`` independent draws (module docstring); NaN where the summary cannot give it."""
    n = stats.count
    if n < 2:
        return math.nan
    if stat == "mean":
        return float(stats.std / math.sqrt(n))
    if stat not in NEIGHBOURS:
        return math.nan
    names = NEIGHBOURS[stat]
    if stat == "p99" and not math.isfinite(stats.p99_9):  # a summary from before p99.9 was kept
        names = ("p90", "p95", "p99")
    points = [(SCORES[name], float(getattr(stats, name))) for name in names]
    if not all(math.isfinite(x) for _, x in points):
        return math.nan
    z = SCORES[stat]
    slope = max(_slope(points, z), 0.0)  # a quantile function never falls
    q = _level(stat)
    density_of_score = math.exp(-z * z / 2) / math.sqrt(2 * math.pi)
    return math.sqrt(q * (1 - q) / n) * slope / density_of_score
