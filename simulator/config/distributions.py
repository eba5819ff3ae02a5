"""Distribution specs that know their moments (Ciw's idea): mean, variance, and sampling.

Each spec is a tagged union member (``dist: ...``) with ``.mean``, ``.variance``,
``.sample(rng, n)`` and ``.draw(rng)``: one value, the same number as ``sample(rng, 1)[0]`` and
the stream left in the same state (a test holds them equal), without a size-1 array; and
``.quantile(u)``, the inverse CDF ``F^-1(u) = inf {x : F(x) >= u}`` of what ``sample`` draws, at
each ``u`` in ``[0, 1)`` (for bounds that need a distribution's lower tail). Lengths
(token counts) are rounded to integers >= 1 by the caller; the moments here are of the
continuous distribution as written.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import numpy.typing as npt
from pydantic import AfterValidator, Field, model_validator

from simulator.config.base import Spec
from simulator.config.files import number, read_csv, read_text
from simulator.errors import ConfigError

#: Largest parameter a distribution may have: 1e12 (seconds, tokens, calls or branches: a trillion of
#: any of them is a typing mistake, 32,000 years of think time or a trillion calls per task).
MAX_PARAMETER = 1e12
Positive = Annotated[float, Field(gt=0.0, le=MAX_PARAMETER)]
NonNegative = Annotated[float, Field(ge=0.0, le=MAX_PARAMETER)]
FloatArray = npt.NDArray[np.float64]


def _standard_normal_quantile(u: FloatArray) -> FloatArray:
    """``Phi^-1(u)`` (``-inf`` at 0); scipy is imported only when a bound asks for it."""
    from scipy.special import ndtri

    return np.asarray(ndtri(u), dtype=np.float64)


class Constant(Spec):
    dist: Literal["constant"] = "constant"
    value: NonNegative

    @property
    def mean(self) -> float:
        return self.value

    @property
    def variance(self) -> float:
        return 0.0

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        return np.full(n, self.value)

    def quantile(self, u: FloatArray) -> FloatArray:
        return np.full(np.shape(u), self.value)

    def draw(self, rng: np.random.Generator) -> float:
        return self.value


class Uniform(Spec):
    dist: Literal["uniform"] = "uniform"
    low: NonNegative
    high: NonNegative

    @model_validator(mode="after")
    def _ordered(self) -> Uniform:
        if self.high < self.low:
            raise ValueError("high must be >= low")
        return self

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2

    @property
    def variance(self) -> float:
        return (self.high - self.low) ** 2 / 12

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        return rng.uniform(self.low, self.high, n)

    def quantile(self, u: FloatArray) -> FloatArray:
        return self.low + np.asarray(u) * (self.high - self.low)

    def draw(self, rng: np.random.Generator) -> float:
        return float(rng.uniform(self.low, self.high))


class Normal(Spec):
    """Normal, truncated at zero by the caller's rounding (keep ``mean >> std``)."""

    dist: Literal["normal"] = "normal"
    mean_value: NonNegative = Field(alias="mean")
    std: NonNegative

    @property
    def mean(self) -> float:
        return self.mean_value

    @property
    def variance(self) -> float:
        return self.std**2

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        return np.maximum(rng.normal(self.mean_value, self.std, n), 0.0)

    def quantile(self, u: FloatArray) -> FloatArray:
        """Of the draws as clipped at 0: ``max(0, mean + std Phi^-1(u))``."""
        if self.std == 0:
            return np.full(np.shape(u), max(self.mean_value, 0.0))
        return np.maximum(self.mean_value + self.std * _standard_normal_quantile(u), 0.0)

    def draw(self, rng: np.random.Generator) -> float:
        return max(0.0, float(rng.normal(self.mean_value, self.std)))  # as np.maximum: 0.0, not -0.0


#: Widest lognormal accepted: at sigma 10 the central 99.99 % already spans 34 orders of
#: magnitude, wider than any length or time; at about 26.6 the variance overflows a double.
MAX_LOGNORMAL_SIGMA = 10.0


class LogNormal(Spec):
    """``exp(N(log median, sigma^2))``: mean ``median e^(s^2/2)``, variance ``(e^(s^2) - 1) mean^2``."""

    dist: Literal["lognormal"] = "lognormal"
    median: Positive
    sigma: Annotated[float, Field(ge=0.0, le=MAX_LOGNORMAL_SIGMA)]

    @property
    def mean(self) -> float:
        return self.median * math.exp(self.sigma**2 / 2)

    @property
    def variance(self) -> float:
        return (math.exp(self.sigma**2) - 1) * self.mean**2

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        return rng.lognormal(math.log(self.median), self.sigma, n)

    def quantile(self, u: FloatArray) -> FloatArray:
        if self.sigma == 0:  # exp(log median), as the sampler computes it
            return np.full(np.shape(u), math.exp(math.log(self.median)))
        return np.exp(math.log(self.median) + self.sigma * _standard_normal_quantile(u))

    def draw(self, rng: np.random.Generator) -> float:
        """``rng.lognormal(log median, sigma)`` as numpy computes it, ``exp(mu + sigma z)`` of one
        standard normal draw ``z`` (the same number, the same stream), without its array call."""
        return math.exp(math.log(self.median) + self.sigma * rng.standard_normal())


class Exponential(Spec):
    dist: Literal["exponential"] = "exponential"
    mean_value: Positive = Field(alias="mean")

    @property
    def mean(self) -> float:
        return self.mean_value

    @property
    def variance(self) -> float:
        return self.mean_value**2

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        return rng.exponential(self.mean_value, n)

    def quantile(self, u: FloatArray) -> FloatArray:
        return -self.mean_value * np.log1p(-np.asarray(u))

    def draw(self, rng: np.random.Generator) -> float:
        return float(rng.exponential(self.mean_value))


class Geometric(Spec):
    """Number of trials to the first success, support 1, 2, ...: mean ``1/p``, var ``(1-p)/p^2``."""

    dist: Literal["geometric"] = "geometric"
    mean_value: Annotated[float, Field(ge=1.0, le=MAX_PARAMETER)] = Field(alias="mean")

    @property
    def p(self) -> float:
        return 1.0 / self.mean_value

    @property
    def mean(self) -> float:
        return self.mean_value

    @property
    def variance(self) -> float:
        return (1 - self.p) / self.p**2

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        return rng.geometric(self.p, n).astype(np.float64)

    def quantile(self, u: FloatArray) -> FloatArray:
        """``max(1, ceil(log(1 - u) / log(1 - p)))``: the trials whose CDF ``1 - (1 - p)^k`` reaches ``u``."""
        if self.p == 1.0:
            return np.ones(np.shape(u))
        return np.maximum(np.ceil(np.log1p(-np.asarray(u)) / math.log1p(-self.p)), 1.0)

    def draw(self, rng: np.random.Generator) -> float:
        return float(rng.geometric(self.p))


class Empirical(Spec):
    """Values from a file (one number per line, or a CSV column), resampled with replacement.

    The file is read when the spec is validated (a relative path is taken from the current
    folder): every value must be a number from 0 to :data:`MAX_PARAMETER`, and there must be at least one.
    """

    dist: Literal["empirical"] = "empirical"
    path: Path
    column: str | None = Field(None, description="CSV column; empty: one number per line")

    @model_validator(mode="after")
    def _readable(self) -> Empirical:
        self.values()
        return self

    def values(self) -> FloatArray:
        return _read_values(self.path, self.column)

    @property
    def mean(self) -> float:
        return float(self.values().mean())

    @property
    def variance(self) -> float:
        return float(self.values().var())

    def sample(self, rng: np.random.Generator, n: int) -> FloatArray:
        return rng.choice(self.values(), n, replace=True)

    def quantile(self, u: FloatArray) -> FloatArray:
        return np.quantile(self.values(), u, method="inverted_cdf")

    def draw(self, rng: np.random.Generator) -> float:
        return float(self.sample(rng, 1)[0])


_CACHE: dict[tuple[Path, str | None], FloatArray] = {}


def _read_values(path: Path, column: str | None) -> FloatArray:
    """The values of a length or time file, read once (through the strict readers)."""
    key = (path.resolve(), column)
    if key not in _CACHE:
        if column is None:
            lines = [(n, t.strip()) for n, t in enumerate(read_text(path).splitlines(), start=1) if t.strip()]
            values = [number(text, f"{path}:{n}", "value", minimum=0.0, maximum=MAX_PARAMETER) for n, text in lines]
        else:
            _, rows = read_csv(path, (column,))
            values = [number(row[column], f"{path}:{n}", column, minimum=0.0, maximum=MAX_PARAMETER) for n, row in rows]
        if not values:
            raise ConfigError(f"{path}: no values (an empirical distribution needs at least one)")
        _CACHE[key] = np.array(values, dtype=np.float64)
    return _CACHE[key]


Distribution = Annotated[
    Constant | Uniform | Normal | LogNormal | Exponential | Geometric | Empirical,
    Field(discriminator="dist"),
]

#: Most tokens one request may hold: the longest context window of a published model (10,485,760
#: tokens) rounded up to a power of two, 2**24. Beyond it a length is a mistake, not a workload: no
#: model holds it, and the closed-form estimates made before a run (layout choice, run size: one
#: entry per prefill chunk) would take minutes and gigabytes.
MAX_REQUEST_TOKENS = 2**24


def _token_counts(dist: Constant | Uniform | Normal | LogNormal | Exponential | Geometric | Empirical) -> object:
    """A distribution of tokens per request: mean and standard deviation at most :data:`MAX_REQUEST_TOKENS`
    (so a draw beyond it, or beyond a 64-bit count, has a vanishing chance: Chebyshev)."""
    try:
        spread = math.sqrt(dist.variance)
    except OverflowError:
        spread = math.inf
    if dist.mean > MAX_REQUEST_TOKENS or spread > MAX_REQUEST_TOKENS:
        values = f" (the values of {dist.path})" if isinstance(dist, Empirical) else ""
        raise ValueError(
            f"a request holds at most {MAX_REQUEST_TOKENS:,} tokens; this distribution{values} has a mean of "
            f"{dist.mean:.3g} tokens and a standard deviation of {spread:.3g}"
        )
    return dist


#: A distribution of token counts per request (prompt, output, tool result), bounded.
TokenCounts = Annotated[Distribution, AfterValidator(_token_counts)]
