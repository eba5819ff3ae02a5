"""How big a run is, checked before it starts: requests, clients, replicas and memory.

A scenario can ask for more than any machine simulates (``duration: 1e308 s``, a billion
users); without a check it hangs or exhausts memory. Before building processes, every
class's model calls are bounded from above by the resolver of its load
(:func:`simulator.plan.resolve.load_plan`):

- open loop: ``peak rate x duration`` (or ``run.max_requests``);
- closed-loop users: ``users x duration / (mean think time + fastest request)``, where the
  fastest request is the closed-form end-to-end time of a mean-length request alone on the
  fastest allowed backend (:func:`fastest_call_s`; nothing completes faster, so no user sends more);
- agents: ``agents x duration / fastest call`` (tools only lower it), open-loop tasks
  ``tasks_per_s x duration x mean calls per task``;
- traces: their rows, known once loaded (files are finite), so only the clients count.

The total is capped by ``run.max_requests``. Memory is estimated from measured per-item costs
(:data:`BYTES_PER_REQUEST`, :data:`BYTES_PER_USER`, :data:`BYTES_PER_AGENT`,
:data:`BYTES_PER_REPLICA`). A run over a limit raises :class:`RunTooLargeError` with the estimate,
how it was made and the limit; the command line's ``--allow-large-runs`` skips the check.

A command that expands lists into many runs (``run`` and ``compare`` with comma lists of
``--set`` and ``--hardware``, ``sweep``'s grid, samples and replications, ``plan``'s candidates)
counts them arithmetically, before building any, and :func:`check_runs` refuses more than
:attr:`Limits.max_runs` the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from simulator.analytic.estimate import estimate
from simulator.analytic.placement import Deployment
from simulator.errors import InfersimError

#: Records, level monitors and counters per simulated request (measured: 257 B on a 1M-request run).
BYTES_PER_REQUEST = 260.0
#: One closed-loop user once started: its SimPy process and length samplers (measured: ~21 kB).
BYTES_PER_USER = 21_000.0
#: One closed-loop agent once started (measured: ~3.6 kB).
BYTES_PER_AGENT = 4_000.0
#: One replica: slot arrays, block manager, level monitors (order of magnitude, assumed).
BYTES_PER_REPLICA = 100_000.0


class RunTooLargeError(InfersimError):
    """A run over a limit: the message says what was estimated, how, and the limit."""


@dataclass(frozen=True)
class Limits:
    """What one run may ask for before it needs ``--allow-large-runs``."""

    max_requests: float = 20_000_000  # ~2 CPU-hours at today's ~330 us per request
    max_clients: int = 500_000
    max_replicas: int = 10_000
    max_memory_bytes: float = 8e9
    #: Runs one command may expand into (a sweep, ``run`` or ``compare`` with comma lists, a plan's
    #: candidates x replications). Each is validated and resolved up front (~7 ms measured for a
    #: compare case on a loaded 2-core machine) and simulated for at least a tenth of a second:
    #: 10,000 runs are about a minute of checks and at least 17 minutes of CPU.
    max_runs: int = 10_000


@dataclass
class RunSize:
    """Upper estimates of what a run will do, with how each was made."""

    requests: float = 0.0
    users: int = 0
    agents: int = 0
    replicas: int = 0
    how: list[str] = field(default_factory=list)

    @property
    def clients(self) -> int:
        return self.users + self.agents

    @property
    def memory_bytes(self) -> float:
        finite_requests = self.requests if math.isfinite(self.requests) else math.inf
        return (
            finite_requests * BYTES_PER_REQUEST
            + self.users * BYTES_PER_USER
            + self.agents * BYTES_PER_AGENT
            + self.replicas * BYTES_PER_REPLICA
        )

    def add_requests(self, count: float, how: str) -> None:
        self.requests += count
        self.how.append(how)


def _amount(x: float) -> str:
    return f"{x:,.0f}" if x < 1e12 else f"{x:.3g}"


def check(size: RunSize, limits: Limits) -> None:
    """Raise :class:`RunTooLargeError` when any estimate is over its limit."""
    problems = []
    if size.requests > limits.max_requests:
        problems.append(f"about {_amount(size.requests)} model calls (limit {_amount(limits.max_requests)})")
    if size.clients > limits.max_clients:
        problems.append(f"{size.clients:,} concurrent users and agents (limit {limits.max_clients:,})")
    if size.replicas > limits.max_replicas:
        problems.append(f"{size.replicas:,} replicas (limit {limits.max_replicas:,})")
    if size.memory_bytes > limits.max_memory_bytes:
        memory_gb, limit_gb = size.memory_bytes / 1e9, limits.max_memory_bytes / 1e9
        problems.append(f"about {memory_gb:,.3g} GB of memory (limit {limit_gb:g} GB)")
    if problems:
        how = "; ".join(size.how) if size.how else ""
        raise RunTooLargeError(
            f"this run is too large to simulate: {', '.join(problems)}"
            + (f" [estimated from {how}]" if how else "")
            + "; shorten run.duration, set run.max_requests, lower the load, or pass --allow-large-runs"
        )


def check_runs(runs: int, limits: Limits | None, what: str, how: str, fewer: str) -> None:
    """Raise :class:`RunTooLargeError` when a command would expand into more than
    :attr:`Limits.max_runs` runs (``limits`` None: no limit). ``what`` names the command's input,
    ``how`` the arithmetic of the count (``3 values x 2 values``), ``fewer`` what to shorten."""
    if limits is not None and runs > limits.max_runs:
        raise RunTooLargeError(
            f"{what}: too many runs: {_amount(runs)} ({how}; limit {limits.max_runs:,}); {fewer}, "
            "or pass --allow-large-runs"
        )


def fastest_call_s(deployments: Sequence[Deployment], mean_input_tokens: float, mean_output_tokens: float) -> float:
    """The closed-form end-to-end seconds of a mean-length call alone on the fastest deployment."""
    prompt = max(1, round(mean_input_tokens))
    answer = max(1, round(mean_output_tokens))
    return min(estimate(d, prompt, answer, 1, strict=False).e2e_s for d in deployments)
