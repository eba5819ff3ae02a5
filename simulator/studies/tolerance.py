"""N+k sizing: a fleet that meets its SLO targets with its ``k`` largest replicas down, and how often
it has no more than ``k`` down.

``slo.tolerate_failures: k`` asks `infersim plan` for the cheapest fleet that meets every target
with ``k`` replicas failed. The planner simulates each candidate with its ``k`` *largest* replicas
down for the whole run (:func:`tolerating_failures`): largest is the most expensive per hour (the
most chips at a price; ties go to the backend listed first, and within a backend to its last
replicas), never a metered (API) backend's. Drawn failures and stragglers of the scenario stay;
its planned outages do not (they are a run's what-if). Removing the ``k`` largest keeps the search's
monotone feasibility: adding any replica to a fleet leaves a larger fleet after the removal.

The answer's availability (:func:`answer_availability`): each replica's ``A = MTBF_r / (MTBF_r +
MTTR)`` and the probability that at most ``k`` of the fleet's replicas are down at once
(:mod:`simulator.analytic.availability`; independent failures), the share of time it meets its
targets by the planner's own test.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from simulator.analytic.availability import at_most_down, more_than_down, replica_reliability
from simulator.config.failures import FailureSpec, Outage
from simulator.config.loading import Catalog
from simulator.config.scenario import Scenario
from simulator.plan.resolve import resolve
from simulator.units import SECONDS_PER_YEAR, SI_NUMBERS

HOURS_PER_YEAR = SECONDS_PER_YEAR / 3600.0


def largest_replicas(counts: Sequence[int], usd_per_replica_hour: Sequence[float], metered: Sequence[bool],
                     k: int) -> list[tuple[int, int]]:  # fmt: skip
    """``(backend index, replica index)`` of the ``k`` most expensive replicas (module docstring)."""
    ranked = sorted((b for b, n in enumerate(counts) if n and not metered[b]), key=lambda b: -usd_per_replica_hour[b])
    found: list[tuple[int, int]] = []
    for b in ranked:
        found += [(b, j) for j in range(counts[b] - 1, -1, -1)][: k - len(found)]
    return found


def tolerating_failures(variant: Scenario, usd_per_replica_hour: Sequence[float], metered: Sequence[bool]) -> Scenario:
    """The candidate ``variant`` with its ``slo.tolerate_failures`` largest replicas down for the whole run;
    the scenario's own outages are what-ifs of a run, not of sizing: dropped (drawn failures and
    stragglers are kept)."""
    k, failures = variant.slo.tolerate_failures, variant.failures
    if k == 0 and failures is None:
        return variant
    fleet = variant.fleet
    down = largest_replicas([b.replicas for b in fleet], usd_per_replica_hour, metered, k)
    outages = [
        Outage.model_validate({"backend": fleet[b].name, "replica": j, "at": 0.0, "down_for": SECONDS_PER_YEAR},
                              context=SI_NUMBERS)
        for b, j in down
    ]  # fmt: skip
    if failures is None:
        return variant.model_copy(update={"failures": FailureSpec(random=False, outages=outages)})
    if outages or failures.random or failures.stragglers is not None:
        return variant.model_copy(update={"failures": failures.model_copy(update={"outages": outages})})
    return variant.model_copy(update={"failures": None})


def answer_availability(answer: Scenario, catalog: Catalog) -> dict[str, Any] | None:
    """Each backend's replica availability, and P(at most ``k`` replicas down) of the whole fleet
    (None when no replica's hardware states its reliability)."""
    k = answer.slo.tolerate_failures
    backends: dict[str, dict[str, float]] = {}
    each: list[float] = []
    for plan in resolve(answer, catalog).backends:
        reliability = replica_reliability(plan.deployment)
        if reliability is None or plan.replicas == 0 or plan.pricing.token_price is not None:
            continue
        backends[plan.name] = {
            "replicas": plan.replicas,
            "replica_availability": reliability.availability,
            "replica_mtbf_h": reliability.mtbf_s / 3600.0,
            "mttr_s": reliability.mttr_s,
        }
        each += [reliability.availability] * plan.replicas
    if not each:
        return None
    return {"tolerate_failures": k, "backends": backends, "p_at_most_k_down": at_most_down(each, k),
            "hours_per_year_more_down": more_than_down(each, k) * HOURS_PER_YEAR,
            "expected_replicas_up": sum(each)}  # fmt: skip


def availability_text(found: dict[str, Any]) -> str:
    """One line of the plan's text: each backend's replica availability and the fleet's P(at most k down)."""
    parts = [f"{name}: each replica up {b['replica_availability']:.4%} (MTBF {b['replica_mtbf_h']:,.0f} h, "
             f"MTTR {b['mttr_s'] / 60:,.1f} min)" for name, b in found["backends"].items()]  # fmt: skip
    k, total = found["tolerate_failures"], sum(b["replicas"] for b in found["backends"].values())
    beyond_h = found["hours_per_year_more_down"]
    evaluated = (
        f" (every fleet above was simulated with its {k} largest replica{'s' if k > 1 else ''} down)" if k else ""
    )
    return (f"availability: {'; '.join(parts)}; more than {k} of its {total} replicas down {beyond_h:.3g} h a "
            f"year (independent failures){evaluated}")  # fmt: skip
