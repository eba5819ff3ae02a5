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

from dataclasses import dataclass

import numpy as np

from simulator.analytic.economics import RunCost, api_usd
from simulator.records import FloatArray, LevelMonitor, RunRecords

ATTRIBUTION = (
    "each backend's $ (busy and idle), $/h and J split among classes by seat-seconds: a replica's time "
    "shared equally among the sequences in its batch (API backends: each class's own metered requests)"
)


@dataclass(frozen=True)
class ClassCosts:
    """Each class's part of each backend's cost, and what no class used."""

    by_class: list[dict[str, RunCost]]  # per class: backend name -> its part of that backend's cost
    unattributed_usd: float


def _seat_clock(level: LevelMonitor, t_end: float) -> tuple[FloatArray, FloatArray]:
    """Breakpoints and the cumulative ``integral of 1 / B(t) dt`` (0 where the batch is empty)."""
    times = np.append(np.frombuffer(level.times, dtype=np.float64), max(t_end, level.times[-1]))
    values = np.frombuffer(level.values, dtype=np.float64)
    with np.errstate(divide="ignore"):
        rate = np.where(values > 0, 1.0 / np.maximum(values, 1.0), 0.0)
    return times, np.concatenate(([0.0], np.cumsum(rate * np.diff(times))))


def seat_seconds(records: RunRecords) -> FloatArray:
    """Each recorded request's seat-seconds on its replica inside the window (0 for dropped ones)."""
    r = records.requests
    t0, t1 = records.warmup_s, records.end_s
    out = np.zeros(r["replica"].size)
    served = (r["dropped"] == 0) & np.isfinite(r["admitted_s"])
    for replica, level in enumerate(records.batch):
        mine = served & (r["replica"] == replica)
        if not mine.any():
            continue
        times, clock = _seat_clock(level, t1)
        start = np.clip(r["admitted_s"][mine], t0, t1)
        end = np.clip(np.where(np.isfinite(r["done_s"][mine]), r["done_s"][mine], t1), t0, t1)
        out[mine] = np.maximum(np.interp(end, times, clock) - np.interp(start, times, clock), 0.0)
    return out


def window_output_tokens(records: RunRecords) -> FloatArray:
    """Each request's output tokens inside the window, spread evenly over ``[first token, done]``."""
    r = records.requests
    t0, t1 = records.warmup_s, records.end_s
    f, c, n = r["first_token_s"], r["done_s"], r["output_tokens"]
    done = (r["dropped"] == 0) & np.isfinite(c) & np.isfinite(f)
    span = np.where(done, c - f, 0.0)
    overlap = np.clip(np.minimum(c, t1) - np.maximum(f, t0), 0.0, None)
    with np.errstate(divide="ignore", invalid="ignore"):
        fraction = np.where(span > 0, overlap / span, ((f >= t0) & (f <= t1)).astype(float))
    return np.where(done, n * fraction, 0.0)


def attribute(records: RunRecords, backend_costs: list[RunCost], tasks_per_class: list[int],
              classes: int) -> ClassCosts:  # fmt: skip
    """Split each backend's cost among ``classes`` classes by :func:`seat_seconds` (the module's rule)."""
    r = records.requests
    klass = r["class"].astype(int)
    seats = seat_seconds(records)
    tokens = window_output_tokens(records)
    measured = (r["dropped"] == 0) & np.isfinite(r["done_s"]) & (r["arrival_s"] >= records.warmup_s)
    by_class: list[dict[str, RunCost]] = [{} for _ in range(classes)]
    unattributed = 0.0
    for backend, cost in zip(records.backends, backend_costs, strict=True):
        on = np.isin(r["replica"], backend.replicas)
        used = np.array([seats[on & (klass == k)].sum() for k in range(classes)])
        if used.sum() <= 0:
            unattributed += cost.usd
            continue
        share = used / used.sum()
        price = backend.pricing.token_price
        for k in range(classes):
            mine = on & (klass == k)
            if price is not None:  # the API bill of the class's own measured requests
                billed = measured & mine
                usd = api_usd(price, r["input_tokens"][billed].sum(), r["output_tokens"][billed].sum())
                per_hour = cost.usd_per_hour * (usd / cost.usd) if cost.usd else 0.0
            else:
                usd, per_hour = cost.usd * share[k], cost.usd_per_hour * share[k]
            by_class[k][backend.name] = RunCost(
                per_hour, usd, cost.joules * share[k], float(tokens[mine].sum()), tasks_per_class[k],
                cost.idle_usd * share[k],
            )  # fmt: skip
    return ClassCosts(by_class, unattributed)
