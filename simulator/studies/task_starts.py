"""How many tasks closed-loop agents may still start before the arrivals end, at a stated risk.

An agent of a closed loop (``agents: N``) runs tasks back to back, thinking between them (at
least 0 s). A task of ``S`` calls waits for its tools after every call but the last, except the
call a fan-out follows (:meth:`~simulator.config.workload.AgentTaskSpec.tool_waits`: ``g(S)``
waits); a wait lasts at least one draw ``X`` of ``tool.latency_s`` (the slowest of its parallel
tool calls), and the calls, the thinking and the sub-agents take at least 0 s, whatever the
fleet. So at time ``t``, an agent whose task has ``w`` tool waits still to begin (0 between tasks
or before it joins) starts its ``k``-th task from now after ``w`` draws and the waits of ``k - 1``
whole tasks, and with ``W = D - t`` left of the arrivals (none start from ``D``) its count
``N_i`` of tasks still to start has

    P(N_i >= k) <= P(X_1 + ... + X_w + Y_1 + ... + Y_(k-1) < W)
                <= exp(min_lambda [lambda W + w log E e^(-lambda X) + (k - 1) log E e^(-lambda Y)])

(Chernoff; ``Y`` a whole task's waits, ``E e^(-lambda Y) = E[(E e^(-lambda X))^g(S)]``). Both
transforms are bounded from above on grids of quantiles: ``e^(-lambda F^-1(u))`` and
``L^g(S(u))`` (``L <= 1``) fall as ``u`` grows, so the sums over the left ends of equal slices of
``[0, 1)`` are over the integrals. Each agent draws on its own stream, so the counts are
independent, and each is no larger in distribution than ``N_i'`` with ``P(N_i' >= k) = q_k``,
the bounds above made monotone (``q_k = min(1, min_(j <= k) c_j)``). So (Chernoff again)

    P(sum_i N_i >= m) <= min_theta exp(-theta m + sum_i log E e^(theta N_i'))

and with ``m`` the least integer where that is at most ``delta``, :meth:`TaskStarts.most` is ``m - 1``:
the tasks still to start, except with chance ``delta`` (plus ``N e^LOG_TINY``, the tails dropped). An agent
half-way through a task is counted with what it has left, which the per-agent bound of a
shortest task length could not: a rule that knew only that every task lasts at least ``d``
must let every agent start ``1 + floor(W / d)`` more.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from simulator.analytic.kept import Kept
from simulator.config.distributions import Distribution
from simulator.config.workload import AgentTaskSpec

#: Points of the quantile grids that bound the transforms, and of the ``lambda`` grid.
_QUANTILES, _LAMBDAS = 4096, 61
#: The ``lambda`` grid spans these multiples of ``1 / E[X]`` (log-spaced): the Chernoff optimum for
#: a sum of waits lies where ``lambda E[X]`` is of order one, far inside it.
_LAMBDA_SPAN = (1e-3, 1e3)
#: The ``theta`` grid of the bound on the sum over the agents.
_THETAS = np.geomspace(1e-3, 1e2, 41)
#: Tails of one agent's count below ``e^LOG_TINY`` are dropped (each adds at most that to the risk).
LOG_TINY = -700.0
#: The most tasks one agent is counted as starting: past it there is no bound (tasks too short).
MOST_PER_AGENT = 256
#: Tasks ahead of an agent costed at once.
_CHUNK = 16
#: Bounds kept between runs of one process (a plan's candidates share their workload, agents and
#: risk; each bound's transforms take ~20 ms of numpy to build).
BOUNDS_KEPT = 8
_kept: Kept[tuple[AgentTaskSpec, int, float], TaskStarts] = Kept(BOUNDS_KEPT)


def log_laplace_bound(latency: Distribution, lambdas: np.ndarray) -> np.ndarray:
    """``log E[e^(-lambda X)]`` bounded from above at each ``lambda``: the mean of ``e^(-lambda
    F^-1(u))`` over the left ends ``u = i / n`` of ``n`` equal slices of ``[0, 1)``."""
    left = latency.quantile(np.arange(_QUANTILES) / _QUANTILES)
    bound: np.ndarray = logsumexp(-np.outer(lambdas, left), axis=1) - math.log(_QUANTILES)
    return bound


@dataclass(frozen=True)
class TaskStarts:
    """The bound for a class of ``agents`` closed-loop agents: its Chernoff exponents per tool wait
    (``per_wait``) and per whole task (``per_task``) on the ``lambdas`` grid, and ``log_risk``, the
    log of the chance ``delta`` each bound may be exceeded."""

    agents: int
    lambdas: np.ndarray
    per_wait: np.ndarray
    per_task: np.ndarray
    log_risk: float

    @classmethod
    def of(cls, task: AgentTaskSpec, agents: int, risk: float) -> TaskStarts | None:
        """The bound for ``agents`` running ``task`` at chance ``risk``; None where a tool takes no
        time on average (a task may be instant: nothing bounds the tasks still to start). It
        depends on these alone, so one built for equal ones is reused (:data:`BOUNDS_KEPT`)."""
        key = (task, agents, risk)
        kept = _kept.get(key)
        if kept is not None:
            return kept
        bound = cls._built(task, agents, risk)
        return _kept.keep(key, bound) if bound is not None else None

    @classmethod
    def _built(cls, task: AgentTaskSpec, agents: int, risk: float) -> TaskStarts | None:
        """:meth:`of`, built anew."""
        latency = task.tool.latency_s
        if not latency.mean > 0 or not math.isfinite(latency.mean):
            return None
        lambdas = np.geomspace(*_LAMBDA_SPAN, _LAMBDAS) / latency.mean
        per_wait = log_laplace_bound(latency, lambdas)
        steps = np.maximum(1, np.round(task.steps.quantile(np.arange(_QUANTILES) / _QUANTILES)))
        waits = np.array([task.tool_waits(int(s)) for s in np.nan_to_num(steps, nan=1.0)])
        per_task = logsumexp(np.outer(per_wait, waits), axis=1) - math.log(_QUANTILES)
        return cls(agents, lambdas, per_wait, per_task, math.log(risk))

    def most(self, window_s: float, waits_left: Sequence[int]) -> int | None:
        """The most tasks the agents may start in the next ``window_s``, except with chance
        ``delta`` (module docstring): ``waits_left``, the tool waits still to begin of each task
        under way (the other agents are between tasks); None where a task may be too short."""
        if window_s <= 0:
            return 0
        groups = Counter(max(0, w) for w in waits_left)
        idle = self.agents - len(waits_left)
        if idle > 0:
            groups[0] += idle
        waits, counts = (np.array(column, dtype=float) for column in zip(*sorted(groups.items()), strict=True))
        tails = self._log_tails(window_s, waits)
        if tails is None:
            return None
        total = counts @ _log_mgf(tails)
        # P(sum >= m) <= delta from the least m >= (log E e^(theta sum) - log delta) / theta: at most m - 1 start
        return max(0, math.ceil(float(np.min((total - self.log_risk) / _THETAS))) - 1)

    def _log_tails(self, window_s: float, waits: np.ndarray) -> np.ndarray | None:
        """``log q_k`` (a row per agent with ``waits[i]`` tool waits left, a column per ``k = 1, 2,
        ...``): the bound on ``P(N_i >= k)`` made monotone, up to the first ``k`` where every row is
        under :data:`LOG_TINY`; None past :data:`MOST_PER_AGENT`."""
        head = self.lambdas[None, :] * window_s + waits[:, None] * self.per_wait[None, :]  # agent x lambda
        found: list[np.ndarray] = []
        lowest = np.zeros(waits.size)
        for first in range(0, MOST_PER_AGENT, _CHUNK):
            ahead = np.arange(first, first + _CHUNK, dtype=float)  # whole tasks before the k-th: k - 1
            exponents = np.min(head[:, None, :] + ahead[None, :, None] * self.per_task[None, None, :], axis=2)
            tails = np.minimum.accumulate(np.minimum(np.minimum(exponents, 0.0), lowest[:, None]), axis=1)
            lowest = tails[:, -1]
            done = np.all(tails < LOG_TINY, axis=0)
            if done.any():
                found.append(tails[:, : int(np.argmax(done)) + 1])
                return np.concatenate(found, axis=1)
            found.append(tails)
        return None


def _log_mgf(log_tails: np.ndarray) -> np.ndarray:
    """``log E e^(theta N')`` (a row per agent, a column per ``theta`` of the grid), where
    ``P(N' >= k) = e^log_tails[:, k-1]`` for ``k = 1 .. K`` and 0 past ``K``: ``P(N' = k) = q_k - q_(k+1)``."""
    rows = log_tails.shape[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        log_q = np.concatenate([np.zeros((rows, 1)), log_tails, np.full((rows, 1), -np.inf)], axis=1)
        log_mass = log_q[:, :-1] + np.log1p(-np.exp(log_q[:, 1:] - log_q[:, :-1]))  # P(N' = k), k = 0 .. K
    log_mass = np.where(np.isnan(log_mass), -np.inf, log_mass)  # q_k = q_(k+1) = 0: no mass
    k = np.arange(log_mass.shape[1], dtype=float)
    mgf: np.ndarray = logsumexp(log_mass[:, None, :] + _THETAS[None, :, None] * k[None, None, :], axis=2)
    return mgf
