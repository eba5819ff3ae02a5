"""Load: open-loop arrival processes and closed-loop users (SimPy processes).

Arrival times are drawn in vectorised chunks; the process then waits once per arrival.
Non-homogeneous rates (steps, ramps) use Lewis-Shedler thinning of a Poisson process at the
peak rate: a candidate at ``t`` is kept with probability ``rate(t) / peak``.

A closed-loop user whose request is refused backs off ``REFUSED_BACKOFF_S``
(:mod:`~simulator.engine.clients`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import simpy

from simulator.config.scenario import (
    Arrivals,
    ClosedLoop,
    ConstantRate,
    GammaArrivals,
    Poisson,
    RateRamp,
    RateSteps,
)
from simulator.engine import ProcessGenerator
from simulator.engine.clients import REFUSED_BACKOFF_S, ClassSource

CHUNK = 4096


def _rate_function(spec: RateSteps | RateRamp) -> tuple[Callable[[np.ndarray], np.ndarray], float]:
    if isinstance(spec, RateSteps):
        starts = np.array([s.at for s in spec.steps])
        rates = np.array([s.rate_per_s for s in spec.steps])
        return (lambda t: rates[np.searchsorted(starts, t, side="right") - 1]), float(rates.max())
    r0, r1, over = spec.start_rate_per_s, spec.end_rate_per_s, spec.over
    return (lambda t: r0 + (r1 - r0) * np.clip(t / over, 0.0, 1.0)), max(r0, r1)


def arrival_times(spec: Arrivals, rng: np.random.Generator) -> Iterator[float]:
    """Absolute arrival times of an open-loop process, forever (the caller stops)."""
    t = 0.0
    while True:
        if isinstance(spec, Poisson):
            times = t + np.cumsum(rng.exponential(1.0 / spec.rate_per_s, CHUNK))
        elif isinstance(spec, GammaArrivals):
            shape = 1.0 / spec.burstiness
            times = t + np.cumsum(rng.gamma(shape, 1.0 / (spec.rate_per_s * shape), CHUNK))
        elif isinstance(spec, ConstantRate):
            times = t + np.arange(1, CHUNK + 1) / spec.rate_per_s
        else:
            rate, peak = _rate_function(spec)
            if peak <= 0:
                return
            candidates = t + np.cumsum(rng.exponential(1.0 / peak, CHUNK))
            keep = rng.random(CHUNK) * peak < rate(candidates)
            t = float(candidates[-1])
            yield from candidates[keep].tolist()
            continue
        t = float(times[-1])
        yield from times.tolist()


def open_loop(
    env: simpy.Environment, spec: Arrivals, rng: np.random.Generator, make: ClassSource, stop_s: float
) -> ProcessGenerator:
    """Submit a request at every arrival time before ``stop_s`` (or until the factory is spent)."""
    for t in arrival_times(spec, rng):
        if t >= stop_s:
            return
        yield env.timeout(t - env.now)
        if make.exhausted:  # checked at submission: other classes may have used the budget meanwhile
            return
        make.submit(user=-1)


def closed_loop_user(
    env: simpy.Environment, spec: ClosedLoop, user: int, rng: np.random.Generator, make: ClassSource, stop_s: float
) -> ProcessGenerator:
    """Think, send, wait for the answer's last token, repeat (the interactive response-time loop)."""
    if spec.start_spread > 0:
        yield env.timeout(spec.start_spread * user / spec.users)
    while True:
        think = float(spec.think_time_s.sample(rng, 1)[0])
        if think > 0:
            yield env.timeout(think)
        if env.now >= stop_s or make.exhausted:
            return
        request = make.submit(user=user)
        if request is None or request.done is None:
            yield env.timeout(REFUSED_BACKOFF_S)
            continue
        yield request.done
