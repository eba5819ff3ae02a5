"""Whether a reported speed is capacity-limited, decided once for every output.

A per-user speed or TTFT is **capacity-limited** when the deployment cannot hold the load:
it holds fewer sequences at once than the load asks to run (``held < demand``), or a run
preempted a sequence because its KV ran out (``preemptions > 0``). ``held`` is the concurrency
the KV budget allows at full context ``I + O`` of the typical call and the batch cap, over all
replicas (:func:`simulator.analytic.estimate.saturation_concurrency`); an agent's typical call is
its task's mean one, whose context has grown call after call
(:meth:`~simulator.config.workload.AgentTaskSpec.mean_call`). The ``demand`` is the ``users``
(each asking all the time: the closed form's concurrency) or, for a simulated run, the calls it
had in flight on average (``in_flight``: the run's ``mean_concurrency``, queued calls included).
By Little's law that is ``users x R / (R + Z)`` for users pausing ``Z`` between responses of
``R``: agents between tool calls hold no running sequence, and an agent fleet whose KV holds
the calls it runs is not limited however many agents wait on tools. The demand that does not fit
waits: the speed quoted is that of the ``held`` running, and averaged over the demand each gets
``speed * held / demand`` (the replica streams ``held * speed`` tokens/s, shared by ``demand``).

Every text table, JSON document, HTML table and takeaway uses :func:`capacity_limited` and
marks such a figure with :data:`LIMITED_MARK`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulator.analytic.estimate import Estimate
    from simulator.config.loading import Catalog
    from simulator.config.scenario import Scenario
    from simulator.plan.resolve import BackendPlan, ResolvedScenario
    from simulator.results.summary import RunSummary

#: The mark on a capacity-limited figure (a report row holding one is highlighted).
LIMITED_MARK = "⚠"


def capacity_limited(demand: float | None, held: int | None, preemptions: int = 0) -> bool:
    """True when the deployment holds fewer sequences than the ``demand`` asks to run, or the run preempted one.

    >>> capacity_limited(64, 12), capacity_limited(16, 64), capacity_limited(None, None, preemptions=3)
    (True, False, True)
    """
    return preemptions > 0 or (demand is not None and held is not None and held < demand)


@dataclass(frozen=True)
class Capacity:
    """Users offered, sequences held at once, preemptions, and a run's mean calls in flight;
    ``None`` where unknown (an open loop has no users, the closed form no run)."""

    users: int | None
    held: int | None
    preemptions: int = 0
    in_flight: float | None = None

    @property
    def demand(self) -> float | None:
        """The sequences the load asks to run at once: the run's calls in flight, else the users."""
        return self.in_flight if self.in_flight is not None else self.users

    @property
    def limited(self) -> bool:
        return capacity_limited(self.demand, self.held, self.preemptions)

    def sharing(self) -> str:
        """Who shares the running sequences' speed in words: 'all 64 users', or 'the 57 calls in flight'.

        >>> Capacity(64, 12).sharing(), Capacity(64, 33, in_flight=57.2).sharing()
        ('all 64 users', 'the 57 calls in flight')
        """
        if self.in_flight is not None:
            return f"the {self.in_flight:,.0f} calls in flight"
        return f"all {self.users:,} users" if self.users is not None else "all users"

    def holds(self) -> str:
        """What the deployment holds against the demand, in words ('' when either is unknown).

        >>> Capacity(64, 12).holds(), Capacity(64, 33, in_flight=57.2).holds(), Capacity(64, 12, in_flight=63.9).holds()
        ('holds 12 of 64 users', 'holds 33 of 57 calls in flight (64 users)', 'holds 12 of 64 users')
        """
        if self.held is None or self.demand is None:
            return ""
        if self.in_flight is None or (self.users is not None and round(self.in_flight) >= self.users):
            return f"holds {self.held:,} of {self.users:,} users"  # every user in a call (no pause)
        users = f" ({self.users:,} users)" if self.users is not None else ""
        return f"holds {self.held:,} of {self.in_flight:,.0f} calls in flight{users}"

    @property
    def mark(self) -> str:
        return LIMITED_MARK if self.limited else ""

    def marked(self, cell: str) -> str:
        """``cell`` with the mark when limited (a cell with no number, ``-``, stays as it is)."""
        return cell + self.mark if cell != "-" else cell

    def averaged(self, per_user: float | None) -> float | None:
        """A running user's speed averaged over the demand: ``speed * held / demand`` when less is held.

        >>> Capacity(64, 12).averaged(445.0), Capacity(64, 30, in_flight=60.0).averaged(445.0)
        (83.4375, 222.5)
        """
        demand = self.demand
        if per_user is None or not self.limited or not demand or self.held is None or self.held >= demand:
            return per_user
        return per_user * self.held / demand

    def note(self) -> str:
        """Why the figure is limited, in words ('' when it is not).

        >>> Capacity(64, 12, 898).note()
        '⚠ holds 12 of 64 users, 898 preemptions'
        """
        if not self.limited:
            return ""
        parts = []
        if self.demand is not None and self.held is not None and self.held < self.demand:
            parts.append(self.holds())
        if self.preemptions:
            parts.append(f"{self.preemptions:,} preemption{'s' if self.preemptions != 1 else ''}")
        return f"{LIMITED_MARK} " + ", ".join(parts)

    def to_dict(self) -> dict[str, object]:
        """The JSON fields: ``capacity_limited``, ``users``, ``held`` (sequences at once), ``preemptions``
        and ``in_flight`` (a run's mean calls in flight; None for the closed form)."""
        return {"capacity_limited": self.limited, "users": self.users, "held": self.held,
                "preemptions": self.preemptions, "in_flight": self.in_flight}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Capacity:
        """Read back :meth:`to_dict`'s fields (absent ones unknown)."""

        def whole(key: str) -> int | None:
            value = data.get(key)
            return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

        flight = data.get("in_flight")
        in_flight = float(flight) if isinstance(flight, int | float) and not isinstance(flight, bool) else None
        return cls(whole("users"), whole("held"), whole("preemptions") or 0, in_flight)


def of_estimate(e: Estimate) -> Capacity:
    """The closed form's users and the concurrency its KV and batch cap hold."""
    return Capacity(e.concurrency, e.max_concurrency)


def of_run(scenario: Scenario, summary: RunSummary, catalog: Catalog | None = None) -> Capacity:
    """A simulated run's closed-loop users and agents, the calls it had in flight on average, and
    what its fleet holds at once at each class's typical call (its backends' replicas x the closed
    form's concurrency, capped by the batch).

    ``held`` is None when the scenario cannot be resolved again here (a trace moved away) or has no
    typical call; the preemptions still decide."""
    from simulator.config.loading import Catalog
    from simulator.errors import InfersimError
    from simulator.plan.resolve import resolve

    try:
        resolved = resolve(scenario, catalog or Catalog())
    except (InfersimError, OSError, ValueError):
        return Capacity(None, None, summary.preemptions, _in_flight(summary))
    return of_resolved(resolved, summary)


def _in_flight(summary: RunSummary) -> float | None:
    """The run's mean calls in flight (``mean_concurrency``); None where it measured none."""
    mean = summary.mean_concurrency
    return float(mean) if mean is not None and mean == mean else None


def of_resolved(resolved: ResolvedScenario, summary: RunSummary) -> Capacity:
    """:func:`of_run` of a scenario already resolved."""
    users = sum((c.load_plan.calls.users + c.load_plan.calls.agents) for c in resolved.classes
                if c.load_plan.calls is not None)  # fmt: skip
    calls = [c.load_plan.typical_call for c in resolved.classes if c.load_plan.typical_call is not None]
    preemptions, in_flight = summary.preemptions, _in_flight(summary)
    if not calls or not users:
        return Capacity(users or None, None, preemptions, in_flight if users else None)
    prompt, answer = (max(1, round(sum(call[i] for call in calls) / len(calls))) for i in (0, 1))
    return Capacity(users, _held(resolved, prompt, answer), preemptions, in_flight)


def _held(resolved: ResolvedScenario, prompt: int, answer: int) -> int:
    """The sequences the fleet holds at once for the typical call, over every backend but the
    prefill pools (their sequences decode, and wait, in their decode pools)."""
    prefill_pools = {b.decodes_for for b in resolved.backends if b.decodes_for is not None}
    return sum(_held_by(b, prompt, answer) for b in resolved.backends if b.index not in prefill_pools)


def _held_by(backend: BackendPlan, prompt: int, answer: int) -> int:
    """The sequences a backend's replicas hold at once for the typical call: ``replicas x
    min(batch cap, saturation concurrency)`` (0 per replica where the closed form has none)."""
    from simulator.analytic.estimate import saturation_concurrency
    from simulator.errors import InfersimError

    try:
        one = saturation_concurrency(backend.deployment, prompt, answer)
    except InfersimError:
        one = 0
    return backend.replicas * min(backend.batch_cap, one)
