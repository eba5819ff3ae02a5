"""Who pays for what: a fleet's dollars and joules attributed to the workload classes that used it.

Rule (stated in every summary that has classes, under ``cost.attribution``):

- **Replica time is shared equally among the sequences in its batch.** A request resident on
  replica i over ``[admitted, done]`` takes ``seat_s = integral of 1 / B_i(t) dt`` over that span
  clipped to the window ``[warmup, end]``, with ``B_i(t)`` the replica's running batch (the level
  the engine records; instants with an empty batch are nobody's). A class's share of a backend
  is its requests' seat-seconds over all seat-seconds on that backend (GPU-seconds of the
  replica, split per sequence).
- A rented or owned backend's ``$`` (busy *and* idle), ``$/h``, idle ``$`` and joules go to the
  classes in proportion to those shares, so a class pays for the idle capacity in proportion
  to what it used. An API backend's bill is exact per request: each class pays for its own
  measured requests' tokens (its joules follow the seat shares).
- A backend no recorded request used in the window is nobody's: its ``$`` is
  ``cost.unattributed_usd``. The classes' ``$`` plus that sum to the fleet's ``$``.
- A class's output tokens in the window spread each request's tokens evenly over its decode
  span ``[first token, done]``; ``$/task`` divides the class's ``$`` by its own completed tasks.

Requests still in flight at the end of the run are not in the records, so they take no share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simulator.analytic.economics import RunCost, api_usd
from simulator.records.store import BackendRecord
from simulator.results.requests import Requests

ATTRIBUTION = (
    "each backend's $ (busy and idle), $/h and J split among classes by seat-seconds: a replica's time "
    "shared equally among the sequences in its batch (API backends: each class's own metered requests)"
)


@dataclass(frozen=True)
class ClassCosts:
    """Each class's part of each backend's cost, and what no class used."""

    by_class: list[dict[str, RunCost]]  # per class: backend name -> its part of that backend's cost
    unattributed_usd: float


def attribute(backends: Sequence[BackendRecord], requests: Requests, backend_costs: list[RunCost],
              tasks_per_class: list[int], classes: int) -> ClassCosts:  # fmt: skip
    """Split each backend's cost among ``classes`` classes by seat-seconds (the module's rule)."""
    by_class: list[dict[str, RunCost]] = [{} for _ in range(classes)]
    unattributed = 0.0
    for backend, cost in zip(backends, backend_costs, strict=True):
        used = np.array([requests.seats(backend.replicas, k) for k in range(classes)])
        if used.sum() <= 0:
            unattributed += cost.usd
            continue
        share = used / used.sum()
        price = backend.pricing.token_price
        for k in range(classes):
            if price is not None:  # the API bill of the class's own measured requests
                usd = api_usd(price, *requests.billed(backend.replicas, k))
                per_hour = cost.usd_per_hour * (usd / cost.usd) if cost.usd else 0.0
            else:
                usd, per_hour = cost.usd * share[k], cost.usd_per_hour * share[k]
            by_class[k][backend.name] = RunCost(
                per_hour, usd, cost.joules * share[k], requests.window_tokens(backend.replicas, k), tasks_per_class[k],
                cost.idle_usd * share[k],
            )  # fmt: skip
    return ClassCosts(by_class, unattributed)
