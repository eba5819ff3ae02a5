"""Load: open-loop arrival processes and closed-loop users (SimPy processes).

Arrival times are drawn in vectorised chunks; the process then waits once per arrival.
Non-homogeneous rates (steps, ramps) use Lewis-Shedler thinning of a Poisson process at the
peak rate: a candidate at ``t`` is kept with probability ``rate(t) / peak``.

A closed-loop user whose request is refused backs off ``REFUSED_BACKOFF_S``
(:mod:`~simulator.engine.clients`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import numpy as np
import simpy

from simulator.config.scenario import (
    ArrivalProcess,
    ClosedLoop,
    ConstantRate,
    GammaArrivals,
    OpenLoop,
    Poisson,
    RateRamp,
    RateSteps,
)
from simulator.engine import ProcessGenerator
from simulator.engine.clients import REFUSED_BACKOFF_S, ClassRun, ClassSource, LengthSampler, start_load
from simulator.records.store import FloatArray

CHUNK = 4096


@functools.singledispatch
def arrival_times(spec: object, rng: np.random.Generator) -> Iterator[float]:
    """Absolute arrival times of an open-loop process, forever (the caller stops), by its config class.

    A new arrival process registers its generator with ``@arrival_times.register``.
    """
    raise TypeError(f"no arrival process is registered for {type(spec).__name__} (@arrival_times.register one)")


def _exponential_gaps(rng: np.random.Generator, mean_s: float) -> FloatArray:
    """``CHUNK`` exponential gaps of mean ``mean_s`` (Poisson arrivals)."""
    return rng.exponential(mean_s, CHUNK)


def _gamma_gaps(rng: np.random.Generator, shape: float, scale_s: float) -> FloatArray:
    """``CHUNK`` gamma gaps of this shape and scale (mean ``shape * scale_s``)."""
    return rng.gamma(shape, scale_s, CHUNK)


def _renewal(gaps: Callable[[], FloatArray]) -> Iterator[float]:
    """Arrivals separated by independent gaps, drawn ``CHUNK`` at a time."""
    t = 0.0
    while True:
        times = t + np.cumsum(gaps())
        t = float(times[-1])
        yield from times.tolist()


# The implementations pass their constants by ``functools.partial``, not closures: compiled
# (:mod:`simulator.compiled`), a closure in a registered implementation loses its variables.
@arrival_times.register
def _poisson(spec: Poisson, rng: np.random.Generator) -> Iterator[float]:
    return _renewal(functools.partial(_exponential_gaps, rng, 1.0 / spec.rate_per_s))


@arrival_times.register
def _gamma(spec: GammaArrivals, rng: np.random.Generator) -> Iterator[float]:
    """Gamma gaps of mean ``1 / rate`` and squared coefficient of variation ``burstiness``."""
    shape = 1.0 / spec.burstiness
    return _renewal(functools.partial(_gamma_gaps, rng, shape, 1.0 / (spec.rate_per_s * shape)))


@arrival_times.register
def _constant(spec: ConstantRate, rng: np.random.Generator) -> Iterator[float]:
    """Every ``1 / rate`` seconds exactly: arrival ``k`` at ``k / rate``."""
    t = 0.0
    while True:
        times = t + np.arange(1, CHUNK + 1) / spec.rate_per_s
        t = float(times[-1])
        yield from times.tolist()


def _thinned(rng: np.random.Generator, rate: Callable[[FloatArray], FloatArray], peak: float) -> Iterator[float]:
    """Lewis-Shedler thinning: Poisson candidates at ``peak``, each kept with probability ``rate(t) / peak``."""
    if peak <= 0:
        return
    t = 0.0
    while True:
        candidates = t + np.cumsum(rng.exponential(1.0 / peak, CHUNK))
        keep = rng.random(CHUNK) * peak < rate(candidates)
        t = float(candidates[-1])
        yield from candidates[keep].tolist()


def _step_rate(starts: FloatArray, rates: FloatArray, t: FloatArray) -> FloatArray:
    """The rate in force at each time ``t``: that of the last step started."""
    rate: FloatArray = rates[np.searchsorted(starts, t, side="right") - 1]
    return rate


def _ramp_rate(start: float, end: float, over: float, t: FloatArray) -> FloatArray:
    """The rate at each time ``t`` of a linear ramp from ``start`` to ``end`` over ``over`` seconds."""
    rate: FloatArray = start + (end - start) * np.clip(t / over, 0.0, 1.0)
    return rate


@arrival_times.register
def _steps(spec: RateSteps, rng: np.random.Generator) -> Iterator[float]:
    starts = np.array([s.at for s in spec.steps])
    rates = np.array([s.rate_per_s for s in spec.steps])
    return _thinned(rng, functools.partial(_step_rate, starts, rates), spec.peak_rate_per_s)


@arrival_times.register
def _ramp(spec: RateRamp, rng: np.random.Generator) -> Iterator[float]:
    rate = functools.partial(_ramp_rate, spec.start_rate_per_s, spec.end_rate_per_s, spec.over)
    return _thinned(rng, rate, spec.peak_rate_per_s)


def open_loop(
    env: simpy.Environment, spec: ArrivalProcess, rng: np.random.Generator, make: ClassSource, stop_s: float
) -> ProcessGenerator:
    """Submit a request at every arrival time before ``stop_s`` (or until the factory is spent)."""
    for t in arrival_times(spec, rng):
        if t >= stop_s:
            return
        yield env.timeout(t - env.now)
        if make.exhausted:  # checked at submission: other classes may have used the budget meanwhile
            return
        make.submit(user=-1, awaited=False)


def closed_loop_user(
    env: simpy.Environment, spec: ClosedLoop, user: int, rng: np.random.Generator, make: ClassSource, stop_s: float
) -> ProcessGenerator:
    """Think, send, wait for the answer's last token, repeat (the interactive response-time loop)."""
    if spec.start_spread > 0:
        yield env.timeout(spec.start_spread * user / spec.users)
    while True:
        think = spec.think_time_s.draw(rng)
        if think > 0:
            yield env.timeout(think)
        if env.now >= stop_s or make.exhausted:
            return
        request = make.submit(user=user)
        if request is None or request.done is None:
            yield env.timeout(REFUSED_BACKOFF_S)
            continue
        yield request.done


def _open(load: OpenLoop, run: ClassRun) -> None:
    run.env.process(open_loop(run.env, load.arrivals, np.random.default_rng(run.arrivals), run.source, run.stop_s))


def _closed(load: ClosedLoop, run: ClassRun) -> None:
    """One process per user, each with its own think-time and length streams."""
    lengths = run.plan.lengths
    assert lengths is not None
    for user, ss in enumerate(run.clients.spawn(load.users)):
        think_ss, in_ss, out_ss = ss.spawn(3)
        run.source.samplers[user] = (
            LengthSampler(lengths.input_tokens, np.random.default_rng(in_ss)),
            LengthSampler(lengths.output_tokens, np.random.default_rng(out_ss)),
        )
        rng = np.random.default_rng(think_ss)
        run.env.process(closed_loop_user(run.env, load, user, rng, run.source, run.stop_s))


# registered by a call, not ``@start_load.register``: mypyc cannot compile that decorator in this module
start_load.register(OpenLoop, _open)
start_load.register(ClosedLoop, _closed)
