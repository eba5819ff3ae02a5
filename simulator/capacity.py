"""Whether a reported speed is capacity-limited, decided once for every output.

A per-user speed or TTFT is **capacity-limited** when the deployment cannot hold the load:
it holds fewer sequences at once than there are users (``held < users``), or a run preempted
a sequence because its KV ran out (``preemptions > 0``). ``held`` is the concurrency the KV
budget allows at full context ``I + O`` and the batch cap, over all replicas
(:func:`simulator.analytic.estimate.saturation_concurrency`). The users that do not fit wait:
the speed quoted is that of the ``held`` running, and averaged over all ``users`` each gets
``speed * held / users`` (the replica streams ``held * speed`` tokens/s, shared by ``users``).

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

#: The mark on a capacity-limited figure (a report row holding one is highlighted).
LIMITED_MARK = "⚠"


def capacity_limited(users: int | None, held: int | None, preemptions: int = 0) -> bool:
    """True when the deployment holds fewer than ``users`` sequences or the run preempted one.

    >>> capacity_limited(64, 12), capacity_limited(16, 64), capacity_limited(None, None, preemptions=3)
    (True, False, True)
    """
    return preemptions > 0 or (users is not None and held is not None and held < users)


@dataclass(frozen=True)
class Capacity:
    """Users offered, sequences held at once, preemptions; ``None`` where unknown (an open loop has no users)."""

    users: int | None
    held: int | None
    preemptions: int = 0

    @property
    def limited(self) -> bool:
        return capacity_limited(self.users, self.held, self.preemptions)

    @property
    def mark(self) -> str:
        return LIMITED_MARK if self.limited else ""

    def marked(self, cell: str) -> str:
        """``cell`` with the mark when limited (a cell with no number, ``-``, stays as it is)."""
        return cell + self.mark if cell != "-" else cell

    def averaged(self, per_user: float | None) -> float | None:
        """A running user's speed averaged over all users: ``speed * held / users`` when fewer are held.

        >>> Capacity(64, 12).averaged(445.0)
        83.4375
        """
        if per_user is None or not self.limited or not self.users or self.held is None or self.held >= self.users:
            return per_user
        return per_user * self.held / self.users

    def note(self) -> str:
        """Why the figure is limited, in words ('' when it is not).

        >>> Capacity(64, 12, 898).note()
        '⚠ holds 12 of 64 users, 898 preemptions'
        """
        if not self.limited:
            return ""
        parts = []
        if self.users is not None and self.held is not None and self.held < self.users:
            parts.append(f"holds {self.held:,} of {self.users:,} users")
        if self.preemptions:
            parts.append(f"{self.preemptions:,} preemption{'s' if self.preemptions != 1 else ''}")
        return f"{LIMITED_MARK} " + ", ".join(parts)

    def to_dict(self) -> dict[str, object]:
        """The JSON fields: ``capacity_limited``, ``users``, ``held`` (sequences at once) and ``preemptions``."""
        return {"capacity_limited": self.limited, "users": self.users, "held": self.held,
                "preemptions": self.preemptions}  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Capacity:
        """Read back :meth:`to_dict`'s fields (absent ones unknown)."""

        def whole(key: str) -> int | None:
            value = data.get(key)
            return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

        return cls(whole("users"), whole("held"), whole("preemptions") or 0)


def of_estimate(e: Estimate) -> Capacity:
    """The closed form's users and the concurrency its KV and batch cap hold."""
    return Capacity(e.concurrency, e.max_concurrency)


def of_run(scenario: Scenario, preemptions: int, catalog: Catalog | None = None) -> Capacity:
    """A simulated run's closed-loop users and agents, and what its fleet holds at once at each class's
    typical call (its backends' replicas x the closed form's concurrency, capped by the batch).

    ``held`` is None when the scenario cannot be resolved again here (a trace moved away) or has no
    typical call; the preemptions still decide."""
    from simulator.config.loading import Catalog
    from simulator.errors import InfersimError
    from simulator.plan.resolve import resolve

    try:
        resolved = resolve(scenario, catalog or Catalog())
    except (InfersimError, OSError, ValueError):
        return Capacity(None, None, preemptions)
    return of_resolved(resolved, preemptions)


def of_resolved(resolved: ResolvedScenario, preemptions: int) -> Capacity:
    """:func:`of_run` of a scenario already resolved."""
    users = sum((c.load_plan.calls.users + c.load_plan.calls.agents) for c in resolved.classes
                if c.load_plan.calls is not None)  # fmt: skip
    calls = [c.load_plan.typical_call for c in resolved.classes if c.load_plan.typical_call is not None]
    if not calls or not users:
        return Capacity(users or None, None, preemptions)
    prompt, answer = (max(1, round(sum(call[i] for call in calls) / len(calls))) for i in (0, 1))
    return Capacity(users, _held(resolved, prompt, answer), preemptions)


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
